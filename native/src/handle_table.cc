#include "handle_table.h"

#include <type_traits>

namespace hvdlite {

// Growing the table moves the slots; their outputs' buffers, whose addresses callers hold until release
// (hvdlite_handle_output_data), must move with them rather than be copied.
static_assert(std::is_nothrow_move_constructible_v<HandleState>, "slots must move, not copy, as the table grows");

void HandleTable::CreateMany(int64_t *handles, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < count; ++i) {
    if (free_.empty()) {
      free_.push_back(static_cast<uint32_t>(slots_.size()));
      slots_.emplace_back();
    }
    const uint32_t index = free_.back();
    free_.pop_back();
    Slot &slot = slots_[index];
    slot.live = true;
    if (++slot.generation == 0) slot.generation = 1;  // never 0: every handle is positive
    handles[i] = static_cast<int64_t>(uint64_t{slot.generation} << 32 | index);
  }
}

HandleState *HandleTable::Find(int64_t handle) {
  const uint32_t index = IndexOf(handle);
  if (handle <= 0 || index >= slots_.size()) return nullptr;
  Slot &slot = slots_[index];
  if (!slot.live || slot.generation != static_cast<uint64_t>(handle) >> 32) return nullptr;
  return &slot.state;
}

bool HandleTable::ReleaseLocked(int64_t handle) {
  HandleState *state = Find(handle);
  if (!state) return false;
  const bool pending = !state->done;
  *state = HandleState{};  // what it owned (an output, an error) is freed now, not when the slot is reused
  slots_[IndexOf(handle)].live = false;
  free_.push_back(IndexOf(handle));
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
  int first_failure = 0;
  for (int32_t i = 0; i < count; ++i) {
    HandleState *state = Find(handles[i]);
    if (!state) return -1;
    if (!state->done) return kPending;
    if (!state->error.empty() && first_failure == 0) first_failure = i + 1;
  }
  return first_failure;
}

int HandleTable::WaitAll(const int64_t *handles, int32_t count) {
  std::unique_lock<std::mutex> lock(mutex_);
  int first_failure = 0;
  for (int32_t i = 0; i < count; ++i) {
    HandleState *state = nullptr;
    // Looked up again on each wake-up: another thread may release the handle meanwhile.
    done_.wait(lock, [&] { return !(state = Find(handles[i])) || state->done; });
    if (!state) return -1;
    if (!state->error.empty() && first_failure == 0) first_failure = i + 1;
  }
  return first_failure;
}

void HandleTable::ReleaseAll(const int64_t *handles, int32_t count) {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int32_t i = 0; i < count; ++i) pending |= ReleaseLocked(handles[i]);
  }
  if (pending) WakeWaiters();  // a waiter on another thread learns that the handle is gone
}

void HandleTable::Release(int64_t handle) {
  ReleaseAll(&handle, 1);
}

}  // namespace hvdlite
