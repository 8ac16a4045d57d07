#include "collectives/nccl_executor.h"

#include <cstdint>
#include <numeric>

#include "gpu/gpu_libraries.h"
#include "base/half.h"
#include "base/collective_info.h"

namespace hvdlite::gpu {
namespace {

CUdeviceptr Address(const void *pointer) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer)); }

bool NcclType(DataType dtype, ncclDataType_t *type) {
  switch (dtype) {
    case DataType::kUInt8: *type = kNcclUint8; return true;
    case DataType::kInt8: *type = kNcclInt8; return true;
    case DataType::kInt32: *type = kNcclInt32; return true;
    case DataType::kInt64: *type = kNcclInt64; return true;
    case DataType::kFloat16: *type = kNcclFloat16; return true;
    case DataType::kBFloat16: *type = kNcclBfloat16; return true;
    case DataType::kFloat32: *type = kNcclFloat32; return true;
    case DataType::kFloat64: *type = kNcclFloat64; return true;
    default: return false;  // int16, uint16, bool: NCCL has no such reduction
  }
}

std::string CudaFailed(const char *call, CUresult result) {
  return result == kCudaSuccess ? "" : std::string(call) + ": " + CudaErrorText(result);
}

std::string NcclFailed(const char *call, ncclResult_t result) {
  return result == kNcclSuccess ? "" : std::string(call) + ": " + NcclErrorText(result);
}

// NCCL's reduction for an all-reduce: its own op, or (custom) a pre-multiplied sum made for this call, which
// applies prescale, postscale and the average's division in one multiplication of each input.
struct Reduction {
  ncclRedOp_t op = kNcclSum;
  bool custom = false;
};

std::string MakeReduction(const Request &spec, int32_t size, ncclComm_t comm, ncclDataType_t type, Reduction *out) {
  double factor = spec.prescale * spec.postscale;
  switch (spec.op) {
    case ReduceOp::kSum: case ReduceOp::kAverage: break;
    case ReduceOp::kMin: out->op = kNcclMin; break;
    case ReduceOp::kMax: out->op = kNcclMax; break;
    case ReduceOp::kProduct: out->op = kNcclProd; break;
    default: return std::string(ReduceOpName(spec.op)) + " is not an NCCL reduction";
  }
  const bool average = spec.op == ReduceOp::kAverage;
  if (!average && spec.op != ReduceOp::kSum) {
    return factor == 1.0 ? "" : "scale factors on GPU tensors go with sum or average only";
  }
  if (!IsFloatingPoint(spec.dtype) && (average || factor != 1.0)) {
    return "average and scale factors of integer GPU tensors are not NCCL reductions";
  }
  if (average && factor == 1.0 && LoadedNcclVersion() >= kNcclAvgVersion) {
    out->op = kNcclAvg;
    return "";
  }
  if (average) factor /= size;
  if (factor == 1.0) return "";
  if (!Nccl().ncclRedOpCreatePreMulSum || !Nccl().ncclRedOpDestroy) {
    return "scale factors and averages of GPU tensors need NCCL 2.11 or newer (this is NCCL " +
           NcclVersionText(LoadedNcclVersion()) + ")";
  }
  union {
    uint16_t half;
    float single;
    double twice;
  } scalar{};
  if (spec.dtype == DataType::kFloat16) scalar.half = FloatToFloat16(static_cast<float>(factor));
  else if (spec.dtype == DataType::kBFloat16) scalar.half = FloatToBFloat16(static_cast<float>(factor));
  else if (spec.dtype == DataType::kFloat32) scalar.single = static_cast<float>(factor);
  else scalar.twice = factor;
  out->custom = true;
  return NcclFailed("ncclRedOpCreatePreMulSum",
                Nccl().ncclRedOpCreatePreMulSum(&out->op, &scalar, type, kNcclScalarHostImmediate, comm));
}

}  // namespace

