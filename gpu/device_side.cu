// The allocator's device work (device_side.h).
#include "gpu/device_side.h"

#include "core/check.h"
#include "core/tables_digest.h"

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

namespace kvtwin::gpu {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 20));
}

#define KVTWIN_FOR_EACH(i, n)                                                                       \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void iota_kernel(std::int64_t* out, std::int64_t n, std::int64_t first) {
  KVTWIN_FOR_EACH(i, n) out[i] = first + i;
}

__global__ void fill_kernel(std::int64_t* out, std::int64_t n, std::int64_t value) {
  KVTWIN_FOR_EACH(i, n) out[i] = value;
}

__global__ void queue_take_kernel(const std::int64_t* queue, std::int64_t capacity, std::int64_t head, std::int64_t k,
                                  std::int64_t* out) {
  KVTWIN_FOR_EACH(i, k) out[i] = queue[(head + i) % capacity];
}

__global__ void queue_put_kernel(std::int64_t* queue, std::int64_t capacity, std::int64_t tail, const std::int64_t* in,
                                 std::int64_t n) {
  KVTWIN_FOR_EACH(i, n) queue[(tail + i) % capacity] = in[i];
}

__global__ void bind_kernel(std::int64_t* v2p, std::int64_t* p2v, std::uint8_t* hole_flags, const std::int64_t* vpages,
                            const std::int64_t* holes, std::int64_t h, std::int64_t band_start, std::int64_t k) {
  KVTWIN_FOR_EACH(i, k) {
    const std::int64_t v = vpages[i];
    const std::int64_t p = i < h ? holes[i] : band_start + (i - h);
    v2p[v] = p;
    p2v[p] = v;
    if (i < h) hole_flags[p] = 0;
  }
}

__global__ void unbind_kernel(std::int64_t* v2p, std::int64_t* p2v, const std::int64_t* vpages, std::int64_t n,
                              bool only_positive) {
  KVTWIN_FOR_EACH(i, n) {
    const std::int64_t v = vpages[i];
    const std::int64_t p = v2p[v];
    if (only_positive && p <= 0) continue;  // SPEC 4.3: -1 is a tombstone, 0 the sink
    if (p >= 0) p2v[p] = -1;
    v2p[v] = -1;
  }
}

__global__ void apply_moves_kernel(std::int64_t* v2p, std::int64_t* p2v, const std::int64_t* src,
                                   const std::int64_t* dst, std::int64_t n) {
  // Sources (survivors) and destinations (holes) are disjoint: the moves are independent.
  KVTWIN_FOR_EACH(i, n) {
    const std::int64_t v = p2v[src[i]];
    v2p[v] = dst[i];
    p2v[dst[i]] = v;
    p2v[src[i]] = -1;
  }
}

__global__ void bind_at_kernel(std::int64_t* v2p, std::int64_t* p2v, std::uint8_t* hole_flags, const std::int64_t* vpages,
                               const std::int64_t* pages, std::int64_t k) {
  KVTWIN_FOR_EACH(i, k) {
    v2p[vpages[i]] = pages[i];
    p2v[pages[i]] = vpages[i];
    hole_flags[pages[i]] = 0;
  }
}

// A relocation in three passes (sources and destinations overlap when the span shifts by less
// than its length): the owners read, the sources cleared, then the destinations bound.
__global__ void clear_rows_kernel(std::int64_t* p2v, const std::int64_t* pages, std::int64_t n) {
  KVTWIN_FOR_EACH(i, n) p2v[pages[i]] = -1;
}

__global__ void bind_moved_kernel(std::int64_t* v2p, std::int64_t* p2v, const std::int64_t* owners,
                                  const std::int64_t* dst, std::int64_t n) {
  KVTWIN_FOR_EACH(i, n) {
    v2p[owners[i]] = dst[i];
    p2v[dst[i]] = owners[i];
  }
}

__global__ void gather_kernel(const std::int64_t* table, const std::int64_t* index, std::int64_t n, std::int64_t* out) {
  KVTWIN_FOR_EACH(i, n) out[i] = table[index[i]];
}

__global__ void set_flags_kernel(std::uint8_t* flags, const std::int64_t* pages, std::int64_t n, std::uint8_t value) {
  KVTWIN_FOR_EACH(i, n) flags[pages[i]] = value;
}

__global__ void flag_outside_kernel(const std::int64_t* values, std::int64_t n, std::int64_t lower, std::int64_t upper,
                                    std::uint32_t* status) {
  KVTWIN_FOR_EACH(i, n) {
    if (values[i] < lower || values[i] >= upper) atomicOr(status, 1u);
  }
}

