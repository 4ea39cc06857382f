// One sub-pool's allocator on the device (SPEC.md section 4): its tables v2p, p2v, the owner's
// free queue (a ring) and the lazy-mode hole flags live in device memory, as they would in a
// server; this class keeps beside them only scalar counters (watermark, counts, the queue's head).
// The counters are private: they change only with the device work that changes the tables (the
// methods below), and snapshot() copies both out for GpuPool::verify() (device_invariants.h) to
// hold against each other.
//
// The device work here: binding pages (alloc), unbinding them (free), marking holes and applying
// a compaction's moves to the tables. What to bind and which moves to make are planned on the
// host, from the allocator's copy of the tables (side_copy.h, float_span.h), so that no answer
// waits for the device; the page bytes themselves move with launch_move_pages (kernels.cuh).
// DeviceAllocator (device_allocator.h) orders these steps so that a failed operation changes
// nothing: plan and check first, commit after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/sizing.h"
#include "gpu/device_buffer.h"
#include "gpu/digest_kernels.h"
#include "gpu/device_invariants.h"

namespace kvtwin::gpu {

// True when two of the n values are equal and non-zero (sorts a copy in `sorted`, n long).
Result<bool> has_nonzero_duplicate(const std::int64_t* values, std::int64_t n, std::int64_t* sorted,
                                   DeviceBuffer<std::uint8_t>& temp, std::uint32_t* status, cudaStream_t stream);
// The same without reading the answer back: *status |= 1 when two of the n values are equal and
// non-zero (the caller zeroes the word and reads it; nothing is enqueued when n < 2).
Status flag_nonzero_duplicate(const std::int64_t* values, std::int64_t n, std::int64_t* sorted,
                              DeviceBuffer<std::uint8_t>& temp, std::uint32_t* status, cudaStream_t stream);

// A write door's loc checks in one launch, for at most kWriteCheckMaxLanes lanes: flags[0] = 1
// when a loc is outside [0, slots), flags[1] = 0, flags[2] = 1 when two lanes of `final_loc` (the
// layer's loc: the SWA one on an SWA layer) hold one slot at or above sink_end. The three words
// are written, not or-ed (no memset first); the caller reads them back. Longer locs take the
// sorting path (flag_outside, sink_to_zero, flag_nonzero_duplicate).
inline constexpr std::int64_t kWriteCheckMaxLanes = 1024;
Status check_write_loc(const std::int64_t* loc, const std::int64_t* final_loc, std::int64_t lanes, std::int64_t slots,
                       std::int64_t sink_end, std::uint32_t* flags, cudaStream_t stream);

class DeviceSide {
 public:
  // Tables for `geometry`, with v2p of num_virtual + 1 rows; `owner` sides also keep the free
  // queue, initially min_page_index .. num_virtual - 1 (SPEC 4). A float middle (SPEC 11) starts
  // as the empty span [float_start_page, float_start_page).
  Status init(const SubPoolGeometry& geometry, std::int64_t num_virtual, bool owner, cudaStream_t stream,
              std::int64_t float_start_page = 0);

  const SubPoolGeometry& geometry() const { return geometry_; }
  bool grows_up() const { return geometry_.direction == GrowDirection::up; }
  // The float middle of a tri-pool (SPEC 11): its band is the span [span_low, watermark).
  bool floats() const { return geometry_.direction == GrowDirection::float_middle; }
  std::int64_t span_low() const { return span_low_; }  // floats() only (0 otherwise)
  bool owner() const { return owner_; }
  std::int64_t num_pages() const { return static_cast<std::int64_t>(geometry_.num_pages); }
  std::int64_t min_page() const { return static_cast<std::int64_t>(geometry_.min_page_index); }
  std::int64_t v2p_len() const { return num_virtual_ + 1; }
  std::int64_t p2v_len() const { return num_pages() + 1; }

  std::int64_t* v2p() const { return v2p_.get(); }
  std::int64_t* p2v() const { return p2v_.get(); }
  const std::uint8_t* hole_flags() const { return hole_flags_.get(); }

  // Host counters (read only; see the class comment).
  std::int64_t watermark() const { return watermark_; }
  std::int64_t allocated() const { return allocated_; }
  std::int64_t holes() const { return holes_; }
  std::int64_t queue_count() const { return queue_count_; }

  // Pages left for this side: num_pages - min_page_index - allocated.
  std::int64_t remaining() const { return num_pages() - min_page() - allocated_; }
  // Pages the band can still grow by before it meets the end (single sub-pool, up side).
  std::int64_t band_room_single() const { return num_pages() - watermark_; }

