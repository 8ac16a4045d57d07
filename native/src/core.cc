#include "core.h"

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>

#include "algorithms/cross_memory.h"
#include "negotiation/carried_round.h"
#include "base/logging.h"
#include "base/mpi_types.h"
#include "base/progress_watchdog.h"
#include "base/reduce_kernels.h"
#include "negotiation/request_validation.h"
#include "base/collective_info.h"

namespace hvdlite {
namespace {

const char kShutDownMessage[] =
    "hvdlite has been shut down: a rank called shutdown() or exited, so this request cannot complete";
// How long the ranks across hosts try to open the TCP ring's connections before they use MPI's instead.
constexpr double kConnectSeconds = 20;

}  // namespace

Core &Core::Get() {
  static Core core;
  return core;
}

bool Core::Init(const Settings &settings, const MPI_Comm *parent, std::string *error) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (running_) return true;
  if (thread_.joinable()) {  // a previous run ended (shutdown by a peer); collect its thread
    lock.unlock();
    thread_.join();
    lock.lock();
  }
  queue_.clear();
  registry_.Clear();
  set_up_done_ = false;
  shutdown_requested_ = false;
  shut_down_because_.clear();
  set_up_error_.clear();
  thread_ = std::thread(&Core::ThreadMain, this, settings, parent ? *parent : MPI_COMM_WORLD);
  ready_cv_.wait(lock, [&] { return set_up_done_; });
  if (!set_up_error_.empty()) {
    *error = set_up_error_;
    lock.unlock();
    thread_.join();
    return false;
  }
  initialized_ = true;
  return true;
}

void Core::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_requested_ = true;
    initialized_ = false;
  }
  work_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string Core::NotRunningError() const {
  if (!shut_down_because_.empty()) return shut_down_because_;
  return "hvdlite is not initialized or has been shut down; call hvdlite.init() first";
}

void Core::ShutDownAfter(const std::string &error) {
  std::lock_guard<std::mutex> lock(mutex_);
  shutdown_requested_ = true;
  if (shut_down_because_.empty()) shut_down_because_ = error;
}

bool Core::running() {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

bool Core::initialized() { return initialized_.load(); }

Topology Core::topology() {
  std::lock_guard<std::mutex> lock(mutex_);
  return topology_;
}

int Core::Enqueue(const Submission *submissions, size_t count, int64_t *handles, std::string *error) {
  // No wake-up: async work waits for the next cycle boundary (ThreadMain), or for a caller to wait on it. A resting
  // thread (quiet_wake.h) is woken, and then waits for that boundary.
  int code;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    code = EnqueueLocked(submissions, count, handles, error);
    wake = code == 0 && resting_;
  }
  if (wake) work_cv_.notify_one();
  return code;
}

int Core::EnqueueAndWait(const Submission *submissions, size_t count, int64_t *handles, std::string *error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int code = EnqueueLocked(submissions, count, handles, error);
    if (code != 0) return code;
    ++callers_waiting_;  // before the wake: the background thread sees a waiter and starts at once
  }
  return WaitAsCaller(handles, static_cast<int32_t>(count), std::chrono::steady_clock::time_point::max()) == 0 ? 0 : 1;
}

std::string Core::CheckRequest(const Request &request, int32_t set_id, const std::vector<int32_t> &splits) {
  int set_size = 0;
  std::string problem = sets_.CheckMember(set_id, topology_.rank, request.name, &set_size);
  if (!problem.empty()) return problem;
  problem = CheckLocalRequest(request, set_size);
  if (!problem.empty() || request.collective != Collective::kAlltoall) return problem;
  if (splits.empty() && request.shape[0] % set_size != 0) {
    return "alltoall of tensor '" + request.name + "': first dimension " + std::to_string(request.shape[0]) +
           " is not divisible by the process set size " + std::to_string(set_size) + "; pass splits";
  }
  if (!splits.empty()) {
    int64_t sum = 0;
    bool negative = false;
    for (int32_t s : splits) { sum += s; negative |= s < 0; }
    if (static_cast<int>(splits.size()) != set_size || negative || sum != request.shape[0]) {
      return "alltoall of tensor '" + request.name + "': splits must have one non-negative entry per rank (" +
             std::to_string(set_size) + ") summing to the first dimension " + std::to_string(request.shape[0]);
    }
  }
  return "";
}

int64_t Core::Prepare(const Entry &request, std::string *error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!running_ || shutdown_requested_) {
    *error = NotRunningError();
    return -3;
  }
  *error = CheckRequest(request.request, request.process_set_id, request.splits);
  if (!error->empty()) return -1;
  const int64_t token = registry_.Prepare(request);
  registry_.Find(token)->checked_sets = sets_.generation();
  return token;
}

