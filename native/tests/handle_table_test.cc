// HandleTable's waits: for all of several handles, and for the first of them (a receive from whichever peer sends
// first), woken by another thread completing or releasing a handle, or giving up at a deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "handle_table.h"

namespace hvdlite {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

TEST(HandleTable, WaitAnyReturnsTheFirstHandleDoneOnAnotherThread) {
  HandleTable table;
  int64_t handles[3];
  table.CreateMany(handles, 3);
  std::thread completer([&] {
    std::this_thread::sleep_for(milliseconds(20));  // the waiter is asleep by then (else it sees it done at once)
    table.Fail(handles[1], "lost");
  });
  EXPECT_EQ(table.WaitAny(handles, 3), 1);
  completer.join();
  EXPECT_EQ(table.Poll(handles[0]), 0);
  EXPECT_EQ(table.WaitAll(&handles[1], 1), 1);  // its failure is there to read
  table.Succeed(handles[2]);
  EXPECT_EQ(table.WaitAny(handles, 3), 1);  // the lowest index of those done
}

TEST(HandleTable, WaitAnyGivesUpAtTheDeadlineAndSeesAReleasedHandle) {
  HandleTable table;
  int64_t handles[2];
  table.CreateMany(handles, 2);
  EXPECT_EQ(table.WaitAny(handles, 2, steady_clock::now() + milliseconds(10)), HandleTable::kPending);
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(20));
    table.Release(handles[0]);  // pending: its waiters learn that it is gone
  });
  EXPECT_EQ(table.WaitAny(handles, 2), 0);
  releaser.join();
  EXPECT_EQ(table.Poll(handles[0]), -1);
  EXPECT_EQ(table.Poll(handles[1]), 0);
}

}  // namespace
}  // namespace hvdlite
