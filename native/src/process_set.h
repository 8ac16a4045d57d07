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
  enum class State { kUnannounced, kCached, kAnnounced };
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
};

struct ProcessSet {
  ProcessSet(int32_t id, std::vector<int32_t> ranks, MPI_Comm comm, int32_t cache_capacity)
      : id(id), ranks(std::move(ranks)), comm(comm), cache(cache_capacity) {
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      if (rank == 0) coordinator = std::make_unique<Coordinator>(size);
    }
  }
  bool member() const { return comm != MPI_COMM_NULL; }

  int32_t id;
  std::vector<int32_t> ranks;  // global ranks, ascending
  MPI_Comm comm;               // MPI_COMM_NULL where this rank is not a member
  int rank = -1;
  int size = 0;
  std::unordered_map<std::string, Entry> pending;  // submitted here, not yet run
  std::vector<std::string> arrival_order;          // pending names in submission order
  ResponseCache cache;
  std::unique_ptr<Coordinator> coordinator;        // rank 0 of the set only
  std::vector<Response> due_failures;              // coordinator: stalled names to fail next round
  Clock::time_point last_stall_check;
  std::vector<uint64_t> round_bits;                // the fast path's bit vector (+ eager payload), reused
  std::vector<int32_t> round_ready_bits;           // cache bits ready everywhere in the last round
  EagerPlan eager;
  bool joined = false;                             // this rank called join and waits for the others
};

}  // namespace hvdlite
