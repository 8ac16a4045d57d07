// Every request the core holds, one entry per process set and name: queue, arrival order and handle all point
// at the same entry, which stays put (a node of a map) while it is in flight. A prepared request (submitted
// again and again with new buffers, as an optimizer submits each gradient) keeps its entry and a copy of its
// request here: submitting it is a token and two pointers, with no name copied, hashed or checked again.
// Not thread-safe: the core guards it with its mutex.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/entry.h"
#include "node_pool.h"
#include "slot_table.h"

namespace hvdlite {

class RequestRegistry {
 public:
  struct Prepared {
    Entry *entry = nullptr;    // its entry in the registry, kept while the prepared request lives
    Request request;           // as prepared; written into the entry when another submission changed it
    int32_t process_set_id = 0;
    std::vector<int32_t> splits;
    uint64_t checked_sets = 0;  // the process sets (Core's count of changes) it was last checked against
  };

  // The entry of (set_id, name), made if there is none. Null when it is in flight: a duplicate.
  Entry *Claim(int32_t set_id, const std::string &name);
  // Puts a claimed entry in flight.
  void Fly(Entry &e) {
    e.in_flight = true;
    ++in_flight_;
  }
  // Out of flight (finished, or failed before it ran); its node goes back to the pool unless prepared.
  void Land(Entry &e);
  bool AnyInFlight() const { return in_flight_ > 0; }

  // A token for request (described by e), which stays valid until Unprepare or Clear.
  int64_t Prepare(const Entry &e);
  // The prepared request of a token, or null for a token unknown here (unprepared, or from before Clear).
  Prepared *Find(int64_t token) { return prepared_.Find(token); }
  void Unprepare(int64_t token);

  // Forgets every request and prepared request (the core shut down): tokens handed out so far stay unknown.
  void Clear();

 private:
  using Names = std::unordered_map<std::string, Entry>;
  Entry &EntryFor(int32_t set_id, const std::string &name);  // made (named, in its set) if there is none
  void Drop(Entry &e);  // gives the entry's node back unless it is in flight or prepared

  std::unordered_map<int32_t, Names> sets_;
  NodePool<Names> nodes_;
  int64_t in_flight_ = 0;
  SlotTable<Prepared> prepared_;  // a prepared request's token is its slot's
};

}  // namespace hvdlite
