#include "negotiation/round_clock.h"

namespace hvdlite {

Clock::duration RoundClock::UntilNextRound() const {
  const Clock::duration every = hold_async_ ? std::chrono::duration_cast<Clock::duration>(kHoldHeartbeat)
                                            : Clock::duration(cycle_ticks_.load(std::memory_order_relaxed));
  // The system clock, not the steady one: its readings agree across processes (and, NTP-synchronised, across
  // hosts). Only the phase is taken from it; the wait itself runs on the steady clock.
  const auto period = std::chrono::duration_cast<std::chrono::system_clock::duration>(every);
  if (period.count() <= 0) return Clock::duration::zero();
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<Clock::duration>(period - since_epoch % period);
}

}  // namespace hvdlite
