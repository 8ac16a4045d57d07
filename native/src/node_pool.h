// Nodes of a node-based map (unordered_map) kept for reuse: the per-request bookkeeping (the entries of
// requests by name) then costs no heap allocation once the pool has seen the most requests held at once.
// A value is recycled as its node is kept: it needs a Recycle() (an Entry's keeps its buffers).
// Not thread-safe: guard it with its map's lock.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace hvdlite {

template <typename Map>
class NodePool {
 public:
  using Node = typename Map::node_type;
  using Key = typename Map::key_type;
  using Value = typename Map::mapped_type;

  // Inserts key, in a spare node when there is one (its recycled value keeps its buffers). Returns the value
  // of key, and whether it is new (false: the one that was there).
  std::pair<Value *, bool> Insert(Map &m, const Key &key) {
    if (spare_.empty()) {
      auto [it, inserted] = m.try_emplace(key);
      return {&it->second, inserted};
    }
    Node node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;  // assigning a string reuses the node's buffer
    auto result = m.insert(std::move(node));
    if (!result.inserted) Keep(std::move(result.node));
    return {&result.position->second, result.inserted};
  }

  // Takes key's element out of m, keeping its node for reuse; its value is recycled now (what it owned, an
  // output, is freed now, not when the node is reused).
  void Erase(Map &m, const Key &key) { Keep(m.extract(key)); }

 private:
  // Bounded, so that a burst of requests does not pin its memory for the life of the job.
  static constexpr size_t kMaxSpare = 4096;

  void Keep(Node node) {
    if (node.empty() || spare_.size() >= kMaxSpare) return;
    node.mapped().Recycle();
    spare_.push_back(std::move(node));
  }

  std::vector<Node> spare_;
};

}  // namespace hvdlite
