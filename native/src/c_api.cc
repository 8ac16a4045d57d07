// The C ABI (include/hvdlite.h): converts C structs to the core's types and back. Nothing else.
#include <algorithm>
#include <cstring>
#include <string>

#include "core.h"
#include "gpu/gpu_libraries.h"
#include "hvdlite.h"
#include "base/logging.h"
#include "base/collective_info.h"

using namespace hvdlite;

namespace {

void CopyError(const std::string &message, char *buffer, int length) {
  if (!buffer || length <= 0) return;
  size_t n = std::min(message.size(), static_cast<size_t>(length - 1));
  std::memcpy(buffer, message.data(), n);
  buffer[n] = '\0';
}

std::string OrEmpty(const char *s) { return s ? s : ""; }

bool ToEntry(const hvdlite_request &r, Entry *e, std::string *error) {
  if (!r.name || !*r.name) { *error = "a request needs a non-empty name"; return false; }
  if (!IsValidDataType(r.dtype)) {
    *error = "Unsupported dtype code " + std::to_string(r.dtype) + " for tensor '" + std::string(r.name) + "'";
    return false;
  }
  if (!hvdlite_collective_describe(r.collective) || r.ndim < 0 || (r.ndim > 0 && !r.shape)) {
    *error = "Malformed request for tensor '" + std::string(r.name) + "'";
    return false;
  }
  e->Recycle();  // the buffers of its last request are reused
  e->request.name = r.name;
  e->request.collective = static_cast<Collective>(r.collective);
  e->request.dtype = static_cast<DataType>(r.dtype);
  e->request.op = static_cast<ReduceOp>(r.reduce_op);
  e->request.prescale = r.prescale_factor;
  e->request.postscale = r.postscale_factor;
  e->request.root_rank = r.root_rank;
  e->request.shape.assign(r.shape, r.shape + r.ndim);
  e->request.gpu = r.gpu != 0;
  e->process_set_id = r.process_set_id;
  e->input = r.input;
  e->output = r.output;
  if (r.collective == HVDLITE_ALLTOALL && r.splits) {
    int32_t n = 0;
    std::vector<int32_t> published;
    n = Core::Get().ProcessSetRanks(r.process_set_id, &published);
    if (n > 0) e->splits.assign(r.splits, r.splits + n);
  }
  return true;
}

}  // namespace

