// The extension's one entry point: torch.distributed's backend creator (hvdlite/torch/distributed/__init__.py)
// makes each group's backend through it, once hvdlite is started and the group's process set exists.
#include <torch/extension.h>

#include "backend.h"
#include "placement.h"

namespace {

c10::intrusive_ptr<c10d::Backend> Create(int rank, int size, int32_t process_set_id, std::vector<int64_t> global_ranks,
                                         std::string group_name, double timeout_seconds,
                                         std::string gpu_unavailable) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  return c10::make_intrusive<hvdlite_c10d::HvdliteBackend>(rank, size, process_set_id, std::move(global_ranks),
                                                           std::move(group_name), timeout, std::move(gpu_unavailable));
}

void UseGpuDoubles(uintptr_t stream) { hvdlite_c10d::UseGpuDoubles(reinterpret_cast<void *>(stream)); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("create", &Create, "hvdlite's c10d backend for one process group", py::arg("rank"), py::arg("size"),
        py::arg("process_set_id"), py::arg("global_ranks"), py::arg("group_name"), py::arg("timeout_seconds"),
        py::arg("gpu_unavailable"), py::call_guard<py::gil_scoped_release>());
  m.def("use_gpu_doubles", &UseGpuDoubles,
        "TEST DOUBLE switch for tests/gpu (host memory as device memory): CPU tensors take the GPU path on the "
        "given stream (a CUstream of the CUDA double; 0 turns it off)", py::arg("stream"));
}
