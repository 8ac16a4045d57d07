// A request as its own rank holds it: one Entry per name and process set (request_registry.h), reused by every
// submission of that name, so that a request submitted step after step is copied, hashed and checked once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/core_results.h"
#include "gpu/device_resources.h"
#include "negotiation/messages.h"

namespace hvdlite {

struct Entry {
  // kRunning: in the batch that carries the next round (carried_round.h), so not announced in that round.
  enum class State { kUnannounced, kCached, kAnnounced, kRunning };

  // First what every submission writes and every round reads, side by side: a step's entries are out of the
  // cache by the next step (its data went through it), and each line a submission touches costs a miss.
  // The submission, written by the submitting thread under the core's mutex while the entry is out of flight.
  const void *input = nullptr;
  void *output = nullptr;
  int64_t handle = 0;
  Clock::time_point enqueued;
  int32_t group_id = 0;  // nonzero: submitted together with others of the same id (the request's, when announced)
  // Flight, under the core's mutex: set by a submission, cleared once it has finished.
  bool in_flight = false;
  int32_t prepared = 0;    // prepared requests that submit through this entry: it outlives their submissions
  int64_t written_by = 0;  // the prepared request whose request it holds (0: a submission by value)
  // The background thread's, while the entry is in flight.
  State state = State::kUnannounced;
  int32_t arrival = -1;  // position in its process set's arrival order; -1 when not there
  // The response-cache bit this request matched, and that bit's stamp then: while both hold, the next
  // round takes the bit without looking the name up (reset whenever the request is rewritten).
  int32_t cache_bit = -1;
  uint64_t cache_stamp = 0;
  Clock::time_point negotiation_start;
  // Results the core allocates (allgather, alltoall; null for the rest), moved into the handle on completion.
  std::unique_ptr<CoreResults> results;
  // A GPU tensor (request.gpu): its device, and the event recorded on the framework's stream at submission
  // (the pool's again once the background thread's stream waits on it). Its done event goes in results.
  int32_t gpu_device = -1;
  gpu::CUevent gpu_ready = nullptr;

  // What the request is: written when a submission changes it.
  Request request;
  int32_t process_set_id = 0;
  std::vector<int32_t> splits;  // alltoall

  // Back to a new entry's values, keeping only the buffers of its name and shape for the next request that
  // reuses this entry's node; results the core allocated are freed.
  void Recycle() {
    ReleaseReadyEvent();
    std::string name = std::move(request.name);
    std::vector<int64_t> shape = std::move(request.shape);
    *this = Entry{};
    name.clear();
    shape.clear();
    request.name = std::move(name);
    request.shape = std::move(shape);
  }
  // A ready event that no stream waited on (the request failed before it ran) goes back to the pool.
  void ReleaseReadyEvent() {
    if (gpu_ready) gpu::EventPool::Get().Release(gpu_device, gpu_ready);
    gpu_ready = nullptr;
  }
  // Takes another request's description (not its flight or results); the cached bit no longer holds.
  void Describe(const Request &r, int32_t set_id, const std::vector<int32_t> &new_splits) {
    request = r;
    process_set_id = set_id;
    splits = new_splits;
    cache_bit = -1;
  }
};

// Finishing a fused batch walks its entries again after its data went through the cache (hundreds of entries, each
// a miss by then): it loads them this many ahead, so that the misses overlap instead of stalling it one by one.
constexpr size_t kEntryPrefetchAhead = 8;

// Starts loading the part of an entry that every round reads and writes (its first two cache lines).
inline void PrefetchEntry(const Entry *e) {
  if (!e) return;
  __builtin_prefetch(e, 1);
  __builtin_prefetch(reinterpret_cast<const char *>(e) + 64, 1);
}

}  // namespace hvdlite
