#include "progress_watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace hvdlite {

ProgressWatchdog &ProgressWatchdog::Get() {
  // Never destroyed: a process that exits without shutdown must not destroy a running thread's object.
  static ProgressWatchdog *watchdog = new ProgressWatchdog();
  return *watchdog;
}

namespace {

// hvdliterun on this host (HVDLITE_LAUNCHER=host:pid:start time): mpiexec would wait forever for the proxy of an
// unreachable host, so the launcher ends the job itself when told. The start time guards against a reused pid.
void TellTheLauncher() {
  const char *launcher = std::getenv("HVDLITE_LAUNCHER");
  char host[256] = {0};
  if (!launcher || gethostname(host, sizeof host - 1) != 0) return;
  std::string text(launcher);
  const size_t first = text.find(':'), second = text.rfind(':');
  if (first == std::string::npos || first == second || text.substr(0, first) != host) return;
  const std::string pid = text.substr(first + 1, second - first - 1), start_time = text.substr(second + 1);
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return;
  std::istringstream fields(line.substr(line.rfind(')') + 1));
  std::string field;
  for (int i = 0; i < 20 && fields >> field; ++i) {
  }
  if (field == start_time) kill(static_cast<pid_t>(std::atoi(pid.c_str())), SIGUSR1);
}

}  // namespace

int64_t ProgressWatchdog::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ProgressWatchdog::Start(double timeout_seconds, int rank) {
  Stop();
  if (timeout_seconds <= 0) return;
  timeout_ns_ = static_cast<int64_t>(timeout_seconds * 1e9);
  rank_ = rank;
  last_progress_ns_.store(0);
  stopping_ = false;
  enabled_.store(true);
  thread_ = std::thread(&ProgressWatchdog::Watch, this);
}

void ProgressWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  enabled_.store(false);
}

void ProgressWatchdog::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; })) {
    const int64_t since = last_progress_ns_.load(std::memory_order_relaxed);
    if (since == 0 || NowNs() - since < timeout_ns_) continue;
    // The background thread is stuck inside MPI: nothing else in this process can end the job. stderr directly
    // (the log's lock may be held by nobody, but this must not wait on anything).
    std::fprintf(stderr,
                 "[hvdlite rank %d] ERROR: no progress for %.0f s in %s: a peer is unreachable (its host down or "
                 "cut off from the network); ending this process so that the launcher ends the job "
                 "(HVDLITE_PROGRESS_TIMEOUT_SECONDS sets the limit, 0 turns it off)\n",
                 rank_, static_cast<double>(NowNs() - since) / 1e9, what_.load(std::memory_order_relaxed));
    std::fflush(stderr);
    TellTheLauncher();
    _exit(1);
  }
}

}  // namespace hvdlite
