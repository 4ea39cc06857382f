// The pool's kernels (kernels.cuh). Plain on purpose: one thread per element or per 16-byte
// unit, grid-stride loops, a few independent loads in flight per thread before the first store.
#include "gpu/kernels.cuh"

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "core/det_math.h"

namespace kvtwin::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kIlp = 4;  // independent 16-byte loads in flight per thread
constexpr std::int64_t kMaxGridX = 1LL << 20;
constexpr unsigned kMaxGridY = 65535;


unsigned blocks_for(std::uint64_t items, std::uint64_t per_block) {
  const std::uint64_t b = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::uint64_t>(b, 1, kMaxGridX));
}

__device__ __forceinline__ std::uint64_t global_thread() {
  return static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::uint64_t grid_threads() {
  return static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

// SPEC 5: t < 0 -> 0; t // ps >= len(v2p) -> 0; else max(v2p[t // ps] * ps + t % ps, 0).
__device__ __forceinline__ std::int64_t translate_one(std::int64_t t, const std::int64_t* v2p, std::int64_t v2p_len,
                                                      std::int64_t ps, bool negative_wraps, bool tombstone_live) {
  std::int64_t page = 0, slot = 0;
  if (t < 0) {
    if (!negative_wraps) return 0;
    // Fault 9: Python-style indexing from the end of the table.
    page = floor_div(t, ps);
    slot = t - page * ps;
    page += v2p_len;
    if (page < 0) return 0;
  } else {
    page = t / ps;
    slot = t % ps;
    if (page >= v2p_len) return 0;
  }
  const std::int64_t pt = v2p[page] * ps + slot;
  // A tombstone (-1) gives a negative id, which goes to the sink (fault 10 keeps it).
  return (tombstone_live || pt > 0) ? pt : 0;
}

// ---------------------------------------------------------------- translation

__global__ void translate_kernel(const TranslateParams p) {
  const std::uint64_t total = static_cast<std::uint64_t>(p.rows) * static_cast<std::uint64_t>(p.out_cols);
  for (std::uint64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t r = static_cast<std::int64_t>(i / static_cast<std::uint64_t>(p.out_cols));
    const std::int64_t c = static_cast<std::int64_t>(i) - r * p.out_cols;
    std::int64_t value = 0;  // lanes past the input: the sink (out_width zero-fill)
    if (c < p.cols) {
      const std::int64_t at = r * p.in_row_stride + c * p.in_col_stride;
      const std::int64_t t = p.in_int32 ? static_cast<std::int64_t>(static_cast<const std::int32_t*>(p.in)[at])
                                        : static_cast<const std::int64_t*>(p.in)[at];
      value = translate_one(t, p.v2p, p.v2p_len, p.page_size, p.negative_wraps, p.tombstone_live);
    }
    p.out[r * p.out_row_stride + c * p.out_col_stride] = value;
  }
}

__global__ void swa_translate_kernel(const SwaTranslateParams p) {
  for (std::uint64_t i = global_thread(); i < static_cast<std::uint64_t>(p.n); i += grid_threads()) {
    const std::int64_t k = p.in[i];
    std::int64_t value = 0;  // a negative full id goes to the sink (docs/decisions.md)
    if (k >= 0) {
      // SPEC 4.3: vpage = max(p2v_full[k // ps], 0); swa = max(swa_v2p[vpage] * ps + k % ps, 0).
      // A page past p2v reads as the -1 sentinel (docs/decisions.md).
      const std::int64_t page = k / p.page_size;
      const std::int64_t owner = page < p.full_p2v_len ? p.full_p2v[page] : -1;
      const std::int64_t vpage = max(owner, std::int64_t{0});
      if (vpage < p.swa_v2p_len) {
        const std::int64_t s = p.swa_v2p[vpage] * p.page_size + k % p.page_size;
        value = (p.tombstone_live || s > 0) ? s : 0;
      }
    }
    p.out[i] = value;
  }
}

__global__ void page_table_kernel(const PageTableParams p) {
  const std::uint64_t total = static_cast<std::uint64_t>(p.bs) * static_cast<std::uint64_t>(p.table_cols);
  for (std::uint64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t b = static_cast<std::int64_t>(i / static_cast<std::uint64_t>(p.table_cols));
    const std::int64_t c = static_cast<std::int64_t>(i) - b * p.table_cols;
    const std::int64_t len = p.seq_lens[b];
    if (len <= 0 || c >= (len + p.page_size - 1) / p.page_size) continue;  // past the live prefix: untouched
    const std::int64_t row = p.req != nullptr ? p.req[b] : b;
    const std::int64_t col = c * p.page_size;
    if (row < 0 || row >= p.rt_rows || col >= p.rt_cols) continue;  // validated on the host; a last guard
    const std::int64_t t = p.req_to_token[row * p.rt_row_stride + col];
    std::int64_t page = 0;
    if (t >= 0 && t / p.page_size < p.v2p_len) page = max(p.v2p[t / p.page_size], std::int64_t{0});
    p.table[b * p.table_row_stride + c] = page;
  }
}

__global__ void remap_indices_kernel(const RemapParams p) {
  const std::int64_t bound = min(p.kv_indptr[p.bs], p.capacity);  // read on the device: never a stale bound
  for (std::uint64_t i = global_thread(); i < static_cast<std::uint64_t>(max(bound, std::int64_t{0}));
       i += grid_threads())
    p.out[i] = translate_one(p.in[i], p.v2p, p.v2p_len, p.page_size, false, false);
}

// ---------------------------------------------------------------- the doors

// Byte offset of a row in the pool, or -1 when it is outside (or the lane moves nothing).
__device__ __forceinline__ std::int64_t row_offset(std::int64_t t, const RowSegment& seg, std::uint64_t pool_bytes,
                                                   bool int32_offsets) {
  if (static_cast<std::uint64_t>(t) >= pool_bytes) return -1;
  std::int64_t off = 0;
  if (int32_offsets) {
    // Fault 18: 32-bit arithmetic, read as a signed int32: wraps past 2^31.
    const std::uint32_t wrapped = static_cast<std::uint32_t>(t) * static_cast<std::uint32_t>(seg.entry_bytes) +
                                  static_cast<std::uint32_t>(seg.pool_offset_bytes);
    off = static_cast<std::int32_t>(wrapped);
  } else {
    off = static_cast<std::int64_t>(static_cast<std::uint64_t>(t) * seg.entry_bytes + seg.pool_offset_bytes);
  }
  if (off < 0 || static_cast<std::uint64_t>(off) + seg.row_bytes > pool_bytes) return -1;
  return off;
}

// Loads and stores of the copy kernels with the cache hint a shape asks for (16-byte units only;
// the byte path is plain). nc: the read-only data path; cs: "streaming", evict first.
template <CacheHint kHint, class Unit>
__device__ __forceinline__ Unit load_unit(const Unit* at) {
  if constexpr (std::is_same_v<Unit, uint4> && kHint == CacheHint::nc_load_cs_store) return __ldg(at);
  else if constexpr (std::is_same_v<Unit, uint4> && kHint == CacheHint::cs_load_cs_store) return __ldcs(at);
  else return *at;
}
template <CacheHint kHint, class Unit>
__device__ __forceinline__ void store_unit(Unit* at, const Unit& value) {
  if constexpr (std::is_same_v<Unit, uint4> && kHint != CacheHint::none) __stcs(at, value);
  else *at = value;
}

// One group of `group` threads per row at a time; a row is one (lane, segment) pair, rows numbered
// segment-major (row = segment * lanes + lane), so consecutive groups take consecutive lanes of
// one segment. The group walks its row in units of 16 bytes (or bytes), kIlp units per thread, and
// kRows rows at once: every load of the kRows rows is issued before the first store. The groups
// loop over the rows (grid-stride), so any grid size moves every row: a grid as large as the rows
// (each group one pass) or a persistent one (SMs x resident blocks, each group several passes).
template <bool kVector, bool kScatter, int kRows, CacheHint kHint>
__global__ void __launch_bounds__(kThreads) copy_rows_kernel(const RowCopyParams p, unsigned group) {
  using Unit = std::conditional_t<kVector, uint4, std::uint8_t>;
  constexpr std::uint64_t kUnit = sizeof(Unit);
  const unsigned groups_per_block = blockDim.x / group;
  const unsigned in_group = threadIdx.x % group;
  const std::uint64_t lanes = static_cast<std::uint64_t>(p.lanes);
  const std::uint64_t rows = lanes * p.num_segments;
  const std::uint64_t groups = static_cast<std::uint64_t>(gridDim.x) * groups_per_block;
  const std::uint64_t chunk_units = static_cast<std::uint64_t>(group) * kIlp;
  for (std::uint64_t first_row = static_cast<std::uint64_t>(blockIdx.x) * groups_per_block + threadIdx.x / group;
       first_row < rows; first_row += groups * kRows) {
    // Where each of the kRows rows comes from and goes to; from == nullptr: zeros (a read-door
    // sink lane); units == 0: nothing to move (past the end, or a write-door sink lane).
    const Unit* from[kRows];
    Unit* to[kRows];
    std::uint64_t units[kRows];
    std::uint64_t most_units = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      from[r] = nullptr;
      to[r] = nullptr;
      units[r] = 0;
      const std::uint64_t row = first_row + static_cast<std::uint64_t>(r) * groups;
      if (row >= rows) continue;
      const std::uint64_t s = row / lanes;
      const std::uint64_t lane = row - s * lanes;
      const RowSegment seg = p.segments[s];
      // The loc set is picked by a branch: indexing the by-value parameter array at run time
      // would copy the parameters to local memory (measured: about a third of the bandwidth).
      const std::int64_t* locs = seg.loc_set != 0 && p.locs[1] != nullptr ? p.locs[1] : p.locs[0];
      const std::int64_t t = locs[lane];
      Unit* staging = reinterpret_cast<Unit*>(p.staging + seg.staging_offset_bytes + lane * p.staging_lane_stride_bytes);
      // A sink lane: the write door discards it (SPEC 6), the read door reads zeros.
      const std::int64_t off = t < seg.first_slot ? -1 : row_offset(t, seg, p.pool_bytes, p.int32_offsets);
      if (off < 0) {
        if (kScatter) continue;
        to[r] = staging;
      } else {
        Unit* pool = reinterpret_cast<Unit*>(p.pool + off);
        from[r] = kScatter ? staging : pool;
        to[r] = kScatter ? pool : staging;
      }
      units[r] = seg.row_bytes / kUnit;
      most_units = max(most_units, units[r]);
    }
    for (std::uint64_t first = in_group; first < most_units; first += chunk_units) {
      Unit value[kRows][kIlp];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int k = 0; k < kIlp; ++k) {
          const std::uint64_t u = first + static_cast<std::uint64_t>(k) * group;
          if (u < units[r]) value[r][k] = from[r] != nullptr ? load_unit<kHint>(from[r] + u) : Unit{};
        }
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int k = 0; k < kIlp; ++k) {
          const std::uint64_t u = first + static_cast<std::uint64_t>(k) * group;
          if (u < units[r]) store_unit<kHint>(to[r] + u, value[r][k]);
        }
    }
  }
}