void Core::Unprepare(int64_t token) {
  std::lock_guard<std::mutex> lock(mutex_);
  registry_.Unprepare(token);
}

Clock::time_point Core::SubmissionTime() const {
  // The timeline shows how long a request queued: the precise clock. Otherwise only stall reports and the
  // hold limit read it, in tenths of seconds: the coarse clock (the same clock, up to a few ms behind) costs a
  // memory read where the precise one reads the hypervisor's clock page and the TSC, which a step of hundreds
  // of submissions notices.
  if (timeline_control_.recording()) return Clock::now();
  timespec coarse;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &coarse);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(coarse.tv_sec) +
                                                                       std::chrono::nanoseconds(coarse.tv_nsec)));
}

int Core::EnqueueLocked(const Submission *submissions, size_t count, int64_t *handles, std::string *error) {
  if (!running_ || shutdown_requested_) {
    *error = NotRunningError();
    return -3;
  }
  // Everything is checked and every entry claimed (in flight, so that a name twice in the group is found)
  // before anything is written: a refused group leaves its entries as they were.
  claimed_.clear();
  claimed_prepared_.clear();
  auto refuse = [&](int code) {
    for (Entry *e : claimed_) registry_.Land(*e);
    return code;
  };
  for (size_t i = 0; i < count; ++i) {
    const Submission &s = submissions[i];
    RequestRegistry::Prepared *prepared = nullptr;
    Entry *e;
    if (s.prepared) {
      prepared = registry_.Find(s.prepared);
      if (!prepared) return refuse(kUnknownPrepared);
      if (prepared->checked_sets != sets_.generation()) {
        *error = CheckRequest(prepared->request, prepared->process_set_id, prepared->splits);
        if (!error->empty()) return refuse(-1);
        prepared->checked_sets = sets_.generation();
      }
      e = prepared->entry->in_flight ? nullptr : prepared->entry;
    } else {
      *error = CheckRequest(s.entry->request, s.entry->process_set_id, s.entry->splits);
      if (!error->empty()) return refuse(-1);
      e = registry_.Claim(s.entry->process_set_id, s.entry->request.name);
    }
    if (!e) {
      const int32_t set_id = prepared ? prepared->process_set_id : s.entry->process_set_id;
      const std::string &name = prepared ? prepared->request.name : s.entry->request.name;
      *error = "Duplicate tensor name '" + name + "': a request with this name is already in flight in process set " +
               std::to_string(set_id) + "; wait for it before submitting the name again";
      return refuse(-2);
    }
    registry_.Fly(*e);
    claimed_.push_back(e);
    claimed_prepared_.push_back(prepared);
  }
  const int32_t group_id = count > 1 ? next_group_id_++ : 0;
  const auto now = SubmissionTime();
  handles_.CreateMany(handles, count);
  for (size_t i = 0; i < count; ++i) {
    const Submission &s = submissions[i];
    Entry &e = *claimed_[i];
    if (const RequestRegistry::Prepared *prepared = claimed_prepared_[i]) {
      if (e.written_by != s.prepared) {  // another submission of this name changed the request
        e.Describe(prepared->request, prepared->process_set_id, prepared->splits);
        e.written_by = s.prepared;
      }
      e.input = s.input;
      e.output = s.output;
    } else {
      e.Describe(s.entry->request, s.entry->process_set_id, s.entry->splits);
      e.written_by = 0;
      e.input = s.entry->input;
      e.output = s.entry->output;
    }
    e.ReleaseReadyEvent();
    e.gpu_device = s.gpu_device;
    e.gpu_ready = s.gpu_ready;
    e.group_id = group_id;
    e.enqueued = now;
    e.handle = handles[i];
    e.state = Entry::State::kUnannounced;
    queue_.push_back(&e);
  }
  return 0;
}

int64_t Core::EnqueueProcessSetChange(Collective change, std::vector<int32_t> ranks, std::string *error) {
  Entry e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Every rank that asks counts its changes alike, except for an add of members, which only they ask for: its
    // name is its ranks, the same on each of them.
    std::string id;
    if (change == Collective::kAddProcessSetOfMembers) {
      for (int32_t r : ranks) id += (id.empty() ? "" : ",") + std::to_string(r);
    } else {
      id = std::to_string(process_set_changes_++);
    }
    e.request.name = std::string("__hvdlite.") + CollectiveName(change) + "." + id;
  }
  e.request.collective = change;
  e.request.dtype = DataType::kUInt8;
  e.request.ranks = std::move(ranks);
  e.process_set_id = 0;  // changes are agreed on by the whole job
  int64_t handle = 0;
  Submission submission;
  submission.entry = &e;
  int code = Enqueue(&submission, 1, &handle, error);
  return code == 0 ? handle : code;
}

