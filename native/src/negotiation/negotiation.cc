#include "negotiation/negotiation.h"

#include <algorithm>
#include <sstream>

#include "negotiation/carried_round.h"
#include "base/logging.h"
#include "base/reduce_kernels.h"
#include "negotiation/request_validation.h"
#include "negotiation/round_across_hosts.h"

namespace hvdlite {
namespace {

// Flag bits in word 0 of the bit vector. Each is reduced with AND, so "any rank" conditions are sent
// inverted: the bit stays set only if no rank has the condition.
constexpr uint64_t kNoSlowPathWork = 1;  // cleared by a rank with requests the cache cannot answer
constexpr uint64_t kNotShuttingDown = 2;
constexpr uint64_t kJoined = 4;          // set by joined ranks: stays set only if all have joined
constexpr uint64_t kIdle = 8;            // set by ranks with nothing to do: stays set only if all are idle
constexpr uint64_t kAllWaiting = 16;     // set by ranks with a caller waiting: stays set only if all wait
constexpr uint64_t kMayHold = 32;        // set by ranks that hold async work and have none waiting too long
static_assert(kMayHold < uint64_t{1} << NegotiationRound::kFlagBits, "a carried round carries every flag");

bool TestBit(const uint64_t *words, int32_t bit) { return (words[bit / 64] >> (bit % 64)) & 1u; }
void SetBit(uint64_t *words, int32_t bit) { words[bit / 64] |= uint64_t{1} << (bit % 64); }
void ClearBit(uint64_t *words, int32_t bit) { words[bit / 64] &= ~(uint64_t{1} << (bit % 64)); }

double SecondsSince(Clock::time_point then, Clock::time_point now) {
  return std::chrono::duration<double>(now - then).count();
}

// The ranks of the set deadlocked: every one has waited deadlock_seconds for what the others never submitted. Every
// name waiting fails with the report on every rank, and hvdlite shuts down (each rank's core, on that response).
bool EndDeadlock(ProcessSet &set, const NegotiationSettings &settings, Clock::time_point now) {
  if (settings.deadlock_seconds <= 0 || set.all_waiting_since == Clock::time_point{} || set.coordinator->empty()) {
    return false;
  }
  const double waited = SecondsSince(set.all_waiting_since, now);
  if (waited < settings.deadlock_seconds) return false;
  std::ostringstream out;
  out << "hvdlite shut down: every rank of process set " << set.id << " has waited " << static_cast<int64_t>(waited)
      << " s for a collective that another rank never submitted: the ranks run different collectives (a branch "
         "taken on some ranks only, a different order of blocking calls, or different names). Waiting:"
      << set.coordinator->DescribeWaiting(now)
      << "\n(HVDLITE_DEADLOCK_TIMEOUT_SECONDS sets how long every rank may wait so; 0 never)";
  Log(LogLevel::kError, out.str());
  set.coordinator->FailAll(out.str(), &set.due_failures);
  return true;
}

// Half the stall check, or half the deadlock bound if shorter: a deadlock's report names every request waiting.
double CachedStallSeconds(const NegotiationSettings &settings) {
  const double seconds = settings.stall_check_seconds / 2;
  return settings.deadlock_seconds > 0 ? std::min(seconds, settings.deadlock_seconds / 2) : seconds;
}

void InspectStalls(ProcessSet &set, const NegotiationSettings &settings, Clock::time_point now) {
  if (!set.coordinator || settings.stall_check_seconds <= 0 || SecondsSince(set.last_stall_check, now) < 1.0) return;
  set.last_stall_check = now;
  if (EndDeadlock(set, settings, now)) return;
  const std::vector<StallReport> reports =
      set.coordinator->FindStalls(now, settings.stall_check_seconds, settings.stall_shutdown_seconds, &set.due_failures);
  if (reports.empty()) return;
  std::ostringstream out;
  for (const StallReport &report : reports) {
    out << "Stall: tensor '" << report.name << "' has waited " << static_cast<int64_t>(report.waited_seconds)
        << " s in process set " << set.id << "; missing ranks: " << ListString(report.missing_ranks) << ". ";
  }
  out << "Those ranks have not submitted it: they may be running a different code path or have fewer steps. "
         "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS > 0 turns this into an error. Waiting in the set:"
      << set.coordinator->DescribeWaiting(now);
  Log(LogLevel::kWarning, out.str());
}

// Gathers every rank's unannounced requests to the coordinator and broadcasts what completed.
std::vector<Response> SlowPath(ProcessSet &set, Clock::time_point now) {
  std::vector<Request> mine;
  for (Entry *e : set.arrival_order) {
    if (!e || e->state != Entry::State::kUnannounced) continue;
    e->state = Entry::State::kAnnounced;
    e->request.sender = set.rank;
    e->request.group_id = e->group_id;
    e->request.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - e->enqueued).count();
    mine.push_back(e->request);
  }
  std::vector<uint8_t> sent = EncodeRequests(mine);
  int my_size = static_cast<int>(sent.size());
  std::vector<int> sizes(set.rank == 0 ? set.size : 0), offsets(sizes.size());
  MPI_Gather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, set.comm);
  std::vector<uint8_t> gathered;
  if (set.rank == 0) {
    int total = 0;
    for (int r = 0; r < set.size; ++r) { offsets[r] = total; total += sizes[r]; }
    gathered.resize(total);
  }
  MPI_Gatherv(sent.data(), my_size, MPI_BYTE, gathered.data(), sizes.data(), offsets.data(), MPI_BYTE, 0, set.comm);

