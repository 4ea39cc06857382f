// The multi-ended page allocator of SPEC.md section 4: one AllocatorSide per sub-pool (its
// v2p/p2v tables, watermark, lazy-mode holes and grow direction) and a PageAllocator for the
// chain of one or two sides sharing one byte buffer (the owner's free virtual-id queue, the
// joint capacity of a full + SWA composite, free / free_swa / flush planning).
//
// How it works: every mutating operation is split into a pure *plan* (which pages, which moves,
// computed from the current tables without touching them) and a *commit* that applies exactly
// that plan. The model checks a plan against open readers (SPEC 7) and only then commits it, so
// a refused operation leaves the tables as they were. Every policy choice (which virtual id,
// which physical page, how survivors and holes are paired) is written out next to the SPEC rule
// it implements, so a second implementation can match it byte for byte.
//
// What it does not cover: bytes (pool_bytes.h moves them), readers (model.h), argument
// validation with user-facing messages (model.cpp validates, then calls in here; broken
// preconditions here are invariant failures).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/pool_config.h"
#include "core/sizing.h"

namespace kvtwin::sim {


// One page move of a compaction: copy the envelope of physical page `src` to `dst`.
struct PagePair {
  std::int64_t src = 0;
  std::int64_t dst = 0;
  bool operator==(const PagePair&) const = default;
};

// Pairs compaction survivors with holes. SPEC 4.1: both ascending, paired in order.
using PairingRule = std::function<std::vector<PagePair>(const std::vector<std::int64_t>& survivors,
                                                        const std::vector<std::int64_t>& holes)>;
std::vector<PagePair> pair_in_order(const std::vector<std::int64_t>& survivors,
                                    const std::vector<std::int64_t>& holes);

// What compacting one side will do (SPEC 4.1). Pure data; AllocatorSide::apply_compaction commits it.
struct CompactionPlan {
  std::int64_t new_watermark = 0;
  std::int64_t new_span_low = 0;        // a float's relocation (SPEC 11): the packed span's first page
  std::vector<std::int64_t> freed;      // the freed physical pages (holes of the band), ascending
  std::vector<std::int64_t> survivors;  // still-bound pages in the band's shrinking end, ascending
  std::vector<std::int64_t> holes;      // freed pages that stay inside the new band, ascending
  std::vector<PagePair> moves;          // survivors paired with holes
};

class AllocatorSide {
 public:
  // A float middle (SPEC 11, direction float_middle) starts as the empty span [start, start).
  AllocatorSide(const SubPoolGeometry& geometry, std::int64_t num_virtual, CompactionMode mode,
                std::int64_t float_start_page = 0);

  const SubPoolGeometry& geometry() const { return geometry_; }
  const std::string& name() const { return geometry_.name; }
  bool grows_up() const { return geometry_.direction == GrowDirection::up; }
  // The float middle of a tri-pool (SPEC 11): its band is the span [span_low, watermark).
  bool floats() const { return geometry_.direction == GrowDirection::float_middle; }
  std::int64_t span_low() const { return span_low_; }
  std::int64_t page_size() const { return static_cast<std::int64_t>(geometry_.page_size); }
  std::int64_t num_pages() const { return static_cast<std::int64_t>(geometry_.num_pages); }
  std::int64_t min_page() const { return static_cast<std::int64_t>(geometry_.min_page_index); }
  std::uint64_t page_bytes() const { return geometry_.page_bytes; }

  // Tables as SPEC 4 defines them: v2p[num_virtual + 1], p2v[num_pages + 1], sink row 0, -1 sentinel last.
  const std::vector<std::int64_t>& v2p() const { return v2p_; }
  const std::vector<std::int64_t>& p2v() const { return p2v_; }
  std::int64_t watermark() const { return watermark_; }
  const std::set<std::int64_t>& holes() const { return holes_; }
  std::uint64_t allocated_pages() const { return allocated_; }

  // Test seam: every field of the tables, writable, so that a test can corrupt one and see the
  // checks (verify, the state digest) notice.
  struct TablesForTest {
    std::vector<std::int64_t>& v2p;
    std::vector<std::int64_t>& p2v;
    std::int64_t& watermark;
    std::set<std::int64_t>& holes;
    std::uint64_t& allocated;
    std::int64_t& span_low;
  };
  TablesForTest tables_for_test() { return {v2p_, p2v_, watermark_, holes_, allocated_, span_low_}; }

  // What changed since clear_changes(): the virtual pages whose v2p row and the physical pages
  // whose p2v row or hole status bind, unbind and apply_compaction wrote (repeats allowed). The
  // incremental invariant check reads only these (core/table_check.h).
  const std::vector<std::int64_t>& changed_virtual() const { return changed_virtual_; }
  const std::vector<std::int64_t>& changed_physical() const { return changed_physical_; }
  void clear_changes() {
    changed_virtual_.clear();
    changed_physical_.clear();
  }