int Core::ProcessSetRanks(int32_t id, std::vector<int32_t> *ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  return sets_.PublishedRanks(id, ranks) ? static_cast<int>(ranks->size()) : -1;
}

int Core::ProcessSetRank(int32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return sets_.PublishedRank(id);
}

bool Core::RequestTimeline(const std::string &path, bool mark_cycles) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_) return false;
    ticket = timeline_control_.Post(path, mark_cycles);
  }
  work_cv_.notify_one();
  timeline_control_.WaitApplied(ticket);
  return true;
}

bool Core::SetUp(const Settings &settings, MPI_Comm parent, std::string *error) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    *error = "MPI is not initialized (or already finalized): import mpi4py before hvdlite's init";
    return false;
  }
  settings_ = settings;
  SetLogLevel(settings.log_level);
  MPI_Comm_dup(parent, &world_);  // our own communicator: user MPI traffic never collides with ours
  Topology t;
  MPI_Comm_rank(world_, &t.rank);
  MPI_Comm_size(world_, &t.size);
  MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local_);
  MPI_Comm_rank(local_, &t.local_rank);
  MPI_Comm_size(local_, &t.local_size);
  MPI_Comm_split(world_, t.local_rank, t.rank, &cross_);
  MPI_Comm_rank(cross_, &t.cross_rank);
  MPI_Comm_size(cross_, &t.cross_size);
  HostLayout hosts;
  hosts.rank = t.rank;
  hosts.local_rank = t.local_rank;
  std::string error_text = DescribeHosts(t, &hosts);
  AlgorithmSettings algorithms = settings.algorithms;
  algorithms.progress_timeout_seconds = settings.progress_timeout_seconds;
  // The direct all-reduce needs every rank on this host (then local_size == size on every rank, else on
  // none: all ranks take the same branch) and each able to read the others' memory.
  algorithms.direct_available = hosts.hosts == 1 && hosts.direct_within_host;
  if (algorithms.algorithm == HVDLITE_ALGORITHM_DIRECT && !algorithms.direct_available) {
    error_text = "HVDLITE_ALLREDUCE_ALGORITHM=direct needs every rank on one host, each able to read the others' "
                 "memory (process_vm_readv and shared memory), but " +
                 (hosts.hosts > 1 ? std::string("the ranks are on ") + std::to_string(hosts.hosts) + " hosts"
                                  : error_text) + "; use ring, hierarchical or auto";
  } else if (algorithms.algorithm == HVDLITE_ALGORITHM_HIERARCHICAL && !hosts.same_ranks_per_host) {
    error_text = "HVDLITE_ALLREDUCE_ALGORITHM=hierarchical (HOROVOD_HIERARCHICAL_ALLREDUCE) needs the same number "
                 "of ranks on every host, but " + error_text + "; use ring or auto";
  } else {
    if (!error_text.empty()) Log(LogLevel::kDebug, error_text);
    error_text.clear();
  }
  if (!error_text.empty()) {
    *error = error_text;
    for (MPI_Comm *comm : {&cross_, &local_, &world_}) MPI_Comm_free(comm);
    return false;
  }
  if (hosts.hosts > 1) {
    // Across hosts a payload over 16 KiB rides slower than it goes the normal way (eager_allreduce.h).
    settings_.negotiation.eager_max_bytes = std::min(settings_.negotiation.eager_max_bytes, kCrossHostEagerMaxBytes);
  }
  // Rounds ride in all-reduces only where every rank says so: a rank that appended them alone would reduce a
  // longer batch than its peers.
  // One maximum over the ranks answers both: does any rank refuse, and the largest bound any rank asks for.
  const bool carry = settings.carried_rounds == HVDLITE_CARRIED_ROUNDS_ON ||
                     (settings.carried_rounds == HVDLITE_CARRIED_ROUNDS_AUTO && hosts.hosts > 1);
  int64_t agreed[2] = {carry ? 0 : 1, settings.carried_rounds == HVDLITE_CARRIED_ROUNDS_ON ? 0 : kAutoCarrierMinBytes};
  MPI_Allreduce(MPI_IN_PLACE, agreed, 2, MPI_INT64_T, MPI_MAX, world_);
  carry_rounds_ = agreed[0] == 0;
  carrier_min_bytes_ = agreed[1];
  // Only the hierarchical all-reduce (auto's choice across hosts, or forced) crosses hosts by this ring: with ring or
  // mpi forced, no connection is opened that nothing would use.
  const bool hierarchical_possible = algorithms.algorithm == HVDLITE_ALGORITHM_AUTO ||
                                     algorithms.algorithm == HVDLITE_ALGORITHM_HIERARCHICAL;
  // From this many hosts the rounds cross them in log2(hosts) steps, over connections opened for it with the ring's.
  const bool round_doubling = hosts.hosts >= settings.round_doubling_min_hosts;
  if (hosts.hosts > 1 && hosts.same_ranks_per_host && t.cross_size > 1 && hierarchical_possible &&
      settings.cross_host_transport == HVDLITE_CROSS_HOST_TCP) {
    const std::string why_not = cross_sockets_.Connect(hosts.cross, settings.network_interfaces, kConnectSeconds,
                                                       round_doubling);
    if (why_not.empty()) {
      hosts.cross_sockets = &cross_sockets_;
      if (t.cross_rank == 0) Log(LogLevel::kDebug, "the ring across hosts runs over its own TCP connections");
    } else if (t.cross_rank == 0) {
      Log(LogLevel::kWarning, "the ring across hosts runs over MPI: its TCP connections could not be opened (" +
                                  why_not + ")");
    }
  }
  quiet_.Start(world_);
  // Overlapping async collectives with computation needs a core for the background thread: MPI busy-polls
  // while it waits, and a fused ring stalls when the two ends' threads are not running together.
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  clock_.Start(settings.cycle_time_ms,
               settings.overlap == HVDLITE_OVERLAP_OFF ||
                   (settings.overlap == HVDLITE_OVERLAP_AUTO && cores > 0 && cores <= t.local_size));
  int provided = 0;
  MPI_Query_thread(&provided);
  t.threads_supported = provided == MPI_THREAD_MULTIPLE;
  SetLogRank(t.rank);
  MutableGlobalMpiTypes().Create();

  sets_.Reset(t.size, world_, settings.cache_capacity);
  if (hosts.cross_sockets) {
    round_across_hosts_.Start(hosts.local, hosts.cross, cross_sockets_, round_doubling);
    sets_.global().across_hosts = &round_across_hosts_;
    if (t.rank == 0) {
      Log(LogLevel::kDebug, std::string("negotiation rounds across hosts wait on the TCP connections, ") +
                                (round_doubling ? "in log2(hosts) steps" : "around the ring"));
    }
  }
  executor_ = std::make_unique<CollectiveExecutor>(algorithms, hosts, timeline());
  autotuner_.reset();
  if (settings.autotune && t.rank == 0) {
    autotuner_ = std::make_unique<Autotuner>(settings.fusion_threshold_bytes, settings.cycle_time_ms,
                                             settings.autotune_log, settings.autotune_steps_per_sample,
                                             settings.autotune_warmup_samples);
  }
  timeline_control_.Begin(t.rank == 0, settings.timeline_path, settings.timeline_mark_cycles);
  ProgressWatchdog::Get().Start(settings.progress_timeout_seconds, t.rank);
  std::lock_guard<std::mutex> lock(mutex_);
  topology_ = t;
  return true;
}