  std::vector<Response> completed;
  std::vector<uint8_t> answer;
  if (set.rank == 0) {
    for (int r = 0; r < set.size; ++r) {
      set.coordinator->Receive(DecodeRequests(gathered.data() + offsets[r], sizes[r]), now, &completed);
    }
    for (Response &failure : set.due_failures) completed.push_back(std::move(failure));
    set.due_failures.clear();
    answer = EncodeResponses(completed);
  }
  int64_t answer_size = static_cast<int64_t>(answer.size());
  MPI_Bcast(&answer_size, 1, MPI_INT64_T, 0, set.comm);
  answer.resize(answer_size);
  MPI_Bcast(answer.data(), static_cast<int>(answer_size), MPI_BYTE, 0, set.comm);
  if (set.rank != 0) completed = DecodeResponses(answer.data(), answer.size());

  for (const Response &response : completed) {
    if (response.ok() && ResponseCache::Cacheable(response.spec.collective)) set.cache.Put(response);
  }
  // Every rank's cache made the same moves: the first rank of the set says it once for all.
  if (set.cache.CrossedThrashThreshold() && set.rank == 0) {
    Log(LogLevel::kWarning,
        "response cache too small: " + std::to_string(set.cache.returns()) +
            " times a tensor came back after the cache evicted it (the last: '" + set.cache.last_returned() +
            "'): the job reduces more tensors than its " + std::to_string(set.cache.capacity()) +
            " entries hold, so they are negotiated the slow way again and again; set HVDLITE_CACHE_CAPACITY "
            "(hvdliterun --cache-capacity) above the number of tensors a step reduces");
  }
  return completed;
}

}  // namespace

const RoundResult &NegotiateRound(ProcessSet &set, const NegotiationSettings &settings, const RoundInput &input) {
  NegotiationRound round(set, settings, input);
  round.Pack();
  round.Exchange();
  return round.Decode();
}

NegotiationRound::NegotiationRound(ProcessSet &set, const NegotiationSettings &settings, const RoundInput &input)
    : set_(set),
      settings_(settings),
      input_(input),
      now_(Clock::now()),
      capacity_(set.cache.capacity()),
      words_((capacity_ + 63) / 64),
      header_words_(1 + 2 * words_ + 2),
      cached_stall_seconds_(CachedStallSeconds(settings)) {}

