// GpuPool: the CUDA implementation of the pool behind kvtwin::Backend.
//
// A thin dispatcher over units that own their state, as sim/ is split:
//   pool_bytes.h        the pool's bytes: one cudaMalloc buffer of total_bytes (SPEC 3), page moves
//   device_allocator.h  the sides' allocator tables on the device (device_side.h), the free queue,
//                       the joint capacity, free / free_swa / flush as plan then commit
//   readers.h           the open readers, the gate every move passes (SPEC 7)
//   batches.h           forward batches: out_cache_loc on the device, the mark on the host (SPEC 6)
//   doors.h             the write and read doors (SPEC 2, 6)
//   translation.h       translate, swa_translate, page_table, remap_indices (SPEC 5)
//   decode_step.h       the captured decode steps (SPEC 7)
//   host_arena.h        the host arena in pinned memory, its leases and recorded events (SPEC 8)
//   transfers.h         offload and load-back on copy streams, their events, what they hold (SPEC 8)
//   state_pool.h        a hybrid chain's state sub-pool: slots, request table, quarantine (SPEC 11)
// Each operation validates first (host checks on the operation's own numbers, device checks on the
// tables), plans what it will change, and only then commits, so that a failed operation leaves the
// pool as it was. Rows written come from the content oracle (core/oracle.h).
//
// This is an independent implementation of the policy SPEC.md and docs/decisions.md describe; it
// shares nothing with sim/ but core/. All device work runs in order on one stream. An operation
// synchronizes the host with it only where its answer needs the device (ids, bytes, a check of
// the tables); the rest (a write's scatter, a free's commit, a batch's copies) is left running,
// and the next synchronization, or any later CUDA call, reports its failure. Such a failure names
// the operations whose work had not been synchronized yet (docs/gpu.md "Synchronization");
// set_sync_each_op(true), or KVTWIN_GPU_SYNC_EACH_OP=1 in the environment, synchronizes after
// every operation so that a failure surfaces in the operation that caused it.
//
// A CUDA call that fails (ErrorKind::environment: out of memory, a launch failure, an error the
// failure injector of cuda_check.h planted) poisons the pool: that operation and every later one
// are refused with the failure as the reason, tables() and raw_bytes() included; no answer that
// could be wrong is ever given.
//
// Hybrid chains (SPEC 11): [state up | owner down] and the tri-pool [state up | swa float | owner
// down], whose float middle is planned on the host (float_span.h) and relocated on the device.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/page_store.h"
#include "core/pool_config.h"
#include "gpu/batches.h"
#include "gpu/decode_step.h"
#include "gpu/deferred_digests.h"
#include "gpu/device_allocator.h"
#include "gpu/doors.h"
#include "gpu/faults.h"
#include "gpu/host_arena.h"
#include "gpu/kept_memory.h"
#include "gpu/pool_bytes.h"
#include "gpu/readers.h"
#include "gpu/state_pool.h"
#include "gpu/transfers.h"
#include "gpu/translation.h"

namespace kvtwin::gpu {

class OpKindTimer;  // gpu_pool.cpp: KVTWIN_PROFILE=1 timing of an operation kind

class GpuPool final : public Backend {
 public:
  explicit GpuPool(Faults faults = {});
  ~GpuPool() override;
  GpuPool(const GpuPool&) = delete;
  GpuPool& operator=(const GpuPool&) = delete;

  std::string_view name() const override { return "gpu"; }
  OpResult apply(const Op& op) override;
  Result<PoolTables> tables() const override;
  // digest_tables(tables()) computed on the device: one reduction kernel per side and eight
  // bytes back, instead of downloading every table (core/tables_digest.h).
  Result<std::uint64_t> tables_digest() const override;
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const override;
  // The digest of byte ranges computed on the device (core/bytes_digest.h): eight bytes back.
  Result<std::uint64_t> bytes_digest(std::span<const ByteRange> ranges) const override;
  // The same two digests queued on the stream, and every queued one answered with one copy and
  // one synchronization (deferred_digests.h).
  bool digests_are_far() const override { return true; }
  Status queue_tables_digest() override;
  Status queue_bytes_digest(std::span<const ByteRange> ranges) override;
  Result<std::vector<std::uint64_t>> collect_digests() override;

