// The job's process sets: the background thread's own table of them (ids, communicators, negotiation state),
// and the view of them it publishes for caller threads (each set's ranks and this rank's place in it), which
// submissions are checked against. The published view is read and written under the owner's lock (the core's
// mutex); its generation tells a prepared request checked against an older view to be checked again.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "negotiation/process_set.h"

namespace hvdlite {

class ProcessSetTable {
 public:
  using Sets = std::map<int32_t, std::unique_ptr<ProcessSet>>;

  // Background thread. Reset: the global set only (id 0, every rank of world).
  void Reset(int size, MPI_Comm world, int32_t cache_capacity);
  ProcessSet &global() { return *sets_.at(0); }
  ProcessSet *Find(int32_t id);
  Sets &sets() { return sets_; }
  const Sets &sets() const { return sets_; }
  // A new set of these ranks (comm: this rank's communicator of it, or MPI_COMM_NULL); returns its id.
  int32_t Add(const std::vector<int32_t> &ranks, MPI_Comm comm, int32_t cache_capacity);
  // The id of a set with exactly these ranks, or -1.
  int32_t IdOf(const std::vector<int32_t> &ranks) const;
  void Erase(int32_t id) { sets_.erase(id); }
  void Clear() { sets_.clear(); }

  // Under the owner's lock. Publish copies the table's ranks for caller threads; Unpublish forgets them.
  void Publish();
  void Unpublish();
  uint64_t generation() const { return generation_; }
  // The published ranks of set id (false: no such set); this rank's place in it (-1: not a member or no set).
  bool PublishedRanks(int32_t id, std::vector<int32_t> *ranks) const;
  int PublishedRank(int32_t id) const;
  // Why this rank cannot submit tensor name to set id ("" when it can); *size: the set's size.
  std::string CheckMember(int32_t id, int rank, const std::string &name, int *size) const;

 private:
  Sets sets_;
  int32_t next_id_ = 1;
  std::map<int32_t, std::vector<int32_t>> published_ranks_;
  std::map<int32_t, int> published_rank_;
  uint64_t generation_ = 0;  // Publish calls
};

}  // namespace hvdlite
