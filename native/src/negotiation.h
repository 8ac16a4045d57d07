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
};

struct RoundResult {
  std::vector<Response> ready;  // cached responses first (bit order), then the slow path's
  bool shutdown = false;        // some rank asked to shut down (global set only)
};

RoundResult NegotiateRound(ProcessSet &set, const NegotiationSettings &settings, bool shutting_down);

}  // namespace hvdlite