std::string Core::DescribeHosts(const Topology &t, HostLayout *hosts) {
  hosts->local = CommContext{local_, t.local_rank, t.local_size};
  hosts->cross = CommContext{cross_, t.cross_rank, t.cross_size};
  // Every rank learns the number of hosts (their local rank 0s), the fewest and most ranks a host has, and
  // whether every host's ranks can read each other's memory.
  std::string why_not_direct;
  const bool direct_here = CrossMemoryWorks(local_, &why_not_direct);
  int host_count = t.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &host_count, 1, MPI_INT, MPI_SUM, world_);
  int maxima[3] = {t.local_size, -t.local_size, direct_here ? 0 : 1};  // most ranks, fewest ranks, any host without
  MPI_Allreduce(MPI_IN_PLACE, maxima, 3, MPI_INT, MPI_MAX, world_);
  hosts->hosts = host_count;
  const int most = maxima[0], fewest = -maxima[1];
  hosts->same_ranks_per_host = fewest == most;
  hosts->direct_within_host = maxima[2] == 0;
  if (!hosts->same_ranks_per_host) {
    return "the " + std::to_string(hosts->hosts) + " hosts have between " + std::to_string(fewest) + " and " +
           std::to_string(most) + " ranks";
  }
  if (!hosts->direct_within_host) {
    return why_not_direct.empty() ? "the ranks of another host cannot read each other's memory" : why_not_direct;
  }
  return "";
}

void Core::PublishProcessSets() {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.Publish();
}

