// The digests on the device (digest_kernels.h).
#include "gpu/digest_kernels.h"

#include <algorithm>

#include "core/bytes_digest.h"
#include "core/tables_digest.h"
#include "gpu/cuda_check.h"

namespace kvtwin::gpu {
namespace {

constexpr int kThreads = 256;

#define KVTWIN_FOR_EACH(i, n)                                                                       \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// The device terms of digest_tables (core/tables_digest.h) of one side, summed by this block:
// v2p rows, p2v rows, the queue's front and each queued id's successor, and (when `holes`) the
// flagged pages; each thread sums its terms over a grid-stride loop in x, one 64-bit atomic add
// per block (a sum mod 2^64 does not depend on the order).
__device__ void tables_digest_block(const DigestRanges& r, unsigned long long* sum) {
  const std::int64_t holes_len = r.hole_flags != nullptr ? r.p2v_len : 0;
  const std::int64_t n = r.v2p_len + r.p2v_len + r.queue_count + holes_len;
  std::uint64_t local = 0;
  KVTWIN_FOR_EACH(i, n) {
    std::int64_t j = i;
    if (j < r.v2p_len) {
      local += tables_digest_term(r.side, TablesDigestPart::v2p, static_cast<std::uint64_t>(j), r.v2p[j]);
      continue;
    }
    j -= r.v2p_len;
    if (j < r.p2v_len) {
      local += tables_digest_term(r.side, TablesDigestPart::p2v, static_cast<std::uint64_t>(j), r.p2v[j]);
      continue;
    }
    j -= r.p2v_len;
    if (j < r.queue_count) {
      // The front, then each id's successor (core free_queue_front_term / free_queue_link_term).
      const std::int64_t id = r.queue[(r.queue_head + j) % r.queue_capacity];
      local += j == 0 ? free_queue_front_term(r.side, id)
                      : free_queue_link_term(r.side, r.queue[(r.queue_head + j - 1) % r.queue_capacity], id);
      continue;
    }
    j -= r.queue_count;
    if (r.hole_flags[j] != 0) local += tables_digest_term(r.side, TablesDigestPart::hole, static_cast<std::uint64_t>(j), 1);
  }
  // The block's sum (warps by shuffle, then the warps' sums through shared memory), then one
  // atomic add a block: one add per row on one address serialised in L2 and cost what the pool
  // holds (0.5 ms a digest at 64 GiB of 2 MiB pages on the H200).
  for (int d = 16; d > 0; d /= 2) local += __shfl_down_sync(0xffffffffu, local, d);
  __shared__ std::uint64_t warp_sums[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint64_t block = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) block += warp_sums[w];
    if (block != 0) atomicAdd(sum, static_cast<unsigned long long>(block));
  }
}

// The words of the ranges this block visits (ranges blockIdx.x, + gridDim.x, ...), added to p.sum.
template <class Ranges>
__device__ void bytes_digest_block(const BytesDigestParams& p, const Ranges& source) {
  std::uint64_t local = 0;
  for (std::int64_t r = blockIdx.x; r < p.count; r += gridDim.x) {
    const std::uint64_t off = source.ranges[2 * r], len = source.ranges[2 * r + 1];
    if (len == 0) continue;
    const std::uint64_t end = off + len;
    for (std::uint64_t w = off / 8 + threadIdx.x; w <= (end - 1) / 8; w += blockDim.x) {
      const std::uint64_t lo = w * 8;
      std::uint64_t word = 0;
      if (lo >= off && lo + 8 <= end) {
        word = *reinterpret_cast<const std::uint64_t*>(p.pool + lo);  // the buffer is 256-byte aligned
      } else {
        // A word the range covers in part: its bytes outside the range read as zero.
        for (std::uint64_t b = 0; b < 8; ++b)
          if (lo + b >= off && lo + b < end) word |= std::uint64_t{p.pool[lo + b]} << (8 * b);
      }
      local += bytes_digest_term(w, word);
    }
  }
  // A warp's sum, then one atomic add a warp (a sum mod 2^64 does not depend on the order).
  for (int d = 16; d > 0; d /= 2) local += __shfl_down_sync(0xffffffffu, local, d);
  if ((threadIdx.x & 31) == 0 && local != 0) atomicAdd(p.sum, static_cast<unsigned long long>(local));
}

template <class Ranges>
__global__ void __launch_bounds__(kThreads)
    bytes_digest_kernel(const BytesDigestParams p, const __grid_constant__ Ranges source) {
  bytes_digest_block(p, source);
}

__global__ void __launch_bounds__(kThreads)
    tables_digest_kernel(const __grid_constant__ TablesDigestLaunch launch, unsigned long long* sum) {
  tables_digest_block(launch.sides[blockIdx.y], sum);
}

// Rows y < tables.count: that side of the tables; row y == tables.count: the bytes. The branch is
// the whole block's, so the tables' __syncthreads is reached by all of its threads or none.
__global__ void __launch_bounds__(kThreads)
    tables_and_bytes_digest_kernel(const __grid_constant__ TablesDigestLaunch tables, unsigned long long* tables_sum,
                                   const BytesDigestParams p, const __grid_constant__ InlineDigestRanges ranges) {
  if (blockIdx.y < tables.count)
    tables_digest_block(tables.sides[blockIdx.y], tables_sum);
  else
    bytes_digest_block(p, ranges);
}

// The first kDigestSidesPerLaunch of `sides`, as one launch's parameters.
TablesDigestLaunch tables_launch(std::span<const DigestRanges> sides) {
  TablesDigestLaunch launch{};
  launch.count = static_cast<unsigned>(std::min(sides.size(), kDigestSidesPerLaunch));
  std::copy_n(sides.begin(), launch.count, launch.sides);
  return launch;
}

// A few blocks an SM for the largest side: each thread sums many rows, and the adds to the sum
// stay few; a smaller side's spare blocks find no rows.
unsigned tables_blocks(const TablesDigestLaunch& launch) {
  std::int64_t most = 1;
  for (unsigned i = 0; i < launch.count; ++i) {
    const DigestRanges& r = launch.sides[i];
    most = std::max(most, r.v2p_len + r.p2v_len + r.queue_count + (r.hole_flags != nullptr ? r.p2v_len : 0));
  }
  return static_cast<unsigned>(std::min<std::int64_t>((most + kThreads - 1) / kThreads, 256));
}

// A block a range, at most 4096 (each walks every 4096th range).
unsigned bytes_blocks(std::int64_t count) { return static_cast<unsigned>(std::min<std::int64_t>(count, 4096)); }

// Where the digest finds its ranges: a device array, or InlineDigestRanges in the launch's
// parameters (both index as source.ranges[i]).
struct ArrayRanges {
  const std::uint64_t* ranges = nullptr;
};

template <class Ranges>
cudaError_t launch_digest(const BytesDigestParams& p, const Ranges& source, cudaStream_t stream) {
  if (p.count <= 0) return cudaSuccess;
  bytes_digest_kernel<Ranges><<<bytes_blocks(p.count), kThreads, 0, stream>>>(p, source);
  return cudaGetLastError();
}

}  // namespace

