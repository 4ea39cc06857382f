// The prefix cache (radix_cache.h).
#include "traces/radix_cache.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace kvtwin::traces {

// ---------------------------------------------------------------- the children's index

std::size_t RadixCache::ChildIndex::home(NodeId parent, std::int64_t hash) const {
  // splitmix64's finalizer over both keys: trace hashes are often small consecutive integers.
  std::uint64_t x = parent * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(hash);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<std::size_t>(x) & (slots_.size() - 1);
}

RadixCache::NodeId RadixCache::ChildIndex::find(NodeId parent, std::int64_t hash) const {
  if (slots_.empty()) return kRoot;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home(parent, hash);; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.child == kRoot) return kRoot;
    if (s.parent == parent && s.hash == hash) return s.child;
  }
}

void RadixCache::ChildIndex::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
  const std::size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.child == kRoot) continue;
    std::size_t i = home(s.parent, s.hash);
    while (slots_[i].child != kRoot) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

bool RadixCache::ChildIndex::insert(NodeId parent, std::int64_t hash, NodeId child) {
  KVTWIN_CHECK(child != kRoot, "the root is nobody's child");
  if ((used_ + 1) * 4 > slots_.size()) grow();  // at most a quarter full: probe runs stay short
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home(parent, hash);
  for (; slots_[i].child != kRoot; i = (i + 1) & mask)
    if (slots_[i].parent == parent && slots_[i].hash == hash) return false;  // one child per hash
  slots_[i] = Slot{parent, hash, child};
  ++used_;
  return true;
}

