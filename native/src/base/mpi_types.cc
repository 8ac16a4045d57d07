#include "base/mpi_types.h"

#include "base/reduce_kernels.h"

namespace hvdlite {
namespace {

MpiTypes g_types;

template <ReduceOp kOp>
void HalfReduce(void *in, void *inout, int *len, MPI_Datatype *datatype) {
  DataType dtype = *datatype == g_types.Datatype(DataType::kBFloat16) ? DataType::kBFloat16 : DataType::kFloat16;
  ReduceInto(inout, in, *len, dtype, kOp);
}

int HalfOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default: return 0;
  }
}

}  // namespace

const MpiTypes &GlobalMpiTypes() { return g_types; }
MpiTypes &MutableGlobalMpiTypes() { return g_types; }

void MpiTypes::Create() {
  MPI_Type_contiguous(2, MPI_BYTE, &float16_);
  MPI_Type_commit(&float16_);
  MPI_Type_contiguous(2, MPI_BYTE, &bfloat16_);
  MPI_Type_commit(&bfloat16_);
  MPI_Op_create(&HalfReduce<ReduceOp::kSum>, 1, &half_ops_[0]);
  MPI_Op_create(&HalfReduce<ReduceOp::kMin>, 1, &half_ops_[1]);
  MPI_Op_create(&HalfReduce<ReduceOp::kMax>, 1, &half_ops_[2]);
  MPI_Op_create(&HalfReduce<ReduceOp::kProduct>, 1, &half_ops_[3]);
}

void MpiTypes::Free() {
  if (float16_ != MPI_DATATYPE_NULL) MPI_Type_free(&float16_);
  if (bfloat16_ != MPI_DATATYPE_NULL) MPI_Type_free(&bfloat16_);
  for (MPI_Op &op : half_ops_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
}

MPI_Datatype MpiTypes::Datatype(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16: return float16_;
    case DataType::kBFloat16: return bfloat16_;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
    case DataType::kUInt16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op MpiTypes::Op(DataType dtype, ReduceOp op) const {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) return half_ops_[HalfOpIndex(op)];
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

}  // namespace hvdlite
