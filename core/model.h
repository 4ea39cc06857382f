// Model shapes and the sub-pools they need, divided over tensor-parallel ranks.
//
// A ModelShape describes what a checkpoint's config says about its KV state: per layer whether
// it is full attention, sliding-window attention, cross-attention (full, but written through the
// encoder's loc) or latent (MLA), and the head geometry. sub_pools() turns a shape into the
// sub-pool specs one tensor-parallel rank holds, and each spec into its DenseEntryLayout.
//
// TP division follows serving engines: KV heads are split evenly over ranks; when there are
// fewer heads than ranks each rank holds one head (replicated), which needs ranks to be a
// multiple of heads; anything uneven is an error. MLA's latent row is not split (every rank
// holds the whole latent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/result.h"
#include "core/state_layout.h"

namespace kvtwin {

enum class LayerKind : std::uint8_t { full, swa, cross, mla };
std::string_view layer_kind_name(LayerKind k);
Result<LayerKind> parse_layer_kind(std::string_view name);

enum class AttentionKind : std::uint8_t { mha, mla };

struct ModelShape {
  std::string name;
  std::string source;  // where the numbers come from
  AttentionKind attention = AttentionKind::mha;
  std::vector<LayerKind> layers;  // one per model layer
  // MHA
  std::uint32_t num_kv_heads = 0;
  std::uint32_t swa_num_kv_heads = 0;  // KV heads of sliding-window layers; 0 = num_kv_heads
  std::uint32_t k_head_dim = 0;
  std::uint32_t v_head_dim = 0;
  std::uint32_t sliding_window_tokens = 0;  // for swa layers; 0 when the model has none
  // MLA
  std::uint32_t kv_lora_rank = 0;
  std::uint32_t qk_rope_head_dim = 0;
  DType dtype = DType::bf16;
  // Hybrid models (SPEC 11): the recurrent state of the model's state layers (Mamba2, GDN, KDA),
  // kept per request in a `state` sub-pool. `layers` above lists the attention layers only.
  std::optional<StateShape> state = {};

  bool operator==(const ModelShape&) const = default;
};

enum class SubPoolKind : std::uint8_t { full, swa, mla };
std::string_view sub_pool_kind_name(SubPoolKind k);

// What one TP rank holds for one sub-pool.
struct SubPoolSpec {
  std::string name;  // "full", "swa", "mla"
  SubPoolKind kind = SubPoolKind::full;
  std::uint32_t layers = 0;
  std::uint32_t heads_per_rank = 0;  // 1 for MLA
  std::uint32_t k_head_dim = 0;      // MLA: kv_lora_rank + qk_rope_head_dim
  std::uint32_t v_head_dim = 0;      // MLA: kv_lora_rank (a prefix of the latent row)
  DType dtype = DType::bf16;

  std::uint64_t k_row_bytes() const;
  std::uint64_t v_row_bytes() const;
  // The token-major entry (SPEC.md section 2), validated: a misaligned row is an error here,
  // when the pool is built, naming the row and the way out.
  Result<DenseEntryLayout> layout() const;
};

// Heads one rank holds: kv_heads / tp, or 1 (replicated) when tp > kv_heads.
Result<std::uint32_t> kv_heads_per_rank(std::uint32_t kv_heads, std::uint32_t tp, std::string_view model);

// Where a model layer lives: which sub-pool and which layer inside it.
struct LayerPlacement {
  std::size_t sub_pool = 0;
  std::uint32_t local_layer = 0;
  LayerKind kind = LayerKind::full;
};

struct PoolPlan {
  std::vector<SubPoolSpec> sub_pools;       // token sub-pools: [owner] or [owner, swa]
  std::vector<LayerPlacement> layer_map;    // one per attention layer of the model
  std::optional<StateShape> state = {};     // one rank's share of the state (SPEC 11), when the model has one
};

// Validates the shape and divides it over `tp` ranks at `dtype`.
Result<PoolPlan> plan_sub_pools(const ModelShape& shape, std::uint32_t tp);

// Structural validation of a shape (zero layers, zero heads, MLA fields on MHA, ...).
Status validate_shape(const ModelShape& shape);

}  // namespace kvtwin
