#include "backend.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <utility>

namespace hvdlite_c10d {

namespace {

constexpr int kErrorBytes = 4096;

int32_t CoreDtype(const at::Tensor &t) {
  switch (t.scalar_type()) {
    case at::kByte: return HVDLITE_UINT8;
    case at::kChar: return HVDLITE_INT8;
    case at::kShort: return HVDLITE_INT16;
    case at::kInt: return HVDLITE_INT32;
    case at::kLong: return HVDLITE_INT64;
    case at::kHalf: return HVDLITE_FLOAT16;
    case at::kBFloat16: return HVDLITE_BFLOAT16;
    case at::kFloat: return HVDLITE_FLOAT32;
    case at::kDouble: return HVDLITE_FLOAT64;
    case at::kBool: return HVDLITE_BOOL;
    case at::kUInt16: return HVDLITE_UINT16;
    default: return -1;
  }
}

void CheckTensor(const at::Tensor &t, const char *collective) {
  TORCH_CHECK(t.defined(), "hvdlite: ", collective, " got an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "hvdlite: ", collective, " takes dense tensors; got layout ", t.layout());
  TORCH_CHECK_TYPE(CoreDtype(t) >= 0, "hvdlite: ", collective, " does not take dtype ", t.scalar_type(),
                   " (it takes uint8, int8, int16, int32, int64, uint16, bool, float16, bfloat16, float32, "
                   "float64)");
}

// The dimensions the core's collective (its description in the header) needs of a tensor, refused here with the
// name of the call that asked.
void CheckDims(int32_t core_collective, const at::Tensor &t, const char *call) {
  const hvdlite_collective_info *info = hvdlite_collective_describe(core_collective);
  TORCH_CHECK_VALUE(t.dim() >= info->min_ndim, "hvdlite: ", call, " (", info->name, ") takes tensors of at least ",
                    info->min_ndim, " dimension, got shape ", t.sizes());
}

void CheckTensors(const std::vector<at::Tensor> &tensors, const char *collective) {
  for (const at::Tensor &t : tensors) CheckTensor(t, collective);
}

// The core's reduction for op; sets *prescale for PREMUL_SUM. -1 for the bitwise ops (done another way).
int32_t CoreOp(const c10d::ReduceOp &op, double *prescale) {
  *prescale = 1.0;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return HVDLITE_OP_SUM;
    case c10d::ReduceOp::AVG: return HVDLITE_OP_AVERAGE;
    case c10d::ReduceOp::PRODUCT: return HVDLITE_OP_PRODUCT;
    case c10d::ReduceOp::MIN: return HVDLITE_OP_MIN;
    case c10d::ReduceOp::MAX: return HVDLITE_OP_MAX;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto *factor = dynamic_cast<c10d::PreMulSumSupplement *>(op.supplement_.get());
      TORCH_CHECK(factor, "hvdlite: PREMUL_SUM without its factor");
      *prescale = factor->tensor_factor.defined() ? factor->tensor_factor.item<double>() : factor->double_factor;
      return HVDLITE_OP_SUM;
    }
    case c10d::ReduceOp::BAND: case c10d::ReduceOp::BOR: case c10d::ReduceOp::BXOR: return -1;
    default: TORCH_CHECK_VALUE(false, "hvdlite: unsupported reduce op ", static_cast<int>(op.op_));
  }
}

bool IsBitwise(const c10d::ReduceOp &op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR || op.op_ == c10d::ReduceOp::BXOR;
}

at::Tensor Flat(const at::Tensor &t) { return t.contiguous().view({-1}); }

// Where a contiguous copy (or a copy for another reason) stood in for a caller's tensor, its result goes back.
void CopyBack(const std::vector<at::Tensor> &targets, const std::vector<at::Tensor> &buffers) {
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].is_same(buffers[i])) targets[i].copy_(buffers[i].view(targets[i].sizes()));
  }
}

// Sum of numels, checked to fit the core's 32-bit splits.
int32_t SplitOf(int64_t count, const char *collective) {
  TORCH_CHECK_VALUE(count <= INT32_MAX, "hvdlite: ", collective, " sends at most 2^31-1 elements to one rank");
  return static_cast<int32_t>(count);
}

// The core's output of a finished all-gather or all-to-all, as a flat tensor of dtype (valid until release).
at::Tensor CoreOutput(hvdlite_handle handle, at::ScalarType dtype) {
  int64_t nbytes = 0;
  const void *data = hvdlite_handle_output_data(handle, &nbytes);
  const int64_t count = nbytes / static_cast<int64_t>(c10::elementSize(dtype));
  if (count == 0) return at::empty({0}, at::TensorOptions().dtype(dtype));
  return at::from_blob(const_cast<void *>(data), {count}, at::TensorOptions().dtype(dtype));
}

