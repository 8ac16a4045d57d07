// Opens the CUDA driver (libcuda.so.1, installed with every NVIDIA driver) and NCCL (libnccl.so.2) at run time,
// once per process, and says what it found and, where it found nothing, why. Nothing here needs CUDA to build, and
// a machine without a GPU loads neither: GPU tensors then keep the host-staged path.
#pragma once
#include <string>
#include <vector>

#include "gpu/gpu_declarations.h"

namespace hvdlite::gpu {

struct LoadStatus {
  bool driver_loaded = false;  // opened, every function found, and cuInit succeeded
  int device_count = 0;
  std::string driver_reason;   // why not, where not loaded
  bool nccl_loaded = false;    // opened and every function found
  int nccl_version = 0;        // ncclGetVersion's code
  std::string nccl_path;       // the file in use
  std::string nccl_reason;     // why not, where not loaded: every place looked at, and what each said
};

// Where to look for NCCL, in this order: explicit_path only, when set; else a copy the process has loaded
// already (PyTorch's CUDA wheels load one), the folders given (the nvidia-nccl-cu12/-cu13 wheels' lib folders on
// the Python path), and the dynamic linker's default search.
struct NcclSearch {
  std::string explicit_path;
  std::vector<std::string> folders;
};

// Loads on the first call; later calls return that first result (one NCCL per process). It may run on any
// thread: of NCCL it calls only ncclGetVersion, a query that starts nothing (collectives stay on the background
// thread).
const LoadStatus &LoadGpuLibraries(const NcclSearch &search);
// Whether GPU tensors can go through NCCL: both libraries loaded and a GPU seen; else false and why.
bool GpuCollectivesAvailable(std::string *why);
int LoadedNcclVersion();  // 0 before loading or without NCCL
// "invalid argument (1)": a driver or NCCL result as text.
std::string CudaErrorText(CUresult result);
std::string NcclErrorText(ncclResult_t result);
// The functions, valid once LoadGpuLibraries says driver_loaded / nccl_loaded.
const CudaDriverFunctions &Driver();
const NcclFunctions &Nccl();
// "2.28.3" from ncclGetVersion's code (NCCL changed the encoding at 2.9).
std::string NcclVersionText(int code);

}  // namespace hvdlite::gpu