extern "C" {

int hvdlite_init(const hvdlite_config *c, const void *comm_address, char *error, int error_len) {
  Settings s;
  s.fusion_threshold_bytes = c->fusion_threshold_bytes;
  s.cycle_time_ms = c->cycle_time_ms > 0 ? c->cycle_time_ms : 1.0;
  s.cache_capacity = std::max(0, c->cache_capacity);
  s.negotiation.stall_check_seconds = c->stall_check_seconds;
  s.negotiation.stall_shutdown_seconds = c->stall_shutdown_seconds;
  s.negotiation.deadlock_seconds = c->deadlock_seconds;
  s.progress_timeout_seconds = c->progress_timeout_seconds;
  s.negotiation.eager_max_bytes = c->eager_max_bytes;
  s.overlap = c->overlap;
  s.algorithms.algorithm = c->allreduce_algorithm;
  s.algorithms.ring_segment_bytes = c->ring_segment_bytes;
  s.algorithms.auto_ring_min_bytes = c->auto_ring_min_bytes;
  s.algorithms.auto_cross_host_ring_min_bytes = c->auto_cross_host_ring_min_bytes;
  s.log_level = c->log_level;
  s.timeline_path = OrEmpty(c->timeline_path);
  s.timeline_mark_cycles = c->timeline_mark_cycles != 0;
  s.autotune = c->autotune != 0;
  s.autotune_log = OrEmpty(c->autotune_log);
  s.autotune_warmup_samples = std::max(0, c->autotune_warmup_samples);
  s.autotune_steps_per_sample = std::max(1, c->autotune_steps_per_sample);
  s.cross_host_transport = c->cross_host_transport;
  s.carried_rounds = c->carried_rounds;
  s.network_interfaces = OrEmpty(c->network_interfaces);
  s.round_doubling_min_hosts = std::max(2, c->round_doubling_min_hosts);
  std::string message;
  if (!Core::Get().Init(s, static_cast<const MPI_Comm *>(comm_address), &message)) {
    CopyError(message, error, error_len);
    return 1;
  }
  return 0;
}

void hvdlite_shutdown(void) { Core::Get().Shutdown(); }
int hvdlite_is_initialized(void) { return Core::Get().initialized() ? 1 : 0; }
int hvdlite_rank(void) { return Core::Get().topology().rank; }
int hvdlite_size(void) { return Core::Get().topology().size; }
int hvdlite_local_rank(void) { return Core::Get().topology().local_rank; }
int hvdlite_local_size(void) { return Core::Get().topology().local_size; }
int hvdlite_cross_rank(void) { return Core::Get().topology().cross_rank; }
int hvdlite_cross_size(void) { return Core::Get().topology().cross_size; }
int hvdlite_mpi_threads_supported(void) { return Core::Get().topology().threads_supported ? 1 : 0; }

const hvdlite_collective_info *hvdlite_collective_describe(int32_t collective) {
  return DescribeCollective(static_cast<Collective>(collective));
}

int64_t hvdlite_output_first_dim(int32_t collective, int64_t first_dim, int32_t set_size, int32_t set_rank) {
  return OutputFirstDim(static_cast<Collective>(collective), first_dim, set_size, set_rank);
}

namespace {
hvdlite_handle AddProcessSet(Collective change, const int32_t *ranks, int32_t nranks, char *error, int error_len) {
  std::vector<int32_t> sorted(ranks, ranks + std::max(0, nranks));
  std::sort(sorted.begin(), sorted.end());
  int size = Core::Get().topology().size;
  std::string message;
  if (sorted.empty() || sorted.front() < 0 || sorted.back() >= size ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    CopyError("process set ranks must be distinct ranks in [0, " + std::to_string(size) + ")", error, error_len);
    return -1;
  }
  if (change == Collective::kAddProcessSetOfMembers &&
      !std::binary_search(sorted.begin(), sorted.end(), Core::Get().topology().rank)) {
    CopyError("only the members of a process set may ask for it this way; rank " +
                  std::to_string(Core::Get().topology().rank) + " is not one of them", error, error_len);
    return -1;
  }
  hvdlite_handle h = Core::Get().EnqueueProcessSetChange(change, sorted, &message);
  if (h < 0) CopyError(message, error, error_len);
  return h;
}
}  // namespace

hvdlite_handle hvdlite_add_process_set(const int32_t *ranks, int32_t nranks, char *error, int error_len) {
  return AddProcessSet(Collective::kAddProcessSet, ranks, nranks, error, error_len);
}

hvdlite_handle hvdlite_add_process_set_of_members(const int32_t *ranks, int32_t nranks, char *error, int error_len) {
  return AddProcessSet(Collective::kAddProcessSetOfMembers, ranks, nranks, error, error_len);
}

hvdlite_handle hvdlite_remove_process_set(int32_t process_set_id, char *error, int error_len) {
  std::string message;
  hvdlite_handle h = Core::Get().EnqueueProcessSetChange(Collective::kRemoveProcessSet, {process_set_id}, &message);
  if (h < 0) CopyError(message, error, error_len);
  return h;
}

int hvdlite_process_set_rank(int32_t process_set_id) { return Core::Get().ProcessSetRank(process_set_id); }

namespace {

int EnqueueGroup(const hvdlite_request *requests, int32_t count, hvdlite_handle *handles, char *error, int error_len,
                 bool wait) {
  // Reused by each calling thread, names and shapes included: the core copies what it is given by value.
  thread_local std::vector<Entry> entries;
  thread_local std::vector<Submission> submissions;
  const size_t n = static_cast<size_t>(std::max(0, count));
  if (entries.size() < n) entries.resize(n);
  if (submissions.size() < n) submissions.resize(n);
  std::string message;
  Core &core = Core::Get();
  // Ready events not taken by the core (a refused group) go back to the pool.
  auto release_events = [&](size_t upto) {
    for (size_t i = 0; i < upto; ++i) {
      gpu::EventPool::Get().Release(submissions[i].gpu_device, submissions[i].gpu_ready);
      submissions[i].gpu_ready = nullptr;
    }
  };
  auto submit = [&](bool by_value) {
    for (int32_t i = 0; i < count; ++i) {
      const hvdlite_request &r = requests[i];
      Submission &s = submissions[i];
      s = Submission{};
      if (r.prepared > 0 && !by_value) {
        s.prepared = r.prepared;
        s.input = r.input;
        s.output = r.output;
      } else if (ToEntry(r, &entries[i], &message)) {
        s.entry = &entries[i];
      } else {
        release_events(i);
        return -1;
      }
      if (r.gpu) {
        s.gpu_device = r.gpu_device;
        s.gpu_ready = gpu::RecordReadyEvent(r.gpu_device, r.gpu_stream, &message);
        if (!s.gpu_ready) {
          message = "GPU tensor '" + OrEmpty(r.name) + "': " + message;
          release_events(i);
          return -1;
        }
      }
    }
    int code = wait ? core.EnqueueAndWait(submissions.data(), n, handles, &message)
                    : core.Enqueue(submissions.data(), n, handles, &message);
    if (code < 0) release_events(n);
    return code;
  };
  // Prepared requests go by token; a token the core does not know (it was shut down and started again since)
  // sends the whole group by value.
  int code = submit(/*by_value=*/false);
  if (code == Core::kUnknownPrepared) code = submit(/*by_value=*/true);
  if (code < 0) CopyError(message, error, error_len);
  return code;
}

}  // namespace

int hvdlite_enqueue_group(const hvdlite_request *requests, int32_t count, hvdlite_handle *handles, char *error,
                          int error_len) {
  return EnqueueGroup(requests, count, handles, error, error_len, /*wait=*/false);
}

int hvdlite_enqueue_and_wait(const hvdlite_request *request, hvdlite_handle *handle, char *error, int error_len) {
  return EnqueueGroup(request, 1, handle, error, error_len, /*wait=*/true);
}

hvdlite_prepared hvdlite_prepare(const hvdlite_request *request, char *error, int error_len) {
  Entry e;
  std::string message;
  int64_t token = ToEntry(*request, &e, &message) ? Core::Get().Prepare(e, &message) : -1;
  if (token < 0) CopyError(message, error, error_len);
  return token;
}

void hvdlite_unprepare(hvdlite_prepared prepared) { Core::Get().Unprepare(prepared); }

hvdlite_handle hvdlite_enqueue(const hvdlite_request *request, char *error, int error_len) {
  hvdlite_handle handle = 0;
  int code = hvdlite_enqueue_group(request, 1, &handle, error, error_len);
  return code == 0 ? handle : code;
}

int hvdlite_poll(hvdlite_handle handle) { return Core::Get().handles().Poll(handle); }
int hvdlite_all_done(const hvdlite_handle *handles, int32_t count) {
  return Core::Get().handles().AllDone(handles, std::max(0, count)) ? 1 : 0;
}
int hvdlite_wait(hvdlite_handle handle) { return Core::Get().Wait(handle); }
int hvdlite_wait_all_done(const hvdlite_handle *handles, int32_t count) {
  return Core::Get().handles().ResultIfDone(handles, std::max(0, count));
}
int hvdlite_wait_all(const hvdlite_handle *handles, int32_t count) {
  return Core::Get().WaitAll(handles, std::max(0, count));
}

namespace {

// The wait's deadline: timeout_seconds from now, or none for a negative one (or NaN).
std::chrono::steady_clock::time_point DeadlineAfter(double timeout_seconds) {
  if (!(timeout_seconds >= 0)) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(std::min(timeout_seconds, 1e9)));
}

}  // namespace

