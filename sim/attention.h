// The reference decode attention of the model's decode step (docs/decisions.md "The decode step
// and its reference attention"): for each request and query head, scores against every K row
// of the request read through the capture-stable page table and the paged view's strides, a
// softmax, and the weighted sum of V rows, all in fp32 with core/det_math.h so that the CUDA
// kernel can match it to the bit.
//
// How it works: a direct transcription of the formulas in docs/decisions.md, in their order
// (no reassociation, no fused multiply-add). K and V elements are converted exactly from the
// pool's dtype. It is slow on purpose: it is the definition, not a kernel.
//
// What it does not cover: refilling the page table or the loc buffer (the model does that), and
// validation (the model checks the graph, the lengths and the tokens first).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/layout.h"
#include "sim/pool_bytes.h"

namespace kvtwin::sim {

struct AttentionShape {
  const DenseEntryLayout* layout = nullptr;  // the attention layer's sub-pool
  std::size_t k_part = 0;                    // MHA "k"; MLA "kv"
  std::size_t v_part = 0;                    // MHA "v"; MLA "kv" (V is its prefix)
  std::uint32_t local_layer = 0;
  std::uint32_t kv_heads = 0;                // per rank (1 for MLA)
  std::uint32_t k_head_dim = 0;              // MLA: the whole latent row
  std::uint32_t v_head_dim = 0;              // MLA: kv_lora_rank
  std::uint32_t query_heads = 0;             // a multiple of kv_heads
  std::int64_t page_size = 1;
};

// fp32 [bs, query_heads, v_head_dim], little-endian, for requests of lengths `lengths` whose
// pages are `table[b][c]`; rows read from the pool by the byte law (SPEC 2).
std::vector<std::uint8_t> reference_decode_attention(const PoolBytes& bytes, const AttentionShape& shape,
                                                     const std::vector<std::vector<std::int64_t>>& table,
                                                     const std::vector<std::int64_t>& lengths,
                                                     std::uint64_t query_seed);

// The same formulas over rows handed out by `row_at(physical token, part)` (the layer is the
// shape's local layer). The overload above passes the pool's rows; a planted fault of the
// harness's self-test (traces/backends.cpp) passes rows read from the wrong place.
using AttentionRowAt = std::function<std::span<const std::uint8_t>(std::int64_t pt, std::size_t part)>;
std::vector<std::uint8_t> reference_decode_attention(const AttentionRowAt& row_at, const AttentionShape& shape,
                                                     const std::vector<std::vector<std::int64_t>>& table,
                                                     const std::vector<std::int64_t>& lengths,
                                                     std::uint64_t query_seed);

// Element `index` of a row, converted exactly to float.
float element_as_float(std::span<const std::uint8_t> row, DType dtype, std::uint64_t index);

}  // namespace kvtwin::sim
