#include "algorithms/adasum_allreduce.h"

#include <algorithm>
#include <climits>

#include "base/half.h"
#include "base/progress_watchdog.h"

namespace hvdlite {
namespace {

constexpr int kTag = 0x4144;  // "AD"
constexpr int64_t kMaxMessageBytes = 1 << 30;

template <typename T>
double Load(const T *p, int64_t i) { return static_cast<double>(p[i]); }
template <typename T>
void Store(T *p, int64_t i, double v) { p[i] = static_cast<T>(v); }

struct Float16 { uint16_t bits; };
struct BFloat16 { uint16_t bits; };
template <>
double Load(const Float16 *p, int64_t i) { return Float16ToFloat(p[i].bits); }
template <>
void Store(Float16 *p, int64_t i, double v) { p[i].bits = FloatToFloat16(static_cast<float>(v)); }
template <>
double Load(const BFloat16 *p, int64_t i) { return BFloat16ToFloat(p[i].bits); }
template <>
void Store(BFloat16 *p, int64_t i, double v) { p[i].bits = FloatToBFloat16(static_cast<float>(v)); }

// Sends and receives byte ranges of any size with one partner, in messages MPI's int counts can carry.
std::string Exchange(const CommContext &ctx, int partner, const uint8_t *send, int64_t send_bytes, uint8_t *receive,
                     int64_t receive_bytes) {
  for (int64_t sent = 0, got = 0; sent < send_bytes || got < receive_bytes;) {
    const int out = static_cast<int>(std::min(kMaxMessageBytes, send_bytes - sent));
    const int in = static_cast<int>(std::min(kMaxMessageBytes, receive_bytes - got));
    if (MPI_Sendrecv(send + sent, out, MPI_BYTE, partner, kTag, receive + got, in, MPI_BYTE, partner, kTag, ctx.comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return "MPI_Sendrecv with rank " + std::to_string(partner) + " failed";
    }
    NoteProgress();
    sent += out;
    got += in;
  }
  return "";
}

// The tensors' element ranges [first[i], first[i] + count[i]) of the batch.
std::vector<int64_t> FirstElements(const std::vector<int64_t> &counts) {
  std::vector<int64_t> first(counts.size());
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    first[i] = at;
    at += counts[i];
  }
  return first;
}

// Per tensor, over its elements within [begin, end): a.b, |a|^2, |b|^2 into sums (3 per tensor).
template <typename T>
void PartialSums(const T *a, const T *b, int64_t begin, int64_t end, const std::vector<int64_t> &first,
                 const std::vector<int64_t> &counts, std::vector<double> *sums) {
  sums->assign(3 * counts.size(), 0.0);
  for (size_t t = 0; t < counts.size(); ++t) {
    const int64_t lo = std::max(begin, first[t]), hi = std::min(end, first[t] + counts[t]);
    double dot = 0, aa = 0, bb = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const double x = Load(a, i - begin), y = Load(b, i - begin);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    (*sums)[3 * t] = dot;
    (*sums)[3 * t + 1] = aa;
    (*sums)[3 * t + 2] = bb;
  }
}

// result (over a's storage) = acoeff * a + bcoeff * b, per tensor, over [begin, end).
template <typename T>
void Combine(T *a, const T *b, int64_t begin, int64_t end, const std::vector<int64_t> &first,
             const std::vector<int64_t> &counts, const std::vector<double> &sums) {
  for (size_t t = 0; t < counts.size(); ++t) {
    const int64_t lo = std::max(begin, first[t]), hi = std::min(end, first[t] + counts[t]);
    if (lo >= hi) continue;
    const double dot = sums[3 * t], aa = sums[3 * t + 1], bb = sums[3 * t + 2];
    const double acoeff = aa >= 1e-8 ? 1.0 - dot / aa * 0.5 : 1.0;
    const double bcoeff = bb >= 1e-8 ? 1.0 - dot / bb * 0.5 : 1.0;
    for (int64_t i = lo; i < hi; ++i) Store(a, i - begin, acoeff * Load(a, i - begin) + bcoeff * Load(b, i - begin));
  }
}

template <typename T>
std::string RunTyped(const CommContext &ctx, T *data, const std::vector<int64_t> &counts,
                     std::vector<uint8_t> *received_bytes, std::vector<double> *sums,
                     std::vector<double> *partner_sums) {
  const std::vector<int64_t> first = FirstElements(counts);
  const int64_t total = first.empty() ? 0 : first.back() + counts.back();
  const int64_t element = sizeof(T);
  received_bytes->resize(static_cast<size_t>((total + 1) / 2 * element));
  T *received = reinterpret_cast<T *>(received_bytes->data());

  // Vector halving, distance doubling: at level L this rank keeps half of its segment, gets the partner's
  // copy of that half, and combines the two.
  struct Split { int64_t begin, middle, end; };
  std::vector<Split> splits;
  int64_t begin = 0, end = total;
  for (int level = 1; level < ctx.size; level <<= 1) {
    const int partner = ctx.rank ^ level;
    const bool lower = (ctx.rank & level) == 0;
    const int64_t middle = begin + (end - begin) / 2;
    splits.push_back(Split{begin, middle, end});
    const int64_t keep_begin = lower ? begin : middle, keep_end = lower ? middle : end;
    const int64_t give_begin = lower ? middle : begin, give_end = lower ? end : middle;
    std::string error = Exchange(ctx, partner, reinterpret_cast<const uint8_t *>(data + give_begin),
                                 (give_end - give_begin) * element, received_bytes->data(),
                                 (keep_end - keep_begin) * element);
    if (!error.empty()) return error;
    // a is the lower group's vector and b the upper's, on both sides, so that both compute the same sums.
    T *mine = data + keep_begin;
    const T *a = lower ? mine : received, *b = lower ? received : mine;
    PartialSums(a, b, keep_begin, keep_end, first, counts, sums);
    // The pieces of a and b are spread over the 2L ranks of this block: sum there by recursive doubling (the
    // partners add in the same order, so every rank of the block gets the same bits).
    for (int distance = 1; distance <= level; distance <<= 1) {
      partner_sums->resize(sums->size());
      error = Exchange(ctx, ctx.rank ^ distance, reinterpret_cast<const uint8_t *>(sums->data()),
                       static_cast<int64_t>(sums->size() * sizeof(double)),
                       reinterpret_cast<uint8_t *>(partner_sums->data()),
                       static_cast<int64_t>(partner_sums->size() * sizeof(double)));
      if (!error.empty()) return error;
      const bool first_half = (ctx.rank & distance) == 0;
      for (size_t i = 0; i < sums->size(); ++i) {
        (*sums)[i] = first_half ? (*sums)[i] + (*partner_sums)[i] : (*partner_sums)[i] + (*sums)[i];
      }
    }
    if (lower) {
      Combine(mine, received, keep_begin, keep_end, first, counts, *sums);
    } else {
      // The result goes to this rank's half: combine into the received copy of a, then move it over.
      Combine(received, mine, keep_begin, keep_end, first, counts, *sums);
      std::copy(received, received + (keep_end - keep_begin), mine);
    }
    begin = keep_begin;
    end = keep_end;
  }
  // Distance halving, vector doubling: the halves go back the way they came.
  for (int level = ctx.size >> 1; level >= 1; level >>= 1) {
    const Split split = splits.back();
    splits.pop_back();
    const bool lower = (ctx.rank & level) == 0;
    const int64_t other_begin = lower ? split.middle : split.begin, other_end = lower ? split.end : split.middle;
    std::string error = Exchange(ctx, ctx.rank ^ level, reinterpret_cast<const uint8_t *>(data + begin),
                                 (end - begin) * element, reinterpret_cast<uint8_t *>(data + other_begin),
                                 (other_end - other_begin) * element);
    if (!error.empty()) return error;
    begin = split.begin;
    end = split.end;
  }
  return "";
}

}  // namespace

std::string AdasumAllreduce::Run(const CommContext &ctx, void *buffer, const std::vector<int64_t> &tensor_counts,
                                 DataType dtype) {
  if (ctx.size == 1) return "";
  switch (dtype) {
    case DataType::kFloat32:
      return RunTyped(ctx, static_cast<float *>(buffer), tensor_counts, &received_, &sums_, &partner_sums_);
    case DataType::kFloat64:
      return RunTyped(ctx, static_cast<double *>(buffer), tensor_counts, &received_, &sums_, &partner_sums_);
    case DataType::kFloat16:
      return RunTyped(ctx, static_cast<Float16 *>(buffer), tensor_counts, &received_, &sums_, &partner_sums_);
    case DataType::kBFloat16:
      return RunTyped(ctx, static_cast<BFloat16 *>(buffer), tensor_counts, &received_, &sums_, &partner_sums_);
    default:
      return std::string("Adasum reduces floating-point tensors only, not ") + DataTypeName(dtype);
  }
}

}  // namespace hvdlite