void NegotiationRound::Pack() {
  // Layout: [flags][ready bits][valid bits][coordinator words x2], then the eager payload (eager_allreduce.h).
  set_.cache.StartRound();
  set_.eager.Layout(set_.cache, settings_.eager_max_bytes);
  std::vector<uint64_t> &bits = set_.round_bits;
  // Its largest size, whatever this round's payload: Layout keeps every slot's word-aligned offset plus its bytes
  // within eager_max_bytes, so the payload is at most that many bytes rounded up to whole words.
  bits.reserve(header_words_ + (settings_.eager_max_bytes + 7) / 8);
  bits.assign(header_words_ + set_.eager.payload_words(), 0);
  payload_ = reinterpret_cast<uint8_t *>(bits.data() + header_words_);
  ready_ = bits.data() + 1;
  valid_ = ready_ + words_;
  coordinator_ = valid_ + words_;
  for (int32_t w = 0; w < words_; ++w) valid_[w] = ~uint64_t{0};
  coordinator_[0] = input_.coordinator_words[0];
  coordinator_[1] = input_.coordinator_words[1];

  bool slow_path_work = !set_.due_failures.empty();
  bool held_too_long = false;
  for (Entry *entry : set_.arrival_order) {
    if (!entry) continue;
    const double age = SecondsSince(entry->enqueued, now_);
    held_too_long |= age > kMaxHoldSeconds;
    if (entry->state == Entry::State::kUnannounced || entry->state == Entry::State::kCached) {
      slow_path_work |= !AnnounceByCache(*entry, age);
    }
  }
  // A joined rank is ready for every cached allreduce: it contributes zeros (its eager slots stay zero).
  if (set_.joined) {
    for (int32_t bit = 0; bit < capacity_; ++bit) {
      if (set_.cache.Used(bit) && set_.cache.Get(bit).spec.collective == Collective::kAllreduce) SetBit(ready_, bit);
    }
  }
  InspectStalls(set_, settings_, now_);
  if (!set_.due_failures.empty()) slow_path_work = true;
  bits[0] = (slow_path_work ? 0 : kNoSlowPathWork) | (input_.shutting_down ? 0 : kNotShuttingDown) |
            (set_.joined ? kJoined : 0) | (input_.idle && !slow_path_work ? kIdle : 0) |
            (input_.caller_waiting ? kAllWaiting : 0) | (input_.hold && !held_too_long ? kMayHold : 0);
}

bool NegotiationRound::AnnounceByCache(Entry &e, double age) {
  // Requests a cached agreement answers set their bit; a changed request, or a cached one waiting too long (so
  // the coordinator can see who is missing), clears its valid bit and goes the slow way.
  int32_t bit = e.cache_bit;
  if (bit < 0 || set_.cache.Stamp(bit) != e.cache_stamp) {  // not matched since the bit last changed
    bit = ResponseCache::Cacheable(e.request.collective) ? set_.cache.Lookup(e.request.name) : -1;
    if (bit >= 0 && !set_.cache.Matches(bit, e.request, set_.rank)) {
      ClearBit(valid_, bit);
      bit = -1;
    }
    e.cache_bit = bit;
    e.cache_stamp = bit >= 0 ? set_.cache.Stamp(bit) : 0;
  }
  if (bit >= 0 && cached_stall_seconds_ > 0 && age > cached_stall_seconds_) {
    ClearBit(valid_, bit);
    bit = -1;
  }
  if (bit < 0) {
    e.state = Entry::State::kUnannounced;
    return false;
  }
  e.state = Entry::State::kCached;
  SetBit(ready_, bit);
  set_.entry_of_bit[bit] = &e;
  set_.round_cached_bits.push_back(bit);
  if (const EagerSlot *slot = set_.eager.Find(bit)) {
    ScaleCopy(payload_ + slot->offset_bytes, e.input, slot->count, slot->dtype, e.request.prescale);
  }
  return true;
}

void NegotiationRound::Exchange() {
  std::vector<uint64_t> &bits = set_.round_bits;
  if (set_.eager.payload_words() > 0) {
    set_.eager.Allreduce(bits.data(), header_words_, set_.comm);
  } else if (set_.across_hosts) {
    set_.across_hosts->Allreduce(bits.data(), header_words_);
  } else {
    MPI_Allreduce(MPI_IN_PLACE, bits.data(), header_words_, MPI_UINT64_T, MPI_BAND, set_.comm);
  }
}

