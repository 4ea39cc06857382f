// The CUDA kernels of the pool, each behind a Params struct taken by value and a launcher that
// returns the launch's cudaError_t. Every kernel takes explicit strides: none derives a stride
// from a shape (SPEC.md section 2: the in-page token stride is the whole entry).
//
//   translate        virtual -> physical token ids through v2p (SPEC 5), int32/int64 strided input,
//                    strided or aliasing int64 output, out_width zero-fill; one launch
//   swa_translate    full physical ids -> SWA ids (SPEC 4.3)
//   page_table       block table from a request-to-token table with the v2p lookup fused in
//   remap_indices    token-level indices remapped in place, bounded by kv_indptr[bs] read on the device
//   scatter/gather   the write and read doors: rows between a staging buffer and the token-major
//                    pool, any number of (layer, part) segments in one launch, 16-byte accesses
//                    when everything is 16-byte aligned
//   move_pages       whole page envelopes src[i] -> dst[i]
//   decode_attention the reference paged decode attention (one query per request, fp32, fixed
//                    operation order from core/det_math.h), K and V read through paged-view strides
//
// What this file does not cover: the allocator's table kernels (gpu/device_side.cu) and the
// decode step's graph (gpu/decode_step.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace kvtwin::gpu {

// ---------------------------------------------------------------- where a launch goes

// A graph built node by node, each node after the last one added (as a captured stream orders
// them). The decode step builds its graph so: a stream capture's begin waits on the other
// threads' driver calls (1.4 ms a capture among the gate's 16 threads, docs/gpu.md); adding a
// node does not.
struct GraphChain {
  cudaGraph_t graph = nullptr;
  cudaGraphNode_t last = nullptr;
  // Adds one node after the last: `add(&node, graph, dependencies, count)` makes the
  // cudaGraphAdd*Node call; the node added is the chain's last from then on.
  template <class Add>
  cudaError_t append(Add add) {
    cudaGraphNode_t added = nullptr;
    const cudaError_t err = add(&added, graph, last != nullptr ? &last : nullptr, last != nullptr ? std::size_t{1} : 0);
    if (err == cudaSuccess) last = added;
    return err;
  }
};
// A one-dimensional copy added to the chain (cudaGraphAddMemcpyNode1D).
cudaError_t add_copy_node(GraphChain& chain, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);

// A launcher's destination: a stream (the kernel runs there), or a graph being built (the kernel
// is added as a node with the same grid, block and parameters).
struct LaunchTarget {
  LaunchTarget(cudaStream_t s) : stream(s) {}     // NOLINT(google-explicit-constructor): any stream
  LaunchTarget(GraphChain& c) : chain(&c) {}      // NOLINT(google-explicit-constructor): any chain
  cudaStream_t stream = nullptr;
  GraphChain* chain = nullptr;
};

// ---------------------------------------------------------------- translation (SPEC 5)

struct TranslateParams {
  const void* in = nullptr;
  bool in_int32 = false;
  std::int64_t rows = 1;             // 1-D: one row
  std::int64_t cols = 0;             // logical ids per row
  std::int64_t in_row_stride = 0;    // elements of the input type
  std::int64_t in_col_stride = 1;
  std::int64_t* out = nullptr;       // may alias `in` (int64 input, same strides)
  std::int64_t out_row_stride = 0;   // int64 elements
  std::int64_t out_col_stride = 1;
  std::int64_t out_cols = 0;         // >= cols; lanes cols .. out_cols-1 are set to the sink
  const std::int64_t* v2p = nullptr;
  std::int64_t v2p_len = 0;
  std::int64_t page_size = 1;
  bool negative_wraps = false;       // fault 9
  bool tombstone_live = false;       // fault 10
};
cudaError_t launch_translate(const TranslateParams& p, cudaStream_t stream);

struct SwaTranslateParams {
  const std::int64_t* in = nullptr;  // full physical token ids
  std::int64_t* out = nullptr;       // may alias `in`
  std::int64_t n = 0;
  const std::int64_t* full_p2v = nullptr;
  std::int64_t full_p2v_len = 0;
  const std::int64_t* swa_v2p = nullptr;
  std::int64_t swa_v2p_len = 0;
  std::int64_t page_size = 1;
  bool tombstone_live = false;       // fault 10
  // Fault graph_swa_tombstone_live (the decode graph's translate only): when > 0, a tombstoned
  // page's negative SWA id is not sent to the sink but indexes the SWA view of this many slots
  // from its end, as a PyTorch index would.
  std::int64_t tombstone_wrap_slots = 0;
};
cudaError_t launch_swa_translate(const SwaTranslateParams& p, LaunchTarget to);