int hvdlite_wait_all_for(const hvdlite_handle *handles, int32_t count, double timeout_seconds) {
  return Core::Get().WaitAll(handles, std::max(0, count), DeadlineAfter(timeout_seconds));
}

int hvdlite_wait_any_for(const hvdlite_handle *handles, int32_t count, double timeout_seconds) {
  return Core::Get().WaitAny(handles, std::max(0, count), DeadlineAfter(timeout_seconds));
}

int hvdlite_handle_error(hvdlite_handle handle, char *buffer, int buffer_len) {
  int length = 0;
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    CopyError(s.error, buffer, buffer_len);
    length = static_cast<int>(s.error.size());
  });
  return length;
}

int64_t hvdlite_handle_result(hvdlite_handle handle) {
  int64_t result = 0;
  Core::Get().handles().Read(handle, [&](const HandleState &s) { result = s.result; });
  return result;
}

int hvdlite_handle_output_ndim(hvdlite_handle handle) {
  int ndim = -1;
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    ndim = s.results ? static_cast<int>(s.results->output_shape.size()) : 0;
  });
  return ndim;
}

int hvdlite_handle_output_shape(hvdlite_handle handle, int64_t *shape, int32_t capacity) {
  int ndim = -1;
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    if (!s.results) return void(ndim = 0);
    ndim = static_cast<int>(s.results->output_shape.size());
    for (int i = 0; i < ndim && i < capacity; ++i) shape[i] = s.results->output_shape[i];
  });
  return ndim;
}

