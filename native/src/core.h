// The core: owns the background thread, the queue that feeds it, the process sets and the handles.
// Caller threads only enqueue and read handles; the background thread alone calls MPI.
#pragma once
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "negotiation/autotuner.h"
#include "negotiation/eager_allreduce.h"
#include "collective_executor.h"
#include "negotiation/fusion_planner.h"
#include "handle_table.h"
#include "negotiation/negotiation.h"
#include "process_set_table.h"
#include "negotiation/quiet_wake.h"
#include "request_registry.h"
#include "negotiation/round_across_hosts.h"
#include "negotiation/round_clock.h"
#include "base/timeline_control.h"
#include "transport/ring_sockets.h"

namespace hvdlite {

// hvdlite_config with its strings owned.
struct Settings {
  int64_t fusion_threshold_bytes = 64 << 20;
  double cycle_time_ms = 1.0;
  int32_t cache_capacity = 1024;
  NegotiationSettings negotiation;
  AlgorithmSettings algorithms;
  int32_t log_level = 3;
  double progress_timeout_seconds = 120;  // progress_watchdog.h
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  bool autotune = false;
  std::string autotune_log;
  int32_t autotune_warmup_samples = 2;
  int32_t autotune_steps_per_sample = 20;
  int32_t overlap = HVDLITE_OVERLAP_AUTO;
  int32_t cross_host_transport = HVDLITE_CROSS_HOST_TCP;
  int32_t carried_rounds = HVDLITE_CARRIED_ROUNDS_AUTO;
  std::string network_interfaces;  // for the TCP ring across hosts; empty: any
  int32_t round_doubling_min_hosts = 8;  // round_across_hosts.h
};

// One request handed to Enqueue: a prepared one (its token, and this submission's buffers) or one by value.
struct Submission {
  int64_t prepared = 0;          // a token from Core::Prepare; 0: entry describes the request
  const Entry *entry = nullptr;  // by value: request, process set, buffers (copied)
  const void *input = nullptr;   // prepared: this submission's buffers
  void *output = nullptr;
  int32_t gpu_device = -1;                 // a GPU tensor's device, and its ready event (the entry takes it)
  gpu::CUevent gpu_ready = nullptr;
};

struct Topology {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  bool threads_supported = false;
};

class Core {
 public:
  static Core &Get();

  // Starts the background thread, which sets up MPI state; returns once it is ready (or failed).
  bool Init(const Settings &settings, const MPI_Comm *parent, std::string *error);
  void Shutdown();
  bool running();
  // Init succeeded and this rank has not called Shutdown. Stays true when a peer's shutdown stopped the
  // background thread: queries keep answering, collectives fail with a clear error.
  bool initialized();
  Topology topology();

  // Enqueues requests atomically (several: a group executed together), copying what is given by value. 0,
  // or a negative code: -1 invalid, -2 duplicate name in flight, -3 not running, kUnknownPrepared (nothing
  // enqueued: submit by value instead).
  static constexpr int kUnknownPrepared = -4;
  int Enqueue(const Submission *submissions, size_t count, int64_t *handles, std::string *error);
  // Enqueue, then Wait for every handle: the background thread starts at once, without a coalescing
  // window and without a second wake-up. A negative code if nothing was enqueued, else 0 (all succeeded)
  // or 1 (some failed: read the handles).
  int EnqueueAndWait(const Submission *submissions, size_t count, int64_t *handles, std::string *error);
  // Registers a request (its buffers are the default ones) for submission by token: its checks are done once
  // here, and again only when process sets change. A positive token, or a negative code as Enqueue's.
  int64_t Prepare(const Entry &request, std::string *error);
  void Unprepare(int64_t token);
  int64_t EnqueueProcessSetChange(Collective change, std::vector<int32_t> ranks, std::string *error);
  int ProcessSetRanks(int32_t id, std::vector<int32_t> *ranks);
  int ProcessSetRank(int32_t id);
  bool RequestTimeline(const std::string &path, bool mark_cycles);

