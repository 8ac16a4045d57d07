#include "work.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace hvdlite_c10d {

namespace {

std::exception_ptr BackendError(const std::string &message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

std::string HandleError(hvdlite_handle handle) {
  char buffer[4096];
  const int length = hvdlite_handle_error(handle, buffer, sizeof(buffer));
  return length > 0 ? std::string(buffer) : std::string("unknown error");
}

c10::intrusive_ptr<c10::ivalue::Future> NewFuture(const Placement &placement) {
  auto type = c10::ListType::create(c10::TensorType::get());
  if (!placement.work_stream) return c10::make_intrusive<c10::ivalue::Future>(type);
  // A CUDA future: its callbacks and waiters are ordered after the events it records on completion.
  return c10::make_intrusive<c10::ivalue::Future>(type, std::vector<c10::Device>{placement.work_stream->device()});
}

// What is left of timeout_seconds since start (never below 0); -1 (no limit) for a negative timeout.
double SecondsLeft(double timeout_seconds, std::chrono::steady_clock::time_point start) {
  if (timeout_seconds < 0) return -1;
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::max(0.0, timeout_seconds - spent);
}

}  // namespace

HvdliteWork::HvdliteWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
                         std::chrono::milliseconds default_timeout, Placement placement)
    : Work(rank, type),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      default_timeout_(default_timeout),
      placement_(std::move(placement)),
      future_(NewFuture(placement_)) {}

HvdliteWork::~HvdliteWork() {
  // Finished Works have released their handles; one never started (its Stage threw) releases what it holds.
  if (!handles.empty() && !handles_borrowed) hvdlite_release_all(handles.data(), static_cast<int32_t>(handles.size()));
}

void HvdliteWork::release_resources() {
  outputs_.clear();
  keep_alive.clear();
  finish = nullptr;
  next_stage = nullptr;
  on_error = nullptr;
  after.reset();
  any_of.clear();
  finish_any = nullptr;
  future_.reset();
}

bool HvdliteWork::Drive(double timeout_seconds) {
  std::lock_guard<std::mutex> driving(drive_mutex_);
  return DriveLocked(timeout_seconds);
}

bool HvdliteWork::DriveLocked(double timeout_seconds) {
  if (!any_of.empty()) return DriveAnyOf(timeout_seconds);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_) return true;
    }
    const double left = SecondsLeft(timeout_seconds, start);
    if (after) {
      // Its outcome is its own (its waiters see it); this Work only needs the name free.
      if (!after->Drive(left)) return false;
      after.reset();
    }
    const int32_t count = static_cast<int32_t>(handles.size());
    const int state = hvdlite_wait_all_for(handles.data(), count, left);
    if (state == -2) return false;
    std::exception_ptr error;
    c10::OptionalStreamGuard on_work_stream;  // kept until the future has completed: its events go on that stream
    if (state == -1) {
      error = BackendError("hvdlite: " + what_ + ": the core no longer knows its requests (was it shut down?)");
    } else if (state > 0) {
      error = BackendError("hvdlite: " + what_ + " failed: " + HandleError(handles[state - 1]));
    } else if (next_stage) {
      RunStage();
      continue;
    } else {
      try {
        if (placement_.gpu) {
          FinishOnGpu(on_work_stream);
        } else if (finish) {
          finish(handles);
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    ReleaseHandles();
    Complete(error);
    return true;
  }
}

int HvdliteWork::sourceRank() const {
  if (source_rank >= 0) return source_rank;
  return Work::sourceRank();  // throws: only a finished receive from any source has one
}

std::vector<hvdlite_handle> HvdliteWork::HandlesNow() {
  std::lock_guard<std::mutex> driving(drive_mutex_);
  return handles;
}

bool HvdliteWork::DriveAnyOf(double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_) return true;
    }
    // The first candidate finished wins (the lowest index where several have: they are in rank order).
    for (size_t i = 0; i < any_of.size(); ++i) {
      if (!any_of[i]->isCompleted()) continue;
      std::exception_ptr error;
      try {
        finish_any(i);  // also when that receive failed: the others are kept posted either way
      } catch (...) {
        error = std::current_exception();
      }
      any_of.clear();
      Complete(error);
      return true;
    }
    // Each candidate is waiting for its message, or for its pair's process set (then its next stage posts the
    // message): wait for the first handle of any of them, then let that candidate take its step.
    std::vector<hvdlite_handle> waiting;
    std::vector<size_t> owner;
    for (size_t i = 0; i < any_of.size(); ++i) {
      for (hvdlite_handle h : any_of[i]->HandlesNow()) {
        waiting.push_back(h);
        owner.push_back(i);
      }
    }
    const double left = SecondsLeft(timeout_seconds, start);
    const int index = hvdlite_wait_any_for(waiting.data(), static_cast<int32_t>(waiting.size()), left);
    if (index == -2) return false;
    if (index >= 0) any_of[owner[index]]->Drive(0);
    // index -1 (no handles left: every candidate has finished): the next pass takes one.
  }
}

