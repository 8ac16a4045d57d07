// One kind of collective run on the batches a round agreed on: each kind is a class of its own in this folder
// (as each all-reduce algorithm is in algorithms/), and so is the GPU path (gpu/nccl_executor.h);
// CollectiveExecutor picks the one for each batch. Every rank runs the same batches in the same order.
#pragma once
#include <climits>
#include <string>
#include <vector>

#include "algorithms/allreduce_algorithm.h"
#include "negotiation/entry.h"
#include "negotiation/messages.h"
#include "negotiation/process_set.h"
#include "base/timeline.h"
#include "base/collective_info.h"

namespace hvdlite {

class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  // locals[i]: this rank's entry for batch.parts[i], null where this rank joined. An error message, or "".
  virtual std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) = 0;
  // The timeline phase recorded for the whole of Run (the collective's name), or nullptr where Run records its own.
  virtual const char *TimelinePhase(Collective collective) const { return CollectiveName(collective); }
};

inline CommContext ContextOf(const ProcessSet &set) { return CommContext{set.comm, set.rank, set.size}; }

// Records phase, from start to now, for every entry this rank holds (null: joined), where the timeline is on.
inline void RecordPhase(Timeline &timeline, const std::vector<Entry *> &locals, const char *phase,
                        Clock::time_point start) {
  if (!timeline.active()) return;
  const auto end = Clock::now();
  for (const Entry *e : locals) {
    if (e) timeline.Record(e->request.name, phase, start, end);
  }
}

// MPI's counts and displacements are ints.
inline bool FitsInt(int64_t value) { return value <= INT_MAX; }

}  // namespace hvdlite
