// Sub-pool planning: model shape -> per-rank sub-pool specs -> token-major layouts.
#include "core/model.h"

#include <string>

#include "core/checked.h"

namespace kvtwin {

std::string_view layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::full:
      return "full";
    case LayerKind::swa:
      return "swa";
    case LayerKind::cross:
      return "cross";
    case LayerKind::mla:
      return "mla";
  }
  return "?";
}

Result<LayerKind> parse_layer_kind(std::string_view name) {
  if (name == "full") return LayerKind::full;
  if (name == "swa" || name == "sliding") return LayerKind::swa;
  if (name == "cross") return LayerKind::cross;
  if (name == "mla") return LayerKind::mla;
  return make_error(ErrorKind::invalid_argument,
                    "unknown layer kind '" + std::string(name) + "'; known: full, swa, cross, mla");
}

std::string_view sub_pool_kind_name(SubPoolKind k) {
  switch (k) {
    case SubPoolKind::full:
      return "full";
    case SubPoolKind::swa:
      return "swa";
    case SubPoolKind::mla:
      return "mla";
  }
  return "?";
}

std::uint64_t SubPoolSpec::k_row_bytes() const {
  return std::uint64_t{heads_per_rank} * k_head_dim * dtype_size_bytes(dtype);
}

std::uint64_t SubPoolSpec::v_row_bytes() const {
  return std::uint64_t{heads_per_rank} * v_head_dim * dtype_size_bytes(dtype);
}

Result<DenseEntryLayout> SubPoolSpec::layout() const {
  DenseEntryLayout layout;
  layout.sub_pool = name;
  if (layers == 0)
    return make_error(ErrorKind::layout, "sub-pool '" + name + "' has 0 layers; a sub-pool needs at least one layer");
  if (heads_per_rank == 0 || k_head_dim == 0 || (kind != SubPoolKind::mla && v_head_dim == 0))
    return make_error(ErrorKind::layout, "sub-pool '" + name + "' has a zero head count or head dim");
  if (kind == SubPoolKind::mla) {
    // One latent row per layer; V is a prefix slice of it.
    const std::uint64_t row = k_row_bytes();
    layout.parts.push_back(DensePart{"kv", 0, row, layers, {1, k_head_dim}, dtype});
    KVTWIN_TRY(std::uint64_t raw, checked_mul(std::uint64_t{layers}, row, "MLA entry"));
    KVTWIN_TRY(layout.entry_bytes, checked_align_up(raw, kEntryAlignBytes, "MLA entry"));
  } else {
    // [K_0 | V_0 | K_1 | V_1 | ... | pad]
    const std::uint64_t k_row = k_row_bytes();
    const std::uint64_t v_row = v_row_bytes();
    const std::uint64_t stride = k_row + v_row;
    layout.parts.push_back(DensePart{"k", 0, stride, layers, {heads_per_rank, k_head_dim}, dtype});
    layout.parts.push_back(DensePart{"v", k_row, stride, layers, {heads_per_rank, v_head_dim}, dtype});
    KVTWIN_TRY(std::uint64_t raw, checked_mul(std::uint64_t{layers}, stride, "MHA entry"));
    KVTWIN_TRY(layout.entry_bytes, checked_align_up(raw, kEntryAlignBytes, "MHA entry"));
  }
  KVTWIN_TRY_STATUS(layout.validate());
  return layout;
}

Result<std::uint32_t> kv_heads_per_rank(std::uint32_t kv_heads, std::uint32_t tp, std::string_view model) {
  const std::string m(model);
  if (tp == 0) return make_error(ErrorKind::invalid_argument, "tensor-parallel size is 0; use --tp 1 or more");
  if (kv_heads == 0) return make_error(ErrorKind::invalid_argument, "model '" + m + "' has 0 KV heads");
  if (kv_heads >= tp) {
    if (kv_heads % tp != 0)
      return make_error(ErrorKind::invalid_argument,
                        "model '" + m + "': " + std::to_string(kv_heads) + " KV heads do not split evenly over " +
                            std::to_string(tp) + " tensor-parallel ranks; use a TP size that divides " +
                            std::to_string(kv_heads));
    return kv_heads / tp;
  }
  if (tp % kv_heads != 0)
    return make_error(ErrorKind::invalid_argument,
                      "model '" + m + "': " + std::to_string(tp) + " tensor-parallel ranks cannot replicate " +
                          std::to_string(kv_heads) + " KV heads evenly; use a TP size that is a multiple of " +
                          std::to_string(kv_heads));
  return 1;
}

