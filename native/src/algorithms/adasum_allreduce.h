// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021) as Horovod runs it
// on CPUs over MPI: recursive vector halving with distance doubling, then the halves gathered back.
//
// At each level two groups' partial results a and b meet; every tensor of the batch is combined as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 where its norm is below 1e-8, so a zero gradient, e.g. of a joined rank, leaves the other
// unchanged). The dot products and norms are per tensor, in double, summed over the ranks that hold the pieces
// of a and b. Needs a power-of-two number of ranks and a floating type (checked when requests are validated).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/allreduce_algorithm.h"

namespace hvdlite {

class AdasumAllreduce {
 public:
  // buffer: the batch's tensors end to end, tensor_counts[i] elements each; in place, ending with the Adasum
  // combination of every rank's buffer, bitwise equal on all ranks.
  [[nodiscard]] std::string Run(const CommContext &ctx, void *buffer, const std::vector<int64_t> &tensor_counts,
                                DataType dtype);

 private:
  std::vector<uint8_t> received_;  // the partner's half, reused
  std::vector<double> sums_;       // per tensor: a.b, |a|^2, |b|^2
  std::vector<double> partner_sums_;
};

}  // namespace hvdlite