void Core::ThreadMain(Settings settings, MPI_Comm parent) {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // every rank is meant to wake at the same cycle boundary
  prctl(PR_SET_NAME, "hvdlite-core", 0, 0, 0);  // how top -H, perf and gdb name this thread
  std::string error;
  bool ok = SetUp(settings, parent, &error);
  if (ok) PublishProcessSets();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    set_up_done_ = true;
    set_up_error_ = error;
    running_ = ok;
  }
  ready_cv_.notify_all();
  if (!ok) return;

  while (true) {
    {
      // Rounds start on the clock's boundaries (round_clock.h): a burst of async requests (a step's
      // gradients) waits for the boundary and goes out as one round, so it fuses. While a caller is blocked
      // on a request in flight, rounds run back to back, so a synchronous collective pays no cycle, as long as
      // the clock says rounds keep finding work. Holding async work (HVDLITE_OVERLAP off, see negotiation.h):
      // nothing runs before every rank waits, so a rank whose caller does not wait only keeps a heartbeat, and
      // a waiting rank keeps its rounds going: its own core is idle while its peers finish computing.
      std::unique_lock<std::mutex> lock(mutex_);
      // A carried round is decided already: it runs now, as on every rank.
      if (!AnyCarried()) {
        bool rested = false;  // to its end, with nothing here: it looks for a peer's wake now
        const Clock::duration rest = quiet_.Rest(Clock::now());
        if (rest > clock_.UntilNextRound()) {
          // Nobody has had work for a while: a peer's wake is looked for less often (quiet_wake.h).
          resting_ = true;
          rested = !work_cv_.wait_for(lock, rest, [&] {
            return shutdown_requested_ || timeline_control_.pending() || !queue_.empty();
          });
          resting_ = false;
        }
        if (!rested) work_cv_.wait_for(lock, clock_.UntilNextRound(), [&] {
          return shutdown_requested_ || timeline_control_.pending() ||
                 (callers_waiting_ > 0 && (!queue_.empty() || (AnyInFlight() && clock_.keep_going())));
        });
      }
    }
    if (!Iterate()) break;
  }
  TearDown();
}

int Core::WaitAll(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline) {
  // Done (or unknown) already: no need to hurry anyone.
  const int known = handles_.ResultIfDone(handles, count);
  if (known != HandleTable::kPending) return known;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++callers_waiting_;
  }
  return WaitAsCaller(handles, count, deadline);
}

int Core::WaitAny(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline) {
  if (count <= 0) return -1;  // none to wait for: as an unknown handle
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++callers_waiting_;
  }
  return WaitAsCaller(handles, count, deadline, /*any=*/true);
}

int Core::WaitAsCaller(const int64_t *handles, int32_t count, std::chrono::steady_clock::time_point deadline,
                       bool any) {
  work_cv_.notify_one();  // rounds for what is in flight start now, not at the cycle boundary
  const int state = any ? handles_.WaitAny(handles, count, deadline) : handles_.WaitAll(handles, count, deadline);
  callers_waiting_.fetch_sub(1, std::memory_order_relaxed);  // no lock: at worst one extra round
  return state;
}

bool Core::Iterate() {
  const bool shutting_down = TakeQueue();
  timeline_control_.Apply();
  const bool local_work = !lists_.fresh.empty() || shutting_down;
  const int64_t finished_before = finished_;
  RoundInput input = BaseRoundInput();
  input.shutting_down = shutting_down;
  bool first_round_awake = false;
  const auto now = Clock::now();
  ProcessSet &global_set = sets_.global();
  if (quiet_.quiet()) {  // never with a carried round: a round that carries is not idle
    if (!local_work && !quiet_.WokenByPeer()) return true;  // nobody anywhere has work: no round, no MPI traffic
    quiet_.WakePeers();  // by work of its own or woken, it passes the wake on
    first_round_awake = true;
  }
  timeline().MarkCycle(now);
  DistributeTaken();
  input.idle = NothingPending();
  if (autotuner_) {
    input.coordinator_words[0] = static_cast<uint64_t>(autotuner_->fusion_threshold_bytes());
    input.coordinator_words[1] = static_cast<uint64_t>(autotuner_->cycle_time_ms() * 1000.0);
  }

  ProgressWatchdog &watchdog = ProgressWatchdog::Get();
  watchdog.Busy("a negotiation round");
  const RoundResult &global =
      global_set.carried ? TakeCarried(global_set) : NegotiateRound(global_set, settings_.negotiation, input);
  watchdog.Progress();
  if (first_round_awake) quiet_.Awake();
  ApplyCoordinatorWords(global.coordinator_words);  // before any fusion plan of this round
  round_allreduce_bytes_ = 0;
  watchdog.Busy("the collectives of a round");
  Execute(global_set, global);
  watchdog.Idle();
  if (global.shutdown) return false;
  if (global.everyone_idle) {
    // Every rank saw the same result: all stop cycling together until one of them has work. A carried round
    // pending in another set found nothing (no rank had anything pending): it is dropped on every rank.
    quiet_.GoQuiet();
    for (auto &[id, set] : sets_.sets()) set->carried = false;
  } else {
    std::vector<int32_t> ids;
    for (auto &[id, set] : sets_.sets()) {
      if (id != 0 && set->member()) ids.push_back(id);
    }
    for (int32_t id : ids) {
      ProcessSet &set = *sets_.Find(id);
      watchdog.Busy("a process set's round");
      Execute(set, set.carried ? TakeCarried(set) : NegotiateRound(set, settings_.negotiation, BaseRoundInput()));
      watchdog.Idle();
    }
  }
  if (autotuner_) autotuner_->RecordRound(round_allreduce_bytes_, Clock::now());
  timeline().Flush();
  clock_.NoteRound(local_work || finished_ != finished_before);
  return true;
}

