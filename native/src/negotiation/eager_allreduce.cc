#include "negotiation/eager_allreduce.h"

#include <algorithm>

#include "base/reduce_kernels.h"
#include "negotiation/response_cache.h"

namespace hvdlite {
namespace {

// The plan whose Allreduce is running: MPI calls the user op without context, and only the background
// thread runs rounds, one at a time.
const EagerPlan *g_running = nullptr;
int32_t g_running_header_words = 0;

}  // namespace

void EagerPlan::ClearSlots() {
  for (const EagerSlot &slot : slots_) slot_of_bit_[slot.bit] = -1;
  slots_.clear();
}

void EagerPlan::Reserve(int32_t cache_bits) {
  const size_t bits = static_cast<size_t>(cache_bits);
  predicted_.reserve(bits);
  next_.reserve(bits);
  previous_.reserve(bits);
  slots_.reserve(bits);
  slot_of_bit_.reserve(bits);
}

void EagerPlan::Layout(const ResponseCache &cache, int64_t max_bytes) {
  ClearSlots();
  slot_of_bit_.resize(cache.capacity(), -1);
  int64_t offset = 0;
  for (const Prediction &prediction : predicted_) {
    const int32_t bit = prediction.bit;
    if (bit >= cache.capacity() || !cache.Used(bit)) continue;
    const Response &response = cache.Get(bit);
    const Request &spec = response.spec;
    const int64_t count = response.Elements();
    const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(spec.dtype));
    if (spec.collective != Collective::kAllreduce || spec.op == ReduceOp::kAdasum || spec.gpu ||
        offset + bytes > max_bytes) {
      // A predicted collective must go the normal way: the small ones ride its batch for free, while
      // their bytes in the negotiation would only slow it down. Eager is for rounds it can finish alone, on
      // host memory (a GPU tensor's bytes are the GPU's, ordered on its stream).
      ClearSlots();
      offset = 0;
      break;
    }
    slot_of_bit_[bit] = static_cast<int32_t>(slots_.size());
    slots_.push_back(EagerSlot{bit, offset, count, spec.dtype, spec.op});
    offset += (bytes + 7) / 8 * 8;
  }
  payload_words_ = offset / 8;
}

void EagerPlan::Reduce(void *in, void *inout, int *len, MPI_Datatype *) {
  const EagerPlan &plan = *g_running;
  const int64_t element_words = g_running_header_words + plan.payload_words_;
  for (int element = 0; element < *len; ++element) {
    const uint64_t *src = static_cast<const uint64_t *>(in) + element * element_words;
    uint64_t *dst = static_cast<uint64_t *>(inout) + element * element_words;
    for (int32_t w = 0; w < g_running_header_words; ++w) dst[w] &= src[w];
    const uint8_t *src_payload = reinterpret_cast<const uint8_t *>(src + g_running_header_words);
    uint8_t *dst_payload = reinterpret_cast<uint8_t *>(dst + g_running_header_words);
    for (const EagerSlot &slot : plan.slots_) {
      ReduceInto(dst_payload + slot.offset_bytes, src_payload + slot.offset_bytes, slot.count, slot.dtype, slot.op);
    }
  }
}

void EagerPlan::Allreduce(uint64_t *buffer, int32_t header_words, MPI_Comm comm) {
  const int64_t words = header_words + payload_words_;
  if (type_ == MPI_DATATYPE_NULL || type_words_ != words) {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
    MPI_Type_contiguous(static_cast<int>(words), MPI_UINT64_T, &type_);
    MPI_Type_commit(&type_);
    type_words_ = words;
  }
  if (op_ == MPI_OP_NULL) MPI_Op_create(&EagerPlan::Reduce, /*commute=*/1, &op_);
  g_running = this;
  g_running_header_words = header_words;
  MPI_Allreduce(MPI_IN_PLACE, buffer, 1, type_, op_, comm);
  g_running = nullptr;
}

void EagerPlan::Observe(const std::vector<int32_t> &ready_bits) {
  // predicted_, previous_ and ready_bits are all sorted by bit: one merge pass each.
  std::vector<Prediction> &next = next_;
  next.clear();
  auto ready = ready_bits.begin();
  auto previous = previous_.begin();
  // A bit ready now that was not predicted becomes a prediction if it was ready last time too.
  auto predict_if_ready_before = [&](int32_t bit) {
    while (previous != previous_.end() && *previous < bit) ++previous;
    if (previous != previous_.end() && *previous == bit) next.push_back({bit, 0});
  };
  for (const Prediction &p : predicted_) {
    for (; ready != ready_bits.end() && *ready < p.bit; ++ready) predict_if_ready_before(*ready);
    const bool hit = ready != ready_bits.end() && *ready == p.bit;
    if (hit) ++ready;
    const int misses = hit ? 0 : p.misses + 1;
    if (misses <= kMaxMisses) next.push_back({p.bit, misses});
  }
  for (; ready != ready_bits.end(); ++ready) predict_if_ready_before(*ready);
  if (!ready_bits.empty()) previous_ = ready_bits;
  predicted_.swap(next);
}

void EagerPlan::FreeMpiObjects() {
  if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  if (op_ != MPI_OP_NULL) MPI_Op_free(&op_);
  type_words_ = 0;
}

}  // namespace hvdlite
