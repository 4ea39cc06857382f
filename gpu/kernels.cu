// The pool's kernels (kernels.cuh). Plain on purpose: one thread per element or per 16-byte
// unit, grid-stride loops, a few independent loads in flight per thread before the first store.
#include "gpu/kernels.cuh"

#include <algorithm>
#include <cfloat>
#include <tuple>
#include <type_traits>

#include "core/bytes_digest.h"
#include "core/oracle.h"  // kOracleKeyStep
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

// `kernel` launched on `to`'s stream, or added to its chain as a kernel node: the arguments are
// held as the kernel's own parameter types while the node is added (the graph copies them).
template <class... Params, class... Args>
cudaError_t launch_on(const LaunchTarget& to, void (*kernel)(Params...), dim3 grid, dim3 block, const Args&... args) {
  if (to.chain == nullptr) {
    kernel<<<grid, block, 0, to.stream>>>(args...);
    return cudaGetLastError();
  }
  std::tuple<std::decay_t<Params>...> held(args...);
  return std::apply(
      [&](auto&... parameter) {
        void* parameters[] = {static_cast<void*>(&parameter)...};
        cudaKernelNodeParams node{};
        node.func = reinterpret_cast<void*>(kernel);
        node.gridDim = grid;
        node.blockDim = block;
        node.kernelParams = parameters;
        return to.chain->append([&](cudaGraphNode_t* added, cudaGraph_t graph, const cudaGraphNode_t* after,
                                    std::size_t count) { return cudaGraphAddKernelNode(added, graph, after, count, &node); });
      },
      held);
}

__device__ __forceinline__ std::uint64_t global_thread() {
  return static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::uint64_t grid_threads() {
  return static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
}

// An offset as int32 arithmetic leaves it (int32 faults): the low 32 bits of the exact value, read
// as a signed int32. Identical to doing every multiply and add in 32 bits.
__device__ __forceinline__ std::int64_t wrapped_int32(std::int64_t exact) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(exact)));
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
        if (p.tombstone_live || s > 0)
          value = s;
        else if (s < 0 && p.tombstone_wrap_slots > 0)
          value = s + p.tombstone_wrap_slots;  // fault graph_swa_tombstone_live: indexed from the view's end
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
    if (t >= 0 && t / p.page_size < p.v2p_len) {
      // SPEC 5: max(v2p[t // ps], 0); fault page_table_tombstone_live keeps a -1.
      const std::int64_t entry = p.v2p[t / p.page_size];
      page = p.tombstone_live ? entry : max(entry, std::int64_t{0});
    }
    p.table[b * p.table_row_stride + c] = page;
  }
}