// table[b, c] = max(v2p[rt[req[b], c * ps] // ps], 0) for c < ceil(seq_lens[b] / ps); the rest of
// the table is not touched.
struct PageTableParams {
  const std::int64_t* req_to_token = nullptr;
  std::int64_t rt_rows = 0;
  std::int64_t rt_cols = 0;
  std::int64_t rt_row_stride = 0;
  const std::int64_t* req = nullptr;       // request row of each batch row; nullptr: row b
  const std::int64_t* seq_lens = nullptr;  // tokens of each batch row (read on the device)
  std::int64_t bs = 0;
  std::int64_t* table = nullptr;
  std::int64_t table_cols = 0;
  std::int64_t table_row_stride = 0;
  const std::int64_t* v2p = nullptr;
  std::int64_t v2p_len = 0;
  std::int64_t page_size = 1;
  bool tombstone_live = false;             // fault page_table_tombstone_live: v2p's -1 is not clamped to 0
};
cudaError_t launch_page_table(const PageTableParams& p, cudaStream_t stream);

// out[i] = translate(in[i]) for i < kv_indptr[bs] (read on the device) and i < capacity.
// In place when out == in (the contract); the rest of `out` is not touched.
struct RemapParams {
  const std::int64_t* in = nullptr;
  std::int64_t* out = nullptr;
  std::int64_t capacity = 0;
  const std::int64_t* kv_indptr = nullptr;
  std::int64_t kv_indptr_len = 0;          // entries of kv_indptr (>= bs + 1)
  std::int64_t bs = 0;
  bool stale_bound = false;                // fault remap_stale_bound: bound by kv_indptr[kv_indptr_len - 1]
  const std::int64_t* v2p = nullptr;
  std::int64_t v2p_len = 0;
  std::int64_t page_size = 1;
};
cudaError_t launch_remap_indices(const RemapParams& p, cudaStream_t stream);

// ---------------------------------------------------------------- the doors (SPEC 2, 6)

// One (layer, part) of a sub-pool: its rows sit at loc * entry_bytes + pool_offset_bytes in the
// pool, and lane i's row at staging_offset_bytes + i * staging_lane_stride_bytes in the staging
// buffer.
struct RowSegment {
  std::uint64_t pool_offset_bytes = 0;     // part offset + layer * layer stride
  std::uint64_t entry_bytes = 0;           // the slot stride of the segment's sub-pool
  std::uint64_t staging_offset_bytes = 0;
  std::uint32_t row_bytes = 0;
  std::uint32_t loc_set = 0;               // which of RowCopyParams::locs indexes the pool
  std::int64_t first_slot = 1;             // ids below it are sink lanes (pages below min_page_index)
  // The oracle scatter only (launch_scatter_oracle_rows): the segment's pattern (row_bytes, on
  // the device) and the key bits a row flips (core/oracle.h).
  const std::uint8_t* pattern = nullptr;
  std::uint64_t mask = 0;
};

struct RowCopyParams {
  std::uint8_t* pool = nullptr;
  std::uint64_t pool_bytes = 0;
  std::uint8_t* staging = nullptr;
  std::uint64_t staging_lane_stride_bytes = 0;
  const RowSegment* segments = nullptr;    // device array
  std::uint32_t num_segments = 0;
  std::uint32_t max_row_bytes = 0;         // sizes the grid
  const std::int64_t* locs[2] = {nullptr, nullptr};
  std::int64_t lanes = 0;
  bool vector16 = false;                   // every address involved is 16-byte aligned
  bool int32_offsets = false;              // fault 18
  // The oracle scatter only: the key of (lane, segment) at keys[lane * num_segments + segment].
  const std::uint64_t* keys = nullptr;
};
// Sink lanes (loc < first_slot: the sink page and any reserved page) write nothing and read as
// zeros; a row that would fall outside the pool moves nothing (the doors range-check locs before
// launching; this is a last guard).
cudaError_t launch_scatter_rows(const RowCopyParams& p, LaunchTarget to);  // staging -> pool
cudaError_t launch_gather_rows(const RowCopyParams& p, cudaStream_t stream);   // pool -> staging
// The oracle rows made on the device, no staging: word i of (lane, segment)'s row is
// pattern[i] ^ ((key + i * kOracleKeyStep) & mask) (core/oracle.h), every row_bytes a multiple
// of 8 (vector16: of 16, as for the copies); sink lanes write nothing.
cudaError_t launch_scatter_oracle_rows(const RowCopyParams& p, cudaStream_t stream);

