// When the background thread starts its next round. Async rounds start on boundaries of the cycle time on the
// system clock: the same instants on every rank, so ranks enter each negotiation together instead of one
// spinning in MPI while another still computes. While a caller waits, rounds run back to back, but only until
// kMaxIdleRounds rounds in a row found nothing to do (a peer is still computing: busy-polling MPI for it would
// take a core from its computation). A rank that holds async work (HVDLITE_OVERLAP off) keeps only a heartbeat.
#pragma once
#include <atomic>
#include <chrono>

#include "base/types.h"

namespace hvdlite {

class RoundClock {
 public:
  // Rounds of a rank that holds async work and has no caller waiting (stall reports, polling callers).
  static constexpr auto kHoldHeartbeat = std::chrono::milliseconds(100);
  static constexpr int kMaxIdleRounds = 2;

  void Start(double cycle_time_ms, bool hold_async) {
    set_cycle(cycle_time_ms);
    hold_async_ = hold_async;
    idle_rounds_ = 0;
  }
  bool hold_async() const { return hold_async_; }
  // The cycle time (autotune changes it in a round that every rank runs).
  void set_cycle(double ms) {
    const auto ticks =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms)).count();
    cycle_ticks_.store(ticks, std::memory_order_relaxed);
  }
  // How long to wait before the next round when nobody hurries it.
  Clock::duration UntilNextRound() const;
  // Whether rounds may keep going back to back for a waiting caller with work in flight.
  bool keep_going() const { return hold_async_ || idle_rounds_ < kMaxIdleRounds; }
  // After each pass of the thread's loop: did it take new work or finish anything?
  void NoteRound(bool did_something) { idle_rounds_ = did_something ? 0 : idle_rounds_ + 1; }

 private:
  std::atomic<Clock::rep> cycle_ticks_{0};
  bool hold_async_ = false;
  int idle_rounds_ = 0;  // rounds in a row that took no new work and finished nothing
};

}  // namespace hvdlite
