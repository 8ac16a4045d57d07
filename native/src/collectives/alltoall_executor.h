// Alltoall with splits (rows sent to each rank; equal shares where none were given): the rows each rank sends are
// exchanged first, then the data, into an output the core allocates (CoreResults, with the rows received from each).
#pragma once
#include "collectives/batch_executor.h"

namespace hvdlite {

class AlltoallExecutor : public BatchExecutor {
 public:
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override;
};

}  // namespace hvdlite
