// PlanFusion: which ready all-reduces share one collective, in what order, up to the threshold.
#include <gtest/gtest.h>

#include <deque>

#include "negotiation/fusion_planner.h"

namespace hvdlite {
namespace {

// Responses owned here; the planner is given pointers, as the core gives it.
class Ready {
 public:
  const Response *Add(Collective c, DataType dtype, int64_t elements, ReduceOp op = ReduceOp::kSum,
                      int32_t group = 0, double prescale = 1.0) {
    Response r;
    r.spec.collective = c;
    r.spec.dtype = dtype;
    r.spec.op = op;
    r.spec.group_id = group;
    r.spec.prescale = prescale;
    r.spec.shape = {elements};
    r.spec.name = "t" + std::to_string(owned_.size());
    owned_.push_back(r);
    list_.push_back(&owned_.back());
    return list_.back();
  }
  const std::vector<const Response *> &list() const { return list_; }

 private:
  std::deque<Response> owned_;  // stable addresses
  std::vector<const Response *> list_;
};

std::vector<std::vector<size_t>> Members(const FusionPlan &plan) {
  std::vector<std::vector<size_t>> out;
  for (const FusedBatch &batch : plan) out.push_back(batch.members);
  return out;
}

TEST(PlanFusion, CompatibleAllreducesShareOneBatchInOrder) {
  Ready ready;
  for (int i = 0; i < 4; ++i) ready.Add(Collective::kAllreduce, DataType::kFloat32, 10);
  FusionPlan plan;
  PlanFusion(ready.list(), 1 << 20, &plan);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(plan.begin()->total_bytes, 4 * 10 * 4);
}

TEST(PlanFusion, DtypeOpAndScaleKeepBatchesApartButLaterTensorsJoinAnOpenOne) {
  Ready ready;
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 8);                       // 0
  ready.Add(Collective::kAllreduce, DataType::kFloat64, 8);                       // 1: other dtype
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 8, ReduceOp::kMax);       // 2: other op
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 8, ReduceOp::kSum, 0, 0.5);  // 3: other prescale
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 8);                       // 4: joins 0
  FusionPlan plan;
  PlanFusion(ready.list(), 1 << 20, &plan);
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0, 4}, {1}, {2}, {3}}));
}

TEST(PlanFusion, ThresholdStartsANewBatchAndZeroDisablesFusion) {
  Ready ready;
  for (int i = 0; i < 5; ++i) ready.Add(Collective::kAllreduce, DataType::kFloat32, 100);  // 400 bytes each
  FusionPlan plan;
  PlanFusion(ready.list(), 800, &plan);  // exactly two fit
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4}}));
  PlanFusion(ready.list(), 0, &plan);
  EXPECT_EQ(plan.size(), 5u);
}

TEST(PlanFusion, AGroupStaysTogetherPastTheThreshold) {
  Ready ready;
  for (int i = 0; i < 3; ++i) ready.Add(Collective::kAllreduce, DataType::kFloat32, 1000, ReduceOp::kSum, 7);
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 1000);  // not in the group: over the threshold
  FusionPlan plan;
  PlanFusion(ready.list(), 16, &plan);
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0, 1, 2}, {3}}));
}

TEST(PlanFusion, OtherCollectivesAreBatchesOfOneInTheirPlace) {
  Ready ready;
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 4);
  ready.Add(Collective::kBroadcast, DataType::kFloat32, 4);
  ready.Add(Collective::kAllgather, DataType::kFloat32, 4);
  ready.Add(Collective::kAllreduce, DataType::kFloat32, 4);
  FusionPlan plan;
  PlanFusion(ready.list(), 1 << 20, &plan);
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0, 3}, {1}, {2}}));
}

TEST(PlanFusion, APlanReusedForAShorterRoundHoldsOnlyThatRound) {
  Ready many, few;
  for (int i = 0; i < 6; ++i) many.Add(Collective::kBroadcast, DataType::kInt32, 1);
  few.Add(Collective::kAllreduce, DataType::kInt32, 1);
  FusionPlan plan;
  PlanFusion(many.list(), 1 << 20, &plan);
  ASSERT_EQ(plan.size(), 6u);
  PlanFusion(few.list(), 1 << 20, &plan);
  EXPECT_EQ(Members(plan), (std::vector<std::vector<size_t>>{{0}}));
}

}  // namespace
}  // namespace hvdlite
