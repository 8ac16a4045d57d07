// Allgather with a first dimension that may differ by rank (the round agreed on every rank's), into an output the
// core allocates (CoreResults: the caller learns its shape from the handle).
#pragma once
#include "collectives/batch_executor.h"

namespace hvdlite {

class AllgatherExecutor : public BatchExecutor {
 public:
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override;
};

}  // namespace hvdlite