// Copies consecutive pieces of flat into targets (their numels), checking that flat holds exactly that much.
void Split(const at::Tensor &flat, const std::vector<at::Tensor> &targets, const char *collective) {
  int64_t want = 0;
  for (const at::Tensor &t : targets) want += t.numel();
  TORCH_CHECK_VALUE(want == flat.numel(), "hvdlite: ", collective, ": the ranks sent ", flat.numel(),
                    " elements in all, the output tensors hold ", want);
  int64_t offset = 0;
  for (const at::Tensor &t : targets) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

HvdliteBackend::HvdliteBackend(int rank, int size, int32_t process_set_id, std::vector<int64_t> global_ranks,
                               std::string group_name, std::chrono::milliseconds timeout, std::string gpu_unavailable)
    : Backend(rank, size),
      set_id_(process_set_id),
      global_ranks_(std::move(global_ranks)),
      group_name_(std::move(group_name)),
      timeout_(timeout),
      gpu_unavailable_(std::move(gpu_unavailable)),
      names_(group_name_),
      completer_(std::make_unique<Completer>()) {}

HvdliteBackend::~HvdliteBackend() {
  {
    // A pair's set that its peer never asked for (this rank posted a receive from any source; the peer never sent
    // it anything) is never made: its request is let go, which wakes the thread waiting for it and fails the
    // receives waiting for it.
    std::lock_guard<std::mutex> lock(point_to_point_mutex_);
    for (auto &pair : pair_sets_) {
      if (!pair.second.settled && pair.second.adding > 0) {
        hvdlite_release(pair.second.adding);
        pair.second.adding = 0;
      }
    }
  }
  for (std::thread &setup : pair_setups_) setup.join();
  completer_.reset();  // every Work handed out is finished first
  {
    // A receive still posted holds a request the core may yet answer: its buffer must outlive the backend.
    static std::mutex unanswered_mutex;
    static auto *unanswered = new std::vector<Posted>();  // never freed: the core may write into them until it ends
    std::lock_guard<std::mutex> keeping(unanswered_mutex);
    for (auto &posted : posted_) unanswered->push_back(std::move(posted.second));
  }
  for (auto &pair : pair_sets_) {
    if (pair.second.adding > 0) hvdlite_release(pair.second.adding);
  }
}

void HvdliteBackend::CheckRoot(int64_t root, const char *collective) const {
  TORCH_CHECK_VALUE(root >= 0 && root < size_, "hvdlite: ", collective, " with root rank ", root, " of a group of ",
                    size_);
}

c10::intrusive_ptr<c10d::Backend> HvdliteBackend::split(const c10::intrusive_ptr<c10d::Store> &,
                                                         const std::vector<int> &ranks,
                                                         const c10::intrusive_ptr<Options> &opts) {
  std::vector<int64_t> group_ranks(ranks.begin(), ranks.end());
  std::sort(group_ranks.begin(), group_ranks.end());
  const std::string name = opts && !opts->group_name.empty() ? opts->group_name : group_name_ + ".split";
  return Subgroup(group_ranks, name, opts ? opts->timeout : timeout_, "split_group");
}

c10::intrusive_ptr<c10d::Backend> HvdliteBackend::shrink(const std::vector<int64_t> &ranks_to_exclude, int,
                                                          const c10::intrusive_ptr<Options> &opts_override) {
  std::vector<int64_t> kept;
  for (int64_t r = 0; r < size_; ++r) {
    if (std::find(ranks_to_exclude.begin(), ranks_to_exclude.end(), r) == ranks_to_exclude.end()) kept.push_back(r);
  }
  // Every remaining rank shrinks the group the same number of times: the count names the new group alike on all.
  const std::string name = group_name_ + ".shrink" + std::to_string(shrinks_++);
  return Subgroup(kept, name, opts_override ? opts_override->timeout : timeout_, "shrink_group");
}

c10::intrusive_ptr<c10d::Backend> HvdliteBackend::Subgroup(const std::vector<int64_t> &group_ranks, std::string name,
                                                            std::chrono::milliseconds timeout, const char *what) {
  const auto me = std::find(group_ranks.begin(), group_ranks.end(), static_cast<int64_t>(rank_));
  if (me == group_ranks.end()) return nullptr;
  std::vector<int32_t> members;
  std::vector<int64_t> global;
  for (int64_t r : group_ranks) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "hvdlite: ", what, ": rank ", r, " is not in a group of ", size_);
    members.push_back(static_cast<int32_t>(global_ranks_[r]));
    global.push_back(global_ranks_[r]);
  }
  char error[kErrorBytes] = {0};
  hvdlite_handle adding = hvdlite_add_process_set_of_members(members.data(), static_cast<int32_t>(members.size()),
                                                             error, kErrorBytes);
  TORCH_CHECK(adding > 0, "hvdlite: ", what, ": ", error);
  const double seconds = timeout.count() > 0 ? timeout.count() / 1000.0 : -1.0;
  const int waited = hvdlite_wait_all_for(&adding, 1, seconds);
  if (waited != 0) {
    if (waited == 1) hvdlite_handle_error(adding, error, kErrorBytes);
    hvdlite_release(adding);
    TORCH_CHECK(false, "hvdlite: ", what, ": the group's process set ",
                waited == -2 ? "was not made within the timeout (did every remaining rank call it?)" : error);
  }
  const int32_t set_id = static_cast<int32_t>(hvdlite_handle_result(adding));
  hvdlite_release(adding);
  return c10::make_intrusive<HvdliteBackend>(static_cast<int>(me - group_ranks.begin()),
                                             static_cast<int>(group_ranks.size()), set_id, std::move(global),
                                             std::move(name), timeout, gpu_unavailable_);
}

std::string HvdliteBackend::NextName() { return names_.Next(0, /*repeatable=*/false).text; }

