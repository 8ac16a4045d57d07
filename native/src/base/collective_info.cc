#include "base/collective_info.h"

namespace hvdlite {
namespace {

// In the order of enum hvdlite_collective. Fields: name, output, takes_op, takes_root, takes_splits, min_ndim.
constexpr hvdlite_collective_info kCollectives[] = {
    {"allreduce", HVDLITE_OUTPUT_LIKE_INPUT, 1, 0, 0, 0},
    {"allgather", HVDLITE_OUTPUT_GATHERED, 0, 0, 0, 1},
    {"broadcast", HVDLITE_OUTPUT_LIKE_INPUT, 0, 1, 0, 0},
    {"alltoall", HVDLITE_OUTPUT_GATHERED, 0, 0, 1, 1},
    {"reducescatter", HVDLITE_OUTPUT_RANK_BLOCK, 1, 0, 0, 1},
    {"barrier", HVDLITE_OUTPUT_NONE, 0, 0, 0, 0},
    {"join", HVDLITE_OUTPUT_NONE, 0, 0, 0, 0},
};
constexpr int32_t kCount = static_cast<int32_t>(sizeof(kCollectives) / sizeof(kCollectives[0]));
static_assert(kCount == HVDLITE_JOIN + 1, "one row per enum hvdlite_collective");

}  // namespace

const hvdlite_collective_info *DescribeCollective(Collective c) {
  const int32_t index = static_cast<int32_t>(c);
  return index >= 0 && index < kCount ? &kCollectives[index] : nullptr;
}

const char *CollectiveName(Collective c) {
  if (const hvdlite_collective_info *info = DescribeCollective(c)) return info->name;
  switch (c) {
    case Collective::kAddProcessSet: return "add_process_set";
    case Collective::kRemoveProcessSet: return "remove_process_set";
    case Collective::kAddProcessSetOfMembers: return "add_process_set_of_members";
    default: return "unknown";
  }
}

int64_t OutputFirstDim(Collective c, int64_t first_dim, int32_t set_size, int32_t set_rank) {
  const hvdlite_collective_info *info = DescribeCollective(c);
  if (!info || first_dim < 0 || set_size <= 0 || set_rank < 0 || set_rank >= set_size) return -1;
  switch (info->output) {
    case HVDLITE_OUTPUT_LIKE_INPUT: return first_dim;
    case HVDLITE_OUTPUT_RANK_BLOCK: return first_dim / set_size + (set_rank < first_dim % set_size ? 1 : 0);
    default: return -1;
  }
}

}  // namespace hvdlite
