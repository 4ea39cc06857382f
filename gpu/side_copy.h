// The host's copy of one grow-up or grow-down side's allocator tables on the GPU (SPEC.md
// section 4), from which its allocations, frees and compactions are planned.
//
// Why a host copy: every allocator answer (which virtual pages an alloc returns, whether a free
// is a double free, which survivors a compaction moves into which holes) reads the tables, and
// reading them off the device costs a synchronization per operation, the GPU player's largest
// cost. The copy changes with every device change: DeviceAllocator applies each plan to both,
// the device through DeviceSide's kernels, and DeviceAllocator::verify() holds the copy against
// the device tables (device_invariants.h: check_side_copy). The device tables stay the truth the
// checkers read (tables(), the tables digest); the copy only chooses. The float middle of a
// tri-pool keeps its own copy (float_span.h). Pure host code (no CUDA header), so it is tested
// without a device, side by side with the model's allocator side.
//
// The rules it plans by (SPEC 4, 4.1, 4.2): an allocation takes the owner's free-queue front,
// binds the lowest holes first (lazy mode), then band pages ascending (up [wm, wm + rest), down
// [wm - rest + 1, wm]); a free unbinds (lazy mode: each freed page a hole); a compaction of K
// freed pages moves the bound pages of the band's last K (up [wm - K, wm), down (wm, wm + K])
// into the freed pages outside them, both ascending and paired in order; the freed virtual ids go
// to the back of the queue. Every step costs what it changes, never the pool's size.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "core/sizing.h"

namespace kvtwin::gpu {

// A planned compaction of one side (SPEC 4.1): sources[i] -> destinations[i], both ascending.
struct SideMoves {
  std::int64_t new_watermark = 0;
  std::vector<std::int64_t> sources, destinations;
};

class SideCopy {
 public:
  // The tables as DeviceSide::init leaves them: all unbound but the sink (v2p[0] = p2v[0] = 0),
  // the watermark at the band's start, and (owner) the queue min_page .. num_virtual - 1.
  void init(const SubPoolGeometry& geometry, std::int64_t num_virtual, bool owner);

  bool grows_up() const { return grows_up_; }
  bool owner() const { return owner_; }
  std::int64_t min_page() const { return min_page_; }
  std::int64_t num_pages() const { return num_pages_; }
  std::int64_t watermark() const { return watermark_; }
  std::int64_t allocated() const { return allocated_; }
  const std::set<std::int64_t>& holes() const { return holes_; }
  const std::deque<std::int64_t>& queue() const { return queue_; }
  const std::vector<std::int64_t>& v2p() const { return v2p_; }
  const std::vector<std::int64_t>& p2v() const { return p2v_; }
  // v2p[v] (p2v[p]) inside the table, -1 outside it.
  std::int64_t physical_of(std::int64_t vpage) const;
  std::int64_t virtual_of(std::int64_t ppage) const;

  // ---- plans (nothing changes)
  // The k virtual pages at the queue's front (owner side).
  std::vector<std::int64_t> queue_front(std::int64_t k) const;
  // The physical pages an allocation of k takes, in binding order: the lowest holes first, then
  // band pages ascending. The caller has counted the room.
  std::vector<std::int64_t> pages_for(std::int64_t k) const;
  // The compaction once `freed` (physical pages of this side, bound or holes, any order) are
  // gone; with every hole as the freed pages for a flush (plan_flush).
  SideMoves plan_compaction(std::vector<std::int64_t> freed) const;
  SideMoves plan_flush() const;

  // ---- changes, each also the device's
  void take_virtual(std::int64_t k);                              // the queue's first k leave it
  void put_virtual(const std::vector<std::int64_t>& vpages);      // appended at the queue's back
  // vpages[i] -> pages[i] (pages from pages_for): holes leave the hole set, band pages move the
  // watermark past them.
  void bind(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages);
  // v2p[v] = -1 and p2v[its page] = -1 for each bound v (only where v2p[v] > 0 when
  // only_positive: -1 is a tombstone, 0 the sink); returns the pages released, in vpages' order.
  std::vector<std::int64_t> unbind(const std::vector<std::int64_t>& vpages, bool only_positive);
  void add_holes(const std::vector<std::int64_t>& pages);  // lazy mode: released pages become holes
  // The planned moves applied: v2p[p2v[src]] = dst, p2v[dst] = that v, p2v[src] = -1; the
  // watermark set; with `clears_holes` (a flush) no hole is left.
  void apply(const SideMoves& moves, bool clears_holes);

 private:
  bool grows_up_ = true;
  bool owner_ = false;
  std::int64_t min_page_ = 1, num_pages_ = 0;
  std::int64_t watermark_ = 0;
  std::int64_t allocated_ = 0;
  std::set<std::int64_t> holes_;  // lazy mode: unbound pages inside the band
  std::deque<std::int64_t> queue_;  // owner side: the free virtual ids, front first
  std::vector<std::int64_t> v2p_, p2v_;
};

}  // namespace kvtwin::gpu
