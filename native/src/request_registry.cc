#include "request_registry.h"

namespace hvdlite {

Entry *RequestRegistry::Claim(int32_t set_id, const std::string &name) {
  auto [e, made] = nodes_.Insert(sets_[set_id], name);
  if (made) {
    e->request.name = name;
    e->process_set_id = set_id;
  }
  return e->in_flight ? nullptr : e;
}

void RequestRegistry::Land(Entry &e) {
  e.in_flight = false;
  --in_flight_;
  Drop(e);
}

void RequestRegistry::Drop(Entry &e) {
  if (e.prepared > 0 || e.in_flight) return;
  auto names = sets_.find(e.process_set_id);
  if (names != sets_.end()) nodes_.Erase(names->second, e.request.name);  // e is gone after this
}

int64_t RequestRegistry::Prepare(const Entry &e) {
  if (free_.empty()) {
    free_.push_back(static_cast<uint32_t>(slots_.size()));
    slots_.emplace_back();
  }
  const uint32_t index = free_.back();
  free_.pop_back();
  Slot &slot = slots_[index];
  slot.live = true;
  if (++slot.generation == 0) slot.generation = 1;  // never 0: every token is positive
  Prepared &p = slot.prepared;
  p.entry = nodes_.Insert(sets_[e.process_set_id], e.request.name).first;
  p.entry->request.name = e.request.name;
  p.entry->process_set_id = e.process_set_id;
  ++p.entry->prepared;
  p.request = e.request;
  p.process_set_id = e.process_set_id;
  p.splits = e.splits;
  p.checked_sets = 0;
  return static_cast<int64_t>(uint64_t{slot.generation} << 32 | index);
}

RequestRegistry::Prepared *RequestRegistry::Find(int64_t token) {
  const uint32_t index = static_cast<uint32_t>(token & 0xffffffff);
  if (token <= 0 || index >= slots_.size()) return nullptr;
  Slot &slot = slots_[index];
  if (!slot.live || slot.generation != static_cast<uint64_t>(token) >> 32) return nullptr;
  return &slot.prepared;
}

void RequestRegistry::Unprepare(int64_t token) {
  Prepared *p = Find(token);
  if (!p) return;
  Entry &e = *p->entry;
  --e.prepared;
  if (e.written_by == token) e.written_by = 0;  // a later token in this slot must not take it as its own
  Drop(e);
  const uint32_t index = static_cast<uint32_t>(token & 0xffffffff);
  slots_[index].live = false;
  slots_[index].prepared = Prepared{};
  free_.push_back(index);
}

void RequestRegistry::Clear() {
  sets_.clear();
  in_flight_ = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].live) continue;
    slots_[i].live = false;
    slots_[i].prepared = Prepared{};
    free_.push_back(i);
  }
}

}  // namespace hvdlite