__global__ void adjacent_duplicate_kernel(const std::int64_t* sorted, std::int64_t n, std::uint32_t* status) {
  KVTWIN_FOR_EACH(i, n - 1) {
    if (sorted[i] != 0 && sorted[i] == sorted[i + 1]) atomicOr(status, 1u);
  }
}

// One block of kWriteCheckMaxLanes threads, lane i on thread i: the range check, then every pair
// of non-sink lanes compared through shared memory (lanes^2 / 2 comparisons: at most half a
// million, cheaper than a sort's launches at these sizes).
__global__ void __launch_bounds__(kWriteCheckMaxLanes)
    write_loc_check_kernel(const std::int64_t* loc, const std::int64_t* final_loc, std::int64_t lanes,
                           std::int64_t slots, std::int64_t sink_end, std::uint32_t* flags) {
  __shared__ std::int64_t keys[kWriteCheckMaxLanes];
  __shared__ std::uint32_t outside, duplicate;
  const std::int64_t i = threadIdx.x;
  if (i == 0) outside = duplicate = 0;
  __syncthreads();
  if (i < lanes) {
    if (loc[i] < 0 || loc[i] >= slots) atomicOr(&outside, 1u);
    keys[i] = final_loc[i] < sink_end ? 0 : final_loc[i];  // sink lanes are discarded, never a duplicate
  }
  __syncthreads();
  if (i < lanes && keys[i] != 0) {
    bool seen = false;
    for (std::int64_t j = i + 1; j < lanes && !seen; ++j) seen = keys[j] == keys[i];
    if (seen) atomicOr(&duplicate, 1u);
  }
  __syncthreads();
  if (i == 0) {
    flags[0] = outside;
    flags[1] = 0;
    flags[2] = duplicate;
  }
}

__global__ void sink_to_zero_kernel(const std::int64_t* values, std::int64_t n, std::int64_t sink_end, std::int64_t* out) {
  KVTWIN_FOR_EACH(i, n) out[i] = values[i] < sink_end ? 0 : values[i];
}

__global__ void flag_unallocated_kernel(const std::int64_t* tokens, std::int64_t row_stride, const std::int64_t* lens,
                                        std::int64_t rows, const std::int64_t* v2p, std::int64_t v2p_len,
                                        std::int64_t page_size, std::int64_t first_page, std::uint32_t* flags) {
  // One block per row, its threads over the row's tokens.
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (std::int64_t j = threadIdx.x; j < lens[r]; j += blockDim.x) {
      const std::int64_t t = tokens[r * row_stride + j];
      const std::int64_t v = t >= 0 ? t / page_size : -1;
      if (v < first_page || v >= v2p_len - 1 || v2p[v] < 0) atomicOr(&flags[r], 1u);
    }
  }
}

}  // namespace

Status flag_nonzero_duplicate(const std::int64_t* values, std::int64_t n, std::int64_t* sorted,
                              DeviceBuffer<std::uint8_t>& temp, std::uint32_t* status, cudaStream_t stream) {
  if (n < 2) return ok_status();
  std::size_t bytes = 0;
  KVTWIN_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, bytes, values, sorted, static_cast<int>(n), 0, 64, stream));
  KVTWIN_TRY_STATUS(temp.reserve(bytes));
  bytes = temp.bytes();
  KVTWIN_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, values, sorted, static_cast<int>(n), 0, 64, stream));
  adjacent_duplicate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(sorted, n, status);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

