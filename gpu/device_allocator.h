// The page allocator on the device (SPEC.md section 4): the chain of one or two DeviceSides (the
// full or MLA side growing up and owning the virtual ids and their free queue, the SWA side
// growing down; on a hybrid chain, SPEC 11, the owner grows down and a tri-pool's SWA side is the
// float middle), the joint capacity of a full + SWA composite, and free / free_swa / flush as a
// *plan* and a *commit*, as sim/page_allocator.h splits them.
//
// Every decision is the host's, made on its copy of each side's tables (side_copy.h; the float's
// in float_span.h): which virtual pages an alloc returns and which pages it binds, whether a free
// is a double free, which survivors a compaction moves into which holes. The device applies each
// decision to its tables, and the copy changes with it, so no answer waits for the device: an
// alloc, a free, a flush and a raw move's check synchronize nothing (docs/gpu.md
// "Synchronization"). The device tables stay what every checker reads (tables(), the tables
// digest), and verify() holds each copy against them (device_invariants.h). A plan changes
// nothing until its commit, so the pool can check it against its readers (readers.h) first and a
// refused operation leaves the tables as they were.
//
// State: the sides (their tables on the device, their host counters private to DeviceSide and
// checked against the tables by verify()), the host copies, and named device lists, each holding
// one thing between an upload and the kernel that reads it (below). The page bytes of a
// compaction move with DevicePoolBytes::move_pages (pool_bytes.h), called by the commit.
//
// Fault switches that live here: pairing_out_of_order (plan). alloc_many_partial is the pool's
// (gpu_pool.cpp), move_under_reader the readers', the move faults the bytes'.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "gpu/device_buffer.h"
#include "gpu/device_io.h"
#include "gpu/device_side.h"
#include "gpu/faults.h"
#include "gpu/float_span.h"
#include "gpu/pool_bytes.h"
#include "gpu/side_copy.h"

namespace kvtwin::gpu {

class DeviceStatePool;

class DeviceAllocator {
 public:
  // One side's planned compaction (SPEC 4.1): moves sources[i] -> destinations[i], planned on the
  // side's host copy; the commit uploads the lists.
  struct SideCompaction {
    std::size_t side = 0;
    SideMoves moves;
  };
  // A free, free_swa or flush, checked and planned on the host copies; nothing on the device yet.
  struct FreePlan {
    enum class Kind { free, free_swa, flush };
    Kind kind = Kind::free;
    std::int64_t pages = 0;      // free, free_swa: the virtual pages freed
    std::vector<std::int64_t> virtual_pages;  // free, free_swa: those pages, ascending
    std::int64_t swa_freed = 0;  // free on a composite: the SWA pages it frees (swa_v2p[v] > 0)
    std::vector<SideCompaction> compactions;  // eager mode (and flush): in commit order, SWA side first
  };
  // A raw move_pages, checked: its device lists are in the raw_move_* buffers.
  struct RawMove {
    std::size_t side = 0;
    std::int64_t pages = 0;
    const std::int64_t* sources = nullptr;
    const std::int64_t* destinations = nullptr;
  };

  // The sides of `derived` (tables initialized on `stream`) and their scratch. `config` and
  // `derived` must outlive the allocator (the pool owns them).
  Status init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream);
  void reset();

  std::size_t side_count() const { return sides_.size(); }
  bool is_composite() const { return sides_.size() == 2; }
  const DeviceSide& side(std::size_t i) const { return *sides_[i]; }
  const DeviceSide& owner() const { return *sides_.front(); }
  const std::string& side_name(std::size_t i) const { return derived_->layouts[i].sub_pool; }
  // Ids below this are sink lanes of a side: its pages below min_page_index (docs/decisions.md).
  std::int64_t sink_end(std::size_t side) const;
  // The side's slots (max_slots): its token ids are [0, slot_count).
  std::int64_t slot_count(std::size_t side) const;
  // The band's bytes of a side: up [min_page, wm) pages, down (wm, num_pages).
  std::uint64_t band_begin_byte(std::size_t side) const;
  std::uint64_t band_end_byte(std::size_t side) const;

