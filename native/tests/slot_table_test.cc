// SlotTable: tokens find their value until it is removed; a reused slot's new token differs from the old one.
#include <gtest/gtest.h>

#include <string>

#include "slot_table.h"

namespace hvdlite {
namespace {

TEST(SlotTable, TokensArePositiveAndFindTheirValue) {
  SlotTable<std::string> table;
  int64_t a = table.Add();
  *table.Find(a) = "a";
  int64_t b = table.Add();
  *table.Find(b) = "b";
  EXPECT_GT(a, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(*table.Find(a), "a");
  EXPECT_EQ(*table.Find(b), "b");
}

TEST(SlotTable, ARemovedTokenIsUnknownAndItsValueResetAtOnce) {
  SlotTable<std::string> table;
  int64_t a = table.Add();
  *table.Find(a) = "owned";
  table.Remove(a);
  EXPECT_EQ(table.Find(a), nullptr);
  table.Remove(a);  // twice: nothing happens
  int64_t again = table.Add();  // the same slot, reused last-in first-out
  EXPECT_EQ(again & 0xffffffff, a & 0xffffffff);
  EXPECT_NE(again, a);          // told apart by its generation
  EXPECT_EQ(table.Find(a), nullptr);
  EXPECT_EQ(*table.Find(again), "");  // reset, not the last user's value
}

TEST(SlotTable, UnknownAndMalformedTokensFindNothing) {
  SlotTable<int> table;
  EXPECT_EQ(table.Find(0), nullptr);
  EXPECT_EQ(table.Find(-5), nullptr);
  EXPECT_EQ(table.Find(12345), nullptr);
  int64_t a = table.Add();
  EXPECT_EQ(table.Find(a + (int64_t{1} << 32)), nullptr);  // right slot, wrong generation
}

TEST(SlotTable, ClearForgetsEveryTokenAndKeepsSlotsForReuse) {
  SlotTable<int> table;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 10; ++i) {
    tokens.push_back(table.Add());
    *table.Find(tokens.back()) = i;
  }
  table.Clear();
  for (int64_t t : tokens) EXPECT_EQ(table.Find(t), nullptr);
  for (int i = 0; i < 10; ++i) EXPECT_LT(table.Add() & 0xffffffff, 10);  // no new slot needed
}

TEST(SlotTable, AlignedSlotsFillWholeCacheLines) {
  EXPECT_EQ((SlotTable<int64_t, 64>::kSlotBytes), 64u);
}

}  // namespace
}  // namespace hvdlite
