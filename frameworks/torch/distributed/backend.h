// hvdlite as a torch.distributed (c10d) backend: each collective of a process group becomes requests to hvdlite's
// core on the group's process set, named by the group and the call's place in it, or in the period of a training
// loop (call_names.h; every rank calls a group's collectives in the same order, as c10d requires), so the core's
// negotiation matches them across ranks and reports a disagreement (dtype, shape, op) on every rank. CUDA tensors
// go through the core's NCCL path (on the caller's current stream, as torch's NCCL backend does).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <functional>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "call_names.h"
#include "work.h"

namespace hvdlite_c10d {

class HvdliteBackend : public c10d::Backend {
 public:
  // rank/size: this rank's place in the group; process_set_id: the core's set of the group's ranks;
  // global_ranks: the group's ranks in the job, in group order; group_name: the same on every rank.
  // gpu_unavailable: why the core cannot run NCCL collectives in this process ("" when it can).
  HvdliteBackend(int rank, int size, int32_t process_set_id, std::vector<int64_t> global_ranks,
                 std::string group_name, std::chrono::milliseconds timeout, std::string gpu_unavailable);
  ~HvdliteBackend() override;

  const std::string getBackendName() const override { return "hvdlite"; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return names_.calls(); }

  // split_group and shrink_group: a backend of some of the group's ranks, on the process set its members ask for
  // (the excluded ranks need not call: a shrink leaves out ranks that may be gone). Non-members get none.
  bool supportsSplitting() const override { return true; }
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store, const std::vector<int> &ranks,
                                          const c10::intrusive_ptr<Options> &opts) override;
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t> &ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<Options> &opts_override) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                     const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                                 std::vector<at::Tensor> &inputs,
                                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                      const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                                 std::vector<at::Tensor> &inputs,
                                                                 const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_split_sizes,
                                               std::vector<int64_t> &input_split_sizes,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;

 private:
  // One request to the core, built from a tensor (its dims kept for the request's shape pointer).
  struct Request {
    hvdlite_request request{};
    std::string name;
    std::vector<int64_t> shape;
    std::vector<int32_t> splits;
  };
  Request MakeRequest(int32_t collective, const std::string &name, const at::Tensor &input, void *output,
                      const Placement &placement) const;
  // Where every tensor of a call (its lists: inputs, outputs, ...) is: all on the CPU or all on one GPU.
  Placement PlacementOf(const char *collective, std::initializer_list<std::vector<at::Tensor>> lists) const;
  // Enqueues the requests (a group when there are several: fused where they can be); throws with the core's reason.
  std::vector<hvdlite_handle> Enqueue(std::vector<Request> &requests, const std::string &what) const;
  c10::intrusive_ptr<HvdliteWork> NewWork(c10d::OpType type, const std::string &what, std::vector<at::Tensor> outputs,
                                          const Placement &placement) const;
  c10::intrusive_ptr<c10d::Work> Start(c10::intrusive_ptr<HvdliteWork> work);  // hands it to the completer
  // Enqueues the Work's requests (keep_alive: the buffers they read and write) and starts it.
  c10::intrusive_ptr<c10d::Work> Start(c10::intrusive_ptr<HvdliteWork> work, std::vector<Request> &requests,
                                       const std::string &what, std::vector<at::Tensor> keep_alive);
  std::string NextName();  // "c10d.<group>.<n>": the group's n-th call (call_names.h)
  // The name of a call of one request to the core, for tensor (as the core gets it): periodic where the call may
  // repeat (a single request of a collective the core's response cache answers), else its place in the sequence.
  // detail: the reduce op or the root rank; scale: the prescale factor (what else every rank must agree on).
  CallNames::Name NameOf(int32_t collective, const at::Tensor &tensor, int64_t detail, double scale,
                         const Placement &placement, bool repeatable);
  // Start for a Work whose requests were named name: the call of a periodic name goes in once that name's last
  // call has finished (call_names.h).
  c10::intrusive_ptr<c10d::Work> StartNamed(c10::intrusive_ptr<HvdliteWork> work, const CallNames::Name &name,
                                            std::vector<Request> &requests, const std::string &what,
                                            std::vector<at::Tensor> keep_alive);
  // The backend of the group ranks given (ascending), named name, or none where this rank is not one of them.
  c10::intrusive_ptr<c10d::Backend> Subgroup(const std::vector<int64_t> &group_ranks, std::string name,
                                             std::chrono::milliseconds timeout, const char *what);
  void CheckRoot(int64_t root, const char *collective) const;

  // All-reduce of tensors in place with op (bitwise ops through an all-gather); the shared part of allreduce,
  // allreduce_coalesced and reduce.
  // results: where each tensor's result goes (the tensor itself, or the caller's where tensors are copies);
  // outputs: the Work's result where it is not results; after: runs once the results are in place.
  c10::intrusive_ptr<c10d::Work> Reduce(std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
                                        const c10d::ReduceOp &op, c10d::OpType type, const char *collective,
                                        std::vector<at::Tensor> outputs = {}, std::function<void()> after = {});
  // All-reduce (sum) of a sparse COO tensor, in place, as gloo does it: every rank's indices and values are
  // all-gathered (each rank sends as many as it holds) and summed where they coincide.
  c10::intrusive_ptr<c10d::Work> AllreduceSparse(at::Tensor tensor, const c10d::ReduceOp &op);
  c10::intrusive_ptr<c10d::Work> ReduceBitwise(std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
                                               const c10d::ReduceOp &op, c10d::OpType type, const char *collective);
  // All-gathers of each input, flattened; each gathered buffer is handed to place with its index.
  c10::intrusive_ptr<c10d::Work> Gather(std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                                        c10d::OpType type, const char *collective,
                                        std::function<void(size_t, const at::Tensor &)> place);
  // All-to-all of CUDA tensors into received (the caller's output or a buffer, contiguous, on the device): the
  // core writes into it, so the ranks first agree on the rows each sends each (an all-gather on the host) and a
  // rank that would send more than its peer has room for fails the call on every rank; after places the results.
  c10::intrusive_ptr<c10d::Work> AllToAllOnGpu(at::Tensor send, std::vector<int32_t> send_rows,
                                               std::vector<int64_t> receive_rows, at::Tensor received,
                                               c10d::OpType type, const char *collective,
                                               std::vector<at::Tensor> outputs, const Placement &placement,
                                               std::function<void()> after);
  c10::intrusive_ptr<c10d::Work> ReduceScatterEven(std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
                                                   const c10d::ReduceOp &op, const char *collective);
  // A send or receive: a broadcast on the process set of this rank and the peer.
  c10::intrusive_ptr<c10d::Work> PointToPoint(std::vector<at::Tensor> &tensors, int peer, int tag, bool sending);
  // The next message from source to destination with tag, as the core's request of work (a broadcast of buffer,
  // flat, in the pair's set): enqueued now, or once the pair's set is made. point_to_point_mutex_ held.
  void PostMessage(const c10::intrusive_ptr<HvdliteWork> &work, const at::Tensor &buffer, int source,
                   int destination, int tag, const Placement &placement, const char *what);
  // A receive from any source: one receive posted from every peer; the first to arrive is the message.
  // point_to_point_mutex_ held.
  struct Posted {
    c10::intrusive_ptr<HvdliteWork> work;
    at::Tensor buffer;  // flat, the element count of the receive that posted it
  };
  Posted PostReceive(int peer, int tag, const at::Tensor &like, const Placement &placement);

  const int32_t set_id_;
  const std::vector<int64_t> global_ranks_;
  const std::string group_name_;
  std::chrono::milliseconds timeout_;
  const std::string gpu_unavailable_;
  mutable CallNames names_;  // synchronised inside
  uint64_t shrinks_ = 0;  // shrinks of this group so far: part of the next one's name
  std::mutex point_to_point_mutex_;
  struct PairSet {
    int32_t id = -1;            // the process set of this rank and the peer, once made
    hvdlite_handle adding = 0;  // the request that makes it (kept until the backend goes: Works wait on it)
    bool settled = false;       // the request has finished (id set if it succeeded)
    // Sends and receives made while it was being made: their requests go in once it is (pair_setups_ does it,
    // not their turn on the completer, which may be waiting for a message they are to receive).
    std::vector<c10::intrusive_ptr<HvdliteWork>> waiting;
  };
  std::map<int, PairSet> pair_sets_;                    // peer (group rank) -> the pair's process set
  std::map<std::tuple<int, int, int>, uint64_t> messages_;  // (source, destination, tag) -> messages so far
  // Receives posted from a peer for a receive from any source that another peer's message answered: the next
  // receive from that peer with that tag (from any source or named) takes it. (peer, tag) -> the receive.
  std::map<std::pair<int, int>, Posted> posted_;
  std::vector<std::thread> pair_setups_;  // one per pair set being made: waits for it, starts the waiting Works
  std::unique_ptr<Completer> completer_;
};

}  // namespace hvdlite_c10d
