// Barrier: every rank of the set has reached it.
#pragma once
#include "collectives/batch_executor.h"

namespace hvdlite {

class BarrierExecutor : public BatchExecutor {
 public:
  std::string Run(const ProcessSet &set, const FusedBatch &, const std::vector<Entry *> &) override {
    MPI_Barrier(set.comm);
    return "";
  }
};

}  // namespace hvdlite
