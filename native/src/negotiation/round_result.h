// What a negotiation round decided for a process set (negotiation.h): the responses every rank runs now,
// in order, and the round's flags. Kept in the set and reused from round to round.
#pragma once
#include <cstdint>
#include <vector>

#include "negotiation/entry.h"
#include "negotiation/messages.h"

namespace hvdlite {

// An all-reduce that the round itself completed (eager_allreduce.h): the reduced values, before
// postscale and the average's division, valid until the set's next round.
struct EagerResult {
  const Response *response;  // in the set's response cache, kept until its next round
  Entry *entry;              // this rank's request (null: this rank joined, it only contributed zeros)
  const uint8_t *reduced;
};

struct RoundResult {
  // What runs this round, in this order: the cached responses ready everywhere (bit order; they point into
  // the set's response cache, which keeps them until its next round), then the slow path's.
  std::vector<const Response *> cached;
  std::vector<Entry *> cached_entries;  // this rank's entry for each of cached (null where it joined)
  std::vector<Response> slow_path;
  std::vector<EagerResult> eager;
  bool shutdown = false;        // some rank asked to shut down (global set only)
  bool everyone_idle = false;   // no rank had anything to do: all may stop cycling until woken
  bool held = false;            // ready cached collectives were held back (they come again next round)
  bool carried = false;         // the round rode in the last batch of the round before (carried_round.h)
  uint64_t coordinator_words[2] = {0, 0};

  // Empty again, the lists keeping their capacity: a steady step negotiates without allocating.
  void Reset() {
    cached.clear();
    cached_entries.clear();
    slow_path.clear();
    eager.clear();
    shutdown = everyone_idle = held = carried = false;
    coordinator_words[0] = coordinator_words[1] = 0;
  }
};

}  // namespace hvdlite
