// Write locs and their mark (SPEC.md section 6): forward batches with their out_cache_loc and
// mark, rebind, split, for_batch / for_layer, the unified pool's mark check, the per-layer lane
// locs (the SWA loc derived from the full physical loc, SPEC 4.3), and duplicate detection.
//
// How it works: a Batch is plain data (per lane: the intended virtual token, the current loc,
// the encoder loc) plus one mark. Every function here is pure: it returns a new batch or a
// checked loc, or an error value whose message says how to fix the input. The model decides
// when to store results, so a refused call changes nothing.
//
// What it does not cover: writing bytes (the model scatters rows through pool_bytes.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "core/model.h"
#include "core/op.h"
#include "core/result.h"

namespace kvtwin::sim {

// A forward batch (docs/decisions.md "Write locs").
struct Batch {
  std::vector<std::int64_t> tokens;       // per lane: the virtual token whose rows the lane writes (-1: padding)
  std::vector<std::int64_t> loc;          // out_cache_loc, one per lane
  bool physical = false;                  // out_cache_loc_is_physical
  std::vector<std::int64_t> encoder_loc;  // encoder_out_cache_loc: empty, or one per lane; never marked
  bool operator==(const Batch&) const = default;
};

// A write loc (SPEC 6): the ids a write door writes to, with the mark saying which space they
// are in, and per lane the virtual token whose row it writes. A view: it borrows the lanes of the
// batch (or op) it was made from, which outlive the write it is made for.
struct WriteLoc {
  std::span<const std::int64_t> loc;
  bool physical = false;
  std::span<const std::int64_t> tokens;
  // Where the lanes come from, when they are a batch's that no op changed since `epoch` (the
  // model's count of batch-changing ops): equal sources have equal lanes. Empty: compare lanes.
  struct Source {
    std::uint32_t batch = 0;
    std::uint64_t epoch = 0;
    bool encoder = false;  // the batch's encoder loc, not its out_cache_loc
    bool operator==(const Source&) const = default;
  };
  std::optional<Source> source;
};

// Per sub-pool, the last loc a check passed: a write door validates the same loc once for all the
// layers of a batch, each written by an op of its own. A batch's loc is known by its source (the
// batch, unchanged since); a loc without one (explicit, or derived from the tables) is compared by
// content, so a loc that changed (or another batch's) is checked again.
class RememberedLocs {
 public:
  bool holds(std::size_t side, const WriteLoc& from, std::span<const std::int64_t> locs) const {
    if (side >= by_side_.size() || !by_side_[side]) return false;
    const Entry& e = *by_side_[side];
    if (from.source) return e.source == from.source;  // the same unchanged lanes, or checked again
    return !e.source && std::equal(locs.begin(), locs.end(), e.locs.begin(), e.locs.end());
  }
  void remember(std::size_t side, const WriteLoc& from, std::span<const std::int64_t> locs) {
    if (by_side_.size() <= side) by_side_.resize(side + 1);
    std::optional<Entry>& e = by_side_[side];
    if (!e) e.emplace();
    e->source = from.source;
    // A batch's lanes are known by their source: no copy of them (a copy a batch per check).
    if (from.source)
      e->locs.clear();
    else
      e->locs.assign(locs.begin(), locs.end());  // into the last loc's storage
  }
  void clear() { by_side_.clear(); }

 private:
  struct Entry {
    std::vector<std::int64_t> locs;
    std::optional<WriteLoc::Source> source;
  };
  std::vector<std::optional<Entry>> by_side_;
};

// The most lanes one batch or loc may have (a bound against runaway widths in traces).
inline constexpr std::uint64_t kMaxLanes = std::uint64_t{1} << 20;

// `batch`: out_cache_loc starts as the tokens (virtual, unmarked). The lanes are put into
// `into`, whatever it held (its vectors' capacity is reused: a forward batch a step, each about
// as wide as the last, allocates nothing); a refusal leaves `into` as it was.
Status make_batch(const MakeBatch& op, Batch& into);

// `rebind` (SPEC 6): loc[i] = translate(tokens[i]) for the batch's lanes, lanes past them up to
// out_width hold the sink, and the loc is marked physical. Rebinding again re-resolves the
// virtual tokens (so a loc made stale by a compaction is refreshed). In place, in the batch's
// own storage; a refusal leaves the batch as it was.
Status rebind_batch(Batch& batch, std::uint64_t out_width, const std::vector<std::int64_t>& v2p,
                    std::int64_t page_size);

// `split` (SPEC 6): lanes [0, at) and [at, n); both children copy the parent's mark.
Result<std::pair<Batch, Batch>> split_batch(const Batch& batch, std::uint64_t at);

// for_batch: the batch's loc with the batch's mark, nothing else.
WriteLoc for_batch(const Batch& batch);
// for_layer: the same, except that a cross-attention layer gets the encoder loc, never marked.
// A cross-attention layer of a batch without an encoder loc is an error.
Result<WriteLoc> for_layer(const Batch& batch, LayerKind kind, std::uint32_t model_layer);

// SPEC 6: a unified pool's write door refuses an unmarked loc, and says how to mark it.
Status check_mark(const WriteLoc& loc, std::uint32_t model_layer);

// Which check last saw each slot, by epoch, so that the duplicate check of a write costs its
// lanes rather than a sort (one per model; slots up to kMaxLocStampSlots, a sort beyond). The
// stamps come zeroed from calloc, which a large allocation gets from the system as pages mapped
// on first touch: a pool of millions of slots pays for the slots its writes reach, not for all of
// them (a 1 TiB pool's 8 Mi slots, filled with zeros up front, took longer than replaying a
// whole public trace). Four bytes a slot (a page's slots in one cache line or two): the earlier
// lane of a refused duplicate is found again by a scan of the lanes before it.
struct LocStamp {
  std::uint32_t epoch = 0;  // the check that last saw the slot (0: none)
};
struct LocStamps {
  struct Free {
    void operator()(LocStamp* p) const;
  };
  std::unique_ptr<LocStamp[], Free> at;
  std::size_t slots = 0;
  std::uint32_t current = 0;
};
inline constexpr std::uint64_t kMaxLocStampSlots = std::uint64_t{1} << 23;

// Duplicate non-sink locs in one write are invalid input (SPEC 6). `sink_end` is the first
// token id past the sink pages; ids below it are sink lanes and are ignored.
// With `stamps` and the sub-pool's `slots`, it costs the lanes; without, a sort.
Status check_duplicates(std::span<const std::int64_t> locs, std::int64_t sink_end, std::uint32_t model_layer,
                        const std::string& sub_pool,
                        LocStamps* stamps = nullptr, std::int64_t slots = 0);

}  // namespace kvtwin::sim