Status launch_tables_digest(std::span<const DigestRanges> sides, unsigned long long* sum, cudaStream_t stream) {
  for (std::size_t first = 0; first < sides.size(); first += kDigestSidesPerLaunch) {
    const TablesDigestLaunch launch = tables_launch(sides.subspan(first));
    const dim3 grid(tables_blocks(launch), launch.count);
    tables_digest_kernel<<<grid, kThreads, 0, stream>>>(launch, sum);
    KVTWIN_CUDA_LAUNCHED();
  }
  return ok_status();
}

cudaError_t launch_bytes_digest(const BytesDigestParams& p, cudaStream_t stream) {
  if (p.count > 0 && p.ranges == nullptr) return cudaErrorInvalidValue;
  return launch_digest(p, ArrayRanges{p.ranges}, stream);
}

cudaError_t launch_bytes_digest_inline(const BytesDigestParams& p, const InlineDigestRanges& ranges,
                                       cudaStream_t stream) {
  if (p.count > static_cast<std::int64_t>(kInlineDigestRanges)) return cudaErrorInvalidValue;
  return launch_digest(p, ranges, stream);
}

cudaError_t launch_tables_and_bytes_digest(const TablesDigestRequest& tables, const BytesDigestParams& p,
                                           const InlineDigestRanges& ranges, cudaStream_t stream) {
  if (!tables_and_bytes_fit_one_launch(tables, p.count) || tables.sum == nullptr) return cudaErrorInvalidValue;
  const TablesDigestLaunch launch = tables_launch(tables.sides);
  const dim3 grid(std::max(tables_blocks(launch), bytes_blocks(std::max<std::int64_t>(p.count, 1))), launch.count + 1);
  tables_and_bytes_digest_kernel<<<grid, kThreads, 0, stream>>>(launch, tables.sum, p, ranges);
  return cudaGetLastError();
}

}  // namespace kvtwin::gpu