__global__ void remap_indices_kernel(const RemapParams p) {
  // Read on the device: never a stale bound (fault remap_stale_bound reads the last entry instead).
  const std::int64_t bound = min(p.kv_indptr[p.stale_bound ? p.kv_indptr_len - 1 : p.bs], p.capacity);
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

// One group of `group` threads per row (lane, segment): the group walks the row in units of
// 16 bytes (or bytes), kIlp units in flight per thread, so a warp moves whole rows with
// coalesced accesses and no per-element division. blockIdx.y picks the segment. A row's units
// are counted in 32 bits and the loc is loaded per segment: 40 registers instead of 48, so six
// blocks fit on a multiprocessor instead of five (measured on the H200: the read door 1-1.5% faster
// at 64 MiB, the rest unchanged).
template <bool kVector, bool kScatter>
__global__ void __launch_bounds__(kThreads) copy_rows_kernel(const RowCopyParams p, unsigned group) {
  using Unit = std::conditional_t<kVector, uint4, std::uint8_t>;
  constexpr std::size_t kUnit = sizeof(Unit);
  const unsigned rows_per_block = blockDim.x / group;
  const unsigned in_group = threadIdx.x % group;
  const std::int64_t lane = static_cast<std::int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group;
  if (lane >= p.lanes) return;
  for (std::uint32_t s = blockIdx.y; s < p.num_segments; s += gridDim.y) {
    const RowSegment seg = p.segments[s];
    const std::uint32_t units = seg.row_bytes / static_cast<std::uint32_t>(kUnit);
    // The loc set is picked by a branch: indexing the by-value parameter array at run time
    // would copy the parameters to local memory (measured: about a third of the bandwidth).
    const std::int64_t* locs = seg.loc_set != 0 && p.locs[1] != nullptr ? p.locs[1] : p.locs[0];
    const std::int64_t t = locs[lane];
    Unit* staging = reinterpret_cast<Unit*>(p.staging + seg.staging_offset_bytes +
                                            static_cast<std::uint64_t>(lane) * p.staging_lane_stride_bytes);
    // A sink lane: the write door discards it (SPEC 6), the read door reads zeros.
    const std::int64_t off = t < seg.first_slot ? -1 : row_offset(t, seg, p.pool_bytes, p.int32_offsets);
    if (off < 0) {
      if (!kScatter)
        for (std::uint32_t u = in_group; u < units; u += group) staging[u] = Unit{};
      continue;
    }
    Unit* pool = reinterpret_cast<Unit*>(p.pool + off);
    Unit* from = kScatter ? staging : pool;
    Unit* to = kScatter ? pool : staging;
    for (std::uint32_t first = in_group; first < units; first += group * kIlp) {
      Unit value[kIlp];
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const std::uint32_t u = first + static_cast<std::uint32_t>(k) * group;
        if (u < units) value[k] = from[u];
      }
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const std::uint32_t u = first + static_cast<std::uint32_t>(k) * group;
        if (u < units) to[u] = value[k];
      }
    }
  }
}

// The launch shape of a row kernel: a group of threads per row (lane), rows_per_block groups a
// block, one grid row per segment (grid-strided past kMaxGridY).
struct RowGrid {
  dim3 grid;
  unsigned group = 1;
};

// The row kernels' grid for rows of `p.max_row_bytes` in units of `unit_bytes`; an error when the
// rows are too long for the kernel's 32-bit unit count or too many for the grid.
cudaError_t row_grid(const RowCopyParams& p, std::uint64_t unit_bytes, RowGrid& out) {
  if (p.max_row_bytes > (1u << 31)) return cudaErrorInvalidValue;  // the kernel counts a row's units in 32 bits
  const std::uint64_t units = p.max_row_bytes / unit_bytes;
  // Threads per row: a power of two, at most a warp, each with about kIlp units of the row.
  // (Measured no faster on the H200: 8 units per thread; a block walking several segments; a
  // persistent grid of SMs x resident blocks looping over the rows; 2 or 4 rows in flight per
  // group; ld.global.nc / ld.global.cs loads with st.global.cs stores, which only gained where
  // back-to-back calls reuse L2 and lost on cold buffers. tools/bench/gpu/results/h200.md.)
  unsigned group = 1;
  while (group < 32 && group * static_cast<std::uint64_t>(kIlp) < units) group *= 2;
  const unsigned rows_per_block = kThreads / group;
  const std::uint64_t blocks = (static_cast<std::uint64_t>(p.lanes) + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7fffffffULL) return cudaErrorInvalidConfiguration;
  out.grid = dim3(static_cast<unsigned>(blocks), std::min<unsigned>(p.num_segments, kMaxGridY));
  out.group = group;
  return cudaSuccess;
}

template <bool kScatter>
cudaError_t launch_copy_rows(const RowCopyParams& p, LaunchTarget to) {
  if (p.lanes <= 0 || p.num_segments == 0 || p.max_row_bytes == 0) return cudaSuccess;
  RowGrid g;
  if (const cudaError_t err = row_grid(p, p.vector16 ? 16 : 1, g); err != cudaSuccess) return err;
  if (p.vector16) return launch_on(to, copy_rows_kernel<true, kScatter>, g.grid, dim3(kThreads), p, g.group);
  return launch_on(to, copy_rows_kernel<false, kScatter>, g.grid, dim3(kThreads), p, g.group);
}

// Where the oracle scatter finds its segments and keys: device arrays, or InlineRows in the
// launch's parameters (both index as source.segments[s], source.keys[k]).
struct ArrayRows {
  const RowSegment* segments = nullptr;
  const std::uint64_t* keys = nullptr;
};

