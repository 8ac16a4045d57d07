// Reducescatter by rows (the first shape[0] % size ranks get one more row), through MPI_Reduce_scatter with
// hvdlite's reduction operators; a prescaled input is scaled into a scratch buffer first, reused.
#pragma once
#include <cstdint>

#include "collectives/batch_executor.h"

namespace hvdlite {

class ReducescatterExecutor : public BatchExecutor {
 public:
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override;

 private:
  std::vector<uint8_t> scratch_;
};

}  // namespace hvdlite