void RadixCache::ChildIndex::erase(NodeId parent, std::int64_t hash) {
  KVTWIN_CHECK(!slots_.empty(), "erasing a child the index holds");
  const std::size_t mask = slots_.size() - 1;
  std::size_t hole = home(parent, hash);
  for (;; hole = (hole + 1) & mask) {
    KVTWIN_CHECK(slots_[hole].child != kRoot, "erasing a child the index holds");
    if (slots_[hole].parent == parent && slots_[hole].hash == hash) break;
  }
  // Backward shift: every later slot of the run whose home is not in (hole, j] moves into the
  // hole, so that a lookup never meets an empty slot before its key.
  for (std::size_t j = (hole + 1) & mask; slots_[j].child != kRoot; j = (j + 1) & mask) {
    const std::size_t h = home(slots_[j].parent, slots_[j].hash);
    const bool stays = hole < j ? (h > hole && h <= j) : (h > hole || h <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = Slot{};
  --used_;
}

// ---------------------------------------------------------------- the cache

RadixCache::RadixCache(std::uint64_t block_pages) : block_pages_(block_pages) {
  KVTWIN_CHECK(block_pages > 0, "a cache block holds at least one page");
  row_of_.push_back(0);  // the root: row 0, never evicted
  rows_.emplace_back();
  pages_.assign(block_pages_, 0);
}

RadixCache::Row RadixCache::live_row(NodeId id) const {
  KVTWIN_CHECK(id < row_of_.size() && row_of_[id] != kDead, "a cache node id names a live node");
  return row_of_[id];
}

void RadixCache::touch(NodeId id, std::uint64_t now) {
  Node& n = live(id);
  if (is_evictable_leaf(n)) evictable_leaves_.erase({n.last_used, id});
  n.last_used = now;
  if (is_evictable_leaf(n)) evictable_leaves_.insert({n.last_used, id});
}

std::vector<RadixCache::NodeId> RadixCache::match(std::span<const std::int64_t> hashes, std::uint64_t now) {
  std::vector<NodeId> path;
  NodeId at = kRoot;
  for (std::int64_t h : hashes) {
    const NodeId child = children_.find(at, h);
    if (child == kRoot) break;
    at = child;
    path.push_back(at);
  }
  for (NodeId id : path) touch(id, now);
  return path;
}

void RadixCache::lock(const std::vector<NodeId>& path) {
  for (NodeId id : path) {
    Node& n = live(id);
    if (is_evictable_leaf(n)) evictable_leaves_.erase({n.last_used, id});
    if (n.refs == 0) evictable_pages_ -= block_pages_;
    ++n.refs;
  }
}

void RadixCache::unlock(const std::vector<NodeId>& path) {
  for (NodeId id : path) {
    Node& n = live(id);
    KVTWIN_CHECK(n.refs > 0, "unlocking a cache node nobody holds");
    --n.refs;
    if (n.refs == 0) evictable_pages_ += block_pages_;
    if (is_evictable_leaf(n)) evictable_leaves_.insert({n.last_used, id});
  }
}

RadixCache::NodeId RadixCache::insert(NodeId parent, std::int64_t hash, std::span<const std::int64_t> pages,
                                      std::uint64_t now) {
  KVTWIN_CHECK(pages.size() == block_pages_, "a cache block is exactly block_pages pages");
  const NodeId id = row_of_.size();
  {
    Node& p = live(parent);
    if (!children_.insert(parent, hash, id)) return kRoot;  // `parent` has that block already
    // The parent stops being a leaf: it leaves the evictable set (it was referenced anyway, by the
    // inserting request, unless it is the root).
    if (parent != kRoot && is_evictable_leaf(p)) evictable_leaves_.erase({p.last_used, parent});
    ++p.children;
  }
  Node n;
  n.parent = parent;
  n.hash = hash;
  n.refs = 1;
  n.last_used = now;
  Row row = 0;
  if (free_rows_.empty()) {
    KVTWIN_CHECK(rows_.size() < kDead, "the cache's live nodes fit its row numbers");
    row = static_cast<Row>(rows_.size());
    rows_.push_back(n);  // `p` above may dangle from here on
    pages_.insert(pages_.end(), pages.begin(), pages.end());
  } else {
    row = free_rows_.back();
    free_rows_.pop_back();
    rows_[row] = n;
    std::copy(pages.begin(), pages.end(), pages_.begin() + static_cast<std::ptrdiff_t>(std::uint64_t{row} * block_pages_));
  }
  row_of_.push_back(row);
  cached_pages_ += block_pages_;
  ++live_nodes_;
  return id;
}

std::vector<std::int64_t> RadixCache::evict(std::uint64_t pages_wanted) {
  EvictedBlocks out;
  evict_blocks(pages_wanted, out);
  return std::move(out.pages);
}

void RadixCache::evict_blocks(std::uint64_t pages_wanted, EvictedBlocks& out) {
  out.nodes.clear();
  out.pages.clear();
  std::uint64_t released = 0;
  while (released < pages_wanted && !evictable_leaves_.empty()) {
    const NodeId id = evictable_leaves_.begin()->second;
    evictable_leaves_.erase(evictable_leaves_.begin());
    const Row row = live_row(id);
    const Node n = rows_[row];
    KVTWIN_CHECK(is_evictable_leaf(n), "the evictable set holds only unreferenced leaves");
    released += block_pages_;
    out.nodes.push_back(id);
    const std::span<const std::int64_t> pages = pages_of_row(row);
    out.pages.insert(out.pages.end(), pages.begin(), pages.end());
    // Dead: its id never live again, its row free for the next node.
    row_of_[id] = kDead;
    free_rows_.push_back(row);
    cached_pages_ -= block_pages_;
    evictable_pages_ -= block_pages_;
    children_.erase(n.parent, n.hash);
    --live_nodes_;
    Node& p = live(n.parent);
    --p.children;
    if (n.parent != kRoot && is_evictable_leaf(p)) evictable_leaves_.insert({p.last_used, n.parent});
  }
}

bool RadixCache::consistent() const {
  std::uint64_t cached = 0, evictable = 0, leaves = 0;
  std::uint64_t live_count = 0;
  std::vector<std::uint64_t> children(row_of_.size(), 0);
  std::vector<bool> row_used(rows_.size(), false);
  if (row_of_.empty() || row_of_[kRoot] != 0 || pages_.size() != rows_.size() * block_pages_) return false;
  row_used[0] = true;
  const auto alive = [&](NodeId id) { return id < row_of_.size() && row_of_[id] != kDead; };
  for (NodeId id = kRoot + 1; id < row_of_.size(); ++id) {
    if (!alive(id)) continue;
    const Row row = row_of_[id];
    if (row >= rows_.size() || row_used[row]) return false;  // a row of its own
    row_used[row] = true;
    const Node& n = rows_[row];
    ++live_count;
    cached += block_pages_;
    if (n.refs == 0) evictable += block_pages_;
    if (!alive(n.parent)) return false;
    ++children[n.parent];
    if (children_.find(n.parent, n.hash) != id) return false;
    const Node& parent = rows_[row_of_[n.parent]];
    if (parent.refs < n.refs && n.parent != kRoot) return false;  // a path is locked whole
  }
  for (NodeId id = kRoot; id < row_of_.size(); ++id) {
    if (!alive(id)) continue;
    const Node& n = rows_[row_of_[id]];
    if (n.children != children[id]) return false;
    if (id != kRoot && is_evictable_leaf(n)) {
      ++leaves;
      if (evictable_leaves_.count({n.last_used, id}) == 0) return false;
    }
  }
  for (Row row : free_rows_)
    if (row >= row_used.size() || row_used[row]) return false;
  return cached == cached_pages_ && evictable == evictable_pages_ && leaves == evictable_leaves_.size() &&
         live_count == live_nodes_ && children_.size() == live_count &&
         live_count + 1 + free_rows_.size() == rows_.size();
}

}  // namespace kvtwin::traces