  // Whether k more pages fit (SPEC 4, 4.2, 4.3; docs/decisions.md for lazy composites). On a
  // hybrid chain [state up | owner down] (SPEC 11) the owner's band may grow down to
  // `low_end_bytes`, the state sub-pool's frontier, and no further.
  bool fits(std::int64_t pages, std::uint64_t low_end_bytes = 0) const;
  // Binds k pages that fit: the k virtual pages at the queue front, bound in order on every side
  // (owner first). Returns the virtual pages (read off the host copy: no synchronization).
  Result<std::vector<std::int64_t>> alloc(std::int64_t pages, cudaStream_t stream);

  // ---- SPEC 11's tri-pool [state up | swa float | owner down]: the float middle (float_span.h).
  bool floats() const { return sides_.size() == 2 && sides_[1]->floats(); }
  const FloatSpan& float_span() const { return float_; }
  // An allocation of k pages on the tri-pool: the owner's band grows down to no lower than
  // `state_end` (the state's frontier); the float's pages fit between them, after a relocation
  // away from the owner when its growth cuts into the span. Nothing changes.
  struct ChainAlloc {
    bool fits = false;
    std::int64_t k = 0;
    std::vector<std::int64_t> float_pages;  // ascending
    std::optional<FloatRelocation> relocation;
  };
  ChainAlloc plan_chain_alloc(std::int64_t k, std::uint64_t state_end) const;
  // Relocates (when planned), then binds the owner's pages and the float's; the virtual pages.
  Result<std::vector<std::int64_t>> commit_chain_alloc(const ChainAlloc& plan, const DevicePoolBytes& bytes,
                                                       const Faults& faults, cudaStream_t stream);
  // A state slot ending at byte `slot_end` beyond the state's band, on the tri-pool: whether it
  // fits, and the float's relocation away from the state end when the slot needs its bytes.
  struct StateRoom {
    bool fits = false;
    std::optional<FloatRelocation> relocation;
  };
  StateRoom plan_state_room(std::uint64_t slot_end) const;
  // make_room's moves: the envelopes copied in waves that never read a page an earlier copy of
  // the same wave writes (fault float_relocation_source_order copies in source order), then the
  // tables, on the device and in the host copy.
  Status relocate_float(const FloatRelocation& plan, const DevicePoolBytes& bytes, const Faults& faults,
                        cudaStream_t stream);

  // Virtual page ids from an operation's ids (tokens -> sorted unique pages), range-checked with
  // the refusal reasons of core/reasons.h.
  Result<std::vector<std::int64_t>> virtual_pages_of(IdUnit unit, const std::vector<std::int64_t>& ids,
                                                     std::string_view what) const;

  // Plans (nothing changes): free of `vpages` (sorted unique, in range), free_swa of them, flush.
  // Host work only: a double free is refused here, from the host copies.
  Result<FreePlan> plan_free(const std::vector<std::int64_t>& vpages, const Faults& faults) const;
  Result<FreePlan> plan_free_swa(const std::vector<std::int64_t>& vpages, const Faults& faults) const;
  FreePlan plan_flush(const Faults& faults) const;
  // Commits the plan made just before (no other allocator call in between): uploads its lists,
  // unbinds, compacts (moving the page bytes), returns the freed virtual ids to the queue, on the
  // device and in the host copies; the moves as the answer.
  Result<Compaction> commit(const FreePlan& plan, const DevicePoolBytes& bytes, const Faults& faults,
                            cudaStream_t stream);

  // move_pages of side `side` checked on the host copy (docs/decisions.md: disjoint usable pages,
  // every destination unbound and outside the other side's band) and uploaded; no table changes.
  Result<RawMove> plan_raw_move(std::size_t side, const MovePages& op, cudaStream_t stream);

  // What a checker compares (core/backend.h), the device digest of it, and the backend's own
  // invariant check (device_invariants.h).
  Result<PoolTables> tables(cudaStream_t stream) const;
  // With `state` (a hybrid chain), the state sub-pool's terms are added in the same reduction.
  Result<std::uint64_t> tables_digest(cudaStream_t stream, const DeviceStatePool* state = nullptr) const;
  // The same digest's device terms added into `sum` (no synchronization); returns its host terms
  // (the counters), which the caller adds to what `sum` holds once it lands.
  Result<std::uint64_t> add_tables_digest_terms(unsigned long long* sum, cudaStream_t stream,
                                                const DeviceStatePool* state = nullptr) const;
  // The same digest not launched: what its device terms read (one entry a side, the state
  // sub-pool's last; digest_kernels.h), and its host terms returned.
  std::uint64_t tables_digest_rows(std::vector<DigestRanges>& device_rows, const DeviceStatePool* state = nullptr) const;
  // With `tables_read`, the tables the check read come back in it too (as tables() shows them),
  // so that a checkpoint's comparison needs no second download.
  Status verify(cudaStream_t stream, PoolTables* tables_read = nullptr) const;

