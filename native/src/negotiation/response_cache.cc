#include "negotiation/response_cache.h"
#include "base/collective_info.h"

#include <atomic>
#include <functional>

namespace hvdlite {
namespace {

uint64_t NextStamp() {
  static std::atomic<uint64_t> last{0};  // shared by every process set's cache (background thread only)
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Evicted names remembered: twice the capacity, at most this many (8 bytes each).
constexpr size_t kMaxEvictedRemembered = size_t{1} << 16;

uint64_t NameHash(const std::string &name) {
  return std::hash<std::string>{}(name) | 1;  // never 0, the empty slot
}

// Where a hash is remembered. Not hash % size: every hash is odd and the size even, which would leave
// half of the table unused.
size_t EvictedIndex(uint64_t hash, size_t size) { return (hash >> 1) % size; }

}  // namespace

ResponseCache::ResponseCache(int32_t capacity)
    : slots_(capacity > 0 ? capacity : 0),
      evicted_(std::min(kMaxEvictedRemembered, 2 * static_cast<size_t>(std::max(capacity, 0)))) {}

bool ResponseCache::CrossedThrashThreshold() {
  if (thrash_reported_ || returns_ < ThrashThreshold()) return false;
  thrash_reported_ = true;
  return true;
}

bool ResponseCache::Cacheable(Collective c) {
  return HasTensor(c);
}

int32_t ResponseCache::Lookup(const std::string &name) const {
  auto it = bits_.find(name);
  return it == bits_.end() ? -1 : it->second;
}

bool ResponseCache::Matches(int32_t bit, const Request &local, int32_t my_rank) const {
  const Response &cached = slots_[bit].response;
  const Request &s = cached.spec;
  if (s.collective != local.collective || s.dtype != local.dtype || s.op != local.op || s.gpu != local.gpu ||
      s.prescale != local.prescale || s.postscale != local.postscale || s.root_rank != local.root_rank ||
      s.shape.size() != local.shape.size()) {
    return false;
  }
  bool variable_first_dim = GathersRows(s.collective);
  for (size_t d = variable_first_dim ? 1 : 0; d < s.shape.size(); ++d) {
    if (s.shape[d] != local.shape[d]) return false;
  }
  if (s.collective == Collective::kAllgather) {
    return my_rank < static_cast<int32_t>(cached.first_dims.size()) && !local.shape.empty() &&
           cached.first_dims[my_rank] == local.shape[0];
  }
  return true;
}

void ResponseCache::Put(const Response &response) {
  if (slots_.empty()) return;
  int32_t bit = Lookup(response.spec.name);
  if (bit < 0) {
    // Lowest free slot, else the least recently used one this round has not used: the same choice on
    // every rank.
    int32_t victim = -1;
    for (int32_t i = 0; i < capacity(); ++i) {
      if (!slots_[i].used) { bit = i; break; }
      if (slots_[i].last_used > round_start_tick_) continue;
      if (victim < 0 || slots_[i].last_used < slots_[victim].last_used) victim = i;
    }
    if (bit < 0 && victim < 0) return;
    // Whether this name was evicted before and is back: asked before the victim is remembered, which may
    // take the same place in the table.
    const uint64_t hash = NameHash(response.spec.name);
    uint64_t &remembered = evicted_[EvictedIndex(hash, evicted_.size())];
    if (remembered == hash) {
      remembered = 0;
      ++returns_;
      last_returned_ = response.spec.name;
    }
    if (bit < 0) {
      const uint64_t gone = NameHash(slots_[victim].response.spec.name);
      evicted_[EvictedIndex(gone, evicted_.size())] = gone;
      Erase(victim);
      bit = victim;
    }
    bits_[response.spec.name] = bit;
  }
  Slot &slot = slots_[bit];
  extent_ = std::max(extent_, bit + 1);
  slot.used = true;
  slot.response = response;
  slot.response.elements = slot.response.spec.NumElements();  // this copy's shape never changes
  slot.last_used = ++tick_;
  slot.stamp = NextStamp();
}

void ResponseCache::Erase(int32_t bit) {
  Slot &slot = slots_[bit];
  if (!slot.used) return;
  bits_.erase(slot.response.spec.name);
  slot = Slot{};
  slot.stamp = NextStamp();
}

}  // namespace hvdlite