  // Takes k virtual pages from the queue front into out (owner side).
  Status take_virtual(std::int64_t k, std::int64_t* out, cudaStream_t stream);
  // Appends n virtual pages (ascending) at the queue's back (owner side).
  Status put_virtual(const std::int64_t* pages, std::int64_t n, cudaStream_t stream);
  // Binds vpages[i] to the i-th physical page: holes[0 .. h) (the lowest min(k, holes) holes,
  // ascending, chosen by the host's copy), then the band (SPEC 4, docs/decisions.md "Lazy mode,
  // alloc"). `holes` is a device list; h must be min(k, holes()).
  Status bind(const std::int64_t* vpages, std::int64_t k, const std::int64_t* holes, std::int64_t h,
              cudaStream_t stream);
  // v2p[v] = -1 and p2v[old page] = -1 for each v (only where v2p[v] > 0 when only_positive);
  // `bound` of them are bound (the caller counted them on its host copy): the allocated count drops by it.
  Status unbind(const std::int64_t* vpages, std::int64_t n, bool only_positive, std::int64_t bound, cudaStream_t stream);
  // Lazy mode (SPEC 4.2): the n freed physical pages become holes (a float's freed pages always).
  Status add_holes(const std::int64_t* pages, std::int64_t n, cudaStream_t stream);

  // ---- the float middle (SPEC 11); floats() only. Its planning is the host's (float_span.h):
  // these apply a plan to the device tables and the counters.
  // Binds vpages[i] to pages[i] (holes of the span, `holes_taken` of them, and pages next to its
  // ends); the span becomes [new_low, new_high).
  Status bind_at(const std::int64_t* vpages, const std::int64_t* pages, std::int64_t k, std::int64_t holes_taken,
                 std::int64_t new_low, std::int64_t new_high, cudaStream_t stream);
  // The n holes at the span's ends leave it; the span becomes [new_low, new_high).
  Status absorb(const std::int64_t* pages, std::int64_t n, std::int64_t new_low, std::int64_t new_high,
                cudaStream_t stream);
  // make_room: live page src[i] moves to dst[i] (sources and destinations may overlap: every
  // owner is read before any row changes); no hole is left and the span becomes [new_low,
  // new_high). `scratch` holds n ids.
  Status relocate(const std::int64_t* src, const std::int64_t* dst, std::int64_t n, std::int64_t new_low,
                  std::int64_t new_high, std::int64_t* scratch, cudaStream_t stream);
  // A planned compaction: for each move v2p[p2v[src]] = dst, p2v[dst] = that v, p2v[src] = -1;
  // then the watermark moves to `new_watermark` and, when `clears_holes` (a flush), no hole is left.
  Status apply_compaction(const std::int64_t* src, const std::int64_t* dst, std::int64_t n, std::int64_t new_watermark,
                          bool clears_holes, cudaStream_t stream);

  // This side's part of digest_tables (core/tables_digest.h) as the host would compute it from
  // tables(): the device rows' (launch_tables_digest reads them) and the host counters' terms.
  // `side_index` is the side's place in the chain.
  DigestRanges digest_ranges(std::uint64_t side_index) const;
  std::uint64_t digest_counter_terms(std::uint64_t side_index) const;

  // The counters and the whole device tables (one synchronization), for the invariant check and
  // tables(); `first_virtual` is the owner's first usable virtual page.
  Result<SideSnapshot> snapshot(std::int64_t first_virtual, cudaStream_t stream) const;

 private:
  SubPoolGeometry geometry_;
  bool owner_ = false;
  std::int64_t num_virtual_ = 0;
  std::int64_t watermark_ = 0;
  std::int64_t span_low_ = 0;  // floats() only
  std::int64_t allocated_ = 0;
  std::int64_t holes_ = 0;
  std::int64_t queue_head_ = 0;
  std::int64_t queue_count_ = 0;
  DeviceBuffer<std::int64_t> v2p_;
  DeviceBuffer<std::int64_t> p2v_;
  DeviceBuffer<std::int64_t> queue_;  // ring of num_virtual entries (owner side)
  DeviceBuffer<std::uint8_t> hole_flags_;
};

// Small device helpers used by the pool.
Status gather_values(const std::int64_t* table, const std::int64_t* index, std::int64_t n, std::int64_t* out,
                     cudaStream_t stream);  // out[i] = table[index[i]]
// status[slot] |= 1 when any of the n values is < 0 (or, with `upper`, >= upper).
Status flag_outside(const std::int64_t* values, std::int64_t n, std::int64_t lower, std::int64_t upper,
                    std::uint32_t* status, cudaStream_t stream);
// out[i] = values[i] < sink_end ? 0 : values[i] (sink lanes all become the sink id 0).
Status sink_to_zero(const std::int64_t* values, std::int64_t n, std::int64_t sink_end, std::int64_t* out,
                    cudaStream_t stream);
// flags[b] = 1 when a token of row b (its first lens[b] of a row_stride-wide table) is not an
// allocated virtual token: v = t // ps must be in [1, v2p_len - 1) with v2p[v] >= 0. Else 0.
// Fault sink_counts_as_allocated tests v >= 0 instead of v > 0: the sink page (v2p[0] = 0) passes.
Status flag_unallocated_rows(const std::int64_t* tokens, std::int64_t row_stride, const std::int64_t* lens,
                             std::int64_t rows, const std::int64_t* v2p, std::int64_t v2p_len, std::int64_t page_size,
                             bool sink_counts_as_allocated, std::uint32_t* flags, cudaStream_t stream);

}  // namespace kvtwin::gpu
