// The coordinator's message table (rank 0 of a process set, slow path only): counts which ranks have
// announced each name, turns complete names into responses in the order they completed, applies join
// (joined ranks count as present for allreduce and contribute zeros), and reports stalls.
#pragma once
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/messages.h"

namespace hvdlite {

struct StallReport {
  std::string name;
  std::vector<int32_t> missing_ranks;
  double waited_seconds;
};

class Coordinator {
 public:
  explicit Coordinator(int32_t size) : size_(size), joined_(size, false) {}

  // One rank's newly announced requests; names that became complete are appended to ready.
  void Receive(const std::vector<Request> &requests, Clock::time_point now, std::vector<Response> *ready);

  // Names waiting longer than warn_after (each reported again only after another warn_after), and
  // error responses for names waiting longer than fail_after (0: never).
  std::vector<StallReport> FindStalls(Clock::time_point now, double warn_after, double fail_after,
                                      std::vector<Response> *failed);
  bool empty() const { return table_.empty(); }
  // Every name waiting, a line each: its collective, how long it has waited, which ranks submitted it and which not.
  std::string DescribeWaiting(Clock::time_point now) const;
  // Error responses for every name waiting, each failing with why and shutting hvdlite down on every rank; the
  // table is left empty.
  void FailAll(const std::string &why, std::vector<Response> *failed);

 private:
  struct Entry {
    std::vector<const Request *> per_rank;  // points into requests
    std::vector<Request> requests;
    Clock::time_point first_seen;
    Clock::time_point last_warned;
  };
  void TryComplete(const std::string &name, std::vector<Response> *ready);
  Response JoinedRanksError(const Entry &entry, const Request &any, const std::string &name) const;
  void Forget(std::unordered_map<std::string, Entry>::iterator it);
  // A table entry has a request from at least one rank: the first.
  static const Request *FirstRequest(const Entry &entry);
  // The ranks whose request the entry still needs (for an add of members: the members').
  std::vector<int32_t> MissingRanks(const Entry &entry) const;

  int32_t size_;
  std::vector<bool> joined_;
  int32_t last_joined_ = -1;
  std::unordered_map<std::string, Entry> table_;
  std::vector<std::string> arrival_order_;
};

}  // namespace hvdlite
