// The prefix cache (radix_cache.h).
#include "traces/radix_cache.h"

#include <utility>

#include "core/check.h"

namespace kvtwin::traces {

RadixCache::RadixCache(std::uint64_t block_pages) : block_pages_(block_pages) {
  KVTWIN_CHECK(block_pages > 0, "a cache block holds at least one page");
  nodes_.emplace_back();
  nodes_[kRoot].alive = true;
}

RadixCache::Node& RadixCache::live(NodeId id) {
  KVTWIN_CHECK(id < nodes_.size() && nodes_[id].alive, "a cache node id names a live node");
  return nodes_[id];
}

const RadixCache::Node& RadixCache::live(NodeId id) const {
  KVTWIN_CHECK(id < nodes_.size() && nodes_[id].alive, "a cache node id names a live node");
  return nodes_[id];
}

void RadixCache::touch(NodeId id, std::uint64_t now) {
  Node& n = live(id);
  if (is_evictable_leaf(n)) evictable_leaves_.erase({n.last_used, id});
  n.last_used = now;
  if (is_evictable_leaf(n)) evictable_leaves_.insert({n.last_used, id});
}

std::vector<RadixCache::NodeId> RadixCache::match(const std::vector<std::int64_t>& hashes, std::uint64_t now) {
  std::vector<NodeId> path;
  NodeId at = kRoot;
  for (std::int64_t h : hashes) {
    const Node& n = live(at);
    auto child = n.children.find(h);
    if (child == n.children.end()) break;
    at = child->second;
    path.push_back(at);
  }
  for (NodeId id : path) touch(id, now);
  return path;
}

void RadixCache::lock(const std::vector<NodeId>& path) {
  for (NodeId id : path) {
    Node& n = live(id);
    if (is_evictable_leaf(n)) evictable_leaves_.erase({n.last_used, id});
    if (n.refs == 0) evictable_pages_ -= n.pages.size();
    ++n.refs;
  }
}

void RadixCache::unlock(const std::vector<NodeId>& path) {
  for (NodeId id : path) {
    Node& n = live(id);
    KVTWIN_CHECK(n.refs > 0, "unlocking a cache node nobody holds");
    --n.refs;
    if (n.refs == 0) evictable_pages_ += n.pages.size();
    if (is_evictable_leaf(n)) evictable_leaves_.insert({n.last_used, id});
  }
}

RadixCache::NodeId RadixCache::insert(NodeId parent, std::int64_t hash, std::vector<std::int64_t> pages,
                                      std::uint64_t now) {
  KVTWIN_CHECK(pages.size() == block_pages_, "a cache block is exactly block_pages pages");
  Node& p = live(parent);
  if (p.children.count(hash) != 0) return kRoot;
  // The parent stops being a leaf: it leaves the evictable set (it was referenced anyway, by the
  // inserting request, unless it is the root).
  if (parent != kRoot && is_evictable_leaf(p)) evictable_leaves_.erase({p.last_used, parent});
  const NodeId id = nodes_.size();
  p.children.emplace(hash, id);
  Node n;
  n.alive = true;
  n.parent = parent;
  n.hash = hash;
  n.pages = std::move(pages);
  n.refs = 1;
  n.last_used = now;
  cached_pages_ += n.pages.size();
  nodes_.push_back(std::move(n));
  ++live_nodes_;
  return id;
}

std::vector<std::int64_t> RadixCache::evict(std::uint64_t pages_wanted) {
  std::vector<std::int64_t> released;
  for (EvictedBlock& b : evict_blocks(pages_wanted)) released.insert(released.end(), b.pages.begin(), b.pages.end());
  return released;
}

std::vector<RadixCache::EvictedBlock> RadixCache::evict_blocks(std::uint64_t pages_wanted) {
  std::vector<EvictedBlock> blocks;
  std::uint64_t released = 0;
  while (released < pages_wanted && !evictable_leaves_.empty()) {
    const NodeId id = evictable_leaves_.begin()->second;
    evictable_leaves_.erase(evictable_leaves_.begin());
    Node& n = live(id);
    KVTWIN_CHECK(is_evictable_leaf(n), "the evictable set holds only unreferenced leaves");
    const std::uint64_t pages = n.pages.size();
    released += pages;
    blocks.push_back(EvictedBlock{id, std::move(n.pages)});  // the node dies below
    cached_pages_ -= pages;
    evictable_pages_ -= pages;
    const NodeId parent = n.parent;
    live(parent).children.erase(n.hash);
    n = Node{};  // dead: its pages and children released, never live again
    --live_nodes_;
    if (parent != kRoot && is_evictable_leaf(live(parent)))
      evictable_leaves_.insert({live(parent).last_used, parent});
  }
  return blocks;
}

bool RadixCache::consistent() const {
  std::uint64_t cached = 0, evictable = 0, leaves = 0;
  std::uint64_t live_count = 0;
  for (NodeId id = kRoot + 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.alive) continue;
    ++live_count;
    cached += n.pages.size();
    if (n.refs == 0) evictable += n.pages.size();
    if (is_evictable_leaf(n)) {
      ++leaves;
      if (evictable_leaves_.count({n.last_used, id}) == 0) return false;
    }
    if (n.parent >= nodes_.size() || !nodes_[n.parent].alive) return false;
    const Node& parent = nodes_[n.parent];
    auto it = parent.children.find(n.hash);
    if (it == parent.children.end() || it->second != id) return false;
    if (parent.refs < n.refs && n.parent != kRoot) return false;  // a path is locked whole
  }
  return cached == cached_pages_ && evictable == evictable_pages_ && leaves == evictable_leaves_.size() &&
         live_count == live_nodes_;
}

}  // namespace kvtwin::traces
