// A process set: a group of ranks with its own communicator, negotiation state and response cache.
// Owned and touched only by the background thread.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator.h"
#include "eager_allreduce.h"
#include "messages.h"
#include "response_cache.h"

namespace hvdlite {

// A request as its own rank holds it until it has run.
struct Entry {
  // kFinished: ran (its handle is complete); it leaves the set's pending entries at the end of the round.
  enum class State { kUnannounced, kCached, kAnnounced, kFinished };
  Request request;
  int32_t process_set_id = 0;
  const void *input = nullptr;
  void *output = nullptr;
  std::vector<int32_t> splits;  // alltoall
  int64_t handle = 0;
  Clock::time_point enqueued;
  Clock::time_point negotiation_start;
  State state = State::kUnannounced;
  // Results the core allocates (allgather, alltoall), moved into the handle on completion.
  std::vector<uint8_t> core_output;
  std::vector<int64_t> output_shape;
  std::vector<int32_t> received_splits;

  // Back to a new entry's values, keeping only the buffers of its name and shape for the next request that
  // reuses this entry (a queue slot, a pending entry's node); results the core allocated are freed.
  void Recycle() {
    std::string name = std::move(request.name);
    std::vector<int64_t> shape = std::move(request.shape);
    *this = Entry{};
    name.clear();
    shape.clear();
    request.name = std::move(name);
    request.shape = std::move(shape);
  }
};

struct ProcessSet {
  ProcessSet(int32_t id, std::vector<int32_t> ranks, MPI_Comm comm, int32_t cache_capacity)
      : id(id), ranks(std::move(ranks)), comm(comm), cache(cache_capacity), entry_of_bit(cache.capacity()) {
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      if (rank == 0) coordinator = std::make_unique<Coordinator>(size);
    }
  }
  bool member() const { return comm != MPI_COMM_NULL; }
  // This rank's pending entry of that name that has not run, or null.
  Entry *FindPending(const std::string &name) {
    auto it = pending.find(name);
    return it == pending.end() || it->second.state == Entry::State::kFinished ? nullptr : &it->second;
  }

  int32_t id;
  std::vector<int32_t> ranks;  // global ranks, ascending
  MPI_Comm comm;               // MPI_COMM_NULL where this rank is not a member
  int rank = -1;
  int size = 0;
  std::unordered_map<std::string, Entry> pending;  // submitted here, not yet run (or ran this round)
  std::vector<Entry *> arrival_order;              // the pending entries in submission order
  ResponseCache cache;
  std::unique_ptr<Coordinator> coordinator;        // rank 0 of the set only
  std::vector<Response> due_failures;              // coordinator: stalled names to fail next round
  Clock::time_point last_stall_check;
  std::vector<uint64_t> round_bits;                // the fast path's bit vector (+ eager payload), reused
  std::vector<int32_t> round_ready_bits;           // cache bits ready everywhere in the last round
  // During a round: this rank's entry for each cache bit it set (else null), so that the responses agreed
  // on find their entries without a lookup by name. All null between rounds.
  std::vector<Entry *> entry_of_bit;
  std::vector<int32_t> round_cached_bits;          // the bits of entry_of_bit set this round
  EagerPlan eager;
  bool joined = false;                             // this rank called join and waits for the others
};

}  // namespace hvdlite