RoundInput Core::BaseRoundInput() const {
  RoundInput input;
  input.hold = clock_.hold_async();
  input.caller_waiting = callers_waiting_.load(std::memory_order_relaxed) > 0;
  return input;
}

void Core::ApplyCoordinatorWords(const uint64_t words[2]) {
  // All ones: the coordinator proposes nothing (autotune off there). Otherwise every rank takes the
  // values in this same round.
  constexpr uint64_t kNone = ~uint64_t{0};
  if (words[0] != kNone && static_cast<int64_t>(words[0]) != settings_.fusion_threshold_bytes) {
    settings_.fusion_threshold_bytes = static_cast<int64_t>(words[0]);
  }
  if (words[1] != kNone) clock_.set_cycle(static_cast<double>(words[1]) / 1000.0);
}

bool Core::AnyInFlight() const { return registry_.AnyInFlight(); }

bool Core::AnyCarried() const {
  for (const auto &[id, set] : sets_.sets()) {
    if (set->carried) return true;
  }
  return false;
}

const RoundResult &Core::TakeCarried(ProcessSet &set) {
  set.carried = false;
  return set.last_round();
}

const FusedBatch *Core::CarrierOf(const ProcessSet &set, const RoundResult &round, bool changes) const {
  // Decided from what every rank agreed on: the setting (agreed at set-up), the round's responses and words, the
  // fusion plan, the set's size. Nothing may run after the carrier, since the next round is decoded after it; nor
  // may the round be the autotuner's (its words do not ride).
  if (!carry_rounds_ || lists_.fusion_plan.size() == 0 || !round.slow_path.empty() || changes || round.shutdown ||
      round.coordinator_words[0] != ~uint64_t{0} || round.coordinator_words[1] != ~uint64_t{0}) {
    return nullptr;
  }
  const FusedBatch &last = *(lists_.fusion_plan.end() - 1);
  const Request &spec = last.parts.front()->spec;
  if (spec.collective != Collective::kAllreduce || spec.gpu || !CanCarryBits(spec.dtype, spec.op, set.size) ||
      last.total_bytes < carrier_min_bytes_) {
    return nullptr;
  }
  return &last;
}

void Core::RunCarrier(ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) {
  // The next round announces what is ready by the time this batch starts: the entries submitted since this round
  // began join it, this batch's own do not.
  for (Entry *e : locals) {
    if (e) e->state = Entry::State::kRunning;
  }
  RoundInput input = BaseRoundInput();
  input.shutting_down = TakeQueue();
  DistributeTaken();
  input.idle = NothingPending();
  NegotiationSettings settings = settings_.negotiation;
  settings.eager_max_bytes = 0;  // the eager payload does not ride
  NegotiationRound next(set, settings, input);
  next.Pack();
  const Request &spec = batch.parts.front()->spec;
  const int32_t bits = next.carried_bits();
  carried_bits_.resize(static_cast<size_t>(bits) * DataTypeSize(spec.dtype));
  next.CarryOut(spec.dtype, spec.op, carried_bits_.data());
  const std::string error =
      executor_->ExecuteWithTrailer(set, batch, locals, AllreduceExecutor::Trailer{carried_bits_.data(), bits});
  NoteProgress();
  FinishBatch(set, locals.data(), locals.size(), error);
  if (!error.empty()) {
    // The same failure on every rank (AllreduceAlgorithm::Run): none decodes the round, each runs its own next.
    next.Abandon();
    return;
  }
  next.CarryIn(carried_bits_.data(), spec.dtype, spec.op);
  next.Decode();
  set.carried = true;
}

bool Core::NothingPending() const {
  for (const auto &[id, set] : sets_.sets()) {
    for (const Entry *e : set->arrival_order) {
      if (e) return false;
    }
  }
  return true;
}

