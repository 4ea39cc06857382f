// GpuPool: the CUDA implementation of the pool behind kvtwin::Backend.
//
// The pool's bytes are one cudaMalloc buffer of total_bytes (SPEC.md section 3, pool_bytes.h).
// The allocator (device_allocator.h) keeps each sub-pool's tables on the device (device_side.h);
// binding, unbinding and compaction planning run there, and page bytes move with the page-move
// kernel; the open readers gate every move (readers.h). Batches' write locs live
// on the device too; their marks are host flags, so the write door's mark check is a flag read.
// Rows written come from the content oracle (core/oracle.h), filled on the host and scattered by
// the write door kernel. The decode step is a CUDA graph (decode_step.h).
//
// This is an independent implementation of the policy SPEC.md and docs/decisions.md describe; it
// shares nothing with sim/ but core/. Every operation is synchronous at this interface: apply()
// returns once the device work it started is done (results have to be read back anyway).
//
// A CUDA call that fails (ErrorKind::environment: out of memory, a launch failure, an error the
// failure injector of cuda_check.h planted) poisons the pool: that operation and every later one
// are refused with the failure as the reason, tables() and raw_bytes() included; no answer that
// could be wrong is ever given.
//
// Not covered: the host arena (SPEC 8) and stored pages, which are host-side.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/pool_config.h"
#include "gpu/device_allocator.h"
#include "gpu/device_buffer.h"
#include "gpu/device_side.h"
#include "gpu/faults.h"
#include "gpu/kernels.cuh"
#include "gpu/pool_bytes.h"
#include "gpu/readers.h"

namespace kvtwin::gpu {

class DecodeStep;

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

  // The backend's own invariant check (gpu/device_invariants.h): downloads every side's device
  // tables and holds the host counters (watermarks, allocated and hole counts, the free queue's
  // head and length) against them, with the tables' own invariants; also the pool buffer's size.
  // An ErrorKind::internal Error says what broke; ok before any pool is built.
  Status verify() const;

  const Faults& faults() const { return faults_; }
  void set_faults(const Faults& faults) { faults_ = faults; }

  // For tests and benchmarks: the device buffer and its derived description (valid once built).
  std::uint8_t* device_pool() const { return bytes_.data(); }
  const PoolDerived* derived() const { return built_ ? &derived_ : nullptr; }
  cudaStream_t stream() const { return stream_; }

 private:
  // A forward batch (docs/decisions.md "Write locs"): its out_cache_loc lives on the device, its
  // mark on the host; per lane the virtual token whose rows it writes.
  struct Batch {
    DeviceBuffer<std::int64_t> loc;          // out_cache_loc, `width` lanes
    std::int64_t width = 0;
    std::vector<std::int64_t> tokens;        // width lanes (-1: padding)
    DeviceBuffer<std::int64_t> encoder_loc;  // encoder_out_cache_loc: empty or width lanes, never translated
    std::vector<std::int64_t> encoder_host;  // the same ids (the rows a cross layer writes are theirs)
    bool physical = false;                   // the mark (SPEC 6)
  };

  OpResult dispatch(const Op& op);
  OpResult build(const BuildPool& op);
  OpResult alloc(const Alloc& op);
  OpResult alloc_many(const AllocMany& op);
  OpResult free_pages(const Free& op);
  OpResult free_swa(const FreeSwa& op);
  OpResult flush(const Flush& op);
  OpResult move_pages(const MovePages& op);
  OpResult begin_read(const BeginRead& op);
  OpResult make_batch(const MakeBatch& op);
  OpResult rebind(const Rebind& op);
  OpResult split(const Split& op);
  OpResult drop_batch(const DropBatch& op);
  OpResult write(const Write& op);
  OpResult read(const Read& op);
  OpResult translate(const Translate& op);
  OpResult swa_translate(const SwaTranslate& op);
  OpResult page_table(const PageTable& op);
  OpResult remap_indices(const RemapIndices& op);
  OpResult capture(const Capture& op);
  OpResult replay(const Replay& op);

  // A free plan past the readers' gate, then committed.
  OpResult commit_checked(const DeviceAllocator::FreePlan& plan);

  // Uploads host values into the pool's id scratch (returns the device pointer).
  Result<std::int64_t*> upload_ids(const std::vector<std::int64_t>& values, int slot);
  Result<std::vector<std::int64_t>> download_ids(const std::int64_t* device, std::int64_t n) const;
  Result<bool> any_outside(const std::int64_t* values, std::int64_t n, std::int64_t lower, std::int64_t upper);
  Status sync() const;

  Status require_pool() const;
  Result<Batch*> find_batch(std::uint32_t id, std::string_view what);
  Result<std::size_t> side_named(std::string_view sub_pool, std::string_view what) const;

  Faults faults_;
  std::string poisoned_;  // why every operation is refused (a CUDA failure); empty: healthy
  cudaStream_t stream_ = nullptr;
  bool built_ = false;
  PoolConfig config_;
  PoolDerived derived_;
  DevicePoolBytes bytes_;
  DeviceAllocator allocator_;
  Readers readers_;
  DeviceBuffer<std::uint8_t> sort_temp_;
  DeviceBuffer<std::uint32_t> status_;
  mutable std::vector<DeviceBuffer<std::int64_t>> ids_;  // id scratch slots
  DeviceBuffer<std::uint8_t> staging_;                // rows for the doors
  DeviceBuffer<RowSegment> segments_;
  std::map<std::uint32_t, Batch> batches_;
  std::map<std::uint32_t, std::unique_ptr<DecodeStep>> graphs_;
};

}  // namespace kvtwin::gpu
