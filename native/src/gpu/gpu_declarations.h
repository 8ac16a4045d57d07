// The parts of the CUDA driver API and of NCCL's C API that hvdlite calls, declared here so that the core builds
// with no CUDA or NCCL headers: both libraries are opened at run time (gpu_libraries.h). The values are the
// libraries' own: CUDA's driver API (stable), and NCCL's C API and enums (stable since NCCL 2.3; the unique id is
// 128 bytes).
#pragma once
#include <cstddef>
#include <cstdint>

namespace hvdlite::gpu {

// CUDA driver API.
using CUresult = int;  // CUDA_SUCCESS = 0
using CUdevice = int;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaNotReady = 600;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL

// NCCL.
using ncclResult_t = int;  // ncclSuccess = 0, ncclInProgress = 7
using ncclComm_t = struct ncclComm *;
struct ncclUniqueId {
  char internal[128];
};
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
enum ncclDataType_t {
  kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclUint32 = 3, kNcclInt64 = 4, kNcclUint64 = 5,
  kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9
};
using ncclRedOp_t = int;  // a custom operator (ncclRedOpCreatePreMulSum) is a further value
constexpr ncclRedOp_t kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4;
constexpr int kNcclScalarHostImmediate = 1;  // ncclScalarResidence_t: the scalar is read at the call
constexpr int kNcclAvgVersion = 21000;         // ncclAvg from NCCL 2.10
constexpr int kNcclPreMulSumVersion = 21100;   // ncclRedOpCreatePreMulSum from NCCL 2.11

// The driver functions hvdlite calls, by the names libcuda exports (several under their _v2 names).
struct CudaDriverFunctions {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDeviceGetCount)(int *count);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *context, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuEventCreate)(CUevent *event, unsigned flags);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventQuery)(CUevent event);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuMemAlloc)(CUdeviceptr *pointer, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr pointer);
  CUresult (*cuMemcpyAsync)(CUdeviceptr destination, CUdeviceptr source, size_t bytes, CUstream stream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr destination, unsigned char value, size_t bytes, CUstream stream);
  CUresult (*cuPointerGetAttribute)(void *data, int attribute, CUdeviceptr pointer);
  CUresult (*cuGetErrorString)(CUresult error, const char **text);
};

// The NCCL functions hvdlite calls.
struct NcclFunctions {
  ncclResult_t (*ncclGetVersion)(int *version);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t *error);
  const char *(*ncclGetErrorString)(ncclResult_t result);
  ncclResult_t (*ncclAllReduce)(const void *send, void *receive, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclAllGather)(const void *send, void *receive, size_t count, ncclDataType_t type, ncclComm_t comm,
                                CUstream stream);
  ncclResult_t (*ncclBroadcast)(const void *send, void *receive, size_t count, ncclDataType_t type, int root,
                                ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclReduce)(const void *send, void *receive, size_t count, ncclDataType_t type, ncclRedOp_t op,
                             int root, ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclReduceScatter)(const void *send, void *receive, size_t count, ncclDataType_t type,
                                    ncclRedOp_t op, ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclSend)(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           CUstream stream);
  ncclResult_t (*ncclRecv)(void *receive, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           CUstream stream);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  // Optional (null where NCCL is older than 2.11): the sum of each input times a scalar, for scale factors.
  ncclResult_t (*ncclRedOpCreatePreMulSum)(ncclRedOp_t *op, void *scalar, ncclDataType_t type, int residence,
                                           ncclComm_t comm);
  ncclResult_t (*ncclRedOpDestroy)(ncclRedOp_t op, ncclComm_t comm);
};

}  // namespace hvdlite::gpu
