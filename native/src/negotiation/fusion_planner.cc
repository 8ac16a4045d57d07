#include "negotiation/fusion_planner.h"

namespace hvdlite {
namespace {

bool Compatible(const Request &a, const Request &b) {
  // GPU and CPU tensors never share a batch: they are reduced by different libraries in different memory.
  return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.gpu == b.gpu;
}

int64_t Bytes(const Response &r) {
  return r.Elements() * static_cast<int64_t>(DataTypeSize(r.spec.dtype));
}

}  // namespace

void FusionPlan::Add(const Response *response, size_t position, int64_t bytes) {
  if (size_ == batches_.size()) batches_.emplace_back();
  FusedBatch &batch = batches_[size_++];
  batch.parts.assign(1, response);
  batch.members.assign(1, position);
  batch.total_bytes = bytes;
}

void PlanFusion(const std::vector<const Response *> &ready, int64_t threshold_bytes, FusionPlan *plan) {
  plan->size_ = 0;
  std::vector<size_t> &open = plan->open_;
  open.clear();
  for (size_t position = 0; position < ready.size(); ++position) {
    const Response *response = ready[position];
    int64_t bytes = Bytes(*response);
    if (response->spec.collective == Collective::kAllreduce) {
      bool placed = false;
      for (size_t index : open) {
        FusedBatch &batch = plan->batches_[index];
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
      open.push_back(plan->size_);
    }
    plan->Add(response, position, bytes);
  }
}

}  // namespace hvdlite
