// One NCCL communicator per process set, made the first time the set runs a GPU collective, by every member at
// once (every rank runs the same responses in the same order, so they all arrive here together): the ranks
// compare their NCCL versions over MPI and refuse to mix them, rank 0 of the set makes the unique id and MPI
// carries it to the others, and each rank joins on its GPU. Background thread only.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/comm_context.h"
#include "gpu/gpu_declarations.h"

namespace hvdlite::gpu {

class NcclCommunicators {
 public:
  NcclCommunicators() = default;
  NcclCommunicators(const NcclCommunicators &) = delete;
  NcclCommunicators &operator=(const NcclCommunicators &) = delete;

  // The set's communicator, made on device (current on this thread) if the set has none; null with the error.
  // *error on the way in is this rank's own failure, if any: the ranks still meet to make the communicator, so
  // that every one of them fails instead of the others waiting for this one.
  ncclComm_t For(int32_t set_id, const CommContext &ctx, int32_t device, std::string *error);
  // The device the set's communicator was made on, or -1; the communicator, or null.
  int32_t DeviceOf(int32_t set_id) const;
  ncclComm_t CommOf(int32_t set_id) const;
  // Destroys a removed set's communicator.
  void Forget(int32_t set_id);
  void DestroyAll();

 private:
  struct Communicator {
    int32_t set_id;
    int32_t device;
    ncclComm_t comm;
  };
  std::vector<Communicator> communicators_;
};

}  // namespace hvdlite::gpu