Result<bool> has_nonzero_duplicate(const std::int64_t* values, std::int64_t n, std::int64_t* sorted,
                                   DeviceBuffer<std::uint8_t>& temp, std::uint32_t* status, cudaStream_t stream) {
  if (n < 2) return false;
  KVTWIN_CUDA_TRY(cudaMemsetAsync(status, 0, sizeof(std::uint32_t), stream));
  KVTWIN_TRY_STATUS(flag_nonzero_duplicate(values, n, sorted, temp, status, stream));
  std::uint32_t host = 0;
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(&host, status, sizeof host, cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  return host != 0;
}

Status DeviceSide::init(const SubPoolGeometry& geometry, std::int64_t num_virtual, bool owner, cudaStream_t stream,
                        std::int64_t float_start_page) {
  geometry_ = geometry;
  owner_ = owner;
  num_virtual_ = num_virtual;
  const std::int64_t pages = num_pages();
  KVTWIN_TRY_STATUS(v2p_.allocate(static_cast<std::size_t>(num_virtual + 1)));
  KVTWIN_TRY_STATUS(p2v_.allocate(static_cast<std::size_t>(pages + 1)));
  KVTWIN_TRY_STATUS(hole_flags_.allocate(static_cast<std::size_t>(pages + 1)));
  // SPEC 4: all -1, except v2p[0] = p2v[0] = 0 (the sink); the last row is the -1 sentinel.
  fill_kernel<<<blocks_for(num_virtual + 1), kThreads, 0, stream>>>(v2p_.get(), num_virtual + 1, -1);
  KVTWIN_CUDA_LAUNCHED();
  fill_kernel<<<blocks_for(pages + 1), kThreads, 0, stream>>>(p2v_.get(), pages + 1, -1);
  KVTWIN_CUDA_LAUNCHED();
  KVTWIN_CUDA_TRY(cudaMemsetAsync(v2p_.get(), 0, sizeof(std::int64_t), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(p2v_.get(), 0, sizeof(std::int64_t), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(hole_flags_.get(), 0, hole_flags_.bytes(), stream));
  watermark_ = grows_up() ? min_page() : pages - 1;
  span_low_ = 0;
  // SPEC 11: a float's span [span_low, watermark) starts empty at the middle of the buffer.
  if (floats()) watermark_ = span_low_ = std::clamp<std::int64_t>(float_start_page, min_page(), pages);
  allocated_ = 0;
  holes_ = 0;
  queue_head_ = 0;
  queue_count_ = 0;
  if (owner) {
    KVTWIN_TRY_STATUS(queue_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(num_virtual, 1))));
    KVTWIN_CUDA_TRY(cudaMemsetAsync(queue_.get(), 0, queue_.bytes(), stream));  // no unwritten slot is ever read
    queue_count_ = std::max<std::int64_t>(num_virtual - min_page(), 0);
    if (queue_count_ > 0) {
      iota_kernel<<<blocks_for(queue_count_), kThreads, 0, stream>>>(queue_.get(), queue_count_, min_page());
      KVTWIN_CUDA_LAUNCHED();
    }
  }
  return ok_status();
}

Status DeviceSide::take_virtual(std::int64_t k, std::int64_t* out, cudaStream_t stream) {
  KVTWIN_CHECK(owner_ && k <= queue_count_, "take_virtual beyond the free queue");
  if (k == 0) return ok_status();
  const std::int64_t capacity = static_cast<std::int64_t>(queue_.size());
  queue_take_kernel<<<blocks_for(k), kThreads, 0, stream>>>(queue_.get(), capacity, queue_head_, k, out);
  KVTWIN_CUDA_LAUNCHED();
  queue_head_ = (queue_head_ + k) % capacity;
  queue_count_ -= k;
  return ok_status();
}

Status DeviceSide::put_virtual(const std::int64_t* pages, std::int64_t n, cudaStream_t stream) {
  const std::int64_t capacity = static_cast<std::int64_t>(queue_.size());
  KVTWIN_CHECK(owner_ && queue_count_ + n <= capacity, "free queue overflow");
  if (n == 0) return ok_status();
  queue_put_kernel<<<blocks_for(n), kThreads, 0, stream>>>(queue_.get(), capacity, (queue_head_ + queue_count_) % capacity,
                                                           pages, n);
  KVTWIN_CUDA_LAUNCHED();
  queue_count_ += n;
  return ok_status();
}

Status DeviceSide::bind(const std::int64_t* vpages, std::int64_t k, const std::int64_t* holes, std::int64_t h,
                        cudaStream_t stream) {
  KVTWIN_CHECK(!floats(), "a float binds the pages its plan chose (bind_at)");
  KVTWIN_CHECK(h == std::min(k, holes_), "a bind fills the lowest min(k, holes) holes first");
  if (k == 0) return ok_status();
  const std::int64_t band = k - h;
  const std::int64_t band_start = grows_up() ? watermark_ : watermark_ - band + 1;
  bind_kernel<<<blocks_for(k), kThreads, 0, stream>>>(v2p_.get(), p2v_.get(), hole_flags_.get(), vpages, holes, h,
                                                      band_start, k);
  KVTWIN_CUDA_LAUNCHED();
  watermark_ = grows_up() ? watermark_ + band : watermark_ - band;
  holes_ -= h;
  allocated_ += k;
  return ok_status();
}

Status DeviceSide::unbind(const std::int64_t* vpages, std::int64_t n, bool only_positive, std::int64_t bound,
                          cudaStream_t stream) {
  KVTWIN_CHECK(bound >= 0 && bound <= n && bound <= allocated_, "unbinding more pages than are bound");
  if (n == 0) return ok_status();
  unbind_kernel<<<blocks_for(n), kThreads, 0, stream>>>(v2p_.get(), p2v_.get(), vpages, n, only_positive);
  KVTWIN_CUDA_LAUNCHED();
  allocated_ -= bound;
  return ok_status();
}

Status DeviceSide::add_holes(const std::int64_t* pages, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return ok_status();
  set_flags_kernel<<<blocks_for(n), kThreads, 0, stream>>>(hole_flags_.get(), pages, n, 1);
  KVTWIN_CUDA_LAUNCHED();
  holes_ += n;
  return ok_status();
}

Status DeviceSide::apply_compaction(const std::int64_t* src, const std::int64_t* dst, std::int64_t n,
                                    std::int64_t new_watermark, bool clears_holes, cudaStream_t stream) {
  if (n > 0) {
    apply_moves_kernel<<<blocks_for(n), kThreads, 0, stream>>>(v2p_.get(), p2v_.get(), src, dst, n);
    KVTWIN_CUDA_LAUNCHED();
  }
  watermark_ = new_watermark;
  if (clears_holes) {
    KVTWIN_CUDA_TRY(cudaMemsetAsync(hole_flags_.get(), 0, hole_flags_.bytes(), stream));
    holes_ = 0;
  }
  return ok_status();
}

Status DeviceSide::bind_at(const std::int64_t* vpages, const std::int64_t* pages, std::int64_t k,
                           std::int64_t holes_taken, std::int64_t new_low, std::int64_t new_high, cudaStream_t stream) {
  KVTWIN_CHECK(floats() && holes_taken <= holes_ && new_low <= new_high, "bind_at binds a float's planned pages");
  if (k > 0) {
    bind_at_kernel<<<blocks_for(k), kThreads, 0, stream>>>(v2p_.get(), p2v_.get(), hole_flags_.get(), vpages, pages, k);
    KVTWIN_CUDA_LAUNCHED();
  }
  holes_ -= holes_taken;
  allocated_ += k;
  span_low_ = new_low;
  watermark_ = new_high;
  return ok_status();
}

Status DeviceSide::absorb(const std::int64_t* pages, std::int64_t n, std::int64_t new_low, std::int64_t new_high,
                          cudaStream_t stream) {
  KVTWIN_CHECK(floats() && n <= holes_ && new_low <= new_high, "absorb takes a float's holes out of its span");
  if (n > 0) {
    set_flags_kernel<<<blocks_for(n), kThreads, 0, stream>>>(hole_flags_.get(), pages, n, 0);
    KVTWIN_CUDA_LAUNCHED();
  }
  holes_ -= n;
  span_low_ = new_low;
  watermark_ = new_high;
  return ok_status();
}

Status DeviceSide::relocate(const std::int64_t* src, const std::int64_t* dst, std::int64_t n, std::int64_t new_low,
                            std::int64_t new_high, std::int64_t* scratch, cudaStream_t stream) {
  KVTWIN_CHECK(floats() && new_high - new_low == allocated_, "a relocation packs the float's live pages");
  if (n > 0) {
    gather_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p2v_.get(), src, n, scratch);
    KVTWIN_CUDA_LAUNCHED();
    clear_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p2v_.get(), src, n);
    KVTWIN_CUDA_LAUNCHED();
    bind_moved_kernel<<<blocks_for(n), kThreads, 0, stream>>>(v2p_.get(), p2v_.get(), scratch, dst, n);
    KVTWIN_CUDA_LAUNCHED();
  }
  if (holes_ != 0) KVTWIN_CUDA_TRY(cudaMemsetAsync(hole_flags_.get(), 0, hole_flags_.bytes(), stream));
  holes_ = 0;
  span_low_ = new_low;
  watermark_ = new_high;
  return ok_status();
}

