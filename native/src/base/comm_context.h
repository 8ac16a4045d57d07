// The communicator a collective runs on, with this rank's place in it: what algorithms, the transport across hosts
// and the GPU's communicators are all handed.
#pragma once
#include <mpi.h>

#include <cstdint>

namespace hvdlite {

struct CommContext {
  MPI_Comm comm;
  int32_t rank;
  int32_t size;
};

}  // namespace hvdlite