CallNames::Name HvdliteBackend::NameOf(int32_t collective, const at::Tensor &tensor, int64_t detail, double scale,
                                       const Placement &placement, bool repeatable) {
  // What every rank's call must agree on (call_names.h), as a hash: equal signatures only need to compare equal
  // (a collision costs a periodic name's cache entry, not a result).
  std::string key = std::to_string(collective) + "|" + std::to_string(static_cast<int>(tensor.scalar_type())) + "|" +
                    std::to_string(detail) + "|" + std::to_string(scale) + "|" + std::to_string(placement.gpu ? 1 : 0);
  for (int64_t d : tensor.sizes()) key += "," + std::to_string(d);
  const uint64_t signature = std::hash<std::string>{}(key) | 1;  // never 0, the signature of calls never repeated
  return names_.Next(signature, repeatable);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::StartNamed(c10::intrusive_ptr<HvdliteWork> work,
                                                          const CallNames::Name &name, std::vector<Request> &requests,
                                                          const std::string &what, std::vector<at::Tensor> keep_alive) {
  if (name.periodic) {
    if (auto before = names_.Follow(name.text, work)) {
      // The name's last call is still in flight: this one goes in once it has finished.
      work->after = std::move(before);
      work->keep_alive = std::move(keep_alive);
      work->next_stage = [this, requests, what](const std::vector<hvdlite_handle> &) mutable {
        return Enqueue(requests, what);
      };
      return Start(work);
    }
  }
  return Start(work, requests, what, std::move(keep_alive));
}

Placement HvdliteBackend::PlacementOf(const char *collective,
                                      std::initializer_list<std::vector<at::Tensor>> lists) const {
  std::vector<at::Tensor> all;
  for (const auto &list : lists) all.insert(all.end(), list.begin(), list.end());
  return hvdlite_c10d::PlacementOf(all, collective, gpu_unavailable_);
}

HvdliteBackend::Request HvdliteBackend::MakeRequest(int32_t collective, const std::string &name,
                                                    const at::Tensor &input, void *output,
                                                    const Placement &placement) const {
  Request r;
  r.name = name;
  if (input.defined()) {
    CheckDims(collective, input, hvdlite_collective_describe(collective)->name);
    r.shape.assign(input.sizes().begin(), input.sizes().end());
  }
  hvdlite_request &q = r.request;
  q.collective = collective;
  q.dtype = input.defined() ? CoreDtype(input) : HVDLITE_UINT8;
  q.ndim = static_cast<int32_t>(r.shape.size());
  q.input = input.defined() ? input.data_ptr() : nullptr;
  q.output = output;
  q.reduce_op = HVDLITE_OP_SUM;
  q.prescale_factor = 1.0;
  q.postscale_factor = 1.0;
  q.process_set_id = set_id_;
  q.gpu = placement.gpu ? 1 : 0;
  q.gpu_device = placement.device;
  q.gpu_stream = placement.stream;
  return r;
}

std::vector<hvdlite_handle> HvdliteBackend::Enqueue(std::vector<Request> &requests, const std::string &what) const {
  std::vector<hvdlite_request> plain;
  for (Request &r : requests) {
    r.request.name = r.name.c_str();
    r.request.shape = r.shape.data();
    r.request.splits = r.splits.empty() ? nullptr : r.splits.data();
    plain.push_back(r.request);
  }
  std::vector<hvdlite_handle> handles(plain.size());
  char error[kErrorBytes] = {0};
  int code;
  if (plain.size() == 1) {
    handles[0] = hvdlite_enqueue(plain.data(), error, kErrorBytes);
    code = handles[0] < 0 ? static_cast<int>(handles[0]) : 0;
  } else {
    code = plain.empty() ? 0 : hvdlite_enqueue_group(plain.data(), static_cast<int32_t>(plain.size()),
                                                     handles.data(), error, kErrorBytes);
  }
  if (code == -3) C10_THROW_ERROR(DistBackendError, "hvdlite: " + what + ": " + error);
  TORCH_CHECK_VALUE(code == 0, "hvdlite: ", what, ": ", error);
  return handles;
}

c10::intrusive_ptr<HvdliteWork> HvdliteBackend::NewWork(c10d::OpType type, const std::string &what,
                                                        std::vector<at::Tensor> outputs,
                                                        const Placement &placement) const {
  auto work = c10::make_intrusive<HvdliteWork>(rank_, type, what + " of process group '" + group_name_ + "'",
                                               std::move(outputs), timeout_, placement);
  CallNames *names = &names_;  // the backend finishes every Work before it goes
  work->on_error = [names] { names->NoteFailure(); };
  return work;
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::Start(c10::intrusive_ptr<HvdliteWork> work) {
  completer_->Add(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::Start(c10::intrusive_ptr<HvdliteWork> work, std::vector<Request> &requests,
                                                     const std::string &what, std::vector<at::Tensor> keep_alive) {
  work->keep_alive = std::move(keep_alive);
  work->handles = Enqueue(requests, what);
  return Start(std::move(work));
}

// ---- all-reduce and reduce ----

c10::intrusive_ptr<c10d::Work> HvdliteBackend::Reduce(std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
                                                      const c10d::ReduceOp &op, c10d::OpType type,
                                                      const char *collective, std::vector<at::Tensor> outputs,
                                                      std::function<void()> after) {
  CheckTensors(tensors, collective);
  TORCH_CHECK_VALUE(!IsBitwise(op) || !after, "hvdlite: ", collective, " does not take bitwise ops here");
  if (IsBitwise(op)) return ReduceBitwise(std::move(tensors), std::move(results), op, type, collective);
  double prescale;
  const int32_t core_op = CoreOp(op, &prescale);
  const Placement placement = PlacementOf(collective, {tensors, results, outputs});
  std::vector<at::Tensor> buffers;
  std::vector<Request> requests;
  CallNames::Name name;
  for (const at::Tensor &t : tensors) {
    at::Tensor buffer = t.contiguous();
    name = NameOf(HVDLITE_ALLREDUCE, buffer, core_op, prescale, placement, /*repeatable=*/tensors.size() == 1);
    Request r = MakeRequest(HVDLITE_ALLREDUCE, name.text, buffer, buffer.data_ptr(), placement);
    r.request.reduce_op = core_op;
    r.request.prescale_factor = prescale;
    requests.push_back(std::move(r));
    buffers.push_back(buffer);
  }
  auto work = NewWork(type, collective, outputs.empty() ? results : outputs, placement);
  work->finish = [buffers, results, after](const std::vector<hvdlite_handle> &) {
    CopyBack(results, buffers);  // or into the caller's tensor, where these were copies (reduce)
    if (after) after();
  };
  return StartNamed(work, name, requests, collective, buffers);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::ReduceBitwise(std::vector<at::Tensor> tensors,
                                                             std::vector<at::Tensor> results,
                                                             const c10d::ReduceOp &op, c10d::OpType type,
                                                             const char *collective) {
  // The core reduces arithmetic ops only; bitwise ones (flags, masks: small tensors) gather every rank's
  // tensor and reduce here, in rank order.
  for (const at::Tensor &t : tensors) {
    TORCH_CHECK_TYPE(!at::isFloatingType(t.scalar_type()), "hvdlite: ", collective,
                     " with a bitwise op (BAND, BOR, BXOR) takes integer or bool tensors; got ", t.scalar_type());
  }
  const auto kind = op.op_;
  const int size = size_;
  std::vector<at::Tensor> inputs = tensors;
  return Gather(inputs, results, type, collective,
                [tensors, results, kind, size](size_t i, const at::Tensor &gathered) {
                  at::Tensor rows = gathered.view({size, -1});
                  at::Tensor acc = rows[0].clone();
                  for (int r = 1; r < size; ++r) {
                    if (kind == c10d::ReduceOp::BAND) acc.bitwise_and_(rows[r]);
                    else if (kind == c10d::ReduceOp::BOR) acc.bitwise_or_(rows[r]);
                    else acc.bitwise_xor_(rows[r]);
                  }
                  results[i].copy_(acc.view(results[i].sizes()));
                });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::allreduce(std::vector<at::Tensor> &tensors,
                                                         const c10d::AllreduceOptions &opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse) {
    return AllreduceSparse(tensors[0], opts.reduceOp);
  }
  return Reduce(tensors, tensors, opts.reduceOp, c10d::OpType::ALLREDUCE, "allreduce");
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::AllreduceSparse(at::Tensor tensor, const c10d::ReduceOp &op) {
  TORCH_CHECK_VALUE(op.op_ == c10d::ReduceOp::SUM, "hvdlite: allreduce of a sparse tensor takes ReduceOp.SUM only "
                    "(as gloo's)");
  TORCH_CHECK_VALUE(tensor.device().is_cpu(), "hvdlite: allreduce of a sparse tensor takes CPU tensors; got one on ",
                    tensor.device());
  // Rows by rank: one row of indices and one of values per element this rank holds.
  const at::Tensor indices = tensor._indices().t().contiguous();
  const at::Tensor values = tensor._values().contiguous();
  CheckTensor(values, "allreduce");
  const Placement placement = PlacementOf("allreduce", {{indices, values}});
  std::vector<Request> requests;
  for (const at::Tensor &part : {indices, values}) {
    requests.push_back(MakeRequest(HVDLITE_ALLGATHER, NextName(), part, nullptr, placement));
  }
  auto work = NewWork(c10d::OpType::ALLREDUCE, "allreduce of a sparse tensor", {tensor}, placement);
  std::vector<int64_t> value_rows = values.sizes().vec();
  value_rows[0] = -1;
  const int64_t sparse_dim = tensor.sparse_dim();
  const at::ScalarType dtype = values.scalar_type();
  work->finish = [tensor, value_rows, sparse_dim, dtype](const std::vector<hvdlite_handle> &handles) {
    const at::Tensor all_indices = CoreOutput(handles[0], at::kLong).view({-1, sparse_dim}).t();
    const at::Tensor all_values = CoreOutput(handles[1], dtype).view(value_rows);
    at::Tensor sum = at::sparse_coo_tensor(all_indices, all_values, tensor.sizes()).coalesce();
    tensor.copy_(sum);  // a copy: the core's outputs go with the handles
  };
  return Start(work, requests, "allreduce", {indices, values});
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                                   const c10d::AllreduceCoalescedOptions &opts) {
  return Reduce(tensors, tensors, opts.reduceOp, c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced");
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::reduce(std::vector<at::Tensor> &tensors,
                                                      const c10d::ReduceOptions &opts) {
  CheckTensors(tensors, "reduce");
  CheckRoot(opts.rootRank, "reduce");
  // Reduced on a copy: only the root's tensor receives the result.
  std::vector<at::Tensor> scratch;
  for (const at::Tensor &t : tensors) scratch.push_back(t.clone(at::MemoryFormat::Contiguous));
  std::vector<at::Tensor> results = rank_ == opts.rootRank ? tensors : scratch;
  return Reduce(scratch, results, opts.reduceOp, c10d::OpType::REDUCE, "reduce");
}

// ---- all-gather, gather ----

c10::intrusive_ptr<c10d::Work> HvdliteBackend::Gather(std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                                                      c10d::OpType type, const char *collective,
                                                      std::function<void(size_t, const at::Tensor &)> place) {
  CheckTensors(inputs, collective);
  const Placement placement = PlacementOf(collective, {inputs, outputs});
  std::vector<at::Tensor> keep;
  std::vector<at::Tensor> gathered;  // GPU: the outputs the core writes (on the device, one row per rank)
  std::vector<Request> requests;
  CallNames::Name name;
  for (const at::Tensor &t : inputs) {
    at::Tensor flat = Flat(t);
    name = NameOf(HVDLITE_ALLGATHER, flat, 0, 1.0, placement, /*repeatable=*/inputs.size() == 1);
    Request r = MakeRequest(HVDLITE_ALLGATHER, name.text, flat, nullptr, placement);
    if (placement.gpu) {
      // Each rank sends one row of its elements: the core then checks that every rank sends as many (the output
      // is sized for that) instead of writing past the output.
      r.shape = {1, flat.numel()};
      r.request.ndim = 2;
      at::Tensor out = at::empty({static_cast<int64_t>(size_) * flat.numel()}, flat.options());
      r.request.output = out.data_ptr();
      gathered.push_back(out);
      keep.push_back(out);
    }
    requests.push_back(std::move(r));
    keep.push_back(flat);
  }
  auto work = NewWork(type, collective, outputs, placement);
  std::vector<at::ScalarType> dtypes;
  std::vector<int64_t> sent;
  for (const at::Tensor &t : inputs) {
    dtypes.push_back(t.scalar_type());
    sent.push_back(t.numel());
  }
  const int size = size_;
  work->finish = [place, dtypes, sent, size, gathered, collective](const std::vector<hvdlite_handle> &handles) {
    for (size_t i = 0; i < handles.size(); ++i) {
      at::Tensor all = gathered.empty() ? CoreOutput(handles[i], dtypes[i]) : gathered[i];
      // Every rank checks (not only those with outputs, as gather's root): a call that ranks disagree about fails
      // on every rank, so that each stops naming calls by their period (call_names.h).
      TORCH_CHECK_VALUE(all.numel() == size * sent[i], "hvdlite: ", collective, ": the ranks sent different "
                        "numbers of elements (", all.numel(), " in all, this rank ", sent[i], ")");
      place(i, all);
    }
  };
  return StartNamed(work, name, requests, collective, keep);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                                         std::vector<at::Tensor> &inputs,
                                                         const c10d::AllgatherOptions &) {
  TORCH_CHECK_VALUE(inputs.size() == 1 && outputs.size() == 1, "hvdlite: allgather takes one tensor per rank");
  TORCH_CHECK_VALUE(static_cast<int>(outputs[0].size()) == size_, "hvdlite: allgather needs ", size_,
                    " output tensors (one per rank of the group); got ", outputs[0].size());
  CheckTensors(outputs[0], "allgather");
  std::vector<at::Tensor> targets = outputs[0];
  return Gather(inputs, targets, c10d::OpType::ALLGATHER, "allgather",
                [targets](size_t, const at::Tensor &gathered) { Split(gathered, targets, "allgather"); });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::_allgather_base(at::Tensor &output, at::Tensor &input,
                                                               const c10d::AllgatherOptions &) {
  CheckTensor(output, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size_, "hvdlite: all_gather_into_tensor needs an output of ",
                    size_, " x ", input.numel(), " elements; got ", output.numel());
  at::Tensor target = output;
  return Gather({input}, {output}, c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor",
                [target](size_t, const at::Tensor &gathered) { Split(gathered, {target}, "all_gather_into_tensor"); });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                                   std::vector<at::Tensor> &inputs,
                                                                   const c10d::AllgatherOptions &) {
  // torch's layout: one list per rank of the group, each with one tensor per input (outputs[rank][input]).
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_, "hvdlite: allgather_coalesced needs one output list "
                    "per rank of the group (", size_, "); got ", outputs.size());
  std::vector<at::Tensor> all;
  std::vector<std::vector<at::Tensor>> by_input(inputs.size());
  for (const auto &list : outputs) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(), "hvdlite: allgather_coalesced needs one output per input (",
                      inputs.size(), ") in each rank's list; got ", list.size());
    CheckTensors(list, "allgather_coalesced");
    all.insert(all.end(), list.begin(), list.end());
    for (size_t i = 0; i < list.size(); ++i) by_input[i].push_back(list[i]);
  }
  return Gather(inputs, all, c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced",
                [by_input](size_t i, const at::Tensor &gathered) {
                  Split(gathered, by_input[i], "allgather_coalesced");
                });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                                               std::vector<at::Tensor> &inputs,
                                                                               const c10d::AllgatherOptions &) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "hvdlite: allgather_into_tensor_coalesced needs one output "
                    "per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckTensor(outputs[i], "allgather_into_tensor_coalesced");
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, "hvdlite: allgather_into_tensor_coalesced "
                      "needs outputs of ", size_, " x their input's elements");
  }
  std::vector<at::Tensor> targets = outputs;
  return Gather(inputs, outputs, c10d::OpType::COALESCED, "allgather_into_tensor_coalesced",
                [targets](size_t i, const at::Tensor &gathered) {
                  Split(gathered, {targets[i]}, "allgather_into_tensor_coalesced");
                });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                      std::vector<at::Tensor> &inputs,
                                                      const c10d::GatherOptions &opts) {
  TORCH_CHECK_VALUE(inputs.size() == 1, "hvdlite: gather takes one tensor per rank");
  CheckRoot(opts.rootRank, "gather");
  std::vector<at::Tensor> targets;
  if (rank_ == opts.rootRank) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                      "hvdlite: gather needs ", size_, " output tensors on the root");
    CheckTensors(outputs[0], "gather");
    targets = outputs[0];
  }
  // Every rank receives the gathered tensor (an all-gather): the root keeps it.
  return Gather(inputs, targets, c10d::OpType::GATHER, "gather", [targets](size_t, const at::Tensor &gathered) {
    if (!targets.empty()) Split(gathered, targets, "gather");
  });
}

// ---- scatter, all-to-all ----

c10::intrusive_ptr<c10d::Work> HvdliteBackend::scatter(std::vector<at::Tensor> &outputs,
                                                       std::vector<std::vector<at::Tensor>> &inputs,
                                                       const c10d::ScatterOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == 1, "hvdlite: scatter takes one output tensor per rank");
  CheckRoot(opts.rootRank, "scatter");
  at::Tensor output = outputs[0];
  CheckTensor(output, "scatter");
  const bool sends = rank_ == opts.rootRank && inputs.size() == 1;  // the root: its inputs count too
  const Placement placement = PlacementOf("scatter", {outputs, sends ? inputs[0] : std::vector<at::Tensor>()});
  // An all-to-all in which only the root sends: its pieces, one per rank.
  at::Tensor send;
  std::vector<int32_t> splits(size_, 0);
  if (rank_ == opts.rootRank) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "hvdlite: scatter needs ",
                      size_, " input tensors on the root");
    CheckTensors(inputs[0], "scatter");
    std::vector<at::Tensor> flats;
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK_TYPE(inputs[0][r].scalar_type() == output.scalar_type(), "hvdlite: scatter's inputs and output "
                       "need one dtype");
      flats.push_back(Flat(inputs[0][r]));
      splits[r] = SplitOf(inputs[0][r].numel(), "scatter");
    }
    send = at::cat(flats);
  } else {
    send = at::empty({0}, output.options());
  }
  if (placement.gpu) {
    std::vector<int64_t> expected(size_, 0);
    expected[opts.rootRank] = output.numel();
    at::Tensor received = at::empty({output.numel()}, output.options());
    return AllToAllOnGpu(send, splits, expected, received, c10d::OpType::SCATTER, "scatter", outputs, placement,
                         [output, received] { output.copy_(received.view(output.sizes())); });
  }
  Request r = MakeRequest(HVDLITE_ALLTOALL, NextName(), send, nullptr, placement);
  r.splits = splits;
  std::vector<Request> requests{std::move(r)};
  auto work = NewWork(c10d::OpType::SCATTER, "scatter", outputs, placement);
  const at::ScalarType dtype = output.scalar_type();
  work->finish = [output, dtype](const std::vector<hvdlite_handle> &handles) {
    Split(CoreOutput(handles[0], dtype), {output}, "scatter");
  };
  return Start(work, requests, "scatter", {send});
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                             std::vector<int64_t> &output_split_sizes,
                                                             std::vector<int64_t> &input_split_sizes,
                                                             const c10d::AllToAllOptions &) {
  CheckTensor(input, "all_to_all_single");
  CheckTensor(output, "all_to_all_single");
  CheckDims(HVDLITE_ALLTOALL, input, "all_to_all_single");
  const Placement placement = PlacementOf("all_to_all_single", {{input, output}});
  at::Tensor send = input.contiguous();
  std::vector<int32_t> splits;  // rows to each rank; none: equal
  if (input_split_sizes.empty()) {
    TORCH_CHECK_VALUE(input.size(0) % size_ == 0, "hvdlite: all_to_all_single without splits needs a first "
                      "dimension divisible by the group's size ", size_, "; got ", input.size(0));
  } else {
    TORCH_CHECK_VALUE(static_cast<int>(input_split_sizes.size()) == size_, "hvdlite: all_to_all_single needs ",
                      size_, " input split sizes; got ", input_split_sizes.size());
    for (int64_t s : input_split_sizes) splits.push_back(SplitOf(s, "all_to_all_single"));
  }
  if (placement.gpu) {
    std::vector<int32_t> send_rows = splits;
    if (send_rows.empty()) send_rows.assign(size_, SplitOf(input.size(0) / size_, "all_to_all_single"));
    std::vector<int64_t> expected = output_split_sizes;
    if (expected.empty()) {
      TORCH_CHECK_VALUE(output.dim() >= 1 && output.size(0) % size_ == 0, "hvdlite: all_to_all_single without "
                        "output splits needs an output whose first dimension is divisible by the group's size ",
                        size_);
      expected.assign(size_, output.size(0) / size_);
    }
    at::Tensor received = output.contiguous();
    return AllToAllOnGpu(send, send_rows, expected, received, c10d::OpType::ALLTOALL_BASE, "all_to_all_single",
                         {output}, placement, [output, received] { CopyBack({output}, {received}); });
  }
  Request r = MakeRequest(HVDLITE_ALLTOALL, NextName(), send, nullptr, placement);
  r.splits = splits;
  std::vector<Request> requests{std::move(r)};
  auto work = NewWork(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, placement);
  const int size = size_;
  std::vector<int64_t> expected = output_split_sizes;
  work->finish = [output, expected, size](const std::vector<hvdlite_handle> &handles) {
    if (!expected.empty()) {
      std::vector<int32_t> received(size);
      hvdlite_handle_received_splits(handles[0], received.data(), size);
      for (int r = 0; r < size; ++r) {
        TORCH_CHECK_VALUE(received[r] == expected[r], "hvdlite: all_to_all_single: rank ", r, " sent ",
                          received[r], " rows; output_split_sizes expected ", expected[r]);
      }
    }
    Split(CoreOutput(handles[0], output.scalar_type()), {output}, "all_to_all_single");
  };
  return Start(work, requests, "all_to_all_single", {send});
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::alltoall(std::vector<at::Tensor> &outputs,
                                                        std::vector<at::Tensor> &inputs,
                                                        const c10d::AllToAllOptions &) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                    "hvdlite: all_to_all needs ", size_, " input and output tensors");
  CheckTensors(inputs, "all_to_all");
  CheckTensors(outputs, "all_to_all");
  const Placement placement = PlacementOf("all_to_all", {inputs, outputs});
  std::vector<at::Tensor> flats;
  std::vector<int32_t> splits;
  for (const at::Tensor &t : inputs) {
    TORCH_CHECK_TYPE(t.scalar_type() == inputs[0].scalar_type(), "hvdlite: all_to_all's tensors need one dtype");
    flats.push_back(Flat(t));
    splits.push_back(SplitOf(t.numel(), "all_to_all"));
  }
  at::Tensor send = at::cat(flats);
  std::vector<at::Tensor> targets = outputs;
  if (placement.gpu) {
    std::vector<int64_t> expected;
    int64_t total = 0;
    for (const at::Tensor &t : outputs) {
      expected.push_back(t.numel());
      total += t.numel();
    }
    at::Tensor received = at::empty({total}, outputs[0].options());
    return AllToAllOnGpu(send, splits, expected, received, c10d::OpType::ALLTOALL, "all_to_all", outputs, placement,
                         [targets, received] { Split(received, targets, "all_to_all"); });
  }
  Request r = MakeRequest(HVDLITE_ALLTOALL, NextName(), send, nullptr, placement);
  r.splits = splits;
  std::vector<Request> requests{std::move(r)};
  auto work = NewWork(c10d::OpType::ALLTOALL, "all_to_all", outputs, placement);
  work->finish = [targets](const std::vector<hvdlite_handle> &handles) {
    Split(CoreOutput(handles[0], targets[0].scalar_type()), targets, "all_to_all");
  };
  return Start(work, requests, "all_to_all", {send});
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::AllToAllOnGpu(at::Tensor send, std::vector<int32_t> send_rows,
                                                             std::vector<int64_t> receive_rows, at::Tensor received,
                                                             c10d::OpType type, const char *collective,
                                                             std::vector<at::Tensor> outputs,
                                                             const Placement &placement, std::function<void()> after) {
  // What every rank sends to every rank and expects from it, gathered on the host first.
  at::Tensor plan = at::empty({2 * static_cast<int64_t>(size_)}, at::TensorOptions().dtype(at::kLong));
  for (int r = 0; r < size_; ++r) {
    plan[r] = static_cast<int64_t>(send_rows[r]);
    plan[size_ + r] = receive_rows[r];
  }
  std::vector<Request> agree{MakeRequest(HVDLITE_ALLGATHER, NextName(), plan, nullptr, Placement())};
  const std::string name = NextName();  // the data's call, numbered now: names follow the order of the calls
  auto work = NewWork(type, collective, std::move(outputs), placement);
  work->keep_alive = {send, received, plan};
  work->handles = Enqueue(agree, collective);
  const int size = size_;
  work->next_stage = [this, send, send_rows, received, name, placement, size,
                      collective](const std::vector<hvdlite_handle> &done) {
    at::Tensor all = CoreOutput(done[0], at::kLong);
    TORCH_CHECK_VALUE(all.numel() == 2 * size * size, "hvdlite: ", collective, ": the ranks' plans differ in size");
    const int64_t *rows = all.data_ptr<int64_t>();
    for (int from = 0; from < size; ++from) {
      for (int to = 0; to < size; ++to) {
        const int64_t sent = rows[from * 2 * size + to];
        const int64_t expected = rows[to * 2 * size + size + from];
        TORCH_CHECK_VALUE(sent == expected, "hvdlite: ", collective, " of CUDA tensors: rank ", from, " sends ", sent,
                          " rows to rank ", to, ", whose output has room for ", expected, " from it");
      }
    }
    Request r = MakeRequest(HVDLITE_ALLTOALL, name, send, received.data_ptr(), placement);
    r.splits = send_rows;
    std::vector<Request> requests{std::move(r)};
    return Enqueue(requests, collective);
  };
  work->finish = [after](const std::vector<hvdlite_handle> &) { after(); };
  return Start(std::move(work));
}

