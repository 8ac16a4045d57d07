// Runs the agreed collectives of GPU tensors with NCCL, on the core's own stream of the tensors' GPU, without
// the host waiting for the GPU: the stream first waits on each tensor's ready event (recorded on the framework's
// stream at submission), a fused all-reduce packs its tensors into the device's fusion buffer (cuMemcpyAsync),
// reduces it in place and unpacks it, and a done event recorded after the collective is handed to every
// tensor's handle (the framework's stream waits on it) and to the watch (gpu_watch.h). Average is NCCL's own
// (ncclAvg); scale factors on floating-point sums become NCCL's pre-multiplied sum. Allgather, alltoall and
// reducescatter write into outputs the caller allocated (it learns the sizes first: the adapters exchange the
// first dimensions or splits on the host); allgather with unequal first dimensions is one NCCL broadcast per
// rank, alltoall grouped sends and receives, an uneven reducescatter one NCCL reduce per rank, all in one NCCL
// group. Background thread only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/allreduce_algorithm.h"
#include "collectives/batch_executor.h"
#include "negotiation/entry.h"
#include "gpu/gpu_watch.h"
#include "gpu/nccl_communicators.h"
#include "negotiation/messages.h"

namespace hvdlite::gpu {

class NcclExecutor : public BatchExecutor {
 public:
  // local_rank picks the GPU of a rank that has joined before it ever submitted a GPU tensor.
  NcclExecutor(int rank, int local_rank, double progress_timeout_seconds);
  ~NcclExecutor();  // waits for the streams, then destroys the communicators and frees the buffers
  NcclExecutor(const NcclExecutor &) = delete;
  NcclExecutor &operator=(const NcclExecutor &) = delete;

  // locals[i]: this rank's entry for batch.parts[i], null where it joined. An error message, or "".
  std::string Execute(int32_t set_id, const CommContext &ctx, const FusedBatch &batch,
                      const std::vector<Entry *> &locals);
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override {
    return Execute(set.id, ContextOf(set), batch, locals);
  }
  void ForgetProcessSet(int32_t set_id);
  const char *TimelinePhase(Collective collective) const override {
    switch (collective) {
      case Collective::kAllreduce: return "NCCL_ALLREDUCE";
      case Collective::kBroadcast: return "NCCL_BROADCAST";
      case Collective::kAllgather: return "NCCL_ALLGATHER";
      case Collective::kAlltoall: return "NCCL_ALLTOALL";
      default: return "NCCL_REDUCESCATTER";
    }
  }

 private:
  struct Device {
    CUstream stream = nullptr;
    CUdeviceptr fusion = 0;  // grows to the largest fused batch, then reused
    size_t fusion_bytes = 0;
  };
  Device *DeviceFor(int32_t device, std::string *error);
  std::string Allreduce(Device &d, ncclComm_t comm, const CommContext &ctx, const FusedBatch &batch,
                        const std::vector<Entry *> &locals);
  std::string Broadcast(Device &d, ncclComm_t comm, const Response &response, const Entry *local);
  std::string Allgather(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response, Entry &local);
  std::string Alltoall(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response, Entry &local);
  std::string Reducescatter(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response,
                            Entry &local);

  const int local_rank_;
  NcclCommunicators communicators_;
  GpuWatch watch_;
  std::vector<Device> devices_;  // by ordinal
  int32_t last_device_ = -1;     // this rank's GPU so far
};

}  // namespace hvdlite::gpu