  // v2p[v] for a virtual page inside the table, -1 otherwise.
  std::int64_t physical_of(std::int64_t vpage) const;
  // p2v[p] for a physical page inside the table, -1 otherwise.
  std::int64_t virtual_of(std::int64_t ppage) const;
  // A usable page (never the sink or a reserved page) bound to a virtual page.
  bool is_bound_physical(std::int64_t ppage) const { return ppage >= min_page() && virtual_of(ppage) >= 0; }

  // Occupied band: up [min_page, wm), down (wm, num_pages). Its page count (bound pages + holes).
  std::int64_t band_begin() const;  // first page of the band
  std::int64_t band_end() const;    // one past the last page of the band
  std::uint64_t band_pages() const { return static_cast<std::uint64_t>(band_end() - band_begin()); }
  bool in_band(std::int64_t ppage) const { return ppage >= band_begin() && ppage < band_end(); }
  // Byte frontiers of the band: up [min*epp, wm*epp), down [(wm+1)*epp, num_pages*epp).
  std::uint64_t band_begin_byte() const { return static_cast<std::uint64_t>(band_begin()) * page_bytes(); }
  std::uint64_t band_end_byte() const { return static_cast<std::uint64_t>(band_end()) * page_bytes(); }

  // Pages this side may still bind: num_pages - min_page_index - allocated (SPEC 4.3's R).
  std::uint64_t remaining_pages() const { return geometry_.usable_pages() - allocated_; }

  // The physical pages an allocation of k pages takes, in binding order (SPEC 4 and
  // docs/decisions.md "Allocation"): the lowest holes first (lazy mode), then band pages
  // ascending: up [wm, wm + rest), down [wm - rest + 1, wm]. Pure.
  std::vector<std::int64_t> pages_for(std::uint64_t k) const;

  // Binds vpages[i] -> pages_for(k)[i] and advances the watermark past the band pages taken.
  // Returns the physical pages. The caller has checked the room.
  std::vector<std::int64_t> bind(const std::vector<std::int64_t>& vpages);

  // Clears v2p[v] and p2v[v2p[v]]; returns the physical page it held. Lazy mode records it as a hole.
  std::int64_t unbind(std::int64_t vpage);

  // The compaction that packs the band again once `freed` (ascending, inside the band) are gone
  // (SPEC 4.1). Up: new_wm = wm - K, survivors = pages of [new_wm, wm) not freed, holes = freed
  // pages below new_wm. Down: new_wm = wm + K, survivors = pages of (wm, new_wm] not freed,
  // holes = freed pages above new_wm. Both ascending, paired by `pairing`. Pure.
  CompactionPlan plan_compaction(const std::vector<std::int64_t>& freed, const PairingRule& pairing) const;

  // Commits a plan made on this state after its freed pages were unbound: moves each survivor's
  // binding (v2p[p2v[src]] = dst, p2v[dst] = v, p2v[src] = -1), drops the freed pages from the
  // hole set, sets the watermark.
  void apply_compaction(const CompactionPlan& plan);

  // ---- the float middle (SPEC 11); floats() only.
  // The pages an allocation of k pages takes between the byte limits [low_limit, high_limit)
  // (the state frontier and the owner's band): its holes first, ascending (no copy), then the span
  // extended one page at a time on the side with the larger gap in bytes (a tie goes up); an empty
  // float (no live page) first moves its point into the limits. Empty when they do not fit.
  std::vector<std::int64_t> float_pages_for(std::uint64_t k, std::uint64_t low_limit, std::uint64_t high_limit) const;
  // k pages that extend the span [low, high) one at a time toward the larger gap between the byte
  // limits (a tie goes up); the caller has counted the room.
  std::vector<std::int64_t> float_extension(std::int64_t low, std::int64_t high, std::uint64_t k,
                                            std::uint64_t low_limit, std::uint64_t high_limit) const;
  // Binds vpages[i] -> pages[i] and widens the span over them.
  void bind_pages(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages);
  // make_room: the live pages laid side by side, ascending, on [new_low, new_low + live); each
  // live page moves at most once, in an order where every destination is free when it is written.
  CompactionPlan plan_relocation(std::int64_t new_low) const;
  void apply_relocation(const CompactionPlan& plan);
  // Holes at either end of the span leave it (flush; at once in eager mode). An empty float keeps
  // no holes: its span collapses to a point (transparency).
  void absorb_boundary_holes();

