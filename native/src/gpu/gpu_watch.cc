#include "gpu/gpu_watch.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "gpu/gpu_libraries.h"

namespace hvdlite::gpu {

void GpuWatch::Launched(ncclComm_t comm, std::shared_ptr<DoneEvent> done, const std::string &what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { Watch(); });
  Watched *w = nullptr;
  for (Watched &candidate : watched_) {
    if (candidate.comm == comm) w = &candidate;
  }
  if (!w) w = &watched_.emplace_back(Watched{comm, nullptr, {}, "", nullptr, {}, ""});
  w->newest = std::move(done);
  w->newest_at = Clock::now();
  w->newest_what = what;
}

void GpuWatch::Forget(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (watched_[i].comm == comm) {
      watched_.erase(watched_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

void GpuWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    watched_.clear();
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuWatch::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    for (Watched &w : watched_) {
      ncclResult_t async = kNcclSuccess;
      ncclResult_t asked = Nccl().ncclCommGetAsyncError(w.comm, &async);
      if (asked != kNcclSuccess) Fail(w, "ncclCommGetAsyncError: " + NcclErrorText(asked));
      if (async != kNcclSuccess && async != kNcclInProgress) Fail(w, NcclErrorText(async));
      if (!w.waiting && w.newest) {
        w.waiting = std::move(w.newest);
        w.waiting_at = w.newest_at;
        w.waiting_what = std::move(w.newest_what);
      }
      if (!w.waiting) continue;
      std::string why;
      if (!UseDevice(w.waiting->device, &why)) Fail(w, why);
      CUresult state = Driver().cuEventQuery(w.waiting->event);
      if (state == kCudaSuccess) {
        w.waiting.reset();
      } else if (state != kCudaNotReady) {
        Fail(w, "the GPU reported " + CudaErrorText(state));
      } else if (timeout_seconds_ > 0 &&
                 std::chrono::duration<double>(Clock::now() - w.waiting_at).count() > timeout_seconds_) {
        Fail(w, "no GPU collective of this communicator finished for " + std::to_string(timeout_seconds_) +
                    " s (HVDLITE_PROGRESS_TIMEOUT_SECONDS): a peer is gone or stuck");
      }
    }
  }
}

void GpuWatch::Fail(const Watched &w, const std::string &why) {
  std::fprintf(stderr,
               "[hvdlite rank %d] NCCL collective failed (%s): %s; aborting the NCCL communicator and ending "
               "this process, so that the job ends\n",
               rank_, (w.waiting ? w.waiting_what : w.newest_what).c_str(), why.c_str());
  std::fflush(stderr);
  Nccl().ncclCommAbort(w.comm);
  _exit(1);
}

}  // namespace hvdlite::gpu