NcclExecutor::NcclExecutor(int rank, int local_rank, double progress_timeout_seconds)
    : local_rank_(local_rank), watch_(rank, progress_timeout_seconds) {}

NcclExecutor::~NcclExecutor() {
  const CudaDriverFunctions &cu = Driver();
  std::string ignored;
  // The watch stays on while the streams drain: a peer gone now still ends this process instead of hanging it.
  for (size_t device = 0; device < devices_.size(); ++device) {
    if (devices_[device].stream && UseDevice(static_cast<int32_t>(device), &ignored)) {
      cu.cuStreamSynchronize(devices_[device].stream);
    }
  }
  watch_.Stop();
  communicators_.DestroyAll();
  for (size_t device = 0; device < devices_.size(); ++device) {
    Device &d = devices_[device];
    if (!d.stream || !UseDevice(static_cast<int32_t>(device), &ignored)) continue;
    if (d.fusion) cu.cuMemFree(d.fusion);
    cu.cuStreamDestroy(d.stream);
  }
}

NcclExecutor::Device *NcclExecutor::DeviceFor(int32_t device, std::string *error) {
  if (devices_.size() <= static_cast<size_t>(device)) devices_.resize(device + 1);
  Device &d = devices_[device];
  if (!d.stream) {
    *error = CudaFailed("cuStreamCreate", Driver().cuStreamCreate(&d.stream, kStreamNonBlocking));
    if (!error->empty()) return nullptr;
  }
  return &d;
}

std::string NcclExecutor::Execute(int32_t set_id, const CommContext &ctx, const FusedBatch &batch,
                                  const std::vector<Entry *> &locals) {
  const Request &spec = batch.parts.front()->spec;
  std::string error;
  if (!GpuCollectivesAvailable(&error)) {  // a rank that joined without ever loading the GPU libraries
    return std::string(CollectiveName(spec.collective)) + " of GPU tensor '" + spec.name + "': " + error;
  }
  int32_t device = -1;
  for (const Entry *e : locals) {
    if (!e) continue;
    if (device < 0) device = e->gpu_device;
    if (e->gpu_device != device) {
      error = "GPU tensors '" + spec.name + "' and '" + e->request.name + "' of one batch are on GPUs " +
              std::to_string(device) + " and " + std::to_string(e->gpu_device) + ": one GPU per rank";
    }
  }
  if (device < 0) device = communicators_.DeviceOf(set_id);
  if (device < 0) device = last_device_;
  if (device < 0) {  // joined before it ever had a GPU tensor: the GPU its local rank would use
    int count = 0;
    Driver().cuDeviceGetCount(&count);
    device = count > 0 ? local_rank_ % count : 0;
  }
  Device *d = error.empty() && UseDevice(device, &error) ? DeviceFor(device, &error) : nullptr;
  // Every ready event is waited on or given back, whatever fails: none is left behind.
  for (Entry *e : locals) {
    if (!e || !e->gpu_ready) continue;
    if (d && error.empty()) {
      error = CudaFailed("cuStreamWaitEvent", Driver().cuStreamWaitEvent(d->stream, e->gpu_ready, 0));
    }
    EventPool::Get().Release(e->gpu_device, e->gpu_ready);
    e->gpu_ready = nullptr;
  }
  // Before the set has a communicator, a failure here still goes through making it (nccl_communicators.h), so
  // that the other ranks fail too instead of waiting for this one.
  if (!error.empty() && communicators_.CommOf(set_id)) return error;
  if (error.empty()) last_device_ = device;
  ncclComm_t comm = communicators_.For(set_id, ctx, device, &error);
  if (!comm) return error;
  switch (spec.collective) {
    case Collective::kAllreduce: error = Allreduce(*d, comm, ctx, batch, locals); break;
    case Collective::kBroadcast: error = Broadcast(*d, comm, *batch.parts.front(), locals[0]); break;
    case Collective::kAllgather: case Collective::kAlltoall: case Collective::kReducescatter: {
      if (!locals[0] || !locals[0]->output) {
        error = std::string(CollectiveName(spec.collective)) + " of GPU tensor '" + spec.name +
                "' needs an output the caller allocated";
        break;
      }
      const Response &response = *batch.parts.front();
      error = spec.collective == Collective::kAllgather ? Allgather(*d, comm, ctx, response, *locals[0])
              : spec.collective == Collective::kAlltoall ? Alltoall(*d, comm, ctx, response, *locals[0])
                                                         : Reducescatter(*d, comm, ctx, response, *locals[0]);
      break;
    }
    default:
      error = std::string(CollectiveName(spec.collective)) + " of GPU tensor '" + spec.name + "': not a GPU collective";
  }
  if (!error.empty()) return error;
  CUevent event = EventPool::Get().Acquire(device, &error);
  if (!event) return error;
  auto done = std::make_shared<DoneEvent>(device, event);
  error = CudaFailed("cuEventRecord", Driver().cuEventRecord(event, d->stream));
  if (!error.empty()) return error;
  for (Entry *e : locals) {
    if (!e) continue;
    if (!e->results) e->results = std::make_unique<CoreResults>();
    e->results->gpu_done = done;
  }
  watch_.Launched(comm, std::move(done),
                  std::string(CollectiveName(spec.collective)) + " of '" + spec.name + "'" +
                      (batch.parts.size() > 1 ? " and " + std::to_string(batch.parts.size() - 1) + " more" : ""));
  return "";
}