const void *hvdlite_handle_output_data(hvdlite_handle handle, int64_t *nbytes) {
  const void *data = nullptr;
  *nbytes = 0;
  // The vector is not touched again until release, so the pointer stays valid after the lock.
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    if (!s.results) return;
    data = s.results->output.data();
    *nbytes = static_cast<int64_t>(s.results->output.size());
  });
  return data;
}

int hvdlite_handle_received_splits(hvdlite_handle handle, int32_t *splits, int32_t capacity) {
  int n = -1;
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    if (!s.results) return void(n = 0);
    n = static_cast<int>(s.results->received_splits.size());
    for (int i = 0; i < n && i < capacity; ++i) splits[i] = s.results->received_splits[i];
  });
  return n;
}

void hvdlite_release(hvdlite_handle handle) { Core::Get().handles().Release(handle); }
int hvdlite_release_if_succeeded(hvdlite_handle handle) { return Core::Get().handles().ReleaseIfSucceeded(handle); }
void hvdlite_release_all(const hvdlite_handle *handles, int32_t count) {
  Core::Get().handles().ReleaseAll(handles, std::max(0, count));
}

int hvdlite_start_timeline(const char *path, int mark_cycles) {
  return Core::Get().RequestTimeline(OrEmpty(path), mark_cycles != 0) ? 0 : 1;
}

int hvdlite_stop_timeline(void) { return Core::Get().RequestTimeline("", false) ? 0 : 1; }

int hvdlite_last_warning(char *buffer, int buffer_len) {
  std::string w = LastWarning();
  CopyError(w, buffer, buffer_len);
  return static_cast<int>(w.size());
}

namespace {

// The done event of a finished GPU request's handle (null: none, or not a GPU request).
std::shared_ptr<gpu::DoneEvent> DoneEventOf(hvdlite_handle handle) {
  std::shared_ptr<gpu::DoneEvent> done;
  Core::Get().handles().Read(handle, [&](const HandleState &s) {
    if (s.results) done = s.results->gpu_done;
  });
  return done;
}

}  // namespace

int hvdlite_gpu_stream_wait(hvdlite_handle handle, void *stream, char *error, int error_len) {
  std::shared_ptr<gpu::DoneEvent> done = DoneEventOf(handle);
  if (!done) return 0;
  std::string message;
  if (gpu::UseDevice(done->device, &message)) {
    gpu::CUresult result = gpu::Driver().cuStreamWaitEvent(static_cast<gpu::CUstream>(stream), done->event, 0);
    if (result == gpu::kCudaSuccess) return 0;
    message = "cuStreamWaitEvent: " + gpu::CudaErrorText(result);
  }
  CopyError(message, error, error_len);
  return -1;
}

int hvdlite_gpu_host_wait(hvdlite_handle handle, char *error, int error_len) {
  std::shared_ptr<gpu::DoneEvent> done = DoneEventOf(handle);
  if (!done) return 0;
  std::string message;
  if (gpu::UseDevice(done->device, &message)) {
    gpu::CUresult result = gpu::Driver().cuEventSynchronize(done->event);
    if (result == gpu::kCudaSuccess) return 0;
    message = "cuEventSynchronize: " + gpu::CudaErrorText(result);
  }
  CopyError(message, error, error_len);
  return -1;
}

void hvdlite_gpu_load(const char *nccl_library, const char *nccl_search_dirs, hvdlite_gpu_status *status) {
  gpu::NcclSearch search;
  search.explicit_path = OrEmpty(nccl_library);
  std::string folders = OrEmpty(nccl_search_dirs);
  for (size_t start = 0; start <= folders.size();) {
    size_t end = std::min(folders.find(':', start), folders.size());
    if (end > start) search.folders.push_back(folders.substr(start, end - start));
    start = end + 1;
  }
  const gpu::LoadStatus &loaded = gpu::LoadGpuLibraries(search);
  status->driver_loaded = loaded.driver_loaded;
  status->device_count = loaded.device_count;
  status->nccl_loaded = loaded.nccl_loaded;
  status->nccl_version = loaded.nccl_version;
  CopyError(loaded.nccl_loaded ? gpu::NcclVersionText(loaded.nccl_version) : "", status->nccl_version_text,
            sizeof(status->nccl_version_text));
  CopyError(loaded.driver_reason, status->driver_reason, sizeof(status->driver_reason));
  CopyError(loaded.nccl_path, status->nccl_path, sizeof(status->nccl_path));
  CopyError(loaded.nccl_reason, status->nccl_reason, sizeof(status->nccl_reason));
}

}  // extern "C"
