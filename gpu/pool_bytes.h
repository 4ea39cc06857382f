// The pool's bytes on the device (SPEC.md section 3): one cudaMalloc buffer of exactly
// total_bytes, zero-filled when built, and the page move that copies whole page envelopes inside
// it (SPEC 4.1, 7). A tables-only pool holds no bytes: moves do nothing and raw reads are refused
// by the caller.
//
// Two fault switches live in the move (faults.h): move_stride_from_shape (the envelope taken from
// the first part's row shape) and int32_offsets_move (page offsets computed in int32).
//
// What it does not cover: rows (doors.h writes and reads them), which pages move (the allocator's
// compaction plans, device_allocator.h) and whether a reader holds them (readers.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/pool_config.h"
#include "gpu/device_buffer.h"
#include "gpu/digest_kernels.h"
#include "gpu/faults.h"
#include "gpu/pinned_buffer.h"

namespace kvtwin::gpu {

class DevicePoolBytes {
 public:
  // The buffer for `config` (none when tables-only), zero-filled on `stream`.
  Status init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream);
  void reset();

  std::uint8_t* data() const { return buffer_.get(); }
  std::uint64_t size_bytes() const { return buffer_.bytes(); }
  bool holds_bytes() const { return buffer_.get() != nullptr; }

  // Copies the page envelopes src[i] -> dst[i] of `side` (device lists of n physical pages,
  // disjoint); nothing when the pool is tables-only or n is 0.
  Status move_pages(std::size_t side, const std::int64_t* src, const std::int64_t* dst, std::int64_t n,
                    const Faults& faults, cudaStream_t stream) const;

  // `length` bytes from `offset` (the caller checked the range); synchronizes the stream.
  Result<std::vector<std::uint8_t>> download(std::uint64_t offset, std::uint64_t length, cudaStream_t stream) const;
  // The digest of `ranges` (core/bytes_digest.h; the caller checked them), computed on the device:
  // the ranges go up, eight bytes come back; synchronizes the stream.
  Result<std::uint64_t> digest(std::span<const ByteRange> ranges, cudaStream_t stream) const;
  // The same digest added into the device word `sum`, without a synchronization (a deferred
  // digest, deferred_digests.h). The ranges' staging is a ring: it synchronizes only when full.
  // With `tables` (a tables digest asked for and not launched: GpuPool::queue_tables_digest), it
  // is launched here too, in the same kernel when both fit one launch (digest_kernels.h).
  Status add_digest(std::span<const ByteRange> ranges, unsigned long long* sum, cudaStream_t stream,
                    const TablesDigestRequest* tables = nullptr) const;

 private:
  DeviceBuffer<std::uint8_t> buffer_;
  std::vector<std::uint64_t> page_bytes_;             // per side: its page envelope (page_size * E)
  std::vector<std::uint64_t> shape_page_bytes_;       // per side: page_size * the first part's row (the fault's envelope)
  // The digests' scratch: the ranges as (offset, length) chunks, staged in pinned memory and
  // copied up, a ring of which [0, digest_ring_used_) may still be read by queued work; the sum of
  // digest(), coming back through digest_landed_.
  mutable PinnedBuffer<std::uint64_t> digest_staging_;
  mutable DeviceBuffer<std::uint64_t> digest_ranges_;
  mutable std::size_t digest_ring_used_ = 0;
  mutable DeviceBuffer<unsigned long long> digest_sum_;
  mutable PinnedBuffer<unsigned long long> digest_landed_;
};

}  // namespace kvtwin::gpu
