// Nodes of a node-based container (unordered_map, unordered_set) kept for reuse: the per-request
// bookkeeping (names in flight, pending entries) then costs no heap allocation once the pool has seen the
// most requests in flight at once. Not thread-safe: guard it with its container's lock.
// A map's value is recycled as its node is kept: it needs a Recycle() (an Entry's keeps its buffers).
#pragma once
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace hvdlite {

template <typename Container>
class NodePool {
 public:
  using Node = typename Container::node_type;
  using Key = typename Container::key_type;

  // Sets: inserts key, in a spare node when there is one; false when it was there already.
  bool Insert(Container &c, const Key &key) {
    if (spare_.empty()) return c.insert(key).second;
    Node node = Take();
    node.value() = key;  // assigning a string reuses the node's buffer
    auto result = c.insert(std::move(node));
    if (!result.inserted) Keep(std::move(result.node));
    return result.inserted;
  }

  // Maps: inserts (key, value) unless key is there already, swapping value with a spare node's reset one, so
  // that value gets that one's buffers for its next use. The value as stored, or null when key was there
  // (value then unchanged).
  template <typename Map = Container>  // Map: mapped_type is looked up only for maps
  typename Map::mapped_type *Adopt(Container &c, const Key &key, typename Map::mapped_type &value) {
    if (spare_.empty()) {
      auto [it, inserted] = c.try_emplace(key, std::move(value));
      return inserted ? &it->second : nullptr;
    }
    Node node = Take();
    node.key() = key;
    std::swap(node.mapped(), value);
    auto result = c.insert(std::move(node));
    if (!result.inserted) {
      std::swap(result.node.mapped(), value);
      Keep(std::move(result.node));
      return nullptr;
    }
    return &result.position->second;
  }

  // Takes key's element out of c, keeping its node for reuse. A map's value is recycled first: what it owned
  // (an output) is freed now, not when the node is reused; an Entry keeps only its emptied name and shape.
  void Erase(Container &c, const Key &key) { Keep(c.extract(key)); }

  // Erase for every element that drop accepts, by position: no key is hashed again.
  template <typename Predicate>
  void EraseIf(Container &c, Predicate drop) {
    for (auto it = c.begin(); it != c.end();) {
      auto here = it++;
      if (drop(*here)) Keep(c.extract(here));
    }
  }

 private:
  // Bounded, so that a burst of requests in flight does not pin its memory for the life of the job.
  static constexpr size_t kMaxSpare = 4096;

  Node Take() {
    Node node = std::move(spare_.back());
    spare_.pop_back();
    return node;
  }
  void Keep(Node node) {
    if (node.empty() || spare_.size() >= kMaxSpare) return;
    if constexpr (IsMap<Container>::value) node.mapped().Recycle();
    spare_.push_back(std::move(node));
  }

  template <typename C, typename = void>
  struct IsMap : std::false_type {};
  template <typename C>
  struct IsMap<C, std::void_t<typename C::mapped_type>> : std::true_type {};

  std::vector<Node> spare_;
};

}  // namespace hvdlite
