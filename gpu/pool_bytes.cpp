// The pool's device bytes and the page move (pool_bytes.h).
#include "gpu/pool_bytes.h"

#include <algorithm>

#include "gpu/kernels.cuh"

namespace kvtwin::gpu {

Status DevicePoolBytes::init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream) {
  reset();
  for (std::size_t side = 0; side < derived.geometry.sub_pools.size(); ++side) {
    page_bytes_.push_back(derived.geometry.sub_pools[side].page_bytes);
    shape_page_bytes_.push_back(config.page_size * derived.layouts[side].parts.front().row_bytes());
  }
  // One raw byte buffer of exactly total_bytes, zero-filled.
  if (!config.tables_only) {
    KVTWIN_TRY_STATUS(buffer_.allocate(config.total_bytes));
    KVTWIN_CUDA_TRY(cudaMemsetAsync(buffer_.get(), 0, buffer_.bytes(), stream));
  }
  return ok_status();
}

void DevicePoolBytes::reset() {
  buffer_.reset();
  page_bytes_.clear();
  shape_page_bytes_.clear();
}

Status DevicePoolBytes::move_pages(std::size_t side, const std::int64_t* src, const std::int64_t* dst, std::int64_t n,
                                   const Faults& faults, cudaStream_t stream) const {
  if (!holds_bytes() || n == 0) return ok_status();
  PageMoveParams p;
  p.pool = buffer_.get();
  p.pool_bytes = buffer_.bytes();
  p.page_bytes = page_bytes_[side];  // SPEC 4.1: the whole page envelope
  if (faults.move_stride_from_shape) p.page_bytes = shape_page_bytes_[side];  // the token stride from the row shape
  p.src = src;
  p.dst = dst;
  p.pages = n;
  p.int32_offsets = faults.int32_offsets_move;
  KVTWIN_CUDA_TRY(launch_move_pages(p, stream));
  return ok_status();
}

Result<std::vector<std::uint8_t>> DevicePoolBytes::download(std::uint64_t offset, std::uint64_t length,
                                                            cudaStream_t stream) const {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(length));
  if (length > 0) {
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data(), buffer_.get() + offset, out.size(), cudaMemcpyDeviceToHost, stream));
    KVTWIN_CUDA_SYNC(stream);
  }
  return out;
}

Status DevicePoolBytes::add_digest(std::span<const ByteRange> ranges, unsigned long long* sum, cudaStream_t stream,
                                   const TablesDigestRequest* tables) const {
  // Chunks of at most 64 KiB, cut at 8-byte boundaries of the pool (a word is never split), so
  // that a long range (a page envelope a move wrote) spreads over many blocks.
  constexpr std::uint64_t kChunk = std::uint64_t{64} << 10;
  std::vector<std::uint64_t> chunks;
  for (const ByteRange& r : ranges) {
    std::uint64_t at = r.offset;
    const std::uint64_t end = r.offset + r.length;
    while (at < end) {
      const std::uint64_t next = std::min(end, at / 8 * 8 + kChunk);
      chunks.push_back(at);
      chunks.push_back(next - at);
      at = next;
    }
  }
  BytesDigestParams p;
  p.pool = buffer_.get();
  p.count = static_cast<std::int64_t>(chunks.size() / 2);
  p.sum = sum;
  // An op's written rows: the chunks travel in the launch (digest_kernels.h InlineDigestRanges).
  const auto carried = [&] {
    InlineDigestRanges r;
    std::copy(chunks.begin(), chunks.end(), r.ranges);
    return r;
  };
  if (tables != nullptr && tables_and_bytes_fit_one_launch(*tables, p.count)) {
    // An op's tables and its written rows in one launch.
    KVTWIN_CUDA_TRY(launch_tables_and_bytes_digest(*tables, p, carried(), stream));
    return ok_status();
  }
  if (tables != nullptr) KVTWIN_TRY_STATUS(launch_tables_digest(tables->sides, tables->sum, stream));
  if (chunks.empty()) return ok_status();
  if (p.count <= static_cast<std::int64_t>(kInlineDigestRanges)) {
    KVTWIN_CUDA_TRY(launch_bytes_digest_inline(p, carried(), stream));
    return ok_status();
  }
  if (digest_ring_used_ + chunks.size() > digest_staging_.size()) {
    // The ring is full: once the stream has drained, nothing queued reads it any more.
    if (digest_ring_used_ > 0) KVTWIN_CUDA_SYNC(stream);
    digest_ring_used_ = 0;
    const std::size_t want = std::max<std::size_t>(chunks.size(), 64 * 1024);
    KVTWIN_TRY_STATUS(digest_staging_.reserve(want));
    KVTWIN_TRY_STATUS(digest_ranges_.reserve(want));
  }
  std::uint64_t* staged = digest_staging_.get() + digest_ring_used_;
  std::uint64_t* device_ranges = digest_ranges_.get() + digest_ring_used_;
  std::copy(chunks.begin(), chunks.end(), staged);
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(device_ranges, staged, chunks.size() * sizeof(std::uint64_t), cudaMemcpyHostToDevice,
                                  stream));
  digest_ring_used_ += chunks.size();
  p.ranges = device_ranges;
  KVTWIN_CUDA_TRY(launch_bytes_digest(p, stream));
  return ok_status();
}

Result<std::uint64_t> DevicePoolBytes::digest(std::span<const ByteRange> ranges, cudaStream_t stream) const {
  KVTWIN_TRY_STATUS(digest_sum_.reserve(1));
  KVTWIN_TRY_STATUS(digest_landed_.reserve(1));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(digest_sum_.get(), 0, sizeof(unsigned long long), stream));
  KVTWIN_TRY_STATUS(add_digest(ranges, digest_sum_.get(), stream));
  // The sum comes back through pinned memory (a true async copy).
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(digest_landed_.get(), digest_sum_.get(), sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  digest_ring_used_ = 0;  // the stream drained: the whole ring is free again
  return static_cast<std::uint64_t>(digest_landed_.get()[0]);
}

}  // namespace kvtwin::gpu