// A small oracle write's segments and keys carried in the launch's own parameters instead of
// device arrays: one launch instead of two uploads and a launch. Under many threads every CUDA
// call waits on the driver's lock (measured: a 2 us upload took 18-21 us beside 15 busy threads),
// and a decode step's write of one layer holds a few segments and a key a lane. 2.2 KiB, inside
// the 4 KiB a launch's parameters may always take; read in place (__grid_constant__), never
// copied to local memory.
inline constexpr std::uint32_t kInlineRowSegments = 8;
inline constexpr std::uint32_t kInlineRowKeys = 224;
struct InlineRows {
  RowSegment segments[kInlineRowSegments];
  std::uint64_t keys[kInlineRowKeys];  // as RowCopyParams::keys
};
// Whether a write of these many segments and keys fits InlineRows.
constexpr bool rows_fit_inline(std::size_t segments, std::size_t keys) {
  return segments <= kInlineRowSegments && keys <= kInlineRowKeys;
}
// As launch_scatter_oracle_rows, the segments and keys taken from `rows` (p.segments and p.keys
// are not read).
cudaError_t launch_scatter_oracle_rows_inline(const RowCopyParams& p, const InlineRows& rows, cudaStream_t stream);

// True when base addresses, offsets, strides and row sizes are all multiples of 16 bytes.
bool rows_vector16(const void* pool, const void* staging, std::uint64_t staging_lane_stride_bytes,
                   const RowSegment* host_segments, std::uint32_t num_segments);

struct PageMoveParams {
  std::uint8_t* pool = nullptr;
  std::uint64_t pool_bytes = 0;
  std::uint64_t page_bytes = 0;
  const std::int64_t* src = nullptr;  // physical pages
  const std::int64_t* dst = nullptr;
  std::int64_t pages = 0;
  bool int32_offsets = false;         // fault int32_offsets_move: a page's byte offset wraps in int32
};
// dst and src must be disjoint: the copies of one launch run in any order.
cudaError_t launch_move_pages(const PageMoveParams& p, cudaStream_t stream);

// ---------------------------------------------------------------- reference decode attention

// A paged view over raw bytes, in elements of `dtype`: element (page, slot, head, d) sits at
// storage_offset + page * page_stride + slot * token_stride + head * head_stride + d * dim_stride.
struct PagedView {
  const std::uint8_t* base = nullptr;
  std::int64_t storage_offset = 0;
  std::int64_t page_stride = 0;
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;
  std::int64_t dim_stride = 1;
  std::uint64_t limit_elements = 0;  // elements readable from base; reads beyond give 0 (a last guard)
  DType dtype = DType::bf16;
};

// out[b, h, e] for b < rows with seq_lens[b] > 0 (rows with length 0 are not written); any number
// of rows (the grid loops over them):
// see docs/decisions.md "The decode step and its reference attention" for the operation order.
struct AttentionParams {
  PagedView k;
  PagedView v;
  const std::int64_t* page_table = nullptr;  // [rows, table_row_stride] physical pages
  std::int64_t table_row_stride = 0;
  const std::int64_t* seq_lens = nullptr;    // [rows], read on the device
  std::int64_t rows = 0;
  std::int64_t page_size = 1;
  std::int64_t max_tokens = 0;               // per row; bounds seq_lens and sizes `scores`
  const float* q = nullptr;                  // [rows, query_heads, k_dim]
  float* scores = nullptr;                   // scratch [rows, query_heads, max_tokens]
  float* out = nullptr;                      // [rows, query_heads, v_dim]
  std::uint32_t query_heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t k_dim = 0;
  std::uint32_t v_dim = 0;
  bool int32_offsets = false;                // fault int32_offsets_attention: element offsets wrap in int32
};
cudaError_t launch_decode_attention(const AttentionParams& p, LaunchTarget to);

// The digests of the tables and of pool bytes: digest_kernels.h.

}  // namespace kvtwin::gpu
