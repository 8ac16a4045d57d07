// Broadcast from the root rank into the caller's output (in place where output and input are one buffer).
#pragma once
#include "collectives/batch_executor.h"

namespace hvdlite {

class BroadcastExecutor : public BatchExecutor {
 public:
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override;
};

}  // namespace hvdlite