Status validate_shape(const ModelShape& shape) {
  const std::string m = "model '" + shape.name + "'";
  if (shape.layers.empty()) return make_error(ErrorKind::invalid_argument, m + " has 0 layers; give it at least one");
  if (shape.attention == AttentionKind::mla) {
    for (LayerKind k : shape.layers)
      if (k != LayerKind::mla)
        return make_error(ErrorKind::invalid_argument, m + " is MLA, but has a '" + std::string(layer_kind_name(k)) +
                                                           "' layer; every layer of an MLA model is 'mla'");
    if (shape.kv_lora_rank == 0)
      return make_error(ErrorKind::invalid_argument, m + ": kv_lora_rank is 0; an MLA model needs a latent rank");
    return ok_status();
  }
  bool has_swa = false, has_full = false;
  for (LayerKind k : shape.layers) {
    if (k == LayerKind::mla)
      return make_error(ErrorKind::invalid_argument, m + " is MHA, but has an 'mla' layer; set attention to 'mla'");
    has_swa |= k == LayerKind::swa;
    has_full |= k != LayerKind::swa;
  }
  if (!has_full)
    return make_error(ErrorKind::invalid_argument,
                      m + " has only sliding-window layers; the full side owns the virtual ids, so it needs at least one full layer");
  if (shape.num_kv_heads == 0) return make_error(ErrorKind::invalid_argument, m + " has 0 KV heads");
  if (shape.k_head_dim == 0 || shape.v_head_dim == 0)
    return make_error(ErrorKind::invalid_argument, m + " has a head dim of 0");
  if (has_swa && shape.sliding_window_tokens == 0)
    return make_error(ErrorKind::invalid_argument, m + " has sliding-window layers but a window of 0 tokens");
  return ok_status();
}

Result<PoolPlan> plan_sub_pools(const ModelShape& shape, std::uint32_t tp) {
  KVTWIN_TRY_STATUS(validate_shape(shape));
  PoolPlan plan;
  if (tp == 0) return make_error(ErrorKind::invalid_argument, "tensor-parallel size is 0; use --tp 1 or more");
  if (shape.attention == AttentionKind::mla) {
    SubPoolSpec mla{"mla", SubPoolKind::mla, static_cast<std::uint32_t>(shape.layers.size()), 1,
                    shape.kv_lora_rank + shape.qk_rope_head_dim, shape.kv_lora_rank, shape.dtype};
    auto layout = mla.layout();
    if (!layout.ok()) return layout.error().with_context("model '" + shape.name + "', TP " + std::to_string(tp) + ": ");
    plan.sub_pools.push_back(mla);
    for (std::uint32_t l = 0; l < shape.layers.size(); ++l) plan.layer_map.push_back({0, l, LayerKind::mla});
    return plan;
  }
  std::uint32_t full_layers = 0, swa_layers = 0;
  for (LayerKind k : shape.layers) (k == LayerKind::swa ? swa_layers : full_layers)++;
  KVTWIN_TRY(std::uint32_t heads, kv_heads_per_rank(shape.num_kv_heads, tp, shape.name));
  plan.sub_pools.push_back(
      SubPoolSpec{"full", SubPoolKind::full, full_layers, heads, shape.k_head_dim, shape.v_head_dim, shape.dtype});
  if (swa_layers > 0) {
    const std::uint32_t swa_kv_heads = shape.swa_num_kv_heads != 0 ? shape.swa_num_kv_heads : shape.num_kv_heads;
    KVTWIN_TRY(std::uint32_t swa_heads, kv_heads_per_rank(swa_kv_heads, tp, shape.name));
    plan.sub_pools.push_back(
        SubPoolSpec{"swa", SubPoolKind::swa, swa_layers, swa_heads, shape.k_head_dim, shape.v_head_dim, shape.dtype});
  }
  for (const SubPoolSpec& s : plan.sub_pools) {
    auto layout = s.layout();
    if (!layout.ok()) return layout.error().with_context("model '" + shape.name + "', TP " + std::to_string(tp) + ": ");
  }
  std::uint32_t next_full = 0, next_swa = 0;
  for (LayerKind k : shape.layers) {
    if (k == LayerKind::swa)
      plan.layer_map.push_back({1, next_swa++, k});
    else
      plan.layer_map.push_back({0, next_full++, k});
  }
  return plan;
}

}  // namespace kvtwin