std::string NcclExecutor::Allreduce(Device &d, ncclComm_t comm, const CommContext &ctx, const FusedBatch &batch,
                                    const std::vector<Entry *> &locals) {
  const CudaDriverFunctions &cu = Driver();
  const Request &spec = batch.parts.front()->spec;
  auto failed = [&](const std::string &why) {
    return "all-reduce of GPU tensor '" + spec.name + "'" +
           (batch.parts.size() > 1 ? " (fused with " + std::to_string(batch.parts.size() - 1) + " more)" : "") +
           ": " + why;
  };
  ncclDataType_t type;
  if (!NcclType(spec.dtype, &type)) return failed(std::string("NCCL does not reduce ") + DataTypeName(spec.dtype));
  Reduction reduction;
  std::string error = MakeReduction(spec, ctx.size, comm, type, &reduction);
  if (!error.empty()) return failed(error);
  const size_t element = DataTypeSize(spec.dtype);
  const size_t total = static_cast<size_t>(batch.total_bytes) / element;

  if (batch.parts.size() == 1 && locals[0]) {  // in place or input to output: no fusion buffer
    error = NcclFailed("ncclAllReduce", Nccl().ncclAllReduce(locals[0]->input, locals[0]->output, total, type,
                                                         reduction.op, comm, d.stream));
  } else {
    const size_t bytes = static_cast<size_t>(batch.total_bytes);
    if (d.fusion_bytes < bytes) {
      if (d.fusion) {  // the old buffer may still be read by enqueued work
        error = CudaFailed("cuStreamSynchronize", cu.cuStreamSynchronize(d.stream));
        cu.cuMemFree(d.fusion);
        d.fusion = 0;
        d.fusion_bytes = 0;
      }
      if (error.empty()) error = CudaFailed("cuMemAlloc (GPU fusion buffer)", cu.cuMemAlloc(&d.fusion, bytes));
      if (error.empty()) d.fusion_bytes = bytes;
    }
    size_t offset = 0;
    for (size_t i = 0; i < batch.parts.size() && error.empty(); ++i) {
      const size_t part = static_cast<size_t>(batch.parts[i]->Elements()) * element;
      if (part == 0) continue;
      error = locals[i]
                  ? CudaFailed("cuMemcpyAsync",
                               cu.cuMemcpyAsync(d.fusion + offset, Address(locals[i]->input), part, d.stream))
                  : CudaFailed("cuMemsetD8Async",  // joined: zeros
                               cu.cuMemsetD8Async(d.fusion + offset, 0, part, d.stream));
      offset += part;
    }
    if (error.empty()) {
      void *buffer = reinterpret_cast<void *>(static_cast<uintptr_t>(d.fusion));
      error = NcclFailed("ncclAllReduce",
                         Nccl().ncclAllReduce(buffer, buffer, total, type, reduction.op, comm, d.stream));
    }
    offset = 0;
    for (size_t i = 0; i < batch.parts.size() && error.empty(); ++i) {
      const size_t part = static_cast<size_t>(batch.parts[i]->Elements()) * element;
      if (locals[i] && part) {
        error = CudaFailed("cuMemcpyAsync",
                           cu.cuMemcpyAsync(Address(locals[i]->output), d.fusion + offset, part, d.stream));
      }
      offset += part;
    }
  }
  // A custom reduction may go as soon as the call that uses it has returned.
  if (reduction.custom) Nccl().ncclRedOpDestroy(reduction.op, comm);
  return error.empty() ? "" : failed(error);
}

