#include "gpu/nccl_communicators.h"

#include "gpu/gpu_libraries.h"

namespace hvdlite::gpu {
namespace {

// "" when every rank of ctx loaded the same NCCL, else which rank has which.
std::string CompareVersions(const CommContext &ctx, int32_t set_id) {
  int32_t mine = LoadedNcclVersion();
  std::vector<int32_t> all(ctx.size);
  MPI_Allgather(&mine, 1, MPI_INT32_T, all.data(), 1, MPI_INT32_T, ctx.comm);
  for (int32_t version : all) {
    if (version == all[0]) continue;
    std::string text = "the ranks of process set " + std::to_string(set_id) + " loaded different NCCL versions (";
    for (int r = 0; r < ctx.size; ++r) {
      text += (r ? ", rank " : "rank ") + std::to_string(r) + " has " + NcclVersionText(all[r]);
    }
    return text + "); every rank must load the same NCCL (HVDLITE_NCCL_LIBRARY, or one nvidia-nccl wheel)";
  }
  return "";
}

}  // namespace

ncclComm_t NcclCommunicators::For(int32_t set_id, const CommContext &ctx, int32_t device, std::string *error) {
  for (const Communicator &c : communicators_) {
    if (c.set_id != set_id) continue;
    if (c.device != device) {
      *error = "this rank's tensors of process set " + std::to_string(set_id) + " are on GPU " +
               std::to_string(c.device) + " and now on GPU " + std::to_string(device) + ": one GPU per rank";
      return nullptr;
    }
    return c.comm;
  }
  // Every rank takes every step, whatever the one before found, so that none is left waiting in the next.
  const bool failed_here = !error->empty();
  const std::string versions = CompareVersions(ctx, set_id);
  if (!failed_here) *error = versions;
  ncclUniqueId id{};
  ncclResult_t made = kNcclSuccess;
  if (ctx.rank == 0 && !failed_here) made = Nccl().ncclGetUniqueId(&id);
  int32_t ok = error->empty() && made == kNcclSuccess ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT32_T, MPI_MIN, ctx.comm);
  if (!ok) {
    if (error->empty()) {
      *error = made != kNcclSuccess ? "ncclGetUniqueId: " + NcclErrorText(made)
                                    : "another rank of process set " + std::to_string(set_id) +
                                          " could not set up its GPU for NCCL (its own error says why)";
    }
    return nullptr;
  }
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, ctx.comm);
  ncclComm_t comm = nullptr;
  ncclResult_t result = Nccl().ncclCommInitRank(&comm, ctx.size, id, ctx.rank);
  if (result != kNcclSuccess) {
    *error = "ncclCommInitRank (process set " + std::to_string(set_id) + ", GPU " + std::to_string(device) +
             "): " + NcclErrorText(result);
    return nullptr;
  }
  communicators_.push_back(Communicator{set_id, device, comm});
  return comm;
}

int32_t NcclCommunicators::DeviceOf(int32_t set_id) const {
  for (const Communicator &c : communicators_) {
    if (c.set_id == set_id) return c.device;
  }
  return -1;
}

ncclComm_t NcclCommunicators::CommOf(int32_t set_id) const {
  for (const Communicator &c : communicators_) {
    if (c.set_id == set_id) return c.comm;
  }
  return nullptr;
}

void NcclCommunicators::Forget(int32_t set_id) {
  for (size_t i = 0; i < communicators_.size(); ++i) {
    if (communicators_[i].set_id != set_id) continue;
    Nccl().ncclCommDestroy(communicators_[i].comm);
    communicators_.erase(communicators_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

void NcclCommunicators::DestroyAll() {
  for (const Communicator &c : communicators_) Nccl().ncclCommDestroy(c.comm);
  communicators_.clear();
}

}  // namespace hvdlite::gpu