// Blocks of a launch: enough for every item (`items_per_block` each) or, for a persistent shape,
// at most the multiprocessors times the resident blocks (occupancy of `kernel`, capped by
// blocks_per_sm); never more than max_blocks when set, nor than a grid can hold.
template <class Kernel>
cudaError_t grid_blocks(Kernel kernel, std::uint64_t items, std::uint64_t items_per_block, std::uint32_t blocks_per_sm,
                        std::uint32_t max_blocks, unsigned& blocks) {
  std::uint64_t b = (items + items_per_block - 1) / items_per_block;
  if (blocks_per_sm > 0) {
    int device = 0, sms = 0, resident = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
    if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, 0); e != cudaSuccess)
      return e;
    const std::uint64_t per_sm = std::min<std::uint64_t>(blocks_per_sm, std::max(resident, 1));
    b = std::min<std::uint64_t>(b, per_sm * static_cast<std::uint64_t>(std::max(sms, 1)));
  }
  if (max_blocks > 0) b = std::min<std::uint64_t>(b, max_blocks);
  blocks = static_cast<unsigned>(std::clamp<std::uint64_t>(b, 1, 0x7fffffffULL));  // the loops cover the rest
  return cudaSuccess;
}

template <bool kVector, bool kScatter, int kRows, CacheHint kHint>
cudaError_t launch_copy_rows_as(const RowCopyParams& p, const RowCopyShape& shape, unsigned group, cudaStream_t stream) {
  const auto kernel = copy_rows_kernel<kVector, kScatter, kRows, kHint>;
  const std::uint64_t rows = static_cast<std::uint64_t>(p.lanes) * p.num_segments;
  unsigned blocks = 0;
  if (const cudaError_t e = grid_blocks(kernel, rows, (kThreads / group) * static_cast<std::uint64_t>(kRows),
                                        shape.blocks_per_sm, shape.max_blocks, blocks);
      e != cudaSuccess)
    return e;
  kernel<<<blocks, kThreads, 0, stream>>>(p, group);
  return cudaGetLastError();
}