// ---- broadcast, reduce-scatter, barrier ----

c10::intrusive_ptr<c10d::Work> HvdliteBackend::broadcast(std::vector<at::Tensor> &tensors,
                                                         const c10d::BroadcastOptions &opts) {
  CheckTensors(tensors, "broadcast");
  CheckRoot(opts.rootRank, "broadcast");
  const Placement placement = PlacementOf("broadcast", {tensors});
  std::vector<at::Tensor> buffers;
  std::vector<Request> requests;
  CallNames::Name name;
  for (const at::Tensor &t : tensors) {
    at::Tensor buffer = t.contiguous();
    name = NameOf(HVDLITE_BROADCAST, buffer, opts.rootRank, 1.0, placement, /*repeatable=*/tensors.size() == 1);
    Request r = MakeRequest(HVDLITE_BROADCAST, name.text, buffer, buffer.data_ptr(), placement);
    r.request.root_rank = static_cast<int32_t>(opts.rootRank);
    requests.push_back(std::move(r));
    buffers.push_back(buffer);
  }
  auto work = NewWork(c10d::OpType::BROADCAST, "broadcast", tensors, placement);
  std::vector<at::Tensor> targets = tensors;
  work->finish = [targets, buffers](const std::vector<hvdlite_handle> &) { CopyBack(targets, buffers); };
  return StartNamed(work, name, requests, "broadcast", buffers);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::ReduceScatterEven(std::vector<at::Tensor> outputs,
                                                                 std::vector<at::Tensor> inputs,
                                                                 const c10d::ReduceOp &op, const char *collective) {
  CheckTensors(inputs, collective);
  CheckTensors(outputs, collective);
  TORCH_CHECK_VALUE(!IsBitwise(op), "hvdlite: ", collective, " does not take bitwise ops (BAND, BOR, BXOR)");
  double prescale;
  const int32_t core_op = CoreOp(op, &prescale);
  const Placement placement = PlacementOf(collective, {inputs, outputs});
  std::vector<at::Tensor> keep;
  std::vector<at::Tensor> received;
  std::vector<Request> requests;
  CallNames::Name name;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, "hvdlite: ", collective, " needs an input of ",
                      size_, " x its output's ", outputs[i].numel(), " elements; got ", inputs[i].numel());
    at::Tensor flat = Flat(inputs[i]);
    at::Tensor out = outputs[i].contiguous();
    name = NameOf(HVDLITE_REDUCESCATTER, flat, core_op, prescale, placement, /*repeatable=*/inputs.size() == 1);
    Request r = MakeRequest(HVDLITE_REDUCESCATTER, name.text, flat, out.data_ptr(), placement);
    r.request.reduce_op = core_op;
    r.request.prescale_factor = prescale;
    requests.push_back(std::move(r));
    keep.push_back(flat);
    keep.push_back(out);
    received.push_back(out);
  }
  auto work = NewWork(c10d::OpType::REDUCE_SCATTER, collective, outputs, placement);
  work->finish = [outputs, received](const std::vector<hvdlite_handle> &) { CopyBack(outputs, received); };
  return StartNamed(work, name, requests, collective, keep);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::reduce_scatter(std::vector<at::Tensor> &outputs,
                                                              std::vector<std::vector<at::Tensor>> &inputs,
                                                              const c10d::ReduceScatterOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                    "hvdlite: reduce_scatter takes one output and ", size_, " inputs per rank");
  CheckTensors(inputs[0], "reduce_scatter");
  std::vector<at::Tensor> flats;
  bool even = true;
  for (const at::Tensor &t : inputs[0]) {
    flats.push_back(Flat(t));
    even = even && t.numel() == outputs[0].numel();
  }
  at::Tensor all = at::cat(flats);
  if (even) return ReduceScatterEven(outputs, {all}, opts.reduceOp, "reduce_scatter");
  // Pieces of different sizes: all-reduce them all, keep this rank's.
  int64_t offset = 0;
  for (int r = 0; r < rank_; ++r) offset += inputs[0][r].numel();
  TORCH_CHECK_VALUE(inputs[0][rank_].numel() == outputs[0].numel(), "hvdlite: reduce_scatter: this rank's output "
                    "holds ", outputs[0].numel(), " elements, its piece of the input ", inputs[0][rank_].numel());
  at::Tensor mine = all.narrow(0, offset, outputs[0].numel());
  at::Tensor output = outputs[0];
  return Reduce({all}, {all}, opts.reduceOp, c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
                [output, mine] { output.copy_(mine.view(output.sizes())); });
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                                    const c10d::ReduceScatterOptions &opts) {
  return ReduceScatterEven({output}, {input}, opts.reduceOp, "reduce_scatter_tensor");
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                                               std::vector<at::Tensor> &inputs,
                                                                               const c10d::ReduceScatterOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "hvdlite: reduce_scatter_tensor_coalesced needs one output per "
                    "input");
  return ReduceScatterEven(outputs, inputs, opts.reduceOp, "reduce_scatter_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::barrier(const c10d::BarrierOptions &) {
  Request r = MakeRequest(HVDLITE_BARRIER, NextName(), at::Tensor(), nullptr, Placement());
  std::vector<Request> requests{std::move(r)};
  auto work = NewWork(c10d::OpType::BARRIER, "barrier", {}, Placement());
  return Start(work, requests, "barrier", {});
}