void Core::TearDown() {
  std::vector<Entry *> queued;
  std::string because = kShutDownMessage;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;  // nothing is enqueued from now on; the entries stay in the registry until the end
    queued.swap(queue_);
    if (!shut_down_because_.empty()) because = shut_down_because_;
  }
  ProgressWatchdog::Get().Stop();
  for (Entry *e : queued) handles_.Fail(e->handle, because);
  quiet_.Stop();
  for (auto &[id, set] : sets_.sets()) {
    for (Entry *e : set->arrival_order) {
      if (e) handles_.Fail(e->handle, because);
    }
    set->eager.FreeMpiObjects();
    if (id != 0 && set->member()) MPI_Comm_free(&set->comm);
  }
  sets_.Clear();
  executor_.reset();
  round_across_hosts_.Stop();
  cross_sockets_.Close("hvdlite shut down");
  autotuner_.reset();  // closes the autotune log
  MPI_Comm_free(&local_);
  MPI_Comm_free(&cross_);
  MPI_Comm_free(&world_);
  MutableGlobalMpiTypes().Free();
  timeline_control_.End();  // closes the file; a caller waiting for a timeline change gives up
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.Unpublish();
  registry_.Clear();  // prepared requests' tokens stay unknown: their holders submit by value
}

bool Core::TakeQueue() {
  std::lock_guard<std::mutex> lock(mutex_);
  lists_.fresh.swap(queue_);
  return shutdown_requested_;
}

void Core::DistributeTaken() {
  auto now = Clock::now();
  for (Entry *e : lists_.fresh) {
    ProcessSet *found = sets_.Find(e->process_set_id);
    if (!found || !found->member()) {
      FailForRemovedSet(*e);
      continue;
    }
    ProcessSet &set = *found;
    e->negotiation_start = now;
    if (e->request.collective == Collective::kJoin) set.joined = true;
    set.Arrive(e);
  }
  lists_.fresh.clear();
}

void Core::Finish(ProcessSet &set, Entry &entry, const std::string &error, int64_t result) {
  Entry *one = &entry;
  FinishBatch(set, &one, 1, error, result);
}

void Core::FailForRemovedSet(Entry &entry) {
  const int64_t handle = entry.handle;
  const std::string message = "process set " + std::to_string(entry.process_set_id) + " was removed before tensor '" +
                              entry.request.name + "' ran";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    registry_.Land(entry);  // entry may be gone after this
  }
  handles_.Fail(handle, message);
}

void Core::FinishBatch(ProcessSet &set, Entry *const *entries, size_t count, const std::string &error,
                       int64_t result) {
  std::vector<Entry *> &finished_entries = lists_.finished_entries;
  std::vector<int64_t> &finished_handles = lists_.finished_handles;
  std::vector<std::unique_ptr<CoreResults>> &finished_results = lists_.finished_results;
  finished_entries.clear();
  finished_handles.clear();
  finished_results.clear();
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (i + kEntryPrefetchAhead < count) PrefetchEntry(entries[i + kEntryPrefetchAhead]);
    Entry *e = entries[i];
    if (!e) continue;
    set.Leave(e);
    finished_entries.push_back(e);
    finished_handles.push_back(e->handle);
    finished_results.push_back(std::move(e->results));
    e->ReleaseReadyEvent();  // a request that failed before its stream waited
    ++n;
  }
  if (n == 0) return;  // nothing here (joined, or no eager results): wake nobody
  {
    // Out of flight before the handles complete, so that a waiter may submit the names again at once; from
    // here on the entries belong to the next submissions (or are gone): only their results are read.
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry *e : finished_entries) registry_.Land(*e);
  }
  finished_ += static_cast<int64_t>(n);
  handles_.CompleteAll(finished_handles.data(), n, [&](size_t i, HandleState &s) {
    if (!error.empty()) s.error = error;
    s.result = result;
    s.results = std::move(finished_results[i]);
  }, /*wake=*/false);
  handles_.WakeWaiters();
}

void Core::FinishEager(ProcessSet &set, const std::vector<EagerResult> &done) {
  const bool record = timeline().active();
  std::vector<Entry *> &eager_finished = lists_.eager_finished;
  eager_finished.clear();
  for (const EagerResult &eager : done) {
    const Request &spec = eager.response->spec;
    round_allreduce_bytes_ += eager.response->Elements() * static_cast<int64_t>(DataTypeSize(spec.dtype));
    if (!eager.entry) continue;  // this rank joined: it only contributed zeros
    Entry &e = *eager.entry;
    FinishReduction(e.output, eager.reduced, eager.response->Elements(), spec.dtype, spec.op, spec.postscale,
                    set.size);
    if (record) {
      timeline().Record(spec.name, "QUEUE", e.enqueued, e.negotiation_start);
      timeline().Record(spec.name, "EAGER_ALLREDUCE", e.negotiation_start, Clock::now());
    }
    eager_finished.push_back(&e);
  }
  FinishBatch(set, eager_finished.data(), eager_finished.size(), "");
}