// The oracle scatter: as copy_rows_kernel's scatter, the unit made from the pattern and the
// lane's key instead of read from staging (a uint4 is two words, a uint2 one).
template <bool kVector, class Rows>
__global__ void __launch_bounds__(kThreads)
    oracle_rows_kernel(const RowCopyParams p, const __grid_constant__ Rows source, unsigned group) {
  using Unit = std::conditional_t<kVector, uint4, uint2>;
  constexpr std::uint32_t kWords = sizeof(Unit) / 8;
  const unsigned rows_per_block = blockDim.x / group;
  const unsigned in_group = threadIdx.x % group;
  const std::int64_t lane = static_cast<std::int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group;
  if (lane >= p.lanes) return;
  for (std::uint32_t s = blockIdx.y; s < p.num_segments; s += gridDim.y) {
    const RowSegment seg = source.segments[s];
    const std::uint32_t units = seg.row_bytes / static_cast<std::uint32_t>(sizeof(Unit));
    const std::int64_t* locs = seg.loc_set != 0 && p.locs[1] != nullptr ? p.locs[1] : p.locs[0];
    const std::int64_t t = locs[lane];
    const std::int64_t off = t < seg.first_slot ? -1 : row_offset(t, seg, p.pool_bytes, p.int32_offsets);
    if (off < 0) continue;  // a sink lane: the write door discards it (SPEC 6)
    const std::uint64_t key = source.keys[static_cast<std::uint64_t>(lane) * p.num_segments + s];
    const Unit* pattern = reinterpret_cast<const Unit*>(seg.pattern);
    Unit* pool = reinterpret_cast<Unit*>(p.pool + off);
    for (std::uint32_t u = in_group; u < units; u += group) {
      Unit v = pattern[u];
      std::uint64_t w[kWords];
      memcpy(w, &v, sizeof(Unit));
#pragma unroll
      for (std::uint32_t k = 0; k < kWords; ++k)
        w[k] ^= (key + (static_cast<std::uint64_t>(u) * kWords + k) * kOracleKeyStep) & seg.mask;
      memcpy(&v, w, sizeof(Unit));
      pool[u] = v;
    }
  }
}

template <bool kVector>
__global__ void __launch_bounds__(kThreads) move_pages_kernel(const PageMoveParams p) {
  using Unit = std::conditional_t<kVector, uint4, std::uint8_t>;
  constexpr std::uint64_t kUnit = sizeof(Unit);
  const std::uint64_t units = p.page_bytes / kUnit;
  const std::uint64_t stride = grid_threads();
  for (std::int64_t page = blockIdx.y; page < p.pages; page += gridDim.y) {
    const std::int64_t src = p.src[page], dst = p.dst[page];
    const std::uint64_t limit = p.pool_bytes / p.page_bytes;  // pages wholly inside the pool
    if (src < 0 || dst < 0 || static_cast<std::uint64_t>(src) >= limit || static_cast<std::uint64_t>(dst) >= limit)
      continue;  // validated on the host; a last guard
    std::int64_t src_off = src * static_cast<std::int64_t>(p.page_bytes);
    std::int64_t dst_off = dst * static_cast<std::int64_t>(p.page_bytes);
    if (p.int32_offsets) {
      // Fault int32_offsets_move: 32-bit offsets; a page that wraps outside the pool moves nothing.
      src_off = wrapped_int32(src_off);
      dst_off = wrapped_int32(dst_off);
      if (src_off < 0 || dst_off < 0) continue;
    }
    const Unit* from = reinterpret_cast<const Unit*>(p.pool + src_off);
    Unit* to = reinterpret_cast<Unit*>(p.pool + dst_off);
    for (std::uint64_t first = global_thread(); first < units; first += stride * kIlp) {
      Unit value[kIlp];
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const std::uint64_t i = first + static_cast<std::uint64_t>(k) * stride;
        if (i < units) value[k] = from[i];
      }
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const std::uint64_t i = first + static_cast<std::uint64_t>(k) * stride;
        if (i < units) to[i] = value[k];
      }
    }
  }
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
    for (std::uint32_t d = 0; d < p.k_dim; ++d) {
      const std::int64_t at = base + d * p.k.dim_stride;
      acc = det::add(acc, det::mul(q[d], load_element(p.k, p.int32_offsets ? wrapped_int32(at) : at)));  // fault
    }
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
      acc = det::add(acc, det::mul(s[j], load_element(p.v, p.int32_offsets ? wrapped_int32(at) : at)));  // fault
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