 private:
  // The host copy of a grow-up or grow-down side (the float's is float_).
  SideCopy& copy(std::size_t side);
  const SideCopy& copy(std::size_t side) const;
  // Binds vpages (on the device: `dv`) on one grow-up or grow-down side, the device and the copy.
  Status bind_side(std::size_t side, const std::vector<std::int64_t>& vpages, const std::int64_t* dv,
                   cudaStream_t stream);
  // One side's compaction once `freed` (its physical pages; the holes for a flush) are gone;
  // fault pairing_out_of_order pairs the holes in reverse.
  SideCompaction plan_compaction(std::size_t side, const std::vector<std::int64_t>& freed, const Faults& faults) const;
  // Uploads the moves (one copy), moves the page bytes, applies the moves to the device tables
  // and to the copy.
  Status commit_compaction(const SideCompaction& plan, bool clears_holes, const DevicePoolBytes& bytes,
                           const Faults& faults, cudaStream_t stream);
  // Unbinds vpages (device list `dv`) on a grow-up or grow-down side; in lazy mode (`as_holes`)
  // the released pages become holes. Returns how many were released.
  Result<std::int64_t> unbind_side(std::size_t side, const std::vector<std::int64_t>& vpages, const std::int64_t* dv,
                                   bool only_positive, bool as_holes, cudaStream_t stream);
  void append_moves(Compaction& out, const SideCompaction& plan) const;
  // The float's part of a free or free_swa (SPEC 11): its bound pages among `vpages` (device copy
  // `dv`) unbound, each a hole; then, in eager mode or when the float is left empty, the holes at
  // the span's ends absorbed. absorb_float: a flush's part.
  Status free_float_pages(const std::vector<std::int64_t>& vpages, const std::int64_t* dv, std::int64_t n,
                          cudaStream_t stream);
  Status absorb_float(cudaStream_t stream);
  Status verify_float_copy(const SideSnapshot& device) const;
  // Every side's device tables in one copy each (DeviceSide::snapshot), chain order.
  Result<std::vector<SideSnapshot>> snapshots(cudaStream_t stream) const;
  // The sides as tables() reports them, their tables moved out of `snapshots`.
  PoolTables tables_of(std::vector<SideSnapshot>&& snapshots) const;

  const PoolConfig* config_ = nullptr;
  const PoolDerived* derived_ = nullptr;
  std::vector<std::unique_ptr<DeviceSide>> sides_;  // chain order: full/mla (up), swa (down)
  std::vector<SideCopy> copies_;                    // per side; a float's entry unused (float_)
  mutable DeviceBuffer<unsigned long long> digest_sum_;  // tables_digest()'s device accumulator

  // Named device lists, each valid from its upload (or the kernel that fills it) to the kernel
  // that reads it; later uploads into the same list are ordered after that kernel on the stream.
  DeviceBuffer<std::int64_t> bound_virtual_;  // alloc: the virtual pages taken from the queue front
  DeviceBuffer<std::int64_t> bind_holes_;     // alloc: a side's holes, ascending, that the bind fills first
  DeviceBuffer<std::int64_t> freed_virtual_;  // free, free_swa: the virtual pages freed
  DeviceBuffer<std::int64_t> new_holes_;      // free, free_swa in lazy mode: a side's released pages
  // A compaction's moves: the K sources, then the K destinations (one upload).
  DeviceBuffer<std::int64_t> compaction_moves_;
  DeviceBuffer<std::int64_t> raw_move_sources_;       // move_pages: src
  DeviceBuffer<std::int64_t> raw_move_destinations_;  // move_pages: dst
  // The tri-pool's float: the host copy it is planned from, and one operation's device lists.
  FloatSpan float_;
  DeviceBuffer<std::int64_t> float_pages_;    // a bind's pages, a free's holes, an absorption's pages
  DeviceBuffer<std::int64_t> float_sources_;  // a relocation's sources (copy order)
  DeviceBuffer<std::int64_t> float_destinations_;
  DeviceBuffer<std::int64_t> float_owners_;   // a relocation's moved virtual pages
};

}  // namespace kvtwin::gpu