void HvdliteWork::FinishOnGpu(c10::OptionalStreamGuard &guard) {
  OrderAfterCore(placement_, handles);
  if (placement_.work_stream) guard.reset_stream(*placement_.work_stream);
  if (finish) finish(handles);
  RecordOnWorkStream(placement_, keep_alive);
  RecordOnWorkStream(placement_, outputs_);
  if (placement_.work_stream) {
    done_on_gpu_.emplace(c10::DeviceType::CUDA);
    done_on_gpu_->record(*placement_.work_stream);
  }
}

void HvdliteWork::RunStageIfIdle() {
  std::unique_lock<std::mutex> driving(drive_mutex_, std::try_to_lock);
  if (driving.owns_lock() && next_stage && !after) RunStage();
}

void HvdliteWork::RunStage() {
  Stage stage = std::move(next_stage);
  next_stage = nullptr;
  std::vector<hvdlite_handle> next;
  std::exception_ptr failed;
  try {
    next = stage(handles);
  } catch (...) {
    failed = std::current_exception();
  }
  ReleaseHandles();
  handles = std::move(next);
  if (failed) Complete(failed);
}

void HvdliteWork::ReleaseHandles() {
  if (!handles_borrowed) hvdlite_release_all(handles.data(), static_cast<int32_t>(handles.size()));
  handles.clear();
  handles_borrowed = false;
}

void HvdliteWork::Complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
  }
  keep_alive.clear();
  finish = nullptr;
  finish_any = nullptr;  // its receives: the ones not taken are posted for the next receives by now
  if (error && on_error) on_error();
  cv_.notify_all();
  if (error && unobserved) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception &e) {
      TORCH_WARN(e.what());
    }
  }
  Completer::BeforeCallbacks();
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool HvdliteWork::wait(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds limit = timeout == ::kNoTimeout ? default_timeout_ : timeout;
  const double seconds = limit.count() > 0 ? limit.count() / 1000.0 : -1;
  // Drive it here where nobody else does (also on a thread that a future's callback runs on); else the thread
  // that drives it tells this one when it is done.
  std::unique_lock<std::mutex> driving(drive_mutex_, std::try_to_lock);
  bool done;
  if (driving.owns_lock()) {
    done = DriveLocked(seconds);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    auto finished = [&] { return completed_; };
    if (seconds < 0) {
      cv_.wait(lock, finished);
      done = true;
    } else {
      done = cv_.wait_for(lock, std::chrono::duration<double>(seconds), finished);
    }
  }
  if (!done) {
    // Worded as gloo's ("Timed out waiting ..."): scripts and torch's own tests match on it.
    C10_THROW_ERROR(DistBackendError, "hvdlite: " + what_ + ": Timed out waiting " +
                                          std::to_string(static_cast<int64_t>(seconds * 1000)) +
                                          " ms for it to finish (the process group's timeout)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  if (done_on_gpu_) {  // the caller's current stream waits for the results; the host does not
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    done_on_gpu_->block(impl.getStream(placement_.work_stream->device()));
  }
  return true;
}

namespace {
thread_local Completer *leading = nullptr;  // the Completer this thread leads, if any
}  // namespace

Completer::Completer() {
  std::lock_guard<std::mutex> lock(mutex_);
  threads_.emplace_back([this] { Loop(); });
}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // Threads start threads (StepDown) under the lock: once every thread seen here has ended, none is added.
  for (size_t i = 0;; ++i) {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (i == threads_.size()) break;
      thread = std::move(threads_[i]);
    }
    thread.join();
  }
}

void Completer::Add(c10::intrusive_ptr<HvdliteWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_all();
}

void Completer::BeforeCallbacks() {
  if (leading) leading->StepDown();
}

void Completer::StepDown() {
  leading = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    led_ = false;
    if (idle_ == 0 && !stopping_) threads_.emplace_back([this] { Loop(); });
  }
  wake_.notify_all();
}

void Completer::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [&] { return (!led_ && !queue_.empty()) || (stopping_ && queue_.empty()); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    led_ = true;
    c10::intrusive_ptr<HvdliteWork> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    leading = this;
    work->Drive(-1);
    if (leading) StepDown();  // finished without callbacks of its own (someone else completed it)
    work.reset();
    lock.lock();
  }
}

}  // namespace hvdlite_c10d
