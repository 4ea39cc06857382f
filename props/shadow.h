// The shadow: an independent, abstract model of a pool's tables that predicts what every
// operation must answer. The stateful properties compare the reference model with it after
// every command, and generators read it to produce mostly valid operations (ids of live
// allocations, existing batches, open readers).
//
// How it works: written apart from sim/ and in another style, from SPEC.md and
// docs/decisions.md directly. A side is a pair of maps (virtual <-> physical) and a set of
// holes; its occupied band is not tracked but derived from its size (bound + holes) and its
// end, and compaction is stated as "the band shrinks by K at its inner end: the still-bound
// pages past the new end move, ascending, onto the freed pages inside it, ascending". Batches,
// readers and graphs are plain records. apply(op) validates in the model's documented order,
// returns the expected result, and takes the step.
//
// What it does not cover: bytes. Rows, reads and the attention are the model's own business
// (its verify() checks them); here a read or a decode step is predicted by size only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"

namespace kvtwin::props {

// What an operation must answer. Errors compare by kind; bytes (a read, a decode step's
// attention) by size only.
struct Expectation {
  OpResult result = OpResult(Outcome(Done{}));
  bool bytes_by_size = false;
};

// nullopt when `actual` is what `expected` says; otherwise what differs, in words.
std::optional<std::string> mismatch(const Expectation& expected, const OpResult& actual);

struct ShadowSide {
  std::string name;
  bool grows_up = true;
  std::int64_t min_page = 1;
  std::int64_t num_pages = 0;
  std::uint64_t page_bytes = 0;
  std::map<std::int64_t, std::int64_t> v2p;  // bound virtual page -> physical page
  std::map<std::int64_t, std::int64_t> p2v;
  std::set<std::int64_t> holes;

  std::int64_t band_size() const { return static_cast<std::int64_t>(v2p.size() + holes.size()); }
  std::int64_t band_begin() const { return grows_up ? min_page : num_pages - band_size(); }
  std::int64_t band_end() const { return grows_up ? min_page + band_size() : num_pages; }
  std::int64_t physical(std::int64_t vpage) const {
    auto it = v2p.find(vpage);
    return it == v2p.end() ? -1 : it->second;
  }
};

struct ShadowBatch {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> loc;
  bool physical = false;
  std::vector<std::int64_t> encoder;
};

struct ShadowReader {
  std::size_t side = 0;
  std::set<std::int64_t> pages;
};

struct ShadowGraph {
  Capture shape;
  std::vector<std::int64_t> loc;
  std::vector<std::vector<std::int64_t>> table;
};

class PoolShadow {
 public:
  // The pool of a configuration that builds (an invariant failure otherwise).
  explicit PoolShadow(const PoolConfig& config);

  // Predicts what `op` must answer and takes the step (nothing changes on an error).
  Expectation apply(const Op& op);

  // The tables in the Backend's form, to compare with a backend's tables() exactly.
  PoolTables tables() const;

  // ---- what generators read
  const PoolConfig& config() const { return config_; }
  const PoolDerived& derived() const { return derived_; }
  std::int64_t page_size() const { return page_size_; }
  std::int64_t num_virtual() const { return sides_.front().num_pages; }
  bool is_composite() const { return sides_.size() == 2; }
  const std::vector<ShadowSide>& sides() const { return sides_; }
  const std::deque<std::int64_t>& free_queue() const { return free_queue_; }
  // Live allocations in the order they were made: each the virtual pages still bound of one
  // alloc (or one alloc_many request), in binding order.
  const std::vector<std::vector<std::int64_t>>& allocations() const { return allocations_; }
  const std::map<std::uint32_t, ShadowBatch>& batches() const { return batches_; }
  const std::map<std::uint32_t, ShadowReader>& readers() const { return readers_; }
  const std::map<std::uint32_t, ShadowGraph>& graphs() const { return graphs_; }
  // SPEC 5 translate of a virtual token through the owner's table.
  std::int64_t translate(std::int64_t token) const;
  // SPEC 4.3 SWA id of a full physical token id.
  std::int64_t swa_of(std::int64_t full_token) const;

 private:
  Expectation on(const BuildPool& op);
  Expectation on(const Alloc& op);
  Expectation on(const AllocMany& op);
  Expectation on(const Free& op);
  Expectation on(const FreeSwa& op);
  Expectation on(const Flush& op);
  Expectation on(const MovePages& op);
  Expectation on(const BeginRead& op);
  Expectation on(const EndRead& op);
  Expectation on(const MakeBatch& op);
  Expectation on(const Rebind& op);
  Expectation on(const Split& op);
  Expectation on(const DropBatch& op);
  Expectation on(const Write& op);
  Expectation on(const Read& op);
  Expectation on(const Translate& op);
  Expectation on(const SwaTranslate& op);
  Expectation on(const PageTable& op);
  Expectation on(const RemapIndices& op);
  Expectation on(const Capture& op);
  Expectation on(const Replay& op);
  Expectation on(const Checkpoint& op);

  struct SideMoves {
    std::size_t side = 0;
    std::set<std::int64_t> freed_virtual;
    std::set<std::int64_t> freed_physical;
    std::vector<std::pair<std::int64_t, std::int64_t>> moves;  // (src, dst)
    bool compact = false;
  };
  bool fits(std::int64_t pages) const;
  std::vector<std::int64_t> take(std::int64_t pages);
  SideMoves plan(std::size_t side, std::set<std::int64_t> freed_virtual, bool flush) const;
  bool held(std::size_t side, std::int64_t page) const;
  Expectation free_steps(const std::vector<SideMoves>& steps, bool release_ids);
  std::optional<ErrorKind> virtual_pages(IdUnit unit, const std::vector<std::int64_t>& ids,
                                         std::set<std::int64_t>& out) const;
  std::optional<ErrorKind> check_write(std::uint32_t model_layer, const std::vector<std::int64_t>& loc) const;
  std::int64_t slots(std::size_t side) const;

  PoolConfig config_;
  PoolDerived derived_;
  std::int64_t page_size_ = 1;
  bool lazy_ = false;
  std::vector<ShadowSide> sides_;
  std::deque<std::int64_t> free_queue_;
  std::vector<std::vector<std::int64_t>> allocations_;
  std::map<std::uint32_t, ShadowBatch> batches_;
  std::map<std::uint32_t, ShadowReader> readers_;
  std::map<std::uint32_t, ShadowGraph> graphs_;
};

}  // namespace kvtwin::props
