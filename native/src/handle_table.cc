#include "handle_table.h"

namespace hvdlite {

void HandleTable::CreateMany(int64_t *handles, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < count; ++i) {
    handles[i] = next_++;
    HandleState fresh;  // takes a released state's place in the pool, which lends its node
    released_.Adopt(states_, handles[i], fresh);
  }
}

void HandleTable::Fail(int64_t handle, const std::string &error) {
  Complete(handle, [&](HandleState &s) { s.error = error; });
}

void HandleTable::Succeed(int64_t handle, int64_t result) {
  Complete(handle, [&](HandleState &s) { s.result = result; });
}

int HandleTable::Poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(handle);
  if (it == states_.end()) return -1;
  return it->second.done ? 1 : 0;
}

bool HandleTable::AllDone(const int64_t *handles, int32_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int32_t i = 0; i < count; ++i) {
    auto it = states_.find(handles[i]);
    if (it != states_.end() && !it->second.done) return false;
  }
  return true;
}

int HandleTable::WaitAll(const int64_t *handles, int32_t count) {
  std::unique_lock<std::mutex> lock(mutex_);
  int first_failure = 0;
  for (int32_t i = 0; i < count; ++i) {
    auto it = states_.find(handles[i]);
    if (it == states_.end()) return -1;
    HandleState &state = it->second;
    done_.wait(lock, [&] { return state.done; });
    if (!state.error.empty() && first_failure == 0) first_failure = i + 1;
  }
  return first_failure;
}

void HandleTable::ReleaseAll(const int64_t *handles, int32_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int32_t i = 0; i < count; ++i) released_.Erase(states_, handles[i]);
}

void HandleTable::Release(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  released_.Erase(states_, handle);
}

size_t HandleTable::Size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_.size();
}

}  // namespace hvdlite
