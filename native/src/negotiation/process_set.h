// A process set: a group of ranks with its own communicator, negotiation state and response cache.
// Owned and touched only by the background thread.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "negotiation/coordinator.h"
#include "negotiation/eager_allreduce.h"
#include "negotiation/entry.h"
#include "negotiation/messages.h"
#include "negotiation/response_cache.h"
#include "negotiation/round_result.h"

namespace hvdlite {

class RoundAcrossHosts;

struct ProcessSet {
  ProcessSet(int32_t id, std::vector<int32_t> ranks, MPI_Comm comm, int32_t cache_capacity)
      : id(id), ranks(std::move(ranks)), comm(comm), cache(cache_capacity), entry_of_bit(cache.capacity()) {
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      if (rank == 0) coordinator = std::make_unique<Coordinator>(size);
    }
    // A round's lists hold at most one item per cache bit: reserved at that here, a round whose timing readies
    // more at once than any before allocates nothing on the background thread.
    const size_t bits = static_cast<size_t>(cache.capacity());
    round_ready_bits.reserve(bits);
    round_cached_bits.reserve(bits);
    for (RoundResult &round : rounds_) {
      round.cached.reserve(bits);
      round.cached_entries.reserve(bits);
      round.eager.reserve(bits);
    }
    eager.Reserve(cache.capacity());
  }
  bool member() const { return comm != MPI_COMM_NULL; }
  // This rank's entry of that name that waits in this set (arrived and not finished), or null. Looked up by
  // name only on the slow path, for joins and for process-set changes: the index is built when first needed.
  Entry *FindPending(const std::string &name) {
    if (!pending_index_valid_) {
      pending_index_.clear();
      for (Entry *e : arrival_order) {
        if (e) pending_index_.emplace(e->request.name, e);
      }
      pending_index_valid_ = true;
    }
    auto it = pending_index_.find(name);
    return it == pending_index_.end() ? nullptr : it->second;
  }
  void Arrive(Entry *e) {
    e->arrival = static_cast<int32_t>(arrival_order.size());
    arrival_order.push_back(e);
    pending_index_valid_ = false;  // rebuilt when next needed: a round of cached requests never needs it
  }
  // Out of the arrival order (a hole, closed by CloseHoles at the end of the round).
  void Leave(Entry *e) {
    if (e->arrival < 0) return;
    arrival_order[e->arrival] = nullptr;
    e->arrival = -1;
    has_holes_ = true;
    if (pending_index_valid_) pending_index_.erase(e->request.name);
  }
  void CloseHoles() {
    if (!has_holes_) return;
    size_t kept = 0;
    for (Entry *e : arrival_order) {
      if (!e) continue;
      e->arrival = static_cast<int32_t>(kept);
      arrival_order[kept++] = e;
    }
    arrival_order.resize(kept);
    has_holes_ = false;
  }

  int32_t id;
  std::vector<int32_t> ranks;  // global ranks, ascending
  MPI_Comm comm;               // MPI_COMM_NULL where this rank is not a member
  int rank = -1;
  int size = 0;
  // This rank's entries waiting in this set, in submission order (null: finished this round).
  std::vector<Entry *> arrival_order;
  ResponseCache cache;
  std::unique_ptr<Coordinator> coordinator;        // rank 0 of the set only
  std::vector<Response> due_failures;              // coordinator: stalled names to fail next round
  Clock::time_point last_stall_check;
  // Since when every rank has had a caller waiting and the set's rounds have run nothing (the epoch: not so).
  Clock::time_point all_waiting_since{};
  std::vector<uint64_t> round_bits;                // the fast path's bit vector (+ eager payload), reused
  std::vector<int32_t> round_ready_bits;           // cache bits ready everywhere in the last round
  // During a round: this rank's entry for each cache bit it set (else null), so that the responses agreed
  // on find their entries without a lookup by name. All null between rounds.
  std::vector<Entry *> entry_of_bit;
  std::vector<int32_t> round_cached_bits;          // the bits of entry_of_bit set this round
  EagerPlan eager;
  // The global set's rounds of bits across hosts where the ring's TCP connections are open (else null: MPI).
  RoundAcrossHosts *across_hosts = nullptr;
  // The list a round decodes its outcome into: of the two kept, the one the round before did not use. A round
  // carried in the last batch of the round before it (carried_round.h) is decoded while that round's lists are
  // still being run. Both reused.
  RoundResult &NextRoundResult() {
    current_round_ ^= 1;
    rounds_[current_round_].Reset();
    return rounds_[current_round_];
  }
  const RoundResult &last_round() const { return rounds_[current_round_]; }
  bool carried = false;                            // the last round was carried in and has not run yet
  bool joined = false;                             // this rank called join and waits for the others

 private:
  std::unordered_map<std::string_view, Entry *> pending_index_;  // FindPending's, keyed by the entries' names
  bool pending_index_valid_ = false;
  bool has_holes_ = false;
  RoundResult rounds_[2];
  int current_round_ = 0;
};

}  // namespace hvdlite
