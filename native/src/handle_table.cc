#include "handle_table.h"

#include <type_traits>

namespace hvdlite {

// Growing the table moves the slots. Outputs the core allocated stay where they are (CoreResults is held by
// pointer), so the addresses callers hold until release (hvdlite_handle_output_data) stay good.
static_assert(std::is_nothrow_move_constructible_v<HandleState>, "slots must move, not copy, as the table grows");

void HandleTable::CreateMany(int64_t *handles, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < count; ++i) handles[i] = slots_.Add();
}

bool HandleTable::ReleaseLocked(int64_t handle) {
  HandleState *state = Find(handle);
  if (!state) return false;
  const bool pending = !state->done;
  slots_.Remove(handle);
  return pending;
}

void HandleTable::Fail(int64_t handle, const std::string &error) {
  Complete(handle, [&](HandleState &s) { s.error = error; });
}

void HandleTable::Succeed(int64_t handle, int64_t result) {
  Complete(handle, [&](HandleState &s) { s.result = result; });
}

int HandleTable::Poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  HandleState *state = Find(handle);
  if (!state) return -1;
  return state->done ? 1 : 0;
}

bool HandleTable::AllDone(const int64_t *handles, int32_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int32_t i = 0; i < count; ++i) {
    HandleState *state = Find(handles[i]);
    if (state && !state->done) return false;
  }
  return true;
}

int HandleTable::ResultIfDone(const int64_t *handles, int32_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ResultIfDoneLocked(handles, count);
}

int HandleTable::ResultIfDoneLocked(const int64_t *handles, int32_t count) {
  int first_failure = 0;
  for (int32_t i = 0; i < count; ++i) {
    HandleState *state = Find(handles[i]);
    if (!state) return -1;
    if (!state->done) return kPending;
    if (!state->error.empty() && first_failure == 0) first_failure = i + 1;
  }
  return first_failure;
}

int HandleTable::WaitAll(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  int first_failure = 0;
  for (int32_t i = 0; i < count; ++i) {
    HandleState *state = nullptr;
    // Looked up again on each wake-up: another thread may release the handle meanwhile.
    auto finished = [&] { return !(state = Find(handles[i])) || state->done; };
    if (!WaitUntil(lock, deadline, finished)) return kPending;
    if (!state) return -1;
    if (!state->error.empty() && first_failure == 0) first_failure = i + 1;
  }
  return first_failure;
}

int HandleTable::WaitAny(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  int index = kPending;
  auto one_finished = [&] {
    for (int32_t i = 0; i < count; ++i) {
      const HandleState *state = Find(handles[i]);
      if (!state || state->done) {
        index = i;
        return true;
      }
    }
    return false;
  };
  WaitUntil(lock, deadline, one_finished);
  return index;
}

void HandleTable::ReleaseAll(const int64_t *handles, int32_t count) {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int32_t i = 0; i < count; ++i) pending |= ReleaseLocked(handles[i]);
  }
  if (pending) WakeWaiters();  // a waiter on another thread learns that the handle is gone
}

int HandleTable::ReleaseIfSucceeded(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int result = ResultIfDoneLocked(&handle, 1);
  if (result == 0) slots_.Remove(handle);  // done: no waiter needs to hear that it is gone
  return result;
}

void HandleTable::Release(int64_t handle) {
  ReleaseAll(&handle, 1);
}

}  // namespace hvdlite
