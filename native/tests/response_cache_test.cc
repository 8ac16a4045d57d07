// ResponseCache: bits for names, least-recently-used eviction that spares the running round, stamps that
// change with a bit's response, and the count of evicted names that come back.
#include <gtest/gtest.h>

#include "negotiation/response_cache.h"

namespace hvdlite {
namespace {

Response Allreduce(const std::string &name, std::vector<int64_t> shape = {4}) {
  Response r;
  r.spec.collective = Collective::kAllreduce;
  r.spec.name = name;
  r.spec.shape = std::move(shape);
  return r;
}

TEST(ResponseCache, PutGivesANameABitAndKeepsItsElementCount) {
  ResponseCache cache(4);
  cache.Put(Allreduce("a", {2, 3}));
  int32_t bit = cache.Lookup("a");
  ASSERT_GE(bit, 0);
  EXPECT_EQ(cache.Get(bit).spec.name, "a");
  EXPECT_EQ(cache.Get(bit).elements, 6);
  EXPECT_EQ(cache.Lookup("b"), -1);
}

TEST(ResponseCache, AFullCacheEvictsTheLeastRecentlyUsed) {
  ResponseCache cache(2);
  cache.Put(Allreduce("a"));
  cache.Put(Allreduce("b"));
  cache.Touch(cache.Lookup("a"));  // b is now the least recently used
  cache.StartRound();
  cache.Put(Allreduce("c"));
  EXPECT_EQ(cache.Lookup("b"), -1);
  EXPECT_GE(cache.Lookup("a"), 0);
  EXPECT_GE(cache.Lookup("c"), 0);
}

TEST(ResponseCache, WhatTheRunningRoundUsedIsNotEvicted) {
  ResponseCache cache(2);
  cache.Put(Allreduce("a"));
  cache.Put(Allreduce("b"));
  cache.StartRound();
  cache.Touch(cache.Lookup("a"));
  cache.Touch(cache.Lookup("b"));
  cache.Put(Allreduce("c"));  // every entry is in use this round: c is simply not cached
  EXPECT_EQ(cache.Lookup("c"), -1);
  EXPECT_GE(cache.Lookup("a"), 0);
  EXPECT_GE(cache.Lookup("b"), 0);
}

TEST(ResponseCache, AStampChangesWithTheBitsResponseAndNeverRepeats) {
  ResponseCache cache(1);
  cache.Put(Allreduce("a"));
  int32_t bit = cache.Lookup("a");
  uint64_t first = cache.Stamp(bit);
  cache.Erase(bit);
  uint64_t erased = cache.Stamp(bit);
  cache.StartRound();
  cache.Put(Allreduce("b"));
  uint64_t second = cache.Stamp(cache.Lookup("b"));
  EXPECT_NE(first, erased);
  EXPECT_NE(erased, second);
  EXPECT_NE(first, second);
  ResponseCache other(1);
  other.Put(Allreduce("a"));
  EXPECT_NE(other.Stamp(other.Lookup("a")), first);  // in any cache
}

TEST(ResponseCache, MatchesOnlyTheSameCollectiveDtypeOpScaleAndShape) {
  ResponseCache cache(4);
  cache.Put(Allreduce("a", {2, 3}));
  int32_t bit = cache.Lookup("a");
  Request same = cache.Get(bit).spec;
  EXPECT_TRUE(cache.Matches(bit, same, 0));
  Request other_shape = same;
  other_shape.shape = {3, 2};
  EXPECT_FALSE(cache.Matches(bit, other_shape, 0));
  Request other_dtype = same;
  other_dtype.dtype = DataType::kFloat64;
  EXPECT_FALSE(cache.Matches(bit, other_dtype, 0));
  Request other_scale = same;
  other_scale.postscale = 2.0;
  EXPECT_FALSE(cache.Matches(bit, other_scale, 0));
}

TEST(ResponseCache, EvictedNamesThatComeBackAreCountedAndReportedOnce) {
  ResponseCache cache(2);
  // Three names cycling through two entries: from the third put on, each name put back was evicted before.
  const char *names[] = {"x", "y", "z"};
  for (int step = 0; step < 12; ++step) {
    cache.StartRound();
    cache.Put(Allreduce(names[step % 3]));
  }
  EXPECT_EQ(cache.returns(), 12 - 3);
  EXPECT_EQ(cache.last_returned(), "z");
  int crossings = 0;
  for (int step = 0; step < 40; ++step) {
    cache.StartRound();
    cache.Put(Allreduce(names[step % 3]));
    crossings += cache.CrossedThrashThreshold() ? 1 : 0;
  }
  EXPECT_EQ(crossings, 1);  // at 16 returns (half of 2 is less), once
}

TEST(ResponseCache, CapacityZeroCachesNothing) {
  ResponseCache cache(0);
  cache.Put(Allreduce("a"));
  EXPECT_EQ(cache.Lookup("a"), -1);
}

TEST(ResponseCache, ExtentBoundsEveryBitEverUsed) {
  ResponseCache cache(8);
  EXPECT_EQ(cache.extent(), 0);
  cache.Put(Allreduce("a"));
  cache.Put(Allreduce("b"));
  cache.Put(Allreduce("c"));
  EXPECT_EQ(cache.extent(), 3);
  cache.Erase(cache.Lookup("c"));
  EXPECT_EQ(cache.extent(), 3);  // a bound, not shrunk: a carried round's length stays as it was
  cache.Put(Allreduce("d"));     // the lowest free bit again
  EXPECT_EQ(cache.Lookup("d"), 2);
  EXPECT_EQ(cache.extent(), 3);
}

}  // namespace
}  // namespace hvdlite
