// One negotiation round of a process set: which requests are ready on every rank, and in what order
// every rank executes them.
//
// Fast path: requests whose name is in the response cache set their bit; one MPI_Allreduce(BAND) of
// the bit vector (plus flag bits and "still valid" bits) tells which are ready everywhere.
// Slow path (only when some rank has a request the cache cannot answer, or the coordinator has stalled
// tensors to fail): requests are gathered to the coordinator, which answers with the completed
// responses, broadcast to all. Every rank then holds the same ready list in the same order.
#pragma once
#include <vector>

#include "messages.h"
#include "process_set.h"

namespace hvdlite {

struct NegotiationSettings {
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  int64_t eager_max_bytes = 64 << 10;  // payload of predicted small all-reduces per round; 0: none
};

// What this rank brings to a round besides its pending requests.
struct RoundInput {
  bool shutting_down = false;
  bool idle = false;       // nothing pending or queued on this rank, in any process set
  bool sent_wake = false;  // this rank woke the others from quiet (one wake message to each)
  // Holding async work back (HVDLITE_OVERLAP off): cached collectives ready everywhere run only once every
  // rank has a caller waiting, or once a request has waited kMaxHoldSeconds (so polling alone progresses).
  bool hold = false;
  bool caller_waiting = false;
  // Values the coordinator (rank 0) decides for everyone, e.g. autotuned settings: other ranks send all
  // ones, so the AND of the round leaves rank 0's words on every rank, in the same round.
  uint64_t coordinator_words[2] = {~uint64_t{0}, ~uint64_t{0}};
};

// An all-reduce that the round itself completed (eager_allreduce.h): the reduced values, before
// postscale and the average's division, valid until the set's next round.
struct EagerResult {
  const Response *response;  // in the set's response cache, kept until its next round
  Entry *entry;              // this rank's request (null: this rank joined, it only contributed zeros)
  const uint8_t *reduced;
};

constexpr double kMaxHoldSeconds = 0.1;

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
  int32_t wakes_sent_to_me = 0; // wake messages that other ranks sent this rank before the round
  uint64_t coordinator_words[2] = {0, 0};
};

RoundResult NegotiateRound(ProcessSet &set, const NegotiationSettings &settings, const RoundInput &input);

}  // namespace hvdlite