cudaError_t launch_swa_translate(const SwaTranslateParams& p, LaunchTarget to) {
  if (p.n <= 0) return cudaSuccess;
  return launch_on(to, swa_translate_kernel, dim3(blocks_for(static_cast<std::uint64_t>(p.n), kThreads)), dim3(kThreads), p);
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

cudaError_t launch_scatter_rows(const RowCopyParams& p, LaunchTarget to) { return launch_copy_rows<true>(p, to); }
cudaError_t launch_gather_rows(const RowCopyParams& p, cudaStream_t stream) { return launch_copy_rows<false>(p, stream); }

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

template <class Rows>
cudaError_t launch_oracle_rows(const RowCopyParams& p, const Rows& source, cudaStream_t stream) {
  if (p.lanes <= 0 || p.num_segments == 0 || p.max_row_bytes == 0) return cudaSuccess;
  RowGrid g;
  if (const cudaError_t err = row_grid(p, p.vector16 ? 16 : 8, g); err != cudaSuccess) return err;
  if (p.vector16)
    oracle_rows_kernel<true, Rows><<<g.grid, kThreads, 0, stream>>>(p, source, g.group);
  else
    oracle_rows_kernel<false, Rows><<<g.grid, kThreads, 0, stream>>>(p, source, g.group);
  return cudaGetLastError();
}

cudaError_t launch_scatter_oracle_rows(const RowCopyParams& p, cudaStream_t stream) {
  if (p.lanes > 0 && (p.keys == nullptr || p.segments == nullptr)) return cudaErrorInvalidValue;
  return launch_oracle_rows(p, ArrayRows{p.segments, p.keys}, stream);
}

cudaError_t launch_scatter_oracle_rows_inline(const RowCopyParams& p, const InlineRows& rows, cudaStream_t stream) {
  if (!rows_fit_inline(p.num_segments, static_cast<std::size_t>(std::max<std::int64_t>(p.lanes, 0)) * p.num_segments))
    return cudaErrorInvalidValue;
  return launch_oracle_rows(p, rows, stream);
}

cudaError_t launch_move_pages(const PageMoveParams& p, cudaStream_t stream) {
  if (p.pages <= 0 || p.page_bytes == 0) return cudaSuccess;
  const bool vector = (reinterpret_cast<std::uintptr_t>(p.pool) | p.page_bytes) % 16 == 0;
  const std::uint64_t units = p.page_bytes / (vector ? 16 : 1);
  const dim3 grid(blocks_for(units, kThreads * kIlp),
                  static_cast<unsigned>(std::min<std::int64_t>(p.pages, kMaxGridY)));
  if (vector)
    move_pages_kernel<true><<<grid, kThreads, 0, stream>>>(p);
  else
    move_pages_kernel<false><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_decode_attention(const AttentionParams& p, LaunchTarget to) {
  if (p.rows <= 0 || p.query_heads == 0) return cudaSuccess;
  if (p.kv_heads == 0 || p.query_heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  const dim3 grid(p.query_heads, static_cast<unsigned>(std::min<std::int64_t>(p.rows, kMaxGridY)));
  return launch_on(to, decode_attention_kernel, grid, dim3(kAttentionThreads), p);
}

cudaError_t add_copy_node(GraphChain& chain, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return chain.append([&](cudaGraphNode_t* added, cudaGraph_t graph, const cudaGraphNode_t* after, std::size_t count) {
    return cudaGraphAddMemcpyNode1D(added, graph, after, count, dst, src, bytes, kind);
  });
}

}  // namespace kvtwin::gpu
