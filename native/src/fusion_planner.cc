#include "fusion_planner.h"

namespace hvdlite {
namespace {

bool Compatible(const Request &a, const Request &b) {
  return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale;
}

int64_t Bytes(const Response &r) {
  return r.spec.NumElements() * static_cast<int64_t>(DataTypeSize(r.spec.dtype));
}

}  // namespace

std::vector<FusedBatch> PlanFusion(const std::vector<const Response *> &ready, int64_t threshold_bytes) {
  std::vector<FusedBatch> batches;
  std::vector<size_t> open;  // indices of allreduce batches that may still take more
  for (size_t position = 0; position < ready.size(); ++position) {
    const Response *response = ready[position];
    int64_t bytes = Bytes(*response);
    if (response->spec.collective == Collective::kAllreduce) {
      bool placed = false;
      for (size_t index : open) {
        FusedBatch &batch = batches[index];
        const Request &head = batch.parts.front()->spec;
        if (!Compatible(head, response->spec)) continue;
        bool same_group = response->spec.group_id != 0 && head.group_id == response->spec.group_id;
        if (same_group || (threshold_bytes > 0 && batch.total_bytes + bytes <= threshold_bytes)) {
          batch.parts.push_back(response);
          batch.members.push_back(position);
          batch.total_bytes += bytes;
          placed = true;
          break;
        }
      }
      if (placed) continue;
      open.push_back(batches.size());
    }
    batches.push_back(FusedBatch{{response}, {position}, bytes});
  }
  return batches;
}

}  // namespace hvdlite
