// MPI datatypes and reduction operators for hvdlite's element types. Built-in MPI types and ops where
// MPI has them; float16/bfloat16 get committed 2-byte types and user ops that reduce through float32.
#pragma once
#include <mpi.h>

#include "base/types.h"

namespace hvdlite {

class MpiTypes {
 public:
  // Creates the half types and ops; call on the thread that owns MPI, after MPI_Init.
  void Create();
  void Free();
  MPI_Datatype Datatype(DataType dtype) const;
  MPI_Op Op(DataType dtype, ReduceOp op) const;

 private:
  MPI_Datatype float16_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16_ = MPI_DATATYPE_NULL;
  MPI_Op half_ops_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, min, max, product
};

// The process-wide half types, so the user op functions can tell float16 from bfloat16.
const MpiTypes &GlobalMpiTypes();
MpiTypes &MutableGlobalMpiTypes();

}  // namespace hvdlite