std::string NcclExecutor::Broadcast(Device &d, ncclComm_t comm, const Response &response, const Entry *local) {
  if (!local) return "broadcast of GPU tensor '" + response.spec.name + "': this rank has no tensor";
  const size_t bytes = static_cast<size_t>(local->request.NumElements()) * DataTypeSize(response.spec.dtype);
  std::string error = NcclFailed("ncclBroadcast", Nccl().ncclBroadcast(local->input, local->output, bytes, kNcclUint8,
                                                                   response.spec.root_rank, comm, d.stream));
  return error.empty() ? "" : "broadcast of GPU tensor '" + response.spec.name + "': " + error;
}

namespace {

// The results of a GPU allgather or alltoall: the request's shape with the rows written into the caller's output.
CoreResults &ResultsWithRows(Entry &local, int64_t rows) {
  local.results = std::make_unique<CoreResults>();
  local.results->output_shape = local.request.shape;
  local.results->output_shape[0] = rows;
  return *local.results;
}

void *At(void *base, size_t offset) { return static_cast<uint8_t *>(base) + offset; }
const void *At(const void *base, size_t offset) { return static_cast<const uint8_t *>(base) + offset; }

// Ends an NCCL group whatever happened inside it, keeping the first error.
std::string EndGroup(std::string error) {
  std::string ended = NcclFailed("ncclGroupEnd", Nccl().ncclGroupEnd());
  return error.empty() ? ended : error;
}

}  // namespace

std::string NcclExecutor::Allgather(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response,
                                    Entry &local) {
  const size_t row_bytes = static_cast<size_t>(local.request.RowElements()) * DataTypeSize(response.spec.dtype);
  const std::vector<int64_t> &rows = response.first_dims;
  bool equal = true;
  for (int64_t r : rows) equal = equal && r == rows[0];
  std::string error;
  if (equal) {
    error = NcclFailed("ncclAllGather", Nccl().ncclAllGather(local.input, local.output, rows[0] * row_bytes, kNcclUint8,
                                                            comm, d.stream));
  } else {  // each rank's rows broadcast from it, into their place in every output
    error = NcclFailed("ncclGroupStart", Nccl().ncclGroupStart());
    size_t offset = 0;
    for (int r = 0; r < ctx.size && error.empty(); ++r) {
      const size_t bytes = static_cast<size_t>(rows[r]) * row_bytes;
      error = NcclFailed("ncclBroadcast", Nccl().ncclBroadcast(local.input, At(local.output, offset), bytes,
                                                               kNcclUint8, r, comm, d.stream));
      offset += bytes;
    }
    error = EndGroup(error);
  }
  if (!error.empty()) return "allgather of GPU tensor '" + response.spec.name + "': " + error;
  ResultsWithRows(local, std::accumulate(rows.begin(), rows.end(), int64_t{0}));
  return "";
}