// ---- send, recv ----

c10::intrusive_ptr<c10d::Work> HvdliteBackend::PointToPoint(std::vector<at::Tensor> &tensors, int peer, int tag,
                                                            bool sending) {
  const char *what = sending ? "send" : "recv";
  TORCH_CHECK_VALUE(tensors.size() == 1, "hvdlite: ", what, " takes one tensor");
  CheckTensors(tensors, what);
  TORCH_CHECK_VALUE(peer >= 0 && peer < size_ && peer != rank_, "hvdlite: ", what, " with rank ", peer,
                    " of a group of ", size_, " (this is rank ", rank_, ")");
  // The caller's stream now: the message goes in later (once the pair's set exists) but after what was on it.
  const Placement placement = PlacementOf(what, {tensors});
  at::Tensor target = tensors[0];
  auto work = NewWork(sending ? c10d::OpType::SEND : c10d::OpType::RECV, what, tensors, placement);
  std::lock_guard<std::mutex> lock(point_to_point_mutex_);
  if (!sending) {
    auto posted = posted_.find({peer, tag});
    if (posted != posted_.end()) {
      // The peer's next message was received already, for a receive from any source that another answered.
      Posted taken = std::move(posted->second);
      posted_.erase(posted);
      work->after = taken.work;
      work->finish = [taken, target, peer](const std::vector<hvdlite_handle> &) {
        if (auto error = taken.work->exception()) std::rethrow_exception(error);
        TORCH_CHECK_VALUE(taken.buffer.numel() == target.numel(), "hvdlite: recv from rank ", peer, ": it sent ",
                          taken.buffer.numel(), " elements, the receive holds ", target.numel());
        target.copy_(taken.buffer.view(target.sizes()));
      };
      return Start(work);
    }
  }
  // A send is buffered, as small messages are in MPI and gloo: the tensor is copied and the send is done at once
  // (a rank may send, then receive what its peer sends it first); the message goes when the receiver takes it.
  at::Tensor buffer = sending ? target.clone(at::MemoryFormat::Contiguous) : target.contiguous();
  c10::intrusive_ptr<c10d::Work> handed_out = work;
  if (sending) {
    auto done = NewWork(c10d::OpType::SEND, what, tensors, Placement());
    done->Drive(0);  // no handles: completed now
    handed_out = done;
    work->unobserved = true;
  } else {
    work->finish = [target, buffer](const std::vector<hvdlite_handle> &) { CopyBack({target}, {buffer}); };
  }
  PostMessage(work, buffer, sending ? rank_ : peer, sending ? peer : rank_, tag, placement, what);
  Start(work);
  return handed_out;
}

