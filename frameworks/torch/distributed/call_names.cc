#include "call_names.h"

#include <algorithm>

namespace hvdlite_c10d {

CallNames::Name CallNames::Next(uint64_t signature, bool repeatable) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t n = calls_++;
  Name name;
  const size_t period = repeatable && !failed_ ? Period() : 0;
  if (period > 0) {
    name.text = "c10d." + group_ + ".p" + std::to_string(period) + "." + std::to_string(n % period);
    name.periodic = true;
  } else {
    name.text = "c10d." + group_ + "." + std::to_string(n);
  }
  recent_.push_back(signature);
  if (recent_.size() > 2 * kMaxPeriod) recent_.pop_front();
  return name;
}

size_t CallNames::Period() const {
  // The shortest period that the last calls follow, over two periods at least and never fewer than
  // kMinWindow calls: a few equal calls in a row (a run of buckets of one size) are not yet a period of one.
  const size_t count = recent_.size();
  for (size_t period = 1; period <= kMaxPeriod; ++period) {
    const size_t window = std::max(2 * period, kMinWindow);
    if (window > count) break;
    bool repeats = true;
    for (size_t i = count - window + period; i < count && repeats; ++i) repeats = recent_[i] == recent_[i - period];
    if (repeats) return period;
  }
  return 0;
}

c10::intrusive_ptr<HvdliteWork> CallNames::Follow(const std::string &name,
                                                  const c10::intrusive_ptr<HvdliteWork> &work) {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::intrusive_ptr<HvdliteWork> before;
  auto it = last_call_.find(name);
  if (it == last_call_.end()) {
    last_call_.emplace(name, c10::weak_intrusive_ptr<HvdliteWork>(work));
  } else {
    before = it->second.lock();
    it->second = c10::weak_intrusive_ptr<HvdliteWork>(work);
  }
  if (before && before->isCompleted()) before.reset();
  return before;
}

}  // namespace hvdlite_c10d
