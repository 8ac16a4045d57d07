// A c10d Work for collectives run by hvdlite's core, and the thread that completes their futures.
//
// A Work holds the core's handles of its requests, the tensors they read and write (kept alive until the core is
// done with them), and what is left once the handles finish (copying the core's output into the caller's
// tensors). Whoever gets there first finishes it: the thread that waits on it, or the backend's completer
// thread, which goes through the Works in submission order so that their futures complete without anyone
// waiting (DDP's comm hooks chain work onto them). Neither spins: both block in the core's wait.
// A Work of CUDA tensors is done for the host once the core has put its collective on the core's stream: its
// finishing copies, its future's events and wait() are then ordered after it on the GPU (placement.h).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hvdlite.h"
#include "placement.h"

namespace hvdlite_c10d {

class HvdliteWork : public c10d::Work {
 public:
  // Enqueues the next requests once the handles waited on have succeeded (a send whose pair of ranks needs a
  // process set first: handed the finished handles); returns the new handles.
  using Stage = std::function<std::vector<hvdlite_handle>(const std::vector<hvdlite_handle> &)>;
  // Runs once every handle has succeeded, on the finishing thread: copies the core's output into place.
  using Finish = std::function<void(const std::vector<hvdlite_handle> &)>;

  HvdliteWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
              std::chrono::milliseconds default_timeout, Placement placement);
  ~HvdliteWork() override;

  // Set up by the backend before the Work is handed out.
  std::vector<hvdlite_handle> handles;
  bool handles_borrowed = false;  // someone else's handles (waited on, never released by this Work)
  Stage next_stage;
  // A call whose name another Work still holds in the core (call_names.h): that Work finishes before this one's
  // first stage enqueues its requests.
  c10::intrusive_ptr<HvdliteWork> after;
  std::function<void()> on_error;  // runs when the Work fails, before its future does
  Finish finish;
  std::vector<at::Tensor> keep_alive;  // buffers the core reads or writes (contiguous copies, scratch)
  bool unobserved = false;  // nobody holds it (a buffered send's delivery): an error is printed, not dropped
  // A receive from any source: one receive posted from each peer (Works of their own, driven by this one, never on
  // the completer). This Work finishes when the first of them has, with finish_any handed its index (which
  // throws that receive's error, if it failed). sourceRank() is then set (source_rank).
  std::vector<c10::intrusive_ptr<HvdliteWork>> any_of;
  std::function<void(size_t)> finish_any;
  int source_rank = -1;

  // The last reference but weak ones is gone: the record of a periodic name's last call (call_names.h) keeps the
  // object until that name comes back, so the tensors, the future and the closures go now.
  void release_resources() override;

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void synchronize() override {}
  int sourceRank() const override;

  // Blocks in the core until this Work's handles are done, then finishes it (nothing if already finished).
  // Returns false when timeout_seconds (>= 0) passed first.
  bool Drive(double timeout_seconds);
  // Runs the next stage now, its handles being done, unless another thread drives this Work (then that one does).
  void RunStageIfIdle();

 private:
  bool DriveLocked(double timeout_seconds);  // Drive, drive_mutex_ held
  bool DriveAnyOf(double timeout_seconds);   // DriveLocked of a receive from any source
  std::vector<hvdlite_handle> HandlesNow();  // a copy of the handles, read under drive_mutex_
  void RunStage();  // drive_mutex_ held, the handles done: enqueues the next requests (or fails the Work)
  void ReleaseHandles();
  void Complete(std::exception_ptr error);
  // Once the core's collectives are on its stream: orders the finishing work after them (on the Work's stream,
  // current on this thread until guard goes) and runs it.
  void FinishOnGpu(c10::OptionalStreamGuard &guard);

  const std::string what_;  // "allreduce of group 0 (call 12)": for errors
  std::vector<at::Tensor> outputs_;
  const std::chrono::milliseconds default_timeout_;
  const Placement placement_;
  std::optional<c10::Event> done_on_gpu_;  // recorded on the Work's stream once finished: wait() orders after it
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex drive_mutex_;  // one finisher at a time; the base class's mutex_ guards completed_/exception_
};

// Completes the backend's Works in submission order. One thread at a time leads: it drives the next Work; before
// that Work's future runs its callbacks (which may start a collective and wait for its future: PowerSGD's hook
// does), the leader hands the lead to an idle thread, starting one where there is none. So a callback that waits
// never holds up the Works after it; there are as many threads as callbacks that wait at once, plus one.
class Completer {
 public:
  Completer();
  ~Completer();  // finishes what is queued (the core fails it if it is shut down), then joins
  void Add(c10::intrusive_ptr<HvdliteWork> work);
  // Called by the thread that completes a Work, before its future's callbacks: if it leads, it steps down.
  static void BeforeCallbacks();

 private:
  void Loop();
  void StepDown();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<HvdliteWork>> queue_;
  bool stopping_ = false;
  bool led_ = false;  // a thread is driving a Work
  int idle_ = 0;      // threads waiting to lead
  std::vector<std::thread> threads_;
};

}  // namespace hvdlite_c10d
