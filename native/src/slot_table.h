// Values addressed by tokens: a token is (generation << 32) | slot index, so finding a value is an array
// access, not a hash lookup, and a token whose slot was freed and taken again is told apart by the slot's
// generation. Freed slots are reused last-in first-out (still in cache): the table holds as many slots as
// values were ever live at once. Values move as the table grows: look a token up again after any Add.
// Not thread-safe: guard it with its owner's lock.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvdlite {

// Align: each slot's alignment (a cache line keeps a small value and its generation in one line).
template <typename T, size_t Align = alignof(T)>
class SlotTable {
  // The generation first: finding a token reads it, then the value's first fields.
  struct alignas(Align) Slot {
    uint32_t generation = 0;
    bool live = false;
    T value;
  };

 public:
  static constexpr size_t kSlotBytes = sizeof(Slot);

  // A new live slot (its value as the last user of the slot left it: reset in Remove); its token, > 0.
  int64_t Add() {
    if (free_.empty()) {
      free_.push_back(static_cast<uint32_t>(slots_.size()));
      slots_.emplace_back();
    }
    const uint32_t index = free_.back();
    free_.pop_back();
    Slot &slot = slots_[index];
    slot.live = true;
    if (++slot.generation == 0) slot.generation = 1;  // never 0: every token is positive
    return static_cast<int64_t>(uint64_t{slot.generation} << 32 | index);
  }
  // The live value of token, or null (unknown, or removed).
  T *Find(int64_t token) {
    const uint32_t index = static_cast<uint32_t>(token & 0xffffffff);
    if (token <= 0 || index >= slots_.size()) return nullptr;
    Slot &slot = slots_[index];
    if (!slot.live || slot.generation != static_cast<uint64_t>(token) >> 32) return nullptr;
    return &slot.value;
  }
  // Starts loading token's slot to be written (no check: a hint for a loop that will Find it soon).
  void Prefetch(int64_t token) const {
    const uint32_t index = static_cast<uint32_t>(token & 0xffffffff);
    if (index < slots_.size()) __builtin_prefetch(&slots_[index], 1);
  }
  // Frees token's slot; its value is reset now (what it owned is freed now, not when the slot is reused).
  void Remove(int64_t token) {
    if (!Find(token)) return;
    const uint32_t index = static_cast<uint32_t>(token & 0xffffffff);
    slots_[index].value = T{};
    slots_[index].live = false;
    free_.push_back(index);
  }
  // Removes every live value; their tokens stay unknown (generations are kept).
  void Clear() {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].live) continue;
      slots_[i].value = T{};
      slots_[i].live = false;
      free_.push_back(i);
    }
  }

 private:
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace hvdlite
