#include "mpi_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace hvdlite {
namespace {

constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kFirstSleep = std::chrono::microseconds(10);
constexpr auto kLongestSleep = std::chrono::microseconds(200);

}  // namespace

void WaitPolitely(MPI_Request *request) {
  int done = 0;
  MPI_Test(request, &done, MPI_STATUS_IGNORE);
  if (done) return;
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  while (std::chrono::steady_clock::now() < spin_until) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
  }
  auto sleep = kFirstSleep;
  while (true) {
    std::this_thread::sleep_for(sleep);
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    sleep = std::min<std::chrono::microseconds>(sleep * 2, kLongestSleep);
  }
}

}  // namespace hvdlite
