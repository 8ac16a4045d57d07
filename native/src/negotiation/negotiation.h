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

#include "negotiation/messages.h"
#include "negotiation/process_set.h"
#include "base/types.h"

namespace hvdlite {

struct NegotiationSettings {
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  // Every rank of a set waiting for this long, with nothing of the set's completing: hvdlite shuts down (0: never).
  double deadlock_seconds = 300;
  int64_t eager_max_bytes = 64 << 10;  // payload of predicted small all-reduces per round; 0: none
};

// What this rank brings to a round besides its pending requests.
struct RoundInput {
  bool shutting_down = false;
  bool idle = false;       // nothing pending or queued on this rank, in any process set
  // Holding async work back (HVDLITE_OVERLAP off): cached collectives ready everywhere run only once every
  // rank has a caller waiting, or once a request has waited kMaxHoldSeconds (so polling alone progresses).
  bool hold = false;
  bool caller_waiting = false;
  // Values the coordinator (rank 0) decides for everyone, e.g. autotuned settings: other ranks send all
  // ones, so the AND of the round leaves rank 0's words on every rank, in the same round.
  uint64_t coordinator_words[2] = {~uint64_t{0}, ~uint64_t{0}};
};

constexpr double kMaxHoldSeconds = 0.1;

// Runs the round (NegotiationRound's steps) and returns its outcome, which the set keeps until its round after next.
const RoundResult &NegotiateRound(ProcessSet &set, const NegotiationSettings &settings, const RoundInput &input);

// One round in three steps. Pack: this rank's view into the set's bit vector (flags, a ready bit for each request
// the response cache answers, valid bits cleared where a cached agreement no longer fits, the coordinator's words,
// the eager payload). Exchange: one MPI_Allreduce(BAND) of it (with the eager payload's own
// reductions). Decode: the agreed vector into the round's result, entries of invalidated bits sent the slow way,
// and the slow path itself where any rank asked for it.
class NegotiationRound {
 public:
  NegotiationRound(ProcessSet &set, const NegotiationSettings &settings, const RoundInput &input);
  void Pack();
  void Exchange();
  const RoundResult &Decode();

  // The exchange carried in the last batch of the round before (carried_round.h), in place of Exchange, between
  // Pack and Decode: the bits that ride (the flags, and the ready and valid bits of the cache's extent; the rest of
  // the vector is what every rank packs alike when carrying: no eager payload, no coordinator words, no wake), this
  // rank's as elements of the carrying batch, and the reduced elements back into the vector.
  static constexpr int32_t kFlagBits = 6;  // the flags of word 0 (negotiation.cc)
  int32_t carried_bits() const { return kFlagBits + 2 * set_.cache.extent(); }
  void CarryOut(DataType dtype, ReduceOp op, uint8_t *elements) const;
  void CarryIn(const uint8_t *reduced, DataType dtype, ReduceOp op);
  // Where the carrying batch failed: the round does not run, and what Pack marked is as it was.
  void Abandon();

 private:
  // Sets e's ready bit where the cache answers it (true), else sends it the slow way (false).
  bool AnnounceByCache(Entry &e, double age);
  void EvictInvalidated();
  void CollectReady(bool everyone_joined, RoundResult *result);
  // entry_of_bit back to all null, for the bits this rank announced (the round is decoded, or abandoned).
  void ForgetAnnounced();

  ProcessSet &set_;
  const NegotiationSettings &settings_;
  const RoundInput &input_;
  const Clock::time_point now_;
  const int32_t capacity_, words_, header_words_;  // cache bits, words of them, words of the header
  // A cached request older than this goes the slow way, where the coordinator sees who is missing (0: never).
  const double cached_stall_seconds_;
  // Where each part lies in set_.round_bits (set by Pack).
  uint64_t *ready_ = nullptr, *valid_ = nullptr, *coordinator_ = nullptr;
  uint8_t *payload_ = nullptr;
  bool carried_ = false;  // CarryIn brought the vector
};

}  // namespace hvdlite