  // Block (on the handle table's condition variable) until the handles are done. Wait: 0 success, 1 error,
  // -1 unknown handle; WaitAll: -1 unknown handle, 0 all succeeded, else 1 + the index of the first failure.
  int Wait(int64_t handle) { return WaitAll(&handle, 1); }
  int WaitAll(const int64_t *handles, int32_t count,
              std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // The index of the first handle done or unknown (HandleTable::WaitAny), kPending past the deadline.
  int WaitAny(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline);
  HandleTable &handles() { return handles_; }

 private:
  int EnqueueLocked(const Submission *submissions, size_t count, int64_t *handles, std::string *error);
  Clock::time_point SubmissionTime() const;  // when a submission is stamped (under mutex_)
  // Why a request cannot run in its process set as the sets are now ("" when it can). mutex_ held.
  std::string CheckRequest(const Request &request, int32_t set_id, const std::vector<int32_t> &splits);
  // The tail of every wait: callers_waiting_ was raised under mutex_; wakes the background thread, waits for
  // the handles (HandleTable::WaitAll's result) and lowers it.
  int WaitAsCaller(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline,
                   bool any = false);
  void ThreadMain(Settings settings, MPI_Comm parent);
  // One pass of the background thread's loop: take the queue, run a round of every process set and
  // execute what is ready. Returns false once a round agreed to shut down.
  bool Iterate();
  bool SetUp(const Settings &settings, MPI_Comm parent, std::string *error);
  // Fills *hosts from the local and cross communicators (collective over world_); says why an algorithm that
  // needs more is unavailable ("" when nothing is missing).
  std::string DescribeHosts(const Topology &t, HostLayout *hosts);
  void TearDown();
  // Takes what callers queued since the last take into lists_.fresh; returns whether shutdown was requested.
  bool TakeQueue();
  // Hands each entry taken to its process set, in the order they were queued, and empties lists_.fresh.
  void DistributeTaken();
  // A request whose process set was removed before it ran: out of flight, its handle failed.
  void FailForRemovedSet(Entry &entry);
  // Finishes what the round completed eagerly, then runs what it made ready.
  void Execute(ProcessSet &set, const RoundResult &round);
  void FinishEager(ProcessSet &set, const std::vector<EagerResult> &done);
  // Closes the arrival order over the entries that finished.
  void ForgetFinished(ProcessSet &set) { set.CloseHoles(); }
  void Finish(ProcessSet &set, Entry &entry, const std::string &error, int64_t result = 0);
  // Finish for every entry of a batch that this rank holds (null: joined, nothing here).
  void FinishBatch(ProcessSet &set, Entry *const *entries, size_t count, const std::string &error,
                   int64_t result = 0);
  // A round carried in the last batch of the round before it (carried_round.h). The batch of this round that
  // carries the set's next round, or null; RunCarrier runs it with that round's bits, finishes it and decodes the
  // round into the set (set.carried), which the next pass runs in place of exchanging one.
  const FusedBatch *CarrierOf(const ProcessSet &set, const RoundResult &round, bool changes) const;
  void RunCarrier(ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals);
  const RoundResult &TakeCarried(ProcessSet &set);
  bool AnyCarried() const;
  void ApplyProcessSetChange(const Response &response);
  // A response that shuts hvdlite down on every rank (a deadlock, negotiation.cc) arrived: the next round agrees to
  // shut down, and what fails then, or is submitted later, fails with its error.
  void ShutDownAfter(const std::string &error);
  // Why a request cannot be taken now that the core is not running (mutex_ held).
  std::string NotRunningError() const;
  void PublishProcessSets();
  bool NothingPending() const;
  bool AnyInFlight() const;  // mutex_ held
  RoundInput BaseRoundInput() const;

  // Guarded by mutex_: the queue and everything caller threads read.
  std::mutex mutex_;
  std::condition_variable work_cv_;   // wakes the background thread: new work, a timeline change or shutdown
  std::condition_variable ready_cv_;  // wakes Init: set-up finished
  std::vector<Entry *> queue_;  // submitted, not yet taken by the background thread (entries of registry_)
  RequestRegistry registry_;    // every request in flight, and the prepared ones
  std::vector<Entry *> claimed_;  // EnqueueLocked's, reused
  std::vector<RequestRegistry::Prepared *> claimed_prepared_;
  bool running_ = false;
  // Written under mutex_; read without it (hvdlite_is_initialized runs once per numpy all-reduce).
  std::atomic<bool> initialized_{false};
  bool set_up_done_ = false;
  bool shutdown_requested_ = false;
  std::string shut_down_because_;  // the error that shut hvdlite down on every rank ("": a shutdown() or exit)
  // Threads blocked in Wait: what is in flight must not wait for the cycle boundary. Raised under mutex_
  // (before the wake-up), lowered without it.
  std::atomic<int> callers_waiting_{0};
  bool resting_ = false;  // the background thread rests (quiet_wake.h): a submission wakes it
  std::string set_up_error_;
  Topology topology_;
  int64_t process_set_changes_ = 0;
  int32_t next_group_id_ = 1;
  std::thread thread_;

  // Owned by the background thread, the only thread of the core that calls MPI (the process sets' published
  // view excepted: under mutex_).
  Settings settings_;
  MPI_Comm world_ = MPI_COMM_NULL, local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  RingSockets cross_sockets_;  // the ring across hosts among cross_'s ranks, where TCP is the transport
  RoundAcrossHosts round_across_hosts_;  // the global set's rounds over those connections, where they are open
  ProcessSetTable sets_;
  RoundClock clock_;
  bool carry_rounds_ = false;           // rounds may ride in all-reduces (agreed by every rank at set-up)
  // The smallest batch that carries a round (agreed at set-up). Auto: a batch that takes longer than a cycle over a
  // 1 Gbit/s link, so the round it carries, decided as it starts, would not have fused more at the next cycle; rounds
  // carried in smaller batches ran as more, smaller collectives (60 tensors of 0.3 MB in all, 2 hosts: 0.73-0.78x
  // the step rate in 2 pairs of 5; bench/carried_rounds.py). On: any batch.
  static constexpr int64_t kAutoCarrierMinBytes = 256 << 10;
  int64_t carrier_min_bytes_ = 0;
  std::vector<uint8_t> carried_bits_;   // a carried round's bits as the carrier's elements, reused
  QuietWake quiet_;  // rounds stop while no rank has work (quiet_wake.h)
  TimelineControl timeline_control_;
  Timeline &timeline() { return timeline_control_.timeline(); }
  std::unique_ptr<CollectiveExecutor> executor_;
  std::unique_ptr<Autotuner> autotuner_;  // the coordinator's, with HVDLITE_AUTOTUNE
  void ApplyCoordinatorWords(const uint64_t words[2]);
  int64_t round_allreduce_bytes_ = 0;     // all-reduced by the current iteration (autotune's measure)
  int64_t finished_ = 0;    // requests finished so far
  // The working lists of a round, reused: Iterate's fresh entries, Execute's collectives and their entries, a
  // batch's entries and the fusion plan, FinishBatch's and FinishEager's (results are moved out of the entries
  // before they leave flight).
  struct RoundLists {
    std::vector<Entry *> fresh;
    std::vector<const Response *> collectives;
    std::vector<Entry *> entries;
    std::vector<Entry *> batch;
    FusionPlan fusion_plan;
    std::vector<Entry *> finished_entries;
    std::vector<int64_t> finished_handles;
    std::vector<std::unique_ptr<CoreResults>> finished_results;
    std::vector<Entry *> eager_finished;
  } lists_;
  HandleTable handles_;
};

}  // namespace hvdlite
