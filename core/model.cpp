// Sub-pool planning: model shape -> per-rank sub-pool specs -> token-major layouts.
#include "core/model.h"

#include <string>

#include "core/checked.h"
#include "core/printable.h"

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
                    "unknown layer kind '" + printable(name) + "'; known: full, swa, cross, mla");
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
  const std::string where = "sub-pool '" + name + "'";
  if (layers == 0)
    return make_error(ErrorKind::layout, where + " has 0 layers; a sub-pool needs at least one layer");
  if (layers > kMaxLayers)
    return make_error(ErrorKind::layout, where + " has " + std::to_string(layers) + " layers, more than the " +
                                             std::to_string(kMaxLayers) + " kvtwin supports");
  if (heads_per_rank == 0 || k_head_dim == 0 || (kind != SubPoolKind::mla && v_head_dim == 0))
    return make_error(ErrorKind::layout, where + " has " + std::to_string(heads_per_rank) + " heads per rank, K head dim " +
                                             std::to_string(k_head_dim) + " and V head dim " +
                                             std::to_string(v_head_dim) + "; every one must be at least 1");
  // Rows are at most (2^32-1)^2 * 4 bytes: that can overflow 64 bits, so check it.
  const std::uint64_t itemsize = dtype_size_bytes(dtype);
  KVTWIN_TRY(std::uint64_t k_elems, checked_mul(heads_per_rank, k_head_dim, where + " K row"));
  KVTWIN_TRY(std::uint64_t k_row, checked_mul(k_elems, itemsize, where + " K row"));
  if (kind == SubPoolKind::mla) {
    // SPEC 2: one latent row per layer, part kv at offset 0, stride row; V is a prefix slice of it.
    layout.parts.push_back(DensePart{"kv", 0, k_row, layers, {1, k_head_dim}, dtype});
    KVTWIN_TRY(std::uint64_t raw, checked_mul(std::uint64_t{layers}, k_row, where + " MLA entry"));
    KVTWIN_TRY(layout.entry_bytes, checked_align_up(raw, kEntryAlignBytes, where + " MLA entry"));
  } else {
    // SPEC 2: [K_0 | V_0 | K_1 | V_1 | ... | pad]; k at 0, v at k_row, both with stride k_row + v_row.
    KVTWIN_TRY(std::uint64_t v_elems, checked_mul(heads_per_rank, v_head_dim, where + " V row"));
    KVTWIN_TRY(std::uint64_t v_row, checked_mul(v_elems, itemsize, where + " V row"));
    KVTWIN_TRY(std::uint64_t stride, checked_add(k_row, v_row, where + " layer stride"));
    layout.parts.push_back(DensePart{"k", 0, stride, layers, {heads_per_rank, k_head_dim}, dtype});
    layout.parts.push_back(DensePart{"v", k_row, stride, layers, {heads_per_rank, v_head_dim}, dtype});
    KVTWIN_TRY(std::uint64_t raw, checked_mul(std::uint64_t{layers}, stride, where + " MHA entry"));
    KVTWIN_TRY(layout.entry_bytes, checked_align_up(raw, kEntryAlignBytes, where + " MHA entry"));
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
  if (shape.state) KVTWIN_TRY_STATUS(validate_state_shape(*shape.state, shape.name));
  if (shape.layers.empty()) return make_error(ErrorKind::invalid_argument, m + " has 0 layers; give it at least one");
  if (shape.layers.size() > kMaxLayers)
    return make_error(ErrorKind::invalid_argument, m + " has " + std::to_string(shape.layers.size()) +
                                                       " layers, more than the " + std::to_string(kMaxLayers) +
                                                       " kvtwin supports");
  if (shape.attention == AttentionKind::mla) {
    for (LayerKind k : shape.layers)
      if (k != LayerKind::mla)
        return make_error(ErrorKind::invalid_argument, m + " is MLA, but has a '" + std::string(layer_kind_name(k)) +
                                                           "' layer; every layer of an MLA model is 'mla'");
    if (shape.kv_lora_rank == 0)
      return make_error(ErrorKind::invalid_argument, m + ": kv_lora_rank is 0; an MLA model needs a latent rank");
    // A field of the other attention kind is a mistake (a copied config), not something to ignore.
    if (shape.num_kv_heads != 0 || shape.swa_num_kv_heads != 0 || shape.k_head_dim != 0 || shape.v_head_dim != 0 ||
        shape.sliding_window_tokens != 0)
      return make_error(ErrorKind::invalid_argument,
                        m + " is MLA, but sets MHA fields (num_kv_heads, swa_num_kv_heads, head_dim, v_head_dim or "
                            "sliding_window); an MLA model has one latent row of kv_lora_rank + qk_rope_head_dim: "
                            "drop them, or set attention to 'mha'");
    if (std::uint64_t{shape.kv_lora_rank} + shape.qk_rope_head_dim > 0xffffffffULL)
      return make_error(ErrorKind::overflow, m + ": kv_lora_rank " + std::to_string(shape.kv_lora_rank) +
                                                 " + qk_rope_head_dim " + std::to_string(shape.qk_rope_head_dim) +
                                                 " does not fit 32 bits; use real dimensions");
    return ok_status();
  }
  if (shape.kv_lora_rank != 0 || shape.qk_rope_head_dim != 0)
    return make_error(ErrorKind::invalid_argument,
                      m + " is MHA, but sets MLA fields (kv_lora_rank, qk_rope_head_dim); drop them, or set "
                          "attention to 'mla'");
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
    return make_error(ErrorKind::invalid_argument,
                      m + " has sliding-window layers but a window of 0 tokens; give sliding_window");
  if (!has_swa && (shape.sliding_window_tokens != 0 || shape.swa_num_kv_heads != 0))
    return make_error(ErrorKind::invalid_argument,
                      m + " sets sliding_window or swa_num_kv_heads but has no 'swa' layer; list the sliding-window "
                          "layers in layer_types, or drop those fields");
  return ok_status();
}

// SPEC 11: one rank's share of the model's recurrent state, its entry validated.
static Status plan_state(const ModelShape& shape, std::uint32_t tp, PoolPlan& plan) {
  if (!shape.state) return ok_status();
  auto per_rank = state_shape_per_rank(*shape.state, tp, shape.name);
  if (!per_rank.ok()) return per_rank.error();
  auto layout = state_entry_layout(*per_rank);
  if (!layout.ok()) return layout.error().with_context("model '" + shape.name + "', TP " + std::to_string(tp) + ": ");
  plan.state = std::move(per_rank).value();
  return ok_status();
}

Result<PoolPlan> plan_sub_pools(const ModelShape& shape, std::uint32_t tp) {
  KVTWIN_TRY_STATUS(validate_shape(shape));
  PoolPlan plan;
  if (tp == 0) return make_error(ErrorKind::invalid_argument, "tensor-parallel size is 0; use --tp 1 or more");
  KVTWIN_TRY_STATUS(plan_state(shape, tp, plan));
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
