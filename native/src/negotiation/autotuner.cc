#include "negotiation/autotuner.h"

#include <algorithm>

namespace hvdlite {
namespace {

constexpr int64_t kMiB = 1 << 20;

template <typename T>
void AddCandidate(std::vector<T> *candidates, T value) {
  if (std::find(candidates->begin(), candidates->end(), value) == candidates->end()) candidates->push_back(value);
  std::sort(candidates->begin(), candidates->end());
}

}  // namespace

Autotuner::Autotuner(int64_t fusion_threshold_bytes, double cycle_time_ms, const std::string &log_path,
                     int rounds_per_sample, int warmup_samples)
    : fusion_candidates_{1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB},
      cycle_candidates_{0.5, 1.0, 2.5, 5.0},
      fusion_(fusion_threshold_bytes),
      cycle_ms_(cycle_time_ms),
      rounds_per_sample_(std::max(1, rounds_per_sample)),
      warmup_left_(std::max(0, warmup_samples)),
      best_fusion_(fusion_threshold_bytes),
      best_cycle_ms_(cycle_time_ms) {
  AddCandidate(&fusion_candidates_, fusion_threshold_bytes);
  AddCandidate(&cycle_candidates_, cycle_time_ms);
  if (!log_path.empty()) {
    log_ = std::fopen(log_path.c_str(), "w");
    if (log_) {
      std::fprintf(log_, "sample,phase,fusion_threshold_bytes,cycle_time_ms,rounds,bytes,seconds,bytes_per_second\n");
      std::fflush(log_);
    }
  }
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

void Autotuner::RecordRound(int64_t bytes, Clock::time_point now) {
  if (phase_ == Phase::kSettled || bytes <= 0) return;
  if (!window_open_) {
    // The window opens with its first work round; that round's bytes were moved under the old setting
    // (the new one is applied from the round after the one that carried it), so they do not count.
    window_open_ = true;
    window_start_ = now;
    window_rounds_ = 0;
    window_bytes_ = 0;
    return;
  }
  ++window_rounds_;
  window_bytes_ += bytes;
  if (window_rounds_ >= rounds_per_sample_) {
    window_open_ = false;
    FinishSample(std::chrono::duration<double>(now - window_start_).count());
  }
}

void Autotuner::Log(const char *phase, double seconds, double score) {
  if (!log_) return;
  std::fprintf(log_, "%d,%s,%lld,%g,%d,%lld,%.6f,%.1f\n", sample_, phase, static_cast<long long>(fusion_), cycle_ms_,
               window_rounds_, static_cast<long long>(window_bytes_), seconds, score);
  std::fflush(log_);
}

void Autotuner::FinishSample(double seconds) {
  ++sample_;
  const double score = seconds > 0 ? static_cast<double>(window_bytes_) / seconds : 0;
  switch (phase_) {
    case Phase::kWarmup:
      Log("warmup", seconds, score);
      if (--warmup_left_ > 0) return;
      phase_ = Phase::kFusion;
      candidate_ = 0;
      fusion_ = fusion_candidates_[0];
      return;
    case Phase::kFusion:
      Log("fusion", seconds, score);
      if (score > best_score_) { best_score_ = score; best_fusion_ = fusion_; }
      if (++candidate_ < fusion_candidates_.size()) {
        fusion_ = fusion_candidates_[candidate_];
        return;
      }
      // Cycle times next, with the best threshold; the best score so far stands as the one to beat.
      fusion_ = best_fusion_;
      phase_ = Phase::kCycle;
      candidate_ = 0;
      cycle_ms_ = cycle_candidates_[0];
      return;
    case Phase::kCycle:
      Log("cycle", seconds, score);
      if (score > best_score_) { best_score_ = score; best_cycle_ms_ = cycle_ms_; }
      if (++candidate_ < cycle_candidates_.size()) {
        cycle_ms_ = cycle_candidates_[candidate_];
        return;
      }
      cycle_ms_ = best_cycle_ms_;
      phase_ = Phase::kSettled;
      window_rounds_ = 0;
      window_bytes_ = 0;
      Log("settled", 0, best_score_);
      return;
    case Phase::kSettled:
      return;
  }
}

}  // namespace hvdlite
