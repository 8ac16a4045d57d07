// Online tuning of the fusion threshold and the cycle time (HVDLITE_AUTOTUNE=1), run by the coordinator
// (rank 0 of the job) only. It scores each setting by the bytes all-reduced per second of wall time over a
// window of rounds that carried work (a training step's gradients go through a few such rounds, so a
// faster step shows as more bytes per second), tries the candidates one coordinate at a time (fusion
// threshold first, then cycle time, each with the best value found so far for the other), and settles on
// the best. Every sample is a line of the CSV log.
//
// The tuned values reach the other ranks inside the round's bit-vector all-reduce (RoundInput's
// coordinator words), so every rank switches in the same round: fusion plans, made independently on
// every rank from the same ready list, never disagree.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hvdlite {

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  // Windows of rounds_per_sample work rounds; warmup_samples are scored but not used.
  Autotuner(int64_t fusion_threshold_bytes, double cycle_time_ms, const std::string &log_path,
            int rounds_per_sample = 20, int warmup_samples = 2);
  ~Autotuner();

  // A round finished having all-reduced bytes (0: a round without work, which does not count).
  void RecordRound(int64_t bytes, Clock::time_point now);

  int64_t fusion_threshold_bytes() const { return fusion_; }
  double cycle_time_ms() const { return cycle_ms_; }
  bool settled() const { return phase_ == Phase::kSettled; }

 private:
  enum class Phase { kWarmup, kFusion, kCycle, kSettled };
  void FinishSample(double seconds);
  void Log(const char *phase, double seconds, double score);

  std::vector<int64_t> fusion_candidates_;
  std::vector<double> cycle_candidates_;
  int64_t fusion_;
  double cycle_ms_;
  int rounds_per_sample_;
  int warmup_left_;
  Phase phase_ = Phase::kWarmup;
  size_t candidate_ = 0;
  double best_score_ = -1;
  int64_t best_fusion_;
  double best_cycle_ms_;
  // The open window.
  bool window_open_ = false;
  Clock::time_point window_start_;
  int window_rounds_ = 0;
  int64_t window_bytes_ = 0;
  int sample_ = 0;
  std::FILE *log_ = nullptr;
};

}  // namespace hvdlite
