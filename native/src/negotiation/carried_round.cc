#include "negotiation/carried_round.h"

#include <cstring>

#include "base/half.h"

namespace hvdlite {
namespace {

// Under max an unset vote must win (the max of all is "set" only if every rank sent it): it votes 1, set votes 0.
// Under the others set votes 1: a min or a product is 1 only if every vote is 1, a sum is the ranks only then.
double Vote(bool set, ReduceOp op) { return op == ReduceOp::kMax ? !set : set; }

double Unanimous(ReduceOp op, int32_t ranks) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAverage: return ranks;  // the average divides later, in the copy out
    case ReduceOp::kMax: return 0;
    default: return 1;
  }
}

template <typename T>
void Store(uint8_t *at, double value) {
  T v = static_cast<T>(value);
  std::memcpy(at, &v, sizeof v);
}

template <typename T>
double Load(const uint8_t *at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return static_cast<double>(v);
}

void StoreElement(uint8_t *at, DataType dtype, double value) {
  switch (dtype) {
    case DataType::kUInt8: Store<uint8_t>(at, value); break;
    case DataType::kInt8: Store<int8_t>(at, value); break;
    case DataType::kInt16: Store<int16_t>(at, value); break;
    case DataType::kUInt16: Store<uint16_t>(at, value); break;
    case DataType::kInt32: Store<int32_t>(at, value); break;
    case DataType::kInt64: Store<int64_t>(at, value); break;
    case DataType::kFloat16: Store<uint16_t>(at, FloatToFloat16(static_cast<float>(value))); break;
    case DataType::kBFloat16: Store<uint16_t>(at, FloatToBFloat16(static_cast<float>(value))); break;
    case DataType::kFloat32: Store<float>(at, value); break;
    case DataType::kFloat64: Store<double>(at, value); break;
    case DataType::kBool: Store<bool>(at, value != 0); break;
  }
}

double LoadElement(const uint8_t *at, DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return Load<uint8_t>(at);
    case DataType::kInt8: return Load<int8_t>(at);
    case DataType::kInt16: return Load<int16_t>(at);
    case DataType::kUInt16: return Load<uint16_t>(at);
    case DataType::kInt32: return Load<int32_t>(at);
    case DataType::kInt64: return Load<int64_t>(at);
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, at, 2); return Float16ToFloat(h); }
    case DataType::kBFloat16: { uint16_t h; std::memcpy(&h, at, 2); return BFloat16ToFloat(h); }
    case DataType::kFloat32: return Load<float>(at);
    case DataType::kFloat64: return Load<double>(at);
    case DataType::kBool: return Load<bool>(at);
  }
  return -1;
}

// The largest count of ranks whose sum of ones the dtype holds exactly (and without wrapping).
int64_t LargestExactCount(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: case DataType::kInt8: return 127;
    case DataType::kInt16: return 32767;
    case DataType::kUInt16: return 65535;
    case DataType::kFloat16: return 2048;
    case DataType::kBFloat16: return 256;
    case DataType::kBool: return 0;  // a sum of bools is an OR
    default: return int64_t{1} << 31;
  }
}

}  // namespace

bool CanCarryBits(DataType dtype, ReduceOp op, int32_t ranks) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAverage: return ranks <= LargestExactCount(dtype);
    case ReduceOp::kMin: case ReduceOp::kMax: case ReduceOp::kProduct: return true;
    default: return false;
  }
}

void EncodeBits(const uint64_t *words, int32_t count, DataType dtype, ReduceOp op, uint8_t *elements) {
  const size_t size = DataTypeSize(dtype);
  for (int32_t bit = 0; bit < count; ++bit) {
    StoreElement(elements + bit * size, dtype, Vote((words[bit / 64] >> (bit % 64)) & 1u, op));
  }
}

void DecodeBits(const uint8_t *elements, int32_t count, DataType dtype, ReduceOp op, int32_t ranks, uint64_t *words) {
  const size_t size = DataTypeSize(dtype);
  const double unanimous = Unanimous(op, ranks);
  for (int32_t bit = 0; bit < count; ++bit) {
    const uint64_t mask = uint64_t{1} << (bit % 64);
    if (LoadElement(elements + bit * size, dtype) == unanimous) words[bit / 64] |= mask;
    else words[bit / 64] &= ~mask;
  }
}

}  // namespace hvdlite
