#include "gpu/gpu_libraries.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <mutex>
#include <optional>
#include <utility>

namespace hvdlite::gpu {
namespace {

constexpr int kOldestNcclVersion = 2400;  // 2.4.0 (codes before 2.9: major*1000 + minor*100 + patch): ncclCommGetAsyncError, which a dead peer's error needs

CudaDriverFunctions driver_functions{};
NcclFunctions nccl_functions{};
std::mutex load_mutex;                // guards loaded
std::optional<LoadStatus> loaded;     // what the first LoadGpuLibraries found

struct Symbol {
  const char *name;
  void **slot;
};

template <typename Function>
Symbol Bind(const char *name, Function *&slot) {
  return Symbol{name, reinterpret_cast<void **>(&slot)};
}

// Fills every slot from library; returns the first name it lacks ("" when none is missing).
std::string Resolve(void *library, const std::vector<Symbol> &symbols) {
  for (const Symbol &symbol : symbols) {
    *symbol.slot = dlsym(library, symbol.name);
    if (*symbol.slot == nullptr) return symbol.name;
  }
  return "";
}

std::string DlError() {
  const char *text = dlerror();
  return text ? text : "unknown error";
}

std::string LoadedPath(void *library, const std::string &fallback) {
  link_map *map = nullptr;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0]) return map->l_name;
  return fallback;
}

void LoadDriver(LoadStatus &status) {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    status.driver_reason = "the CUDA driver is not installed: " + DlError();
    return;
  }
  CudaDriverFunctions &f = driver_functions;
  std::string missing = Resolve(library, {
      Bind("cuInit", f.cuInit), Bind("cuDeviceGetCount", f.cuDeviceGetCount), Bind("cuDeviceGet", f.cuDeviceGet),
      Bind("cuDevicePrimaryCtxRetain", f.cuDevicePrimaryCtxRetain),
      Bind("cuDevicePrimaryCtxRelease_v2", f.cuDevicePrimaryCtxRelease), Bind("cuCtxSetCurrent", f.cuCtxSetCurrent),
      Bind("cuStreamCreate", f.cuStreamCreate), Bind("cuStreamDestroy_v2", f.cuStreamDestroy),
      Bind("cuStreamWaitEvent", f.cuStreamWaitEvent), Bind("cuStreamSynchronize", f.cuStreamSynchronize),
      Bind("cuEventCreate", f.cuEventCreate),
      Bind("cuEventRecord", f.cuEventRecord), Bind("cuEventQuery", f.cuEventQuery),
      Bind("cuEventSynchronize", f.cuEventSynchronize), Bind("cuEventDestroy_v2", f.cuEventDestroy),
      Bind("cuMemAlloc_v2", f.cuMemAlloc), Bind("cuMemFree_v2", f.cuMemFree), Bind("cuMemcpyAsync", f.cuMemcpyAsync),
      Bind("cuMemsetD8Async", f.cuMemsetD8Async),
      Bind("cuPointerGetAttribute", f.cuPointerGetAttribute), Bind("cuGetErrorString", f.cuGetErrorString)});
  if (!missing.empty()) {
    status.driver_reason = LoadedPath(library, "libcuda.so.1") + " lacks " + missing + " (a driver older than CUDA 11?)";
    driver_functions = CudaDriverFunctions{};
    dlclose(library);
    return;
  }
  CUresult result = f.cuInit(0);
  if (result != kCudaSuccess) {
    status.driver_reason = "cuInit failed: " + CudaErrorText(result);
    return;
  }
  int count = 0;
  result = f.cuDeviceGetCount(&count);
  if (result != kCudaSuccess) {
    status.driver_reason = "cuDeviceGetCount failed: " + CudaErrorText(result);
    return;
  }
  status.driver_loaded = true;
  status.device_count = count;
  if (count == 0) status.driver_reason = "the CUDA driver sees no GPU";
}

