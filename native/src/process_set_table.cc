#include "process_set_table.h"

namespace hvdlite {

void ProcessSetTable::Reset(int size, MPI_Comm world, int32_t cache_capacity) {
  std::vector<int32_t> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  sets_.clear();
  sets_[0] = std::make_unique<ProcessSet>(0, all, world, cache_capacity);
  next_id_ = 1;
}

ProcessSet *ProcessSetTable::Find(int32_t id) {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

int32_t ProcessSetTable::Add(const std::vector<int32_t> &ranks, MPI_Comm comm, int32_t cache_capacity) {
  const int32_t id = next_id_++;
  sets_[id] = std::make_unique<ProcessSet>(id, ranks, comm, cache_capacity);
  return id;
}

int32_t ProcessSetTable::IdOf(const std::vector<int32_t> &ranks) const {
  for (const auto &[id, set] : sets_) {
    if (set->ranks == ranks) return id;
  }
  return -1;
}

void ProcessSetTable::Publish() {
  ++generation_;
  published_ranks_.clear();
  published_rank_.clear();
  for (const auto &[id, set] : sets_) {
    published_ranks_[id] = set->ranks;
    published_rank_[id] = set->member() ? set->rank : -1;
  }
}

void ProcessSetTable::Unpublish() {
  published_ranks_.clear();
  published_rank_.clear();
}

bool ProcessSetTable::PublishedRanks(int32_t id, std::vector<int32_t> *ranks) const {
  auto it = published_ranks_.find(id);
  if (it == published_ranks_.end()) return false;
  *ranks = it->second;
  return true;
}

int ProcessSetTable::PublishedRank(int32_t id) const {
  auto it = published_rank_.find(id);
  return it == published_rank_.end() ? -1 : it->second;
}

std::string ProcessSetTable::CheckMember(int32_t id, int rank, const std::string &name, int *size) const {
  auto members = published_ranks_.find(id);
  if (members == published_ranks_.end()) {
    return "process set " + std::to_string(id) + " does not exist (tensor '" + name + "')";
  }
  *size = static_cast<int>(members->second.size());
  if (PublishedRank(id) < 0) {
    return "rank " + std::to_string(rank) + " is not a member of process set " + std::to_string(id) + " (tensor '" +
           name + "')";
  }
  return "";
}

}  // namespace hvdlite
