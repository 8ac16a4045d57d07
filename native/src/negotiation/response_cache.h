// The response cache of the fast path: names that were negotiated before get a fixed bit, so that a
// later round only needs one bitwise-AND all-reduce to learn which of them every rank has ready.
// Every rank applies the same Put/Touch/Erase calls in the same order, so bits agree everywhere.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/messages.h"

namespace hvdlite {

class ResponseCache {
 public:
  explicit ResponseCache(int32_t capacity);

  int32_t capacity() const { return static_cast<int32_t>(slots_.size()); }
  // Bit of a cached name, or -1.
  int32_t Lookup(const std::string &name) const;
  const Response &Get(int32_t bit) const { return slots_[bit].response; }
  bool Used(int32_t bit) const { return slots_[bit].used; }
  // One past the highest bit ever used: every used bit lies below it. Equal on every rank, as the bits are.
  int32_t extent() const { return extent_; }
  // Changes whenever the bit gets another response (or none), and never repeats, in any cache: a request
  // that matched the bit's response may skip Lookup and Matches while the stamp it saw then holds.
  uint64_t Stamp(int32_t bit) const { return slots_[bit].stamp; }
  // Whether this rank's request can reuse the cached agreement unchanged.
  bool Matches(int32_t bit, const Request &local, int32_t my_rank) const;
  // Starts a round: what is touched or put from now on is not evicted before the next StartRound, so the
  // round may run its cached responses by pointer. Every rank calls it at the same points.
  void StartRound() { round_start_tick_ = tick_; }
  // Inserts (or refreshes) an agreed response; when full, evicts the least recently used entry that this
  // round has not used (if every entry is in use, the response is simply not cached).
  void Put(const Response &response);
  void Touch(int32_t bit) { slots_[bit].last_used = ++tick_; }
  void Erase(int32_t bit);
  static bool Cacheable(Collective c);

  // Names put back after this cache evicted them, since it was made. Many of them mean that the job reduces more
  // tensors than the cache holds: least recently used eviction then drops each before its next use, and all of
  // them take the slow path every time. True once, when the count first reaches ThrashThreshold(): half the
  // capacity, 16 at least.
  bool CrossedThrashThreshold();
  int64_t returns() const { return returns_; }
  const std::string &last_returned() const { return last_returned_; }

 private:
  int64_t ThrashThreshold() const { return std::max<int64_t>(16, capacity() / 2); }

  // A round reads every ready bit's stamp, then its response's error and size, then the request's scalars:
  // aligned, the first two lines (see Response).
  struct alignas(64) Slot {
    bool used = false;
    uint64_t last_used = 0;
    uint64_t stamp = 0;
    Response response;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int32_t> bits_;
  uint64_t tick_ = 0;
  int32_t extent_ = 0;
  uint64_t round_start_tick_ = 0;
  // Hashes of evicted names, one per slot of a fixed table (a later eviction may overwrite one: the count is
  // a lower bound, and the table never grows).
  std::vector<uint64_t> evicted_;
  int64_t returns_ = 0;
  bool thrash_reported_ = false;
  std::string last_returned_;
};

}  // namespace hvdlite
