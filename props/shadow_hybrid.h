// The shadow of a hybrid chain (SPEC.md section 11): [state up | owner down] and the tri-pool
// [state up | swa float | owner down], predicted from SPEC 11 and docs/decisions.md directly,
// apart from sim/ and in another style.
//
// How it works: every end is described by where its bytes are, not by a watermark: the owner by
// the first page of its band (the band is [owner_low, num_pages)), the float by its span
// [float_low, float_high), the state by one past its last slot in the band (state_top). Bound
// pages are maps, holes sets. An allocation is predicted by asking "how many whole pages lie
// between the ends" at each step, as a person would draw it; a relocation is "the live pages,
// ascending, laid side by side in the middle of the room left". Readers are a map of held pages per
// sub-pool; the quarantine is "slots moved away while held, still held".
//
// What it predicts: allocation (alloc, alloc_many), frees (free, free_swa, flush), the state
// sub-pool's operations (their answers; a state read by size, and byte for byte in the rows whose
// last state_write it knows), readers (begin_read, end_read) and the whole tables after every
// operation. What it does not: the write and read doors,
// translation, batches, moves, decode steps (`predicted` is false: the model's own checks and the
// table invariants hold those).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"

namespace kvtwin::props {

class HybridShadow {
 public:
  explicit HybridShadow(const PoolConfig& config, const PoolDerived& derived);

  // What `op` must answer (nullopt: not predicted), taking the step.
  std::optional<OpResult> apply(const Op& op);
  PoolTables tables() const;

  // The rows of the last state_read whose bytes the shadow knows (the oracle's state of the
  // slot's last state_write; zeros below the first usable slot); a row not known is checked by
  // size. Known contents are forgotten at any operation that may write bytes the shadow does not
  // follow (a token write, a decode step, a raw move).
  struct KnownRows {
    std::uint64_t row_bytes = 0;
    std::vector<std::uint8_t> bytes;
    std::vector<bool> known;
  };
  const std::optional<KnownRows>& last_read_rows() const { return last_rows_; }

 private:
  struct End {
    std::string name;
    std::int64_t min_page = 0, num_pages = 0;
    std::uint64_t page_bytes = 0;
    std::map<std::int64_t, std::int64_t> v2p, p2v;
    std::set<std::int64_t> holes;
  };
  struct Move {
    std::int64_t src, dst;
  };

  std::optional<OpResult> alloc(std::uint64_t pages, const std::vector<std::uint64_t>* split);
  std::optional<OpResult> free(const Free& op);
  std::optional<OpResult> free_swa(const FreeSwa& op);
  std::optional<OpResult> flush();
  std::optional<OpResult> state_alloc(const StateAlloc& op);
  std::optional<OpResult> state_free(const StateFree& op);
  std::optional<OpResult> state_read(const StateRead& op);
  std::optional<OpResult> begin_read(const BeginRead& op);
  std::optional<OpResult> end_read(const EndRead& op);

  bool tri() const { return float_.has_value(); }
  // One past the last byte the state sub-pool uses: its band, or its highest quarantined slot.
  std::uint64_t state_end_bytes() const;
  std::uint64_t owner_begin_bytes() const { return static_cast<std::uint64_t>(owner_low_) * owner_.page_bytes; }
  bool held(const std::string& sub_pool, std::int64_t page) const;
  // The float's live pages, ascending, laid side by side from `first`: the moves that do it, in
  // an order where every destination is free when written.
  std::vector<Move> pack_float(std::int64_t first) const;
  void apply_float_moves(const std::vector<Move>& moves, std::int64_t first);
  // Holes at the span's ends leave it; an empty float keeps none and is a point.
  void tidy_float(bool absorb);
  // The owner's band packed again after `freed` pages left it (SPEC 4.1 for a band that grows
  // down: it shrinks at its low end; bound pages below the new low end move up onto freed pages
  // above it, both ascending).
  std::vector<Move> owner_compaction(const std::set<std::int64_t>& freed) const;
  std::vector<Move> state_compaction(const std::set<std::int64_t>& freed) const;

  bool lazy_ = false;
  bool tables_only_ = false;
  std::int64_t page_size_ = 1;
  std::deque<std::int64_t> queue_;  // the owner's free virtual pages
  End owner_;
  std::int64_t owner_low_ = 0;
  std::optional<End> float_;
  std::int64_t float_low_ = 0, float_high_ = 0;
  End state_;
  std::int64_t state_top_ = 0;
  std::deque<std::int64_t> state_queue_;
  std::map<std::uint64_t, std::int64_t> requests_;  // request -> virtual slot
  std::set<std::int64_t> quarantine_;
  std::map<std::uint32_t, std::pair<std::string, std::set<std::int64_t>>> readers_;
  std::uint64_t seed_ = 0;
  std::map<std::int64_t, std::pair<std::uint64_t, std::uint64_t>> contents_;  // virtual slot -> (request, write)
  std::vector<DType> state_block_dtypes_;
  std::optional<KnownRows> last_rows_;
  std::vector<std::string> state_blocks_;
  std::vector<std::uint64_t> state_block_bytes_;
  std::uint32_t state_layers_ = 0;
};

}  // namespace kvtwin::props