std::string NcclExecutor::Alltoall(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response,
                                   Entry &local) {
  const Request &spec = local.request;
  const size_t row_bytes = static_cast<size_t>(spec.RowElements()) * DataTypeSize(spec.dtype);
  std::vector<int32_t> send_rows = local.splits;
  if (send_rows.empty()) send_rows.assign(ctx.size, static_cast<int32_t>(spec.shape[0] / ctx.size));
  std::vector<int32_t> receive_rows(ctx.size);
  MPI_Alltoall(send_rows.data(), 1, MPI_INT32_T, receive_rows.data(), 1, MPI_INT32_T, ctx.comm);
  std::string error = NcclFailed("ncclGroupStart", Nccl().ncclGroupStart());
  size_t send_offset = 0, receive_offset = 0;
  for (int r = 0; r < ctx.size && error.empty(); ++r) {
    const size_t send = static_cast<size_t>(send_rows[r]) * row_bytes;
    const size_t receive = static_cast<size_t>(receive_rows[r]) * row_bytes;
    error = NcclFailed("ncclSend", Nccl().ncclSend(At(local.input, send_offset), send, kNcclUint8, r, comm, d.stream));
    if (error.empty()) {
      error = NcclFailed("ncclRecv", Nccl().ncclRecv(At(local.output, receive_offset), receive, kNcclUint8, r, comm,
                                                     d.stream));
    }
    send_offset += send;
    receive_offset += receive;
  }
  error = EndGroup(error);
  if (!error.empty()) return "alltoall of GPU tensor '" + response.spec.name + "': " + error;
  ResultsWithRows(local, std::accumulate(receive_rows.begin(), receive_rows.end(), int64_t{0})).received_splits =
      std::move(receive_rows);
  return "";
}

std::string NcclExecutor::Reducescatter(Device &d, ncclComm_t comm, const CommContext &ctx, const Response &response,
                                        Entry &local) {
  const Request &spec = response.spec;
  auto failed = [&](const std::string &why) { return "reducescatter of GPU tensor '" + spec.name + "': " + why; };
  ncclDataType_t type;
  if (!NcclType(spec.dtype, &type)) return failed(std::string("NCCL does not reduce ") + DataTypeName(spec.dtype));
  Reduction reduction;
  std::string error = MakeReduction(spec, ctx.size, comm, type, &reduction);
  if (!error.empty()) return failed(error);
  const int64_t rows = spec.shape[0], row_elements = spec.RowElements();
  const size_t element = DataTypeSize(spec.dtype);
  if (rows % ctx.size == 0) {
    const size_t share = static_cast<size_t>(rows / ctx.size * row_elements);
    error = NcclFailed("ncclReduceScatter", Nccl().ncclReduceScatter(local.input, local.output, share, type,
                                                                     reduction.op, comm, d.stream));
  } else {  // the first rows % size ranks get one row more: one reduce to each rank
    error = NcclFailed("ncclGroupStart", Nccl().ncclGroupStart());
    size_t offset = 0;
    for (int r = 0; r < ctx.size && error.empty(); ++r) {
      const size_t count = static_cast<size_t>(OutputFirstDim(spec.collective, rows, ctx.size, r) * row_elements);
      error = NcclFailed("ncclReduce", Nccl().ncclReduce(At(local.input, offset * element), local.output, count, type,
                                                         reduction.op, r, comm, d.stream));
      offset += count;
    }
    error = EndGroup(error);
  }
  if (reduction.custom) Nccl().ncclRedOpDestroy(reduction.op, comm);
  return error.empty() ? "" : failed(error);
}

void NcclExecutor::ForgetProcessSet(int32_t set_id) {
  if (ncclComm_t comm = communicators_.CommOf(set_id)) {
    watch_.Forget(comm);
    communicators_.Forget(set_id);
  }
}

}  // namespace hvdlite::gpu
