// The pool's device bytes and the page move (pool_bytes.h).
#include "gpu/pool_bytes.h"

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

}  // namespace kvtwin::gpu