bool IsFile(const std::string &path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The NCCL library to use, and its path; (nullptr, "") with every place looked at in reason.
std::pair<void *, std::string> OpenNccl(const NcclSearch &search, std::string &reason) {
  constexpr const char *kName = "libnccl.so.2";
  if (!search.explicit_path.empty()) {
    void *library = dlopen(search.explicit_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) reason = "HVDLITE_NCCL_LIBRARY=" + search.explicit_path + ": " + DlError();
    return {library, library ? LoadedPath(library, search.explicit_path) : ""};
  }
  if (void *library = dlopen(kName, RTLD_NOW | RTLD_NOLOAD)) return {library, LoadedPath(library, kName)};
  std::vector<std::string> looked{"not loaded by the process yet"};
  for (const std::string &folder : search.folders) {
    std::string path = folder + "/" + kName;
    if (!IsFile(path)) {
      looked.push_back(path + ": no such file");
      continue;
    }
    if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {library, LoadedPath(library, path)};
    looked.push_back(path + ": " + DlError());
  }
  if (void *library = dlopen(kName, RTLD_NOW | RTLD_LOCAL)) return {library, LoadedPath(library, kName)};
  looked.push_back(std::string(kName) + " (default search): " + DlError());
  reason = "NCCL not found (pip install hvdlite[cuda12] or [cuda13], or set HVDLITE_NCCL_LIBRARY):";
  for (const std::string &line : looked) reason += "\n  " + line;
  return {nullptr, ""};
}

void LoadNccl(const NcclSearch &search, LoadStatus &status) {
  auto [library, path] = OpenNccl(search, status.nccl_reason);
  if (!library) return;
  NcclFunctions &f = nccl_functions;
  std::string missing = Resolve(library, {
      Bind("ncclGetVersion", f.ncclGetVersion), Bind("ncclGetUniqueId", f.ncclGetUniqueId),
      Bind("ncclCommInitRank", f.ncclCommInitRank), Bind("ncclCommDestroy", f.ncclCommDestroy),
      Bind("ncclCommAbort", f.ncclCommAbort), Bind("ncclCommGetAsyncError", f.ncclCommGetAsyncError),
      Bind("ncclGetErrorString", f.ncclGetErrorString), Bind("ncclAllReduce", f.ncclAllReduce),
      Bind("ncclAllGather", f.ncclAllGather), Bind("ncclBroadcast", f.ncclBroadcast),
      Bind("ncclReduce", f.ncclReduce), Bind("ncclReduceScatter", f.ncclReduceScatter),
      Bind("ncclSend", f.ncclSend), Bind("ncclRecv", f.ncclRecv),
      Bind("ncclGroupStart", f.ncclGroupStart), Bind("ncclGroupEnd", f.ncclGroupEnd)});
  if (missing.empty()) {
    // Optional: left null by an older NCCL (scale factors on GPU tensors then need a newer one).
    Resolve(library, {Bind("ncclRedOpCreatePreMulSum", f.ncclRedOpCreatePreMulSum)});
    Resolve(library, {Bind("ncclRedOpDestroy", f.ncclRedOpDestroy)});
  }
  int version = 0;
  if (missing.empty() && (f.ncclGetVersion(&version) != kNcclSuccess || version < kOldestNcclVersion)) {
    status.nccl_reason = path + " is NCCL " + NcclVersionText(version) + "; hvdlite needs " +
                         NcclVersionText(kOldestNcclVersion) + " or newer";
  } else if (!missing.empty()) {
    status.nccl_reason = path + " lacks " + missing + ": not an NCCL library, or an NCCL older than 2.4";
  }
  if (!status.nccl_reason.empty()) {
    nccl_functions = NcclFunctions{};
    dlclose(library);
    return;
  }
  status.nccl_loaded = true;
  status.nccl_version = version;
  status.nccl_path = path;
}

}  // namespace

std::string NcclVersionText(int code) {
  // From 2.9 on the code is major*10000 + minor*100 + patch; before, major*1000 + minor*100 + patch.
  int major = code >= 20900 ? code / 10000 : code / 1000;
  int minor = code >= 20900 ? code / 100 % 100 : code / 100 % 10;
  int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

const LoadStatus &LoadGpuLibraries(const NcclSearch &search) {
  std::lock_guard<std::mutex> lock(load_mutex);
  if (!loaded) {
    LoadStatus status;
    LoadDriver(status);
    LoadNccl(search, status);
    loaded = std::move(status);
  }
  return *loaded;
}

bool GpuCollectivesAvailable(std::string *why) {
  std::lock_guard<std::mutex> lock(load_mutex);
  if (!loaded) {
    *why = "the GPU libraries were not loaded (hvdlite.gpu_status() loads them)";
  } else if (!loaded->driver_loaded || loaded->device_count == 0) {
    *why = loaded->driver_reason;
  } else if (!loaded->nccl_loaded) {
    *why = loaded->nccl_reason;
  } else {
    return true;
  }
  return false;
}

int LoadedNcclVersion() {
  std::lock_guard<std::mutex> lock(load_mutex);
  return loaded ? loaded->nccl_version : 0;
}

std::string CudaErrorText(CUresult result) {
  const char *text = nullptr;
  if (driver_functions.cuGetErrorString && driver_functions.cuGetErrorString(result, &text) == kCudaSuccess && text)
    return std::string(text) + " (" + std::to_string(result) + ")";
  return "CUDA error " + std::to_string(result);
}

std::string NcclErrorText(ncclResult_t result) {
  const char *text = nccl_functions.ncclGetErrorString ? nccl_functions.ncclGetErrorString(result) : nullptr;
  return std::string(text ? text : "NCCL error") + " (" + std::to_string(result) + ")";
}

const CudaDriverFunctions &Driver() { return driver_functions; }
const NcclFunctions &Nccl() { return nccl_functions; }

}  // namespace hvdlite::gpu