void HvdliteBackend::PostMessage(const c10::intrusive_ptr<HvdliteWork> &work, const at::Tensor &buffer, int source,
                                 int destination, int tag, const Placement &placement, const char *what) {
  const int peer = source == rank_ ? destination : source;
  // Flat: sender and receiver agree on the element count and dtype, not the shape (as gloo's messages are bytes).
  const at::Tensor flat = buffer.view({-1});
  work->keep_alive = {buffer};
  // In the pair's set, the rank with the lower rank in the job is 0.
  const int32_t root = (global_ranks_[source] < global_ranks_[destination]) ? 0 : 1;
  // Messages between two ranks with one tag are matched in the order they were sent, as MPI matches them.
  uint64_t &count = messages_[std::make_tuple(source, destination, tag)];
  const std::string name = "c10d." + group_name_ + ".p2p." + std::to_string(source) + "." +
                           std::to_string(destination) + "." + std::to_string(tag) + "." + std::to_string(count++);
  auto enqueue = [this, name, flat, root, what, placement](int32_t id) {
    Request r = MakeRequest(HVDLITE_BROADCAST, name, flat, flat.data_ptr(), placement);
    r.request.root_rank = root;
    r.request.process_set_id = id;
    std::vector<Request> requests{std::move(r)};
    return Enqueue(requests, what);
  };
  PairSet &pair = pair_sets_[peer];
  if (pair.id >= 0) {
    work->handles = enqueue(pair.id);
    return;
  }
  if (pair.adding == 0) {
    // The pair's process set, asked for by the two of them alone, in the background: a send does not wait for
    // its peer to get there.
    int32_t ranks[2] = {static_cast<int32_t>(global_ranks_[rank_]), static_cast<int32_t>(global_ranks_[peer])};
    char error[kErrorBytes] = {0};
    const hvdlite_handle adding = hvdlite_add_process_set_of_members(ranks, 2, error, kErrorBytes);
    TORCH_CHECK(adding > 0, "hvdlite: ", what, ": ", error);
    pair.adding = adding;
    pair_setups_.emplace_back([this, peer, adding] {
      hvdlite_handle waited = adding;
      const bool made = hvdlite_wait_all_for(&waited, 1, -1) == 0;
      std::vector<c10::intrusive_ptr<HvdliteWork>> waiting;
      {
        std::lock_guard<std::mutex> lock(point_to_point_mutex_);
        PairSet &settled = pair_sets_[peer];
        if (made) settled.id = static_cast<int32_t>(hvdlite_handle_result(adding));
        settled.settled = true;
        waiting.swap(settled.waiting);
      }
      if (made) {
        for (auto &w : waiting) w->RunStageIfIdle();
      }
    });
  }
  // Waits for the pair's set (a request of the backend's: borrowed), then goes in.
  work->handles = {pair.adding};
  work->handles_borrowed = true;
  work->next_stage = [enqueue](const std::vector<hvdlite_handle> &added) {
    return enqueue(static_cast<int32_t>(hvdlite_handle_result(added[0])));
  };
  if (!pair.settled) pair.waiting.push_back(work);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::send(std::vector<at::Tensor> &tensors, int dst_rank, int tag) {
  return PointToPoint(tensors, dst_rank, tag, true);
}

c10::intrusive_ptr<c10d::Work> HvdliteBackend::recv(std::vector<at::Tensor> &tensors, int src_rank, int tag) {
  return PointToPoint(tensors, src_rank, tag, false);
}

HvdliteBackend::Posted HvdliteBackend::PostReceive(int peer, int tag, const at::Tensor &like,
                                                   const Placement &placement) {
  Posted posted;
  posted.buffer = at::empty({like.numel()}, like.options());
  posted.work = NewWork(c10d::OpType::RECV, "recv from rank " + std::to_string(peer), {}, placement);
  PostMessage(posted.work, posted.buffer, peer, rank_, tag, placement, "recv");
  return posted;
}

// Without MPI_ANY_SOURCE (which lost messages on some of MPI's network layers): a receive is posted from every peer,
// each the next message of that pair as a named receive would be, and the first to arrive is the one; the others
// stay posted for the next receives from those peers. Any of them that a peer never sends stays in the core until
// the end, as an unmatched receive does in MPI.
c10::intrusive_ptr<c10d::Work> HvdliteBackend::recvAnysource(std::vector<at::Tensor> &tensors, int tag) {
  const char *what = "recv from any source";
  TORCH_CHECK_VALUE(tensors.size() == 1, "hvdlite: ", what, " takes one tensor");
  CheckTensors(tensors, what);
  TORCH_CHECK_VALUE(size_ > 1, "hvdlite: ", what, " in a group of one rank: there is no other rank to send");
  const Placement placement = PlacementOf(what, {tensors});
  TORCH_CHECK_VALUE(!placement.gpu, "hvdlite: ", what, " takes CPU tensors (name the source rank for a CUDA tensor)");
  at::Tensor target = tensors[0];
  auto work = NewWork(c10d::OpType::RECVANYSOURCE, what, tensors, placement);
  std::vector<Posted> candidates;
  std::vector<int> sources;
  std::lock_guard<std::mutex> lock(point_to_point_mutex_);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto posted = posted_.find({peer, tag});
    if (posted != posted_.end()) {
      candidates.push_back(std::move(posted->second));
      posted_.erase(posted);
    } else {
      candidates.push_back(PostReceive(peer, tag, target, placement));
    }
    sources.push_back(peer);
    work->any_of.push_back(candidates.back().work);
  }
  HvdliteWork *self = work.get();  // the Work runs finish_any itself, and drops it when it finishes
  work->finish_any = [this, self, candidates, sources, tag, target](size_t winner) {
    {
      // The others wait for the next receive from their peers (their buffers stay alive while the core may
      // write into them).
      std::lock_guard<std::mutex> lock(point_to_point_mutex_);
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (i != winner) posted_[{sources[i], tag}] = candidates[i];
      }
    }
    if (auto error = candidates[winner].work->exception()) std::rethrow_exception(error);
    const at::Tensor &message = candidates[winner].buffer;
    TORCH_CHECK_VALUE(message.numel() == target.numel(), "hvdlite: recv from any source: rank ", sources[winner],
                      " sent ", message.numel(), " elements, the receive holds ", target.numel());
    target.copy_(message.view(target.sizes()));
    self->source_rank = sources[winner];
  };
  return Start(work);
}

}  // namespace hvdlite_c10d