DigestRanges DeviceSide::digest_ranges(std::uint64_t side_index) const {
  DigestRanges r{};
  r.v2p = v2p_.get();
  r.v2p_len = v2p_len();
  r.p2v = p2v_.get();
  r.p2v_len = p2v_len();
  r.queue = queue_.get();
  r.queue_capacity = static_cast<std::int64_t>(queue_.size());
  r.queue_head = queue_head_;
  r.queue_count = owner_ ? queue_count_ : 0;  // as free_queue_of(): only the owner lists a queue
  r.hole_flags = holes_ != 0 ? hole_flags_.get() : nullptr;  // as holes_of(): no holes counted, none listed
  r.side = side_index;
  return r;
}

std::uint64_t DeviceSide::digest_counter_terms(std::uint64_t side_index) const {
  std::uint64_t sum = tables_digest_counters(side_index, watermark_, static_cast<std::uint64_t>(allocated_),
                                             static_cast<std::uint64_t>(owner_ ? queue_count_ : 0),
                                             static_cast<std::uint64_t>(holes_));
  // As digest_tables: a float's span_low, when not 0.
  if (span_low_ != 0) sum += tables_digest_term(side_index, TablesDigestPart::watermark, 1, span_low_);
  return sum;
}

Result<SideSnapshot> DeviceSide::snapshot(std::int64_t first_virtual, cudaStream_t stream) const {
  SideSnapshot s;
  s.name = geometry_.name;
  s.grows_up = grows_up();
  s.floats = floats();
  s.span_low = span_low_;
  s.owner = owner_;
  s.min_page = min_page();
  s.num_pages = num_pages();
  s.num_virtual = num_virtual_;
  s.first_virtual = first_virtual;
  s.page_bytes = geometry_.page_bytes;
  s.watermark = watermark_;
  s.allocated = allocated_;
  s.holes = holes_;
  s.queue_head = queue_head_;
  s.queue_count = queue_count_;
  s.v2p.resize(v2p_.size());
  s.p2v.resize(p2v_.size());
  s.hole_flags.resize(hole_flags_.size());
  if (owner_) s.queue.resize(queue_.size());
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(s.v2p.data(), v2p_.get(), v2p_.bytes(), cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(s.p2v.data(), p2v_.get(), p2v_.bytes(), cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(s.hole_flags.data(), hole_flags_.get(), hole_flags_.bytes(), cudaMemcpyDeviceToHost, stream));
  if (owner_)
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(s.queue.data(), queue_.get(), queue_.bytes(), cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  return s;
}

Status gather_values(const std::int64_t* table, const std::int64_t* index, std::int64_t n, std::int64_t* out,
                     cudaStream_t stream) {
  if (n == 0) return ok_status();
  gather_kernel<<<blocks_for(n), kThreads, 0, stream>>>(table, index, n, out);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

Status flag_outside(const std::int64_t* values, std::int64_t n, std::int64_t lower, std::int64_t upper,
                    std::uint32_t* status, cudaStream_t stream) {
  if (n == 0) return ok_status();
  flag_outside_kernel<<<blocks_for(n), kThreads, 0, stream>>>(values, n, lower, upper, status);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

Status check_write_loc(const std::int64_t* loc, const std::int64_t* final_loc, std::int64_t lanes, std::int64_t slots,
                       std::int64_t sink_end, std::uint32_t* flags, cudaStream_t stream) {
  KVTWIN_CHECK(lanes > 0 && lanes <= kWriteCheckMaxLanes, "check_write_loc takes 1 to " +
                                                              std::to_string(kWriteCheckMaxLanes) + " lanes, not " +
                                                              std::to_string(lanes));
  write_loc_check_kernel<<<1, kWriteCheckMaxLanes, 0, stream>>>(loc, final_loc, lanes, slots, sink_end, flags);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

Status sink_to_zero(const std::int64_t* values, std::int64_t n, std::int64_t sink_end, std::int64_t* out,
                    cudaStream_t stream) {
  if (n == 0) return ok_status();
  sink_to_zero_kernel<<<blocks_for(n), kThreads, 0, stream>>>(values, n, sink_end, out);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

Status flag_unallocated_rows(const std::int64_t* tokens, std::int64_t row_stride, const std::int64_t* lens,
                             std::int64_t rows, const std::int64_t* v2p, std::int64_t v2p_len, std::int64_t page_size,
                             bool sink_counts_as_allocated, std::uint32_t* flags, cudaStream_t stream) {
  if (rows == 0) return ok_status();
  KVTWIN_CUDA_TRY(cudaMemsetAsync(flags, 0, static_cast<std::size_t>(rows) * sizeof(std::uint32_t), stream));
  // Allocated pages are v > 0 (0 is the sink, whose v2p row is 0); the fault tests v >= 0.
  const std::int64_t first_page = sink_counts_as_allocated ? 0 : 1;
  flag_unallocated_kernel<<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream>>>(
      tokens, row_stride, lens, rows, v2p, v2p_len, page_size, first_page, flags);
  KVTWIN_CUDA_LAUNCHED();
  return ok_status();
}

}  // namespace kvtwin::gpu