void Core::Execute(ProcessSet &set, const RoundResult &round) {
  FinishEager(set, round.eager);
  if (round.cached.empty() && round.slow_path.empty()) {
    ForgetFinished(set);
    return;
  }
  // The collectives of the round and this rank's entry for each (null where it has none: it joined).
  std::vector<const Response *> &collectives = lists_.collectives;
  std::vector<Entry *> &their_entries = lists_.entries;
  collectives.clear();
  their_entries.clear();
  std::vector<const Response *> changes;
  auto sort_out = [&](const Response &response, Entry *local) {
    if (!response.ok()) {
      if (response.shuts_down) ShutDownAfter(response.error);
      if (local) Finish(set, *local, response.error);
    } else if (response.spec.collective == Collective::kJoin) {
      set.joined = false;
      if (local) Finish(set, *local, "", response.result);
    } else if (response.spec.collective == Collective::kAddProcessSet ||
               response.spec.collective == Collective::kAddProcessSetOfMembers ||
               response.spec.collective == Collective::kRemoveProcessSet) {
      changes.push_back(&response);
    } else {
      collectives.push_back(&response);
      their_entries.push_back(local);
    }
  };
  for (size_t i = 0; i < round.cached.size(); ++i) sort_out(*round.cached[i], round.cached_entries[i]);
  for (const Response &response : round.slow_path) sort_out(response, set.FindPending(response.spec.name));
  const bool record = timeline().active();
  PlanFusion(collectives, settings_.fusion_threshold_bytes, &lists_.fusion_plan);
  const FusedBatch *carrier = CarrierOf(set, round, !changes.empty());
  for (const FusedBatch &batch : lists_.fusion_plan) {
    std::vector<Entry *> &locals = lists_.batch;
    locals.clear();
    for (size_t member : batch.members) locals.push_back(their_entries[member]);
    if (record) {
      auto now = Clock::now();
      for (Entry *e : locals) {
        if (!e) continue;
        timeline().Record(e->request.name, "QUEUE", e->enqueued, e->negotiation_start);
        timeline().Record(e->request.name, round.carried ? "NEGOTIATE_CARRIED" : "NEGOTIATE", e->negotiation_start, now);
      }
    }
    if (batch.parts.front()->spec.collective == Collective::kAllreduce) round_allreduce_bytes_ += batch.total_bytes;
    if (&batch == carrier) {
      RunCarrier(set, batch, locals);  // the last batch: the next round is decoded after it
      continue;
    }
    std::string error = executor_->Execute(set, batch, locals);
    NoteProgress();
    FinishBatch(set, locals.data(), locals.size(), error);
  }
  for (const Response *change : changes) ApplyProcessSetChange(*change);
  ForgetFinished(set);
}

void Core::ApplyProcessSetChange(const Response &response) {
  ProcessSet &global = sets_.global();
  Entry *local = global.FindPending(response.spec.name);
  std::string error;
  int64_t result = 0;
  const std::vector<int32_t> &ranks = response.spec.ranks;
  if (response.spec.collective != Collective::kRemoveProcessSet) {
    const int32_t existing = sets_.IdOf(ranks);
    if (existing >= 0 && response.spec.collective == Collective::kAddProcessSetOfMembers) {
      result = existing;  // members asking for their set again get it (a framework's group made twice)
    } else if (existing >= 0) {
      error = "a process set with these ranks already exists (id " + std::to_string(existing) + ")";
    }
    // Every rank of the job takes part in the split; non-members get MPI_COMM_NULL.
    bool member = std::binary_search(ranks.begin(), ranks.end(), topology_.rank);
    if (error.empty() && existing < 0) {
      MPI_Comm comm;
      MPI_Comm_split(world_, member ? 0 : MPI_UNDEFINED, topology_.rank, &comm);
      result = sets_.Add(ranks, comm, settings_.cache_capacity);
    }
  } else {
    int32_t id = ranks.empty() ? -1 : ranks[0];
    ProcessSet *target = sets_.Find(id);
    if (id == 0) {
      error = "the global process set cannot be removed";
    } else if (!target) {
      error = "process set " + std::to_string(id) + " does not exist";
    } else {
      ProcessSet &set = *target;
      for (Entry *e : set.arrival_order) {
        if (!e) continue;
        set.Leave(e);
        FailForRemovedSet(*e);
      }
      set.eager.FreeMpiObjects();
      executor_->ForgetProcessSet(id);
      if (set.member()) MPI_Comm_free(&set.comm);
      sets_.Erase(id);
    }
  }
  PublishProcessSets();
  if (local) Finish(global, *local, error, result);
  ForgetFinished(global);
}

}  // namespace hvdlite
