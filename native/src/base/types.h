// Element types, reduction operators and collectives as the core sees them.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hvdlite.h"

namespace hvdlite {

using Clock = std::chrono::steady_clock;  // every duration and time point of the core

enum class DataType : int32_t {
  kUInt8 = HVDLITE_UINT8, kInt8 = HVDLITE_INT8, kInt16 = HVDLITE_INT16, kInt32 = HVDLITE_INT32,
  kInt64 = HVDLITE_INT64, kFloat16 = HVDLITE_FLOAT16, kBFloat16 = HVDLITE_BFLOAT16,
  kFloat32 = HVDLITE_FLOAT32, kFloat64 = HVDLITE_FLOAT64, kBool = HVDLITE_BOOL,
  kUInt16 = HVDLITE_UINT16
};

enum class ReduceOp : int32_t {
  kAverage = HVDLITE_OP_AVERAGE, kSum = HVDLITE_OP_SUM, kAdasum = HVDLITE_OP_ADASUM,
  kMin = HVDLITE_OP_MIN, kMax = HVDLITE_OP_MAX, kProduct = HVDLITE_OP_PRODUCT
};

enum class Collective : int32_t {
  kAllreduce = HVDLITE_ALLREDUCE, kAllgather = HVDLITE_ALLGATHER, kBroadcast = HVDLITE_BROADCAST,
  kAlltoall = HVDLITE_ALLTOALL, kReducescatter = HVDLITE_REDUCESCATTER, kBarrier = HVDLITE_BARRIER,
  kJoin = HVDLITE_JOIN,
  // Internal: process-set changes travel through negotiation so every rank applies them in order. An add of
  // members is asked for by the new set's members only (the others apply it when the coordinator sends it).
  kAddProcessSet = 100, kRemoveProcessSet = 101, kAddProcessSetOfMembers = 102
};

inline bool IsValidDataType(int32_t d) { return d >= HVDLITE_UINT8 && d <= HVDLITE_UINT16; }

inline size_t DataTypeSize(DataType d) {
  switch (d) {
    case DataType::kUInt8: case DataType::kInt8: case DataType::kBool: return 1;
    case DataType::kInt16: case DataType::kUInt16: case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kFloat64: return 8;
  }
  return 0;
}

inline bool IsFloatingPoint(DataType d) {
  return d == DataType::kFloat16 || d == DataType::kBFloat16 || d == DataType::kFloat32 ||
         d == DataType::kFloat64;
}

inline const char *DataTypeName(DataType d) {
  switch (d) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
    case DataType::kUInt16: return "uint16";
  }
  return "unknown";
}

inline const char *ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAdasum: return "adasum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

}  // namespace hvdlite