template <bool kVector, bool kScatter, int kRows>
cudaError_t launch_copy_rows_hint(const RowCopyParams& p, const RowCopyShape& shape, unsigned group, cudaStream_t stream) {
  switch (shape.hint) {
    case CacheHint::none:
      return launch_copy_rows_as<kVector, kScatter, kRows, CacheHint::none>(p, shape, group, stream);
    case CacheHint::nc_load_cs_store:
      return launch_copy_rows_as<kVector, kScatter, kRows, CacheHint::nc_load_cs_store>(p, shape, group, stream);
    case CacheHint::cs_load_cs_store:
      return launch_copy_rows_as<kVector, kScatter, kRows, CacheHint::cs_load_cs_store>(p, shape, group, stream);
  }
  return cudaErrorInvalidValue;
}

template <bool kVector, bool kScatter>
cudaError_t launch_copy_rows_rows(const RowCopyParams& p, const RowCopyShape& shape, unsigned group, cudaStream_t stream) {
  switch (shape.rows_in_flight) {
    case 1: return launch_copy_rows_hint<kVector, kScatter, 1>(p, shape, group, stream);
    case 2: return launch_copy_rows_hint<kVector, kScatter, 2>(p, shape, group, stream);
    case 4: return launch_copy_rows_hint<kVector, kScatter, 4>(p, shape, group, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <bool kScatter>
cudaError_t launch_copy_rows(const RowCopyParams& p, const RowCopyShape& shape, cudaStream_t stream) {
  if (p.lanes <= 0 || p.num_segments == 0 || p.max_row_bytes == 0) return cudaSuccess;
  const std::uint64_t units = p.max_row_bytes / (p.vector16 ? 16 : 1);
  // Threads per row: a power of two, at most a warp, each with about kIlp units of the row.
  // (8 units per thread measured no faster on the H200.)
  unsigned group = 1;
  while (group < 32 && group * static_cast<std::uint64_t>(kIlp) < units) group *= 2;
  return p.vector16 ? launch_copy_rows_rows<true, kScatter>(p, shape, group, stream)
                    : launch_copy_rows_rows<false, kScatter>(p, shape, group, stream);
}

// Page moves in chunks of kThreads * kIlp units: chunk c of page i is item i * chunks + c; the
// blocks loop over the items (grid-stride), so a persistent grid moves every chunk too.
template <bool kVector, CacheHint kHint>
__global__ void __launch_bounds__(kThreads) move_pages_kernel(const PageMoveParams p) {
  using Unit = std::conditional_t<kVector, uint4, std::uint8_t>;
  constexpr std::uint64_t kUnit = sizeof(Unit);
  const std::uint64_t units = p.page_bytes / kUnit;
  constexpr std::uint64_t kChunkUnits = static_cast<std::uint64_t>(kThreads) * kIlp;
  const std::uint64_t chunks = (units + kChunkUnits - 1) / kChunkUnits;
  const std::uint64_t items = static_cast<std::uint64_t>(p.pages) * chunks;
  const std::uint64_t limit = p.pool_bytes / p.page_bytes;  // pages wholly inside the pool
  for (std::uint64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const std::uint64_t page = item / chunks;
    const std::int64_t src = p.src[page], dst = p.dst[page];
    if (src < 0 || dst < 0 || static_cast<std::uint64_t>(src) >= limit || static_cast<std::uint64_t>(dst) >= limit)
      continue;  // validated on the host; a last guard
    const Unit* from = reinterpret_cast<const Unit*>(p.pool + static_cast<std::uint64_t>(src) * p.page_bytes);
    Unit* to = reinterpret_cast<Unit*>(p.pool + static_cast<std::uint64_t>(dst) * p.page_bytes);
    const std::uint64_t first = (item - page * chunks) * kChunkUnits + threadIdx.x;
    Unit value[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::uint64_t i = first + static_cast<std::uint64_t>(k) * kThreads;
      if (i < units) value[k] = load_unit<kHint>(from + i);
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::uint64_t i = first + static_cast<std::uint64_t>(k) * kThreads;
      if (i < units) store_unit<kHint>(to + i, value[k]);
    }
  }
}

template <bool kVector, CacheHint kHint>
cudaError_t launch_move_pages_as(const PageMoveParams& p, const MoveShape& shape, cudaStream_t stream) {
  const auto kernel = move_pages_kernel<kVector, kHint>;
  const std::uint64_t units = p.page_bytes / (kVector ? 16 : 1);
  const std::uint64_t chunk_units = static_cast<std::uint64_t>(kThreads) * kIlp;
  const std::uint64_t items = static_cast<std::uint64_t>(p.pages) * ((units + chunk_units - 1) / chunk_units);
  unsigned blocks = 0;
  if (const cudaError_t e = grid_blocks(kernel, items, 1, shape.blocks_per_sm, shape.max_blocks, blocks); e != cudaSuccess)
    return e;
  kernel<<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <bool kVector>
cudaError_t launch_move_pages_vector(const PageMoveParams& p, const MoveShape& shape, cudaStream_t stream) {
  switch (shape.hint) {
    case CacheHint::none: return launch_move_pages_as<kVector, CacheHint::none>(p, shape, stream);
    case CacheHint::nc_load_cs_store: return launch_move_pages_as<kVector, CacheHint::nc_load_cs_store>(p, shape, stream);
    case CacheHint::cs_load_cs_store: return launch_move_pages_as<kVector, CacheHint::cs_load_cs_store>(p, shape, stream);
  }
  return cudaErrorInvalidValue;
}

// ---------------------------------------------------------------- reference decode attention

__device__ __forceinline__ float load_element(const PagedView& v, std::int64_t element) {
  if (element < 0 || static_cast<std::uint64_t>(element) >= v.limit_elements) return 0.0f;  // a last guard
  switch (v.dtype) {
    case DType::bf16:
      return det::bf16_to_float(reinterpret_cast<const std::uint16_t*>(v.base)[element]);
    case DType::fp16:
      return det::fp16_to_float(reinterpret_cast<const std::uint16_t*>(v.base)[element]);
    case DType::fp8_e4m3:
      return det::fp8e4m3_to_float(v.base[element]);
    case DType::fp32:
      return reinterpret_cast<const float*>(v.base)[element];
  }
  return 0.0f;
}

constexpr int kAttentionThreads = 128;

__device__ void attend_row(const AttentionParams& p, std::int64_t b, std::uint32_t h, float* partial_max, float& total);

__global__ void __launch_bounds__(kAttentionThreads) decode_attention_kernel(const AttentionParams p) {
  __shared__ float partial_max[kAttentionThreads];
  __shared__ float total;
  for (std::int64_t b = blockIdx.y; b < p.rows; b += gridDim.y) {
    attend_row(p, b, blockIdx.x, partial_max, total);
    __syncthreads();  // the shared scratch is reused by the next row
  }
}

__device__ void attend_row(const AttentionParams& p, std::int64_t b, std::uint32_t h, float* partial_max, float& total) {
  std::int64_t len = p.seq_lens[b];
  if (len <= 0) return;  // uniform across the block
  len = min(len, p.max_tokens);
  const std::uint32_t g = h / (p.query_heads / p.kv_heads);
  const std::int64_t row = b * p.query_heads + h;
  const float* q = p.q + row * p.k_dim;
  float* s = p.scores + row * p.max_tokens;
  const std::int64_t* table = p.page_table + b * p.table_row_stride;
  const float scale = det::div(1.0f, det::sqrt(static_cast<float>(p.k_dim)));

  // s_j = (sum_d in order of q[d] * k_j[d]) * scale, one token per thread.
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const std::int64_t page = table[j / p.page_size];
    const std::int64_t base = p.k.storage_offset + page * p.k.page_stride + (j % p.page_size) * p.k.token_stride +
                              static_cast<std::int64_t>(g) * p.k.head_stride;
    float acc = 0.0f;
    for (std::uint32_t d = 0; d < p.k_dim; ++d)
      acc = det::add(acc, det::mul(q[d], load_element(p.k, base + d * p.k.dim_stride)));
    s[j] = det::mul(acc, scale);
  }
  __syncthreads();
  // m = max_j s_j (exact in any order: scores are finite).
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, s[j]);
  partial_max[threadIdx.x] = m;
  __syncthreads();
  for (int half = kAttentionThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial_max[threadIdx.x] = fmaxf(partial_max[threadIdx.x], partial_max[threadIdx.x + half]);
    __syncthreads();
  }
  m = partial_max[0];
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) s[j] = det::exp_nonpositive(det::sub(s[j], m));
  __syncthreads();
  if (threadIdx.x == 0) {
    float l = 0.0f;
    for (std::int64_t j = 0; j < len; ++j) l = det::add(l, s[j]);  // in order
    total = l;
  }
  __syncthreads();
  const float l = total;
  for (std::uint32_t e = threadIdx.x; e < p.v_dim; e += blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < len; ++j) {  // in order
      const std::int64_t page = table[j / p.page_size];
      const std::int64_t at = p.v.storage_offset + page * p.v.page_stride + (j % p.page_size) * p.v.token_stride +
                              static_cast<std::int64_t>(g) * p.v.head_stride + e * p.v.dim_stride;
      acc = det::add(acc, det::mul(s[j], load_element(p.v, at)));
    }
    p.out[row * p.v_dim + e] = det::div(acc, l);
  }
}

}  // namespace

