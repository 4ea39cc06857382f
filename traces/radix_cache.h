// The serving simulator's prefix cache: a tree over prompt blocks (a radix tree whose edges are
// one block each), so that requests whose prompts share leading blocks share those blocks' pages.
//
// A node is one block of `block_pages` virtual pages, keyed by its block hash under its parent.
// A running request holds a reference on every node of its matched path; a node nobody
// references is evictable, and eviction takes the least recently used unreferenced leaf first
// (ties: the older node), which may make its parent an evictable leaf in turn. The cache never
// talks to a pool: evict() returns the pages the caller must free, insert() takes pages the
// caller already filled. Eviction order depends only on the sequence of calls: node ids are
// handed out in sequence and index a vector, and the evictable set is ordered by (last use, id).
// The storage is flat (a whole-trace replay makes a node per block): a live node is a plain row
// of one vector and its pages the same row of another (an evicted node's row is reused; an id,
// never reused, keeps only its row number), and a node's children are found by (parent, hash) in
// one open-addressing table, which is only ever looked up, never walked, so its layout is never
// observable. The host tier below it is the serving simulator's (serving_sim.h).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace kvtwin::traces {

class RadixCache {
 public:
  using NodeId = std::uint64_t;
  static constexpr NodeId kRoot = 0;

  explicit RadixCache(std::uint64_t block_pages);

  // The longest cached prefix of `hashes`: the nodes along it, root excluded. Touches them (LRU).
  std::vector<NodeId> match(std::span<const std::int64_t> hashes, std::uint64_t now);
  std::vector<NodeId> match(const std::vector<std::int64_t>& hashes, std::uint64_t now) {
    return match(std::span<const std::int64_t>(hashes), now);
  }

  // Adds one reference to each node (a request starts using them) / drops one.
  void lock(const std::vector<NodeId>& path);
  void unlock(const std::vector<NodeId>& path);

  // Inserts block `hash` under `parent` with its pages (block_pages of them), referenced once
  // (by the inserting request). Returns the new node, or nullopt-like kRoot when `parent` already
  // has a child with that hash (the caller keeps its pages private).
  NodeId insert(NodeId parent, std::int64_t hash, std::span<const std::int64_t> pages, std::uint64_t now);
  NodeId insert(NodeId parent, std::int64_t hash, const std::vector<std::int64_t>& pages, std::uint64_t now) {
    return insert(parent, hash, std::span<const std::int64_t>(pages), now);
  }

  // Evicts least recently used unreferenced leaves until at least `pages_wanted` pages are
  // released or nothing is evictable; returns the released pages in eviction order.
  std::vector<std::int64_t> evict(std::uint64_t pages_wanted);
  // The same, block by block: each evicted node's id (dead from now on) and its pages, in
  // eviction order (a host tier offloads a block under its node's key before its pages are freed).
  struct EvictedBlocks {
    std::vector<NodeId> nodes;
    std::vector<std::int64_t> pages;  // block_pages a node: nodes[i]'s are [i * block_pages, (i + 1) * block_pages)
    std::span<const std::int64_t> pages_of(std::size_t i, std::uint64_t block_pages) const {
      return std::span<const std::int64_t>(pages).subspan(i * block_pages, block_pages);
    }
  };
  // Fills `out` (cleared first; its storage reused).
  void evict_blocks(std::uint64_t pages_wanted, EvictedBlocks& out);

  std::span<const std::int64_t> pages(NodeId node) const {
    return node == kRoot ? std::span<const std::int64_t>() : pages_of_row(live_row(node));  // the root holds none
  }
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
    std::uint64_t refs = 0;
    std::uint64_t last_used = 0;
    std::uint64_t children = 0;  // live children
  };
  using Row = std::uint32_t;
  static constexpr Row kDead = UINT32_MAX;  // the row of an evicted node's id

  // (parent, block hash) -> child, by open addressing with linear probing (deletion shifts the
  // run back, so no tombstones). Never iterated: nothing observable depends on its layout.
  class ChildIndex {
   public:
    NodeId find(NodeId parent, std::int64_t hash) const;  // kRoot when absent
    // Adds the child unless `parent` has one with that hash already (then false, nothing changed).
    bool insert(NodeId parent, std::int64_t hash, NodeId child);
    void erase(NodeId parent, std::int64_t hash);
    std::uint64_t size() const { return used_; }

   private:
    struct Slot {
      NodeId parent = kRoot;
      std::int64_t hash = 0;
      NodeId child = kRoot;  // kRoot: an empty slot (the root is nobody's child)
    };
    std::size_t home(NodeId parent, std::int64_t hash) const;
    void grow();
    std::vector<Slot> slots_;
    std::uint64_t used_ = 0;
  };

  Row live_row(NodeId id) const;
  Node& live(NodeId id) { return rows_[live_row(id)]; }
  const Node& live(NodeId id) const { return rows_[live_row(id)]; }
  std::span<const std::int64_t> pages_of_row(Row row) const {
    return std::span<const std::int64_t>(pages_).subspan(std::uint64_t{row} * block_pages_, block_pages_);
  }

  static bool is_evictable_leaf(const Node& n) { return n.refs == 0 && n.children == 0; }
  void touch(NodeId id, std::uint64_t now);

  std::uint64_t block_pages_;
  std::vector<Row> row_of_;  // by id (handed out in sequence, never reused): its row, or kDead
  std::vector<Node> rows_;   // the live nodes (the root at row 0)
  std::vector<std::int64_t> pages_;  // block_pages a row: row r's node's pages (the root's unused)
  std::vector<Row> free_rows_;       // rows of evicted nodes, reused latest freed first
  ChildIndex children_;
  std::uint64_t live_nodes_ = 0;  // root excluded
  std::set<std::pair<std::uint64_t, NodeId>> evictable_leaves_;  // (last_used, id)
  std::uint64_t cached_pages_ = 0;
  std::uint64_t evictable_pages_ = 0;
};

}  // namespace kvtwin::traces
