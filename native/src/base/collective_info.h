// The one description of each collective (hvdlite_collective_info in the header): what its request holds and how
// its output is sized. The checks of requests, the response cache and the adapters all read it, so that a new
// collective is an executor and one row of this table.
#ifndef HVDLITE_BASE_COLLECTIVE_INFO_H
#define HVDLITE_BASE_COLLECTIVE_INFO_H

#include <cstdint>

#include "base/types.h"
#include "hvdlite.h"

namespace hvdlite {

// The row of a collective of the header's enum, or nullptr (the internal process-set changes have none).
const hvdlite_collective_info *DescribeCollective(Collective c);

// The collective's name, the internal process-set changes' included.
const char *CollectiveName(Collective c);

// hvdlite_output_first_dim: rows of the output on set_rank, or -1 where the other ranks decide it.
int64_t OutputFirstDim(Collective c, int64_t first_dim, int32_t set_size, int32_t set_rank);

inline bool TakesOp(Collective c) {
  const hvdlite_collective_info *info = DescribeCollective(c);
  return info && info->takes_op;
}

inline bool TakesRoot(Collective c) {
  const hvdlite_collective_info *info = DescribeCollective(c);
  return info && info->takes_root;
}

// Other ranks' first dimensions may differ from this one's (allgather, alltoall).
inline bool GathersRows(Collective c) {
  const hvdlite_collective_info *info = DescribeCollective(c);
  return info && info->output == HVDLITE_OUTPUT_GATHERED;
}

// A tensor goes with the request (not barrier, join, or a process-set change).
inline bool HasTensor(Collective c) {
  const hvdlite_collective_info *info = DescribeCollective(c);
  return info && info->output != HVDLITE_OUTPUT_NONE;
}

}  // namespace hvdlite

#endif  // HVDLITE_BASE_COLLECTIVE_INFO_H
