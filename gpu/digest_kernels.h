// The digests computed on the device: of the allocator tables (core/tables_digest.h) and of pool
// byte ranges (core/bytes_digest.h). The runner compares them with the model's after every
// operation, so they run once an op, queued on the pool's stream (deferred_digests.h); what
// costs is the launches, not the sums: under many threads every CUDA call waits on the driver's
// lock. Hence one launch for every side of the tables, small range lists carried in the launch's
// parameters instead of uploaded, and an op's tables and bytes digests in one launch
// (launch_tables_and_bytes_digest).
//
// What it does not cover: which ranges are valid (GpuPool checks them) and the host's part of
// the tables digest (the counters: DeviceSide::digest_counter_terms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/result.h"

namespace kvtwin::gpu {

// What the tables digest reads of one side's device tables.
struct DigestRanges {
  const std::int64_t* v2p;
  std::int64_t v2p_len;
  const std::int64_t* p2v;
  std::int64_t p2v_len;
  const std::int64_t* queue;
  std::int64_t queue_capacity, queue_head, queue_count;
  const std::uint8_t* hole_flags;  // null: no holes
  std::uint64_t side;              // the side's place in the chain
  bool operator==(const DigestRanges&) const = default;  // the same rows read
};

// Up to this many sides' device rows are summed by one launch (blockIdx.y picks the side).
inline constexpr std::size_t kDigestSidesPerLaunch = 4;
struct TablesDigestLaunch {
  DigestRanges sides[kDigestSidesPerLaunch];
  unsigned count = 0;
};

// The device rows' terms of every side in `sides` added to *sum on the stream (no
// synchronization): one launch a kDigestSidesPerLaunch sides.
Status launch_tables_digest(std::span<const DigestRanges> sides, unsigned long long* sum, cudaStream_t stream);

// The digest of pool byte ranges: `ranges` holds `count` (offset, length) pairs on the device,
// each inside the pool; a chunk of a longer range must start and end on 8-byte boundaries (a
// word's term depends on every byte of it in its range). Each range's words are summed by one
// block at a time; `sum` (zeroed by the caller) gets the total, mod 2^64.
struct BytesDigestParams {
  const std::uint8_t* pool = nullptr;
  const std::uint64_t* ranges = nullptr;  // device array: (offset, length) pairs
  std::int64_t count = 0;
  unsigned long long* sum = nullptr;
};
cudaError_t launch_bytes_digest(const BytesDigestParams& p, cudaStream_t stream);

// The ranges of a small digest (an op's written rows) carried in the launch's parameters (p.ranges
// is not read): one launch instead of an upload and a launch. 2 KiB, inside the 4 KiB a launch's
// parameters may always take; read in place (__grid_constant__).
inline constexpr std::uint32_t kInlineDigestRanges = 128;
struct InlineDigestRanges {
  std::uint64_t ranges[2 * kInlineDigestRanges];  // (offset, length) pairs, p.count of them
};
cudaError_t launch_bytes_digest_inline(const BytesDigestParams& p, const InlineDigestRanges& ranges,
                                       cudaStream_t stream);

// A tables digest asked for and not launched yet: its sides as they were when it was asked for,
// and the zeroed slot it sums into. GpuPool launches it with the same op's bytes digest, or alone
// before anything else reaches the device.
struct TablesDigestRequest {
  std::vector<DigestRanges> sides;
  unsigned long long* sum = nullptr;
};
// Whether `tables` and `ranges_count` inline ranges fit one launch of
// launch_tables_and_bytes_digest.
inline bool tables_and_bytes_fit_one_launch(const TablesDigestRequest& tables, std::int64_t ranges_count) {
  return tables.sides.size() <= kDigestSidesPerLaunch && ranges_count <= static_cast<std::int64_t>(kInlineDigestRanges);
}
// Both digests in one launch: the tables' into tables.sum, the bytes' of `ranges` into p.sum.
cudaError_t launch_tables_and_bytes_digest(const TablesDigestRequest& tables, const BytesDigestParams& p,
                                           const InlineDigestRanges& ranges, cudaStream_t stream);

}  // namespace kvtwin::gpu