const RoundResult &NegotiationRound::Decode() {
  const uint64_t flags = set_.round_bits[0];
  RoundResult &result = set_.NextRoundResult();
  result.carried = carried_;
  result.shutdown = !(flags & kNotShuttingDown);
  result.everyone_idle = (flags & kIdle) && (flags & kNoSlowPathWork);
  result.coordinator_words[0] = coordinator_[0];
  result.coordinator_words[1] = coordinator_[1];
  // Every rank holds and none has waited too long, and some rank still has no caller waiting (it is still
  // computing): the cached collectives ready now wait for the next round. Eager ones are done already.
  result.held = (flags & kMayHold) && !(flags & kAllWaiting);
  EvictInvalidated();
  CollectReady(/*everyone_joined=*/flags & kJoined, &result);
  if (!(flags & kNoSlowPathWork)) result.slow_path = SlowPath(set_, now_);
  // Every rank waits and nothing ran: perhaps each waits for what another never submits (InspectStalls).
  const bool stuck = (flags & kAllWaiting) && result.cached.empty() && result.slow_path.empty() && result.eager.empty();
  if (!stuck) {
    set_.all_waiting_since = Clock::time_point{};
  } else if (set_.all_waiting_since == Clock::time_point{}) {
    set_.all_waiting_since = now_;
  }
  return result;
}

void NegotiationRound::CarryOut(DataType dtype, ReduceOp op, uint8_t *elements) const {
  const int32_t extent = set_.cache.extent();
  const size_t size = DataTypeSize(dtype);
  EncodeBits(set_.round_bits.data(), kFlagBits, dtype, op, elements);
  EncodeBits(ready_, extent, dtype, op, elements + kFlagBits * size);
  EncodeBits(valid_, extent, dtype, op, elements + (kFlagBits + extent) * size);
}

void NegotiationRound::CarryIn(const uint8_t *reduced, DataType dtype, ReduceOp op) {
  const int32_t extent = set_.cache.extent();
  const size_t size = DataTypeSize(dtype);
  DecodeBits(reduced, kFlagBits, dtype, op, set_.size, set_.round_bits.data());
  DecodeBits(reduced + kFlagBits * size, extent, dtype, op, set_.size, ready_);
  DecodeBits(reduced + (kFlagBits + extent) * size, extent, dtype, op, set_.size, valid_);
  carried_ = true;
}

void NegotiationRound::Abandon() { ForgetAnnounced(); }

void NegotiationRound::ForgetAnnounced() {
  for (int32_t bit : set_.round_cached_bits) set_.entry_of_bit[bit] = nullptr;
  set_.round_cached_bits.clear();
}

void NegotiationRound::EvictInvalidated() {
  // Only words with a cleared valid bit need a look: steady state touches few.
  for (int32_t w = 0; w < words_; ++w) {
    for (uint64_t invalid = ~valid_[w]; invalid; invalid &= invalid - 1) {
      int32_t bit = w * 64 + __builtin_ctzll(invalid);
      if (bit >= capacity_ || !set_.cache.Used(bit)) continue;
      if (Entry *e = set_.entry_of_bit[bit]) {
        e->state = Entry::State::kUnannounced;  // goes the slow way
        set_.entry_of_bit[bit] = nullptr;
      }
      set_.cache.Erase(bit);
      ClearBit(ready_, bit);
    }
  }
}

void NegotiationRound::CollectReady(bool everyone_joined, RoundResult *result) {
  std::vector<int32_t> &ready_bits = set_.round_ready_bits;
  ready_bits.clear();
  for (int32_t w = 0; w < words_ && !everyone_joined; ++w) {
    for (uint64_t word = ready_[w]; word; word &= word - 1) {
      int32_t bit = w * 64 + __builtin_ctzll(word);
      set_.cache.Touch(bit);
      ready_bits.push_back(bit);
      const Response &response = set_.cache.Get(bit);
      Entry *entry = set_.entry_of_bit[bit];
      if (!entry && set_.joined) entry = set_.FindPending(response.spec.name);  // ready by the join's rule
      if (const EagerSlot *slot = set_.eager.Find(bit)) {
        result->eager.push_back(EagerResult{&response, entry, payload_ + slot->offset_bytes});
      } else if (!result->held) {
        result->cached.push_back(&response);
        result->cached_entries.push_back(entry);
      }
    }
  }
  ForgetAnnounced();
  set_.eager.Observe(ready_bits);
}

}  // namespace hvdlite
