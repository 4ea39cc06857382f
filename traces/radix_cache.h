// The serving simulator's prefix cache: a tree over prompt blocks (a radix tree whose edges are
// one block each), so that requests whose prompts share leading blocks share those blocks' pages.
//
// A node is one block of `block_pages` virtual pages, keyed by its block hash under its parent.
// A running request holds a reference on every node of its matched path; a node nobody
// references is evictable, and eviction takes the least recently used unreferenced leaf first
// (ties: the older node), which may make its parent an evictable leaf in turn. The cache never
// talks to a pool: evict() returns the pages the caller must free, insert() takes pages the
// caller already filled. Everything is ordered (node ids are handed out in sequence and index a
// vector; children and the evictable set are std::map / std::set), so eviction order depends only
// on the sequence of calls. The host tier below it is the serving simulator's (serving_sim.h).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace kvtwin::traces {

class RadixCache {
 public:
  using NodeId = std::uint64_t;
  static constexpr NodeId kRoot = 0;

  explicit RadixCache(std::uint64_t block_pages);

  // The longest cached prefix of `hashes`: the nodes along it, root excluded. Touches them (LRU).
  std::vector<NodeId> match(const std::vector<std::int64_t>& hashes, std::uint64_t now);

  // Adds one reference to each node (a request starts using them) / drops one.
  void lock(const std::vector<NodeId>& path);
  void unlock(const std::vector<NodeId>& path);

  // Inserts block `hash` under `parent` with its pages (block_pages of them), referenced once
  // (by the inserting request). Returns the new node, or nullopt-like kRoot when `parent` already
  // has a child with that hash (the caller keeps its pages private).
  NodeId insert(NodeId parent, std::int64_t hash, std::vector<std::int64_t> pages, std::uint64_t now);

  // Evicts least recently used unreferenced leaves until at least `pages_wanted` pages are
  // released or nothing is evictable; returns the released pages in eviction order.
  std::vector<std::int64_t> evict(std::uint64_t pages_wanted);
  // The same, block by block: each evicted node's id (dead from now on) and its pages, in
  // eviction order (a host tier offloads a block under its node's key before its pages are freed).
  struct EvictedBlock {
    NodeId node = kRoot;
    std::vector<std::int64_t> pages;
  };
  std::vector<EvictedBlock> evict_blocks(std::uint64_t pages_wanted);

  const std::vector<std::int64_t>& pages(NodeId node) const { return live(node).pages; }
  std::uint64_t cached_pages() const { return cached_pages_; }
  std::uint64_t evictable_pages() const { return evictable_pages_; }
  std::uint64_t node_count() const { return live_nodes_; }
  std::uint64_t block_pages() const { return block_pages_; }

  // Recounts everything from scratch and compares with the counters (for tests); true when sound.
  bool consistent() const;

 private:
  struct Node {
    NodeId parent = kRoot;
    std::int64_t hash = 0;
    std::vector<std::int64_t> pages;
    std::map<std::int64_t, NodeId> children;
    std::uint64_t refs = 0;
    std::uint64_t last_used = 0;
    bool alive = false;  // false once evicted (its id is never handed out again)
  };

  Node& live(NodeId id);
  const Node& live(NodeId id) const;

  bool is_evictable_leaf(const Node& n) const { return n.refs == 0 && n.children.empty(); }
  void touch(NodeId id, std::uint64_t now);

  std::uint64_t block_pages_;
  // Indexed by id; evicted nodes stay as dead rows. A deque: growing never moves the nodes (a
  // vector's growth moved every node, a tenth of a whole-trace replay).
  std::deque<Node> nodes_;
  std::uint64_t live_nodes_ = 0;  // root excluded
  std::set<std::pair<std::uint64_t, NodeId>> evictable_leaves_;  // (last_used, id)
  std::uint64_t cached_pages_ = 0;
  std::uint64_t evictable_pages_ = 0;
};

}  // namespace kvtwin::traces