  // The backend's own invariant check (gpu/device_invariants.h): downloads every side's device
  // tables and holds the host counters (watermarks, allocated and hole counts, the free queue's
  // head and length) against them, with the tables' own invariants; also the pool buffer's size
  // and, with a host arena, its tables (host_arena.h).
  // An ErrorKind::internal Error says what broke; ok before any pool is built. With
  // `tables_read`, a check that passed over a built, working pool leaves in it the tables it read,
  // as tables() shows them (the same download serves a checkpoint's comparison); else nullopt.
  Status verify(std::optional<PoolTables>* tables_read = nullptr) const;

  const Faults& faults() const { return faults_; }
  void set_faults(const Faults& faults) {
    faults_ = faults;
    doors_.forget_swa_loc();  // a derived loc kept is the old faults' answer
  }

  // How host transfers copy (transfers.h); KVTWIN_GPU_COPY=batch picks memcpy_batch at start.
  void set_copy_mechanism(CopyMechanism mechanism) { transfers_.set_mechanism(mechanism); }

  // Synchronize after every operation (see above); off unless KVTWIN_GPU_SYNC_EACH_OP=1.
  void set_sync_each_op(bool on) { sync_each_op_ = on; }
  bool sync_each_op() const { return sync_each_op_; }

  // Where the storage tier makes its folder (sim::Model::set_storage_parent's meaning).
  void set_storage_parent(std::string parent) { storage_parent_ = std::move(parent); }

  // For tests and benchmarks: the device buffer and its derived description (valid once built).
  std::uint8_t* device_pool() const { return bytes_.data(); }
  const PoolDerived* derived() const { return built_ ? &derived_ : nullptr; }
  cudaStream_t stream() const { return stream_; }

 private:
  OpResult dispatch(const Op& op);
  OpResult build(const BuildPool& op);
  OpResult alloc(const Alloc& op);
  OpResult alloc_many(const AllocMany& op);
  OpResult free_pages(const Free& op);
  OpResult free_swa(const FreeSwa& op);
  OpResult flush(const Flush& op);
  OpResult move_pages(const MovePages& op);
  OpResult begin_read(const BeginRead& op);
  OpResult capture(const Capture& op);
  // The storage tier below the host arena (storage_tier.cpp).
  Result<PageStore*> page_store(std::string_view op);
  Status check_storage_pages(std::string_view op, std::size_t side, const std::vector<std::int64_t>& host,
                             const std::vector<std::uint64_t>& hashes) const;
  std::string storage_space(const PageStore& store, std::string_view tag, std::string_view side) const;
  OpResult store_pages(const StorePages& op);
  OpResult load_stored(const LoadStored& op);
  // The state sub-pool (SPEC 11).
  OpResult state_alloc(const StateAlloc& op);
  OpResult state_free(const StateFree& op);
  OpResult state_write(const StateWrite& op);
  OpResult state_read(const StateRead& op);
  OpResult state_slots(const StateSlots& op);
  // The state sub-pool's place among the readers' sides (after the token sides).
  std::size_t state_index() const { return allocator_.side_count(); }
  DeviceStatePool::Held state_held() const;
  // SPEC 10.22: no state move overwrites a slot an open reader holds (leaving one is allowed).
  Status check_state_moves(const DeviceStatePool::Moves& moves) const;
  // The lowest byte the owner's band may reach: the state sub-pool's frontier (0 without one).
  std::uint64_t owner_low_end() const { return state_.built() ? state_.frontier_bytes() : 0; }
  // SPEC 11's tri-pool: an allocation of k pages (split: alloc_many's requests, in pages), the
  // float relocated when it must make room; make_room's gate (readers, then transfers in flight)
  // and its moves as an answer lists them.
  OpResult alloc_on_tri_pool(std::int64_t k, const std::vector<std::uint64_t>* split);
  Status check_relocation(const FloatRelocation& relocation) const;
  std::vector<PageMove> relocation_moves(const std::optional<FloatRelocation>& relocation) const;

