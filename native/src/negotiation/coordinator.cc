#include "negotiation/coordinator.h"

#include <algorithm>
#include <sstream>

#include "negotiation/request_validation.h"
#include "base/collective_info.h"

namespace hvdlite {

void Coordinator::Receive(const std::vector<Request> &requests, Clock::time_point now,
                          std::vector<Response> *ready) {
  bool someone_joined = false;
  for (const Request &request : requests) {
    auto [it, inserted] = table_.try_emplace(request.name);
    Entry &entry = it->second;
    if (inserted) {
      entry.per_rank.assign(size_, nullptr);
      entry.requests.reserve(size_);
      entry.first_seen = now - std::chrono::milliseconds(request.age_ms);
      entry.last_warned = entry.first_seen;
      arrival_order_.push_back(request.name);
    }
    int32_t rank = request.sender;
    if (rank < 0 || rank >= size_ || entry.per_rank[rank]) continue;
    entry.requests.push_back(request);  // reserved to size_: earlier pointers stay valid
    entry.per_rank[rank] = &entry.requests.back();
    if (request.collective == Collective::kJoin) {
      joined_[rank] = true;
      last_joined_ = rank;
      someone_joined = true;
    }
  }
  if (someone_joined) {
    // A join may complete every waiting allreduce: check all names, in arrival order.
    std::vector<std::string> names = arrival_order_;
    for (const std::string &name : names) TryComplete(name, ready);
  } else {
    for (const Request &request : requests) TryComplete(request.name, ready);
  }
}

void Coordinator::TryComplete(const std::string &name, std::vector<Response> *ready) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  Entry &entry = it->second;
  const Request *any = FirstRequest(entry);
  bool is_join = any->collective == Collective::kJoin;
  if (any->collective == Collective::kAddProcessSetOfMembers) {
    // Complete once the new set's members have asked; the other ranks only apply it.
    if (!MissingRanks(entry).empty()) return;
  } else {
    int32_t present = 0, joined_missing = 0;
    for (int32_t r = 0; r < size_; ++r) {
      if (entry.per_rank[r]) ++present;
      else if (joined_[r] && !is_join) ++joined_missing;
    }
    if (present + joined_missing < size_) return;
    if (joined_missing > 0 && any->collective != Collective::kAllreduce) {
      ready->push_back(JoinedRanksError(entry, *any, name));
      Forget(it);
      return;
    }
  }

  Response response = AgreeOnResponse(entry.per_rank);
  if (is_join && response.ok()) {
    response.result = last_joined_;
    std::fill(joined_.begin(), joined_.end(), false);
    last_joined_ = -1;
  }
  ready->push_back(std::move(response));
  Forget(it);
}

Response Coordinator::JoinedRanksError(const Entry &entry, const Request &any, const std::string &name) const {
  Response response;
  response.spec = any;
  std::ostringstream out;
  out << CollectiveName(any.collective) << " of tensor '" << name << "' cannot run while some ranks have joined (";
  bool first = true;
  for (int32_t r = 0; r < size_; ++r) {
    if (joined_[r] && !entry.per_rank[r]) { out << (first ? "rank " : ", ") << r; first = false; }
  }
  out << "); only allreduce accepts zeros from joined ranks";
  response.error = out.str();
  return response;
}

void Coordinator::Forget(std::unordered_map<std::string, Entry>::iterator it) {
  arrival_order_.erase(std::find(arrival_order_.begin(), arrival_order_.end(), it->first));
  table_.erase(it);
}

const Request *Coordinator::FirstRequest(const Entry &entry) {
  return *std::find_if(entry.per_rank.begin(), entry.per_rank.end(), [](const Request *r) { return r != nullptr; });
}

std::vector<int32_t> Coordinator::MissingRanks(const Entry &entry) const {
  std::vector<int32_t> missing;
  const Request *any = FirstRequest(entry);
  if (any->collective == Collective::kAddProcessSetOfMembers) {
    for (int32_t r : any->ranks) {  // checked in range when asked for (c_api.cc)
      if (!entry.per_rank[r]) missing.push_back(r);
    }
    return missing;
  }
  for (int32_t r = 0; r < size_; ++r) {
    if (!entry.per_rank[r] && !joined_[r]) missing.push_back(r);
  }
  return missing;
}

std::string Coordinator::DescribeWaiting(Clock::time_point now) const {
  std::ostringstream out;
  for (const std::string &name : arrival_order_) {
    const Entry &entry = table_.at(name);
    std::vector<int32_t> submitted;
    for (int32_t r = 0; r < size_; ++r) {
      if (entry.per_rank[r]) submitted.push_back(r);
    }
    out << "\n  " << CollectiveName(FirstRequest(entry)->collective) << " '" << name << "' (waited "
        << static_cast<int64_t>(std::chrono::duration<double>(now - entry.first_seen).count())
        << " s): submitted by ranks " << ListString(submitted) << ", not by ranks " << ListString(MissingRanks(entry));
  }
  return out.str();
}

void Coordinator::FailAll(const std::string &why, std::vector<Response> *failed) {
  for (const std::string &name : arrival_order_) {
    Response response;
    response.spec = *FirstRequest(table_.at(name));
    response.error = why;
    response.shuts_down = true;
    failed->push_back(std::move(response));
  }
  table_.clear();
  arrival_order_.clear();
}

std::vector<StallReport> Coordinator::FindStalls(Clock::time_point now, double warn_after, double fail_after,
                                                  std::vector<Response> *failed) {
  std::vector<StallReport> reports;
  std::vector<std::string> names = arrival_order_;
  for (const std::string &name : names) {
    Entry &entry = table_.at(name);
    double waited = std::chrono::duration<double>(now - entry.first_seen).count();
    if (fail_after > 0 && waited >= fail_after) {
      Response response;
      response.spec = **std::find_if(entry.per_rank.begin(), entry.per_rank.end(),
                                     [](const Request *r) { return r != nullptr; });
      std::ostringstream out;
      out << "Stalled: " << CollectiveName(response.spec.collective) << " of tensor '" << name
          << "' waited " << static_cast<int64_t>(waited) << " s for ranks " << ListString(MissingRanks(entry))
          << " that never submitted it (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS)";
      response.error = out.str();
      failed->push_back(std::move(response));
      table_.erase(name);
      arrival_order_.erase(std::find(arrival_order_.begin(), arrival_order_.end(), name));
      continue;
    }
    if (warn_after > 0 && std::chrono::duration<double>(now - entry.last_warned).count() >= warn_after) {
      entry.last_warned = now;
      reports.push_back({name, MissingRanks(entry), waited});
    }
  }
  return reports;
}

}  // namespace hvdlite
