// The names of a process group's calls to the core.
//
// Every rank makes a group's calls in one order (c10d requires it), so a name made from the calls before it
// only is the same on every rank for the same call: the core matches the call across ranks by it and reports
// a disagreement about the call itself (dtype, shape, op) on every rank, instead of waiting for a name that
// another rank never sends. A call is named by its place in the group's sequence ("c10d.<group>.<n>"): such a
// name is never seen twice, so the core negotiates the call in full (a gather to the coordinator and back).
// Where the calls before a call of one request repeat with a period (a training loop: DDP's buffers and buckets,
// FSDP's all-gathers and reduce-scatters every step), a single all-reduce, broadcast, all-gather or reduce-scatter
// is named by its place in that period instead ("c10d.<group>.p<P>.<n mod P>"): the same name every step, which
// the core's response cache answers without a negotiation of its own. The period is found from what every rank's
// calls must agree on (their signatures), so it is found alike on every rank. A call that ranks disagree about
// fails on every rank (the core's check, or the backend's where the core allows it: an all-gather's sizes).
//
// Once a call of the group has failed (ranks that disagreed about it recorded different signatures, so their
// periods could differ from there on), every call is named by its place again.
//
// A periodic name comes back every P calls, possibly while its last call is still in flight (more calls of one
// signature in flight than the period holds); the core takes one request per name at a time, so the later call waits
// for the earlier (Follow): a call that every rank has made finishes whatever comes after it.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "work.h"

namespace hvdlite_c10d {

class CallNames {
 public:
  // Periods up to this many calls are found (longer ones name every call by its place in the sequence).
  static constexpr size_t kMaxPeriod = 64;
  // A period is taken from this many calls at least (and two periods).
  static constexpr size_t kMinWindow = 8;

  explicit CallNames(std::string group) : group_(std::move(group)) {}

  struct Name {
    std::string text;
    bool periodic = false;  // it comes back: Follow before the call is enqueued
  };
  // The next call's name. signature: what every rank's call must agree on; repeatable: whether the call may
  // take a periodic name (one request the core's cache answers), else it is named by its place in the sequence.
  Name Next(uint64_t signature, bool repeatable);
  uint64_t calls() {  // the group's calls so far
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  // A call of the group failed: no periodic names from now on.
  void NoteFailure() { failed_ = true; }
  // Records work as the call of a periodic name; returns the name's last call while that is still in flight
  // (work must not be enqueued before it finishes), else null.
  c10::intrusive_ptr<HvdliteWork> Follow(const std::string &name, const c10::intrusive_ptr<HvdliteWork> &work);

 private:
  // The shortest period of the recent signatures, 0 when there is none.
  size_t Period() const;

  const std::string group_;
  std::mutex mutex_;
  uint64_t calls_ = 0;
  std::atomic<bool> failed_{false};
  std::deque<uint64_t> recent_;  // the last 2 x kMaxPeriod calls' signatures, oldest first
  std::map<std::string, c10::weak_intrusive_ptr<HvdliteWork>> last_call_;  // by periodic name
};

}  // namespace hvdlite_c10d