  Status require_pool() const;
  Status check_digest_ranges(std::span<const ByteRange> ranges) const;
  Status poison_on_failure(Status status);
  Result<std::size_t> side_named(std::string_view sub_pool, std::string_view what) const;
  // A free plan past the readers' gate, then committed.
  OpResult commit_checked(const DeviceAllocator::FreePlan& plan);
  OpResult host_op(const Op& op);
  // Rule 8 of the host vocabulary: no move takes a page an in-flight transfer holds.
  Status check_moves(std::size_t side, const std::vector<std::int64_t>& src, const std::vector<std::int64_t>& dst) const;
  Status check_not_in_transfer(const std::vector<std::int64_t>& vpages, std::size_t side, std::string_view what) const;
  Status check_replay_reads(const Replay& op) const;
  Status check_replay_writes(const Replay& op) const;
  // An environment error of operation `index`, with the operations it may have come from.
  Error attributed(const Error& error, std::uint64_t index, const Op& op, bool synchronized) const;

  // With KVTWIN_PROFILE=1, started by the destructor; declared first, so it ends the pool's teardown.
  std::unique_ptr<OpKindTimer> teardown_timer_;
  // Next, so the last but one to go: once the destructor has synchronized every stream of the
  // pool, the members' buffers are kept for the next pool instead of freed (kept_memory.h).
  std::optional<QuietRelease> quiet_teardown_;
  // What the pool's operations released while device work enqueued before might still touch it
  // (a scratch buffer outgrown, a graph's buffers): held, neither freed (a cudaFree waits for the
  // whole device) nor reused, until the pool has synchronized its streams at a rebuild or its end,
  // and then kept (kept_memory.h). Every public entry point holds a HoldReleases scope of it.
  mutable HeldReleases held_;
  Faults faults_;
  std::string poisoned_;  // why every operation is refused (a CUDA failure); empty: healthy
  bool sync_each_op_ = false;
  std::uint64_t ops_applied_ = 0;  // operations applied so far (#n names the n-th, from 0)
  // "#n name" of the operations whose device work may still be running (since the stream's last
  // synchronization), oldest first, at most kMaxUnsynchronized of them.
  static constexpr std::size_t kMaxUnsynchronized = 16;
  std::vector<std::string> unsynchronized_;
  // With KVTWIN_PROFILE=1: per operation kind, over every pool of the process, how many were
  // applied, the host synchronizations of the stream they made, their wall and thread CPU and the
  // part of each spent in checked CUDA calls, printed to stderr when the process ends.
  bool profile_ops_ = false;
  cudaStream_t stream_ = nullptr;
  bool built_ = false;
  PoolConfig config_;
  PoolDerived derived_;
  // The units (declared in the order they are built; each refers to config_ and derived_).
  DevicePoolBytes bytes_;
  DeviceAllocator allocator_;
  Readers readers_;
  Batches batches_;
  Doors doors_;
  Translation translation_;
  DecodeGraphs graphs_;
  PinnedHostArena host_arena_;  // built when host_bytes > 0
  HostTransfers transfers_;
  DeviceStatePool state_;  // built on a hybrid chain
  DeferredDigests deferred_digests_;  // queued digests, across builds until collected
  // The tables digest queue_tables_digest asked for, launched with the op's bytes digest
  // (queue_bytes_digest) or, when none comes, before the next op or collect.
  std::optional<TablesDigestRequest> pending_tables_digest_;
  DeferredDigests::Handle pending_tables_handle_;
  Status launch_pending_tables_digest();
  // The tables digest summed last: what it read, the thread that launched it, and that thread's
  // checked CUDA calls right after (cuda_check.h). A tables digest asked for with the same rows
  // and no call since (an op that queued no device work: a write judged on the host, on a
  // tables-only pool) repeats its device part (DeferredDigests::repeat) instead of summing the
  // same bytes again; the host part (the counters) is its own. Forgotten at a build and at an op
  // on another thread (whose calls this thread's count does not see).
  struct SummedTables {
    DeferredDigests::Handle handle;
    std::vector<DigestRanges> sides;
    std::thread::id thread;
    std::uint64_t calls_after = 0;
  };
  std::optional<SummedTables> summed_tables_;
  void note_tables_summed(DeferredDigests::Handle handle, std::vector<DigestRanges> sides);
  // The storage tier (storage_bytes > 0): opened at its first operation, dropped at a build.
  std::string storage_parent_;
  std::unique_ptr<ScratchPageStore> store_;
};

}  // namespace kvtwin::gpu
