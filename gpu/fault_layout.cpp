// Fault 17's pool derivation (fault_layout.h). Mirrors core's planning with validation removed.
#include "gpu/fault_layout.h"

#include <algorithm>

#include "core/checked.h"

namespace kvtwin::gpu {
namespace {

DenseEntryLayout unchecked_layout(const SubPoolSpec& s) {
  DenseEntryLayout layout;
  layout.sub_pool = s.name;
  const std::uint64_t k_row = s.k_row_bytes();
  if (s.kind == SubPoolKind::mla) {
    layout.parts.push_back(DensePart{"kv", 0, k_row, s.layers, {1, s.k_head_dim}, s.dtype});
    layout.entry_bytes = ceil_div(std::uint64_t{s.layers} * k_row, kEntryAlignBytes) * kEntryAlignBytes;
  } else {
    const std::uint64_t v_row = s.v_row_bytes();
    layout.parts.push_back(DensePart{"k", 0, k_row + v_row, s.layers, {s.heads_per_rank, s.k_head_dim}, s.dtype});
    layout.parts.push_back(DensePart{"v", k_row, k_row + v_row, s.layers, {s.heads_per_rank, s.v_head_dim}, s.dtype});
    layout.entry_bytes = ceil_div(std::uint64_t{s.layers} * (k_row + v_row), kEntryAlignBytes) * kEntryAlignBytes;
  }
  return layout;
}

}  // namespace

Result<PoolDerived> derive_pool_unchecked_rows(const PoolConfig& config) {
  const ModelShape& shape = config.shape;
  KVTWIN_TRY_STATUS(validate_shape(shape));
  PoolDerived d;
  if (shape.attention == AttentionKind::mla) {
    d.plan.sub_pools.push_back(SubPoolSpec{"mla", SubPoolKind::mla, static_cast<std::uint32_t>(shape.layers.size()), 1,
                                           shape.kv_lora_rank + shape.qk_rope_head_dim, shape.kv_lora_rank, shape.dtype});
    for (std::uint32_t l = 0; l < shape.layers.size(); ++l) d.plan.layer_map.push_back({0, l, LayerKind::mla});
  } else {
    std::uint32_t full_layers = 0, swa_layers = 0;
    for (LayerKind k : shape.layers) (k == LayerKind::swa ? swa_layers : full_layers)++;
    KVTWIN_TRY(std::uint32_t heads, kv_heads_per_rank(shape.num_kv_heads, config.tp, shape.name));
    d.plan.sub_pools.push_back(
        SubPoolSpec{"full", SubPoolKind::full, full_layers, heads, shape.k_head_dim, shape.v_head_dim, shape.dtype});
    if (swa_layers > 0) {
      const std::uint32_t swa_kv = shape.swa_num_kv_heads != 0 ? shape.swa_num_kv_heads : shape.num_kv_heads;
      KVTWIN_TRY(std::uint32_t swa_heads, kv_heads_per_rank(swa_kv, config.tp, shape.name));
      d.plan.sub_pools.push_back(
          SubPoolSpec{"swa", SubPoolKind::swa, swa_layers, swa_heads, shape.k_head_dim, shape.v_head_dim, shape.dtype});
    }
    std::uint32_t next_full = 0, next_swa = 0;
    for (LayerKind k : shape.layers)
      d.plan.layer_map.push_back(k == LayerKind::swa ? LayerPlacement{1, next_swa++, k} : LayerPlacement{0, next_full++, k});
  }
  for (const SubPoolSpec& s : d.plan.sub_pools) d.layouts.push_back(unchecked_layout(s));
  // SPEC 3 sizing, without the layout validation size_pool() runs first.
  PoolGeometry& g = d.geometry;
  g.total_bytes = config.total_bytes;
  g.page_size = config.page_size;
  if (config.page_size == 0 || config.total_bytes == 0)
    return make_error(ErrorKind::invalid_argument, "page size and total_bytes must be positive");
  for (const DenseEntryLayout& l : d.layouts)
    g.reserved_floor_bytes = std::max({g.reserved_floor_bytes, l.entry_bytes, config.page_size * l.entry_bytes});
  for (std::size_t i = 0; i < d.layouts.size(); ++i) {
    SubPoolGeometry s;
    s.name = d.layouts[i].sub_pool;
    s.direction = i == 0 ? GrowDirection::up : GrowDirection::down;
    s.entry_bytes = d.layouts[i].entry_bytes;
    s.page_size = config.page_size;
    s.max_slots = config.total_bytes / s.entry_bytes;
    s.min_slot_index = ceil_div(g.reserved_floor_bytes, s.entry_bytes);
    s.num_pages = s.max_slots / config.page_size;
    s.min_page_index = ceil_div(s.min_slot_index, config.page_size);
    s.page_bytes = config.page_size * s.entry_bytes;
    if (s.num_pages <= s.min_page_index)
      return make_error(ErrorKind::sizing, "sub-pool '" + s.name + "' has no usable page; increase total_bytes");
    g.sub_pools.push_back(s);
  }
  return d;
}

}  // namespace kvtwin::gpu
