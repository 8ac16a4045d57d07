// Eager all-reduce: small cached all-reduces that were ready everywhere in two rounds in a row (rounds
// where nothing was ready do not count) are predicted ready again, and their data rides in the
// negotiation round's own all-reduce. Where every
// rank set the tensor's bit, the reduced values come back with the bits: one collective instead of two
// (negotiate, then reduce), which is most of the latency of a small synchronous all-reduce. A missed
// prediction costs the tensor's bytes in that one round; the tensor then goes the normal way, and after
// kMaxMisses missed rounds in a row it is no longer predicted. Eager is all or nothing per round: when
// anything predicted cannot ride (too big for max_bytes, not an all-reduce), that round runs a normal
// collective anyway, and the small ones join its fused batch instead of lengthening the negotiation (measured
// faster than letting the first ones ride eager).
//
// Across hosts the payload is at most kCrossHostEagerMaxBytes: its one user-defined reduction over the whole buffer
// keeps MPICH on an algorithm that sends all of it each step: at 64 KiB on 4 hosts it ran at 0.73x the speed of
// MPI_Allreduce, at 16 KiB still 1.07-1.10x faster (docs/decisions/allreduce-across-hosts.md).
//
// The prediction and the payload layout derive only from agreed state (the ready bits of past rounds and
// the response cache, equal on every rank), so every rank lays out the same buffer without exchanging it.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "base/types.h"

namespace hvdlite {

class ResponseCache;

constexpr int64_t kCrossHostEagerMaxBytes = 16 << 10;

struct EagerSlot {
  int32_t bit;           // the tensor's response-cache bit
  int64_t offset_bytes;  // into the payload, 8-byte aligned
  int64_t count;
  DataType dtype;
  ReduceOp op;
};

class EagerPlan {
 public:
  EagerPlan() = default;
  EagerPlan(const EagerPlan &) = delete;
  EagerPlan &operator=(const EagerPlan &) = delete;

  // Every list holds distinct bits of a cache of cache_bits: reserved at that once, none grows in a later round,
  // however many bits a round's timing makes ready at once.
  void Reserve(int32_t cache_bits);
  // Lays out this round's payload from the prediction; at most max_bytes of tensors (0 turns eager off).
  void Layout(const ResponseCache &cache, int64_t max_bytes);
  const std::vector<EagerSlot> &slots() const { return slots_; }
  // The slot of a cache bit in this round's payload, or nullptr.
  const EagerSlot *Find(int32_t bit) const {
    return bit < static_cast<int32_t>(slot_of_bit_.size()) && slot_of_bit_[bit] >= 0 ? &slots_[slot_of_bit_[bit]]
                                                                                     : nullptr;
  }
  int64_t payload_words() const { return payload_words_; }

  // MPI_Allreduce over [header | payload] in place: AND on the header words (the negotiation's bit
  // vector), each slot's own reduction on the payload. Background thread only.
  void Allreduce(uint64_t *buffer, int32_t header_words, MPI_Comm comm);
  // Records the bits that were ready everywhere this round: the prediction for the next one.
  void Observe(const std::vector<int32_t> &ready_bits);
  void FreeMpiObjects();

 private:
  static constexpr int kMaxMisses = 2;
  struct Prediction {
    int32_t bit;
    int misses;  // rounds in a row it was planned for and not ready everywhere
  };
  std::vector<int32_t> previous_;       // ready bits of the last round where any was ready, sorted
  std::vector<Prediction> predicted_;   // sorted by bit
  std::vector<Prediction> next_;        // Observe's scratch, reused
  std::vector<EagerSlot> slots_;
  std::vector<int32_t> slot_of_bit_;  // index into slots_ per cache bit, -1 for none
  int64_t payload_words_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;  // the whole buffer as one element, so MPI never splits it
  int64_t type_words_ = 0;
  MPI_Op op_ = MPI_OP_NULL;

  static void Reduce(void *in, void *inout, int *len, MPI_Datatype *datatype);
  void ClearSlots();  // no tensor planned this round
};

}  // namespace hvdlite