 private:
  SubPoolGeometry geometry_;
  CompactionMode mode_;
  std::vector<std::int64_t> v2p_;
  std::vector<std::int64_t> p2v_;
  std::int64_t watermark_ = 0;
  std::set<std::int64_t> holes_;  // lazy mode: unbound pages inside the band
  std::uint64_t allocated_ = 0;
  std::int64_t span_low_ = 0;  // floats() only
  std::vector<std::int64_t> changed_virtual_;
  std::vector<std::int64_t> changed_physical_;
};

// One side's part of a free: which virtual pages it unbinds, the physical pages they held, and
// (eager mode) the compaction that follows.
struct SideFreeStep {
  std::size_t side = 0;
  std::vector<std::int64_t> virtual_pages;   // ascending
  std::vector<std::int64_t> physical_pages;  // ascending
  bool compact = false;
  CompactionPlan compaction;
  bool release_virtual_ids = false;  // the owner side: append the virtual pages to the free queue
  bool absorb = false;               // a float side: its boundary holes leave the span (SPEC 11)
};

// A free, free_swa or flush, as the ordered steps it will take (SWA side first; docs/decisions.md).
struct FreePlan {
  std::vector<SideFreeStep> steps;
};

class PageAllocator {
 public:
  PageAllocator(const PoolGeometry& geometry, CompactionMode mode);

  CompactionMode mode() const { return mode_; }
  std::size_t side_count() const { return sides_.size(); }
  const AllocatorSide& side(std::size_t i) const { return sides_.at(i); }
  const AllocatorSide& owner() const { return sides_.front(); }
  bool is_composite() const { return sides_.size() == 2; }
  std::int64_t page_size() const { return owner().page_size(); }
  // Virtual pages: ids [0, num_virtual); the owner side's page count.
  std::int64_t num_virtual() const { return owner().num_pages(); }
  // The owner's free virtual pages, front first (SPEC 4).
  const std::deque<std::int64_t>& free_queue() const { return free_queue_; }
  // Test seams (see AllocatorSide::tables_for_test).
  AllocatorSide& side_for_test(std::size_t i) { return sides_.at(i); }
  std::deque<std::int64_t>& free_queue_for_test() { return free_queue_; }
  // The free queue's terms of the tables digest (core/tables_digest.h free_queue_front_term and
  // free_queue_link_term, as side 0), kept as ids leave the front and join the back, so that a
  // digest of the tables costs what an operation changed; recount after a test seam changed it.
  std::uint64_t free_queue_digest_terms() const { return queue_terms_; }
  void recount_free_queue_terms();
  // Forgets every side's record of changes (AllocatorSide::changed_virtual): an operation starts.
  void clear_changes() {
    for (AllocatorSide& s : sides_) s.clear_changes();
  }

  // Bytes between the two frontiers (SPEC 4): composite (wm_down + 1) * epp_down - wm_up * epp_up;
  // a single side grows up to its last page: num_pages * epp - wm * epp.
  std::uint64_t gap_bytes() const;

  // Whether k more pages fit (SPEC 4, 4.2, 4.3; docs/decisions.md for lazy composites):
  // k <= free virtual ids, k <= every side's remaining pages, and the pages each side cannot
  // take from its holes, times its page bytes, fit the gap together.
  bool fits(std::uint64_t k) const;

  // Allocates k pages that fit: the k virtual pages at the queue front, bound in order on every
  // side (owner first). Returns the virtual pages.
  std::vector<std::int64_t> alloc(std::uint64_t k);

  // Plans freeing `vpages` (sorted unique, every one bound on the owner side): the SWA side
  // where swa_v2p[v] > 0 (strict: -1 is a tombstone, 0 the sink; SPEC 4.3), then the owner.
  FreePlan plan_free(const std::vector<std::int64_t>& vpages, const PairingRule& pairing) const;
  // Plans free_swa of `vpages` (sorted unique, every one bound on the SWA side): SWA side only.
  FreePlan plan_free_swa(const std::vector<std::int64_t>& vpages, const PairingRule& pairing) const;
  // Plans flush: compacts every side's holes (SWA side first).
  FreePlan plan_flush(const PairingRule& pairing) const;
  // Applies a plan made on the current state.
  void commit(const FreePlan& plan);

  // Hybrid chains (sim/chain_alloc.h) bind through these: the k ids at the queue front, and a side.
  std::vector<std::int64_t> take_free_ids(std::uint64_t k);
  AllocatorSide& side_mut(std::size_t i) { return sides_.at(i); }


 private:
  SideFreeStep plan_side_free(std::size_t side, const std::vector<std::int64_t>& vpages, bool release,
                              const PairingRule& pairing) const;

  CompactionMode mode_;
  std::vector<AllocatorSide> sides_;
  // The queue changes only through these two (they keep queue_terms_).
  std::vector<std::int64_t> pop_free_front(std::uint64_t k);
  void push_free_back(std::int64_t v);

  std::deque<std::int64_t> free_queue_;
  std::uint64_t queue_terms_ = 0;
};

}  // namespace kvtwin::sim