cudaError_t launch_translate(const TranslateParams& p, cudaStream_t stream) {
  const std::uint64_t total = static_cast<std::uint64_t>(p.rows) * static_cast<std::uint64_t>(p.out_cols);
  if (total == 0) return cudaSuccess;
  translate_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_swa_translate(const SwaTranslateParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  swa_translate_kernel<<<blocks_for(static_cast<std::uint64_t>(p.n), kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_page_table(const PageTableParams& p, cudaStream_t stream) {
  const std::uint64_t total = static_cast<std::uint64_t>(p.bs) * static_cast<std::uint64_t>(p.table_cols);
  if (total == 0) return cudaSuccess;
  page_table_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_remap_indices(const RemapParams& p, cudaStream_t stream) {
  if (p.capacity <= 0) return cudaSuccess;
  remap_indices_kernel<<<blocks_for(static_cast<std::uint64_t>(p.capacity), kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_scatter_rows(const RowCopyParams& p, cudaStream_t stream, const RowCopyShape& shape) {
  return launch_copy_rows<true>(p, shape, stream);
}
cudaError_t launch_gather_rows(const RowCopyParams& p, cudaStream_t stream, const RowCopyShape& shape) {
  return launch_copy_rows<false>(p, shape, stream);
}

bool rows_vector16(const void* pool, const void* staging, std::uint64_t staging_lane_stride_bytes,
                   const RowSegment* host_segments, std::uint32_t num_segments) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(pool) | reinterpret_cast<std::uintptr_t>(staging) |
                       staging_lane_stride_bytes;
  for (std::uint32_t s = 0; s < num_segments; ++s) {
    const RowSegment& seg = host_segments[s];
    bits |= seg.pool_offset_bytes | seg.entry_bytes | seg.staging_offset_bytes | seg.row_bytes;
  }
  return bits % 16 == 0;
}

cudaError_t launch_move_pages(const PageMoveParams& p, cudaStream_t stream, const MoveShape& shape) {
  if (p.pages <= 0 || p.page_bytes == 0) return cudaSuccess;
  const bool vector = (reinterpret_cast<std::uintptr_t>(p.pool) | p.page_bytes) % 16 == 0;
  return vector ? launch_move_pages_vector<true>(p, shape, stream) : launch_move_pages_vector<false>(p, shape, stream);
}

cudaError_t launch_decode_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.query_heads == 0) return cudaSuccess;
  if (p.kv_heads == 0 || p.query_heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  const dim3 grid(p.query_heads, static_cast<unsigned>(std::min<std::int64_t>(p.rows, kMaxGridY)));
  decode_attention_kernel<<<grid, kAttentionThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace kvtwin::gpu
