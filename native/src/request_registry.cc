#include "request_registry.h"

namespace hvdlite {

Entry &RequestRegistry::EntryFor(int32_t set_id, const std::string &name) {
  auto [e, made] = nodes_.Insert(sets_[set_id], name);
  if (made) {
    e->request.name = name;
    e->process_set_id = set_id;
  }
  return *e;
}

Entry *RequestRegistry::Claim(int32_t set_id, const std::string &name) {
  Entry &e = EntryFor(set_id, name);
  return e.in_flight ? nullptr : &e;
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
  const int64_t token = prepared_.Add();
  Prepared &p = *prepared_.Find(token);
  p.entry = &EntryFor(e.process_set_id, e.request.name);
  ++p.entry->prepared;
  p.request = e.request;
  p.process_set_id = e.process_set_id;
  p.splits = e.splits;
  p.checked_sets = 0;
  return token;
}

void RequestRegistry::Unprepare(int64_t token) {
  Prepared *p = Find(token);
  if (!p) return;
  Entry &e = *p->entry;
  --e.prepared;
  if (e.written_by == token) e.written_by = 0;  // its description belongs to no live prepared request now
  Drop(e);
  prepared_.Remove(token);
}

void RequestRegistry::Clear() {
  sets_.clear();
  in_flight_ = 0;
  prepared_.Clear();
}

}  // namespace hvdlite
