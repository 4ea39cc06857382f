// The shadow's own sizing (shadow_sizing.h): SPEC 2 and 3 again, in 128 bits, and the comparison
// with core's derivation. Nothing here calls core's planning, layout or sizing code.
#include "props/shadow_sizing.h"

#include <algorithm>

namespace kvtwin::props {
namespace {

constexpr u128 kEntryAlign = 32;  // SPEC 2: ENTRY_ALIGN_BYTES
constexpr u128 kRowAlign = 16;    // SPEC 2: ROW_ALIGN_BYTES

u128 round_up(u128 v, u128 to) { return (v + to - 1) / to * to; }
u128 divide_up(u128 a, u128 b) { return (a + b - 1) / b; }

u128 itemsize(DType d) {
  // SPEC 1 rows are heads * head_dim * itemsize; the sizes of the four dtypes kvtwin stores.
  switch (d) {
    case DType::bf16:
    case DType::fp16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::fp32:
      return 4;
  }
  return 0;
}

// Heads one rank holds: an even split, or one replicated head when there are fewer heads than
// ranks (ranks a multiple of heads). 0 when neither divides.
std::uint32_t heads_for_rank(std::uint32_t heads, std::uint32_t tp) {
  if (heads == 0 || tp == 0) return 0;
  if (heads >= tp) return heads % tp == 0 ? heads / tp : 0;
  return tp % heads == 0 ? 1 : 0;
}

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

// SPEC 2: one sub-pool's entry. MHA: [K_0 | V_0 | K_1 | V_1 | ... | pad], k at 0 and v at k_row,
// both with stride k_row + v_row; MLA: one latent row per layer, kv at 0 with stride row.
bool lay_out(ShadowSubPoolSizing& s, bool mla, u128 k_row, u128 v_row, std::string* why) {
  if (s.layers == 0) return fail(why, "sub-pool '" + s.name + "' has no layers");
  if (k_row == 0 || (!mla && v_row == 0)) return fail(why, "sub-pool '" + s.name + "' has an empty row");
  if (k_row % kRowAlign != 0 || (!mla && v_row % kRowAlign != 0))
    return fail(why, "sub-pool '" + s.name + "' has a row that is not a multiple of 16 bytes");
  if (mla) {
    s.parts.push_back({"kv", 0, k_row, k_row, s.layers});
    const u128 used = s.layers * k_row;
    s.entry_bytes = round_up(used, kEntryAlign);
    s.padding_bytes = s.entry_bytes - used;
  } else {
    const u128 stride = k_row + v_row;
    s.parts.push_back({"k", 0, stride, k_row, s.layers});
    s.parts.push_back({"v", k_row, stride, v_row, s.layers});
    const u128 used = s.layers * stride;
    s.entry_bytes = round_up(used, kEntryAlign);
    s.padding_bytes = s.entry_bytes - used;
  }
  return true;
}

}  // namespace

std::string u128_text(u128 v) {
  if (v == 0) return "0";
  std::string out;
  while (v != 0) {
    out.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<ShadowSizing> shadow_sizing(const PoolConfig& config, std::string* why) {
  const ModelShape& shape = config.shape;
  const u128 is = itemsize(shape.dtype);
  ShadowSizing z;
  z.total_bytes = config.total_bytes;
  z.page_size = config.page_size;
  if (config.page_size == 0) {
    fail(why, "the page size is 0");
    return std::nullopt;
  }
  // SPEC 1 / 2: which sub-pools a shape needs, and what one rank holds of each.
  if (shape.attention == AttentionKind::mla) {
    ShadowSubPoolSizing s;
    s.name = "mla";
    s.layers = static_cast<std::uint32_t>(shape.layers.size());
    s.heads_per_rank = 1;  // the latent row is not split over ranks
    const u128 row = (u128{shape.kv_lora_rank} + shape.qk_rope_head_dim) * is;
    if (!lay_out(s, true, row, 0, why)) return std::nullopt;
    z.sub_pools.push_back(std::move(s));
  } else {
    std::uint32_t swa_layers = 0;
    for (LayerKind k : shape.layers) swa_layers += k == LayerKind::swa ? 1 : 0;
    ShadowSubPoolSizing full;
    full.name = "full";  // full and cross-attention layers
    full.layers = static_cast<std::uint32_t>(shape.layers.size()) - swa_layers;
    full.heads_per_rank = heads_for_rank(shape.num_kv_heads, config.tp);
    if (full.heads_per_rank == 0) {
      fail(why, "the KV heads do not divide over the tensor-parallel ranks");
      return std::nullopt;
    }
    if (!lay_out(full, false, u128{full.heads_per_rank} * shape.k_head_dim * is,
                 u128{full.heads_per_rank} * shape.v_head_dim * is, why))
      return std::nullopt;
    z.sub_pools.push_back(std::move(full));
    if (swa_layers != 0) {
      ShadowSubPoolSizing swa;
      swa.name = "swa";
      swa.grows_up = false;  // the second sub-pool of a chain grows down from the top
      swa.layers = swa_layers;
      swa.heads_per_rank =
          heads_for_rank(shape.swa_num_kv_heads != 0 ? shape.swa_num_kv_heads : shape.num_kv_heads, config.tp);
      if (swa.heads_per_rank == 0) {
        fail(why, "the sliding-window KV heads do not divide over the tensor-parallel ranks");
        return std::nullopt;
      }
      if (!lay_out(swa, false, u128{swa.heads_per_rank} * shape.k_head_dim * is,
                   u128{swa.heads_per_rank} * shape.v_head_dim * is, why))
        return std::nullopt;
      z.sub_pools.push_back(std::move(swa));
    }
  }
  // SPEC 11: a hybrid model's state, unless its configuration asks for the token chain alone.
  z.has_state = shape.state.has_value() && (config.chain.empty() || config.chain.front() == "state");
  if (z.has_state) {
    const StateShape& st = *shape.state;
    auto tensor_bytes = [&](const StateTensor& t) {
      u128 n = itemsize(t.dtype);
      for (std::size_t d = 0; d < t.shape.size(); ++d) n *= d == 0 ? t.shape[d] / config.tp : t.shape[d];
      return n;
    };
    u128 per_layer = tensor_bytes(st.temporal);
    for (const StateTensor& t : st.conv) per_layer += tensor_bytes(t);
    z.state_entry_bytes = u128{st.layers} * per_layer;
    for (ShadowSubPoolSizing& s : z.sub_pools) s.grows_up = false;  // [state up | (swa float |) owner down]
  }
  // SPEC 3: the floor is the largest entry and the largest page of every sub-pool of the chain,
  // and (SPEC 11) the state's entry once: a state slot is its own page.
  for (const ShadowSubPoolSizing& s : z.sub_pools)
    z.reserved_floor_bytes = std::max({z.reserved_floor_bytes, s.entry_bytes, s.entry_bytes * z.page_size});
  if (z.has_state) z.reserved_floor_bytes = std::max(z.reserved_floor_bytes, z.state_entry_bytes);
  for (ShadowSubPoolSizing& s : z.sub_pools) {
    s.max_slots = z.total_bytes / s.entry_bytes;
    s.min_slot_index = divide_up(z.reserved_floor_bytes, s.entry_bytes);
    s.num_pages = s.max_slots / z.page_size;
    s.min_page_index = divide_up(s.min_slot_index, z.page_size);
    s.page_bytes = s.entry_bytes * z.page_size;
    if (z.builds && s.num_pages <= s.min_page_index) {
      z.builds = false;
      z.why_not = "sub-pool '" + s.name + "' has " + u128_text(s.num_pages) + " pages and its first usable page is " +
                  u128_text(s.min_page_index);
    }
  }
  if (z.has_state) {
    z.state_max_slots = z.total_bytes / z.state_entry_bytes;
    z.state_min_slot_index = divide_up(z.reserved_floor_bytes, z.state_entry_bytes);
    u128 token_entries = 0, token_pages = 0;
    for (const ShadowSubPoolSizing& s : z.sub_pools) {
      token_entries += s.entry_bytes;
      token_pages += s.page_bytes;
    }
    z.state_token_cost = divide_up(z.state_entry_bytes, token_entries);
    // Above the state's first usable slot, up to the owner's top: three states and a page of each.
    const u128 low = z.state_min_slot_index * z.state_entry_bytes;
    const u128 top = z.sub_pools[0].num_pages * z.sub_pools[0].page_bytes;
    if (z.builds && z.state_max_slots <= z.state_min_slot_index) {
      z.builds = false;
      z.why_not = "the state sub-pool has no usable slot";
    } else if (z.builds && (top < low || top - low < 3 * z.state_entry_bytes + token_pages)) {
      z.builds = false;
      z.why_not = "the chain cannot hold three states and a page of each token sub-pool above its floor";
    }
    return z;
  }
  // SPEC 4.3: a chain allocates a page of each side per page; the bytes between the up side's
  // first usable page and the down side's top must hold at least one such pair.
  if (z.builds && z.sub_pools.size() == 2) {
    const ShadowSubPoolSizing& up = z.sub_pools[0];
    const ShadowSubPoolSizing& down = z.sub_pools[1];
    const u128 low = up.min_page_index * up.page_bytes;
    const u128 top = down.num_pages * down.page_bytes;
    const u128 gap = top > low ? top - low : 0;
    if (gap / (up.page_bytes + down.page_bytes) == 0) {
      z.builds = false;
      z.why_not = "the chain's shared " + u128_text(gap) + " bytes hold no page of each side";
    }
  }
  return z;
}

u128 shadow_row_address(const ShadowSubPoolSizing& s, u128 pt, std::size_t part, std::uint32_t layer) {
  const ShadowPartSizing& p = s.parts.at(part);
  return pt * s.entry_bytes + p.offset_bytes + u128{layer} * p.layer_stride_bytes;
}

std::optional<std::string> compare_sizing(const PoolConfig& config, const PoolDerived& core) {
  std::string why;
  const std::optional<ShadowSizing> mine = shadow_sizing(config, &why);
  if (!mine) return "core built a pool the shadow cannot lay out: " + why;
  if (!mine->builds) return "core built a pool that SPEC 3 refuses: " + mine->why_not;
  const auto differ = [](const std::string& what, u128 core_value, u128 shadow_value) -> std::optional<std::string> {
    if (core_value == shadow_value) return std::nullopt;
    return what + ": core says " + u128_text(core_value) + ", the shadow's own derivation " + u128_text(shadow_value);
  };
#define KVTWIN_SIZING_SAME(what, a, b) \
  if (auto d = differ(what, a, b)) return d
  if (core.layouts.size() != mine->sub_pools.size() || core.geometry.sub_pools.size() != mine->sub_pools.size())
    return "core derives " + std::to_string(core.layouts.size()) + " sub-pools, the shadow " +
           std::to_string(mine->sub_pools.size());
  // SPEC 2: entries, parts and padding.
  for (std::size_t i = 0; i < mine->sub_pools.size(); ++i) {
    const ShadowSubPoolSizing& s = mine->sub_pools[i];
    const DenseEntryLayout& l = core.layouts[i];
    const std::string where = "sub-pool " + std::to_string(i) + " ('" + s.name + "')";
    if (l.sub_pool != s.name) return where + " is called '" + l.sub_pool + "' by core";
    if (i < core.plan.sub_pools.size())
      KVTWIN_SIZING_SAME(where + " heads per rank", core.plan.sub_pools[i].heads_per_rank, s.heads_per_rank);
    KVTWIN_SIZING_SAME(where + " entry bytes (E, padded to 32)", l.entry_bytes, s.entry_bytes);
    KVTWIN_SIZING_SAME(where + " padding bytes", l.padding_bytes(), s.padding_bytes);
    if (l.parts.size() != s.parts.size())
      return where + ": core lays out " + std::to_string(l.parts.size()) + " parts, the shadow " +
             std::to_string(s.parts.size());
    for (std::size_t k = 0; k < s.parts.size(); ++k) {
      const DensePart& cp = l.parts[k];
      const ShadowPartSizing& sp = s.parts[k];
      const std::string part = where + " part " + std::to_string(k) + " ('" + sp.name + "')";
      if (cp.name != sp.name) return part + " is called '" + cp.name + "' by core";
      KVTWIN_SIZING_SAME(part + " offset", cp.offset_bytes, sp.offset_bytes);
      KVTWIN_SIZING_SAME(part + " layer stride", cp.layer_stride_bytes, sp.layer_stride_bytes);
      KVTWIN_SIZING_SAME(part + " row bytes", cp.row_bytes(), sp.row_bytes);
      KVTWIN_SIZING_SAME(part + " layers", cp.layer_num, sp.layers);
    }
  }
  // SPEC 3: the chain's numbers.
  const PoolGeometry& g = core.geometry;
  KVTWIN_SIZING_SAME("total bytes", g.total_bytes, mine->total_bytes);
  KVTWIN_SIZING_SAME("page size", g.page_size, mine->page_size);
  KVTWIN_SIZING_SAME("reserved floor bytes (max over sub-pools of E and page_size * E)", g.reserved_floor_bytes,
                     mine->reserved_floor_bytes);
  for (std::size_t i = 0; i < mine->sub_pools.size(); ++i) {
    const ShadowSubPoolSizing& s = mine->sub_pools[i];
    const SubPoolGeometry& c = g.sub_pools[i];
    const std::string where = "sub-pool '" + s.name + "'";
    if (c.name != s.name) return "sub-pool " + std::to_string(i) + " is '" + c.name + "' in core's geometry, '" + s.name + "' in the shadow's";
    if ((c.direction == GrowDirection::up) != s.grows_up)
      return where + " grows " + (s.grows_up ? "up" : "down") + " by SPEC 3, " +
             (c.direction == GrowDirection::up ? "up" : "down") + " in core";
    KVTWIN_SIZING_SAME(where + " entry bytes", c.entry_bytes, s.entry_bytes);
    KVTWIN_SIZING_SAME(where + " max_slots (total // E)", c.max_slots, s.max_slots);
    KVTWIN_SIZING_SAME(where + " min_slot_index (ceil(floor / E))", c.min_slot_index, s.min_slot_index);
    KVTWIN_SIZING_SAME(where + " num_pages (max_slots // page_size)", c.num_pages, s.num_pages);
    KVTWIN_SIZING_SAME(where + " min_page_index (ceil(min_slot_index / page_size))", c.min_page_index,
                       s.min_page_index);
    KVTWIN_SIZING_SAME(where + " page bytes (E * page_size)", c.page_bytes, s.page_bytes);
  }
  // SPEC 11: the state sub-pool's numbers.
  if (mine->has_state != core.geometry.has_state())
    return std::string("core ") + (core.geometry.has_state() ? "has" : "has no") + " state sub-pool, the shadow " +
           (mine->has_state ? "has one" : "none");
  if (mine->has_state) {
    const SubPoolGeometry& st = *core.geometry.state;
    KVTWIN_SIZING_SAME("state entry bytes (L * conv + L * temporal)", st.entry_bytes, mine->state_entry_bytes);
    KVTWIN_SIZING_SAME("state max_slots (total // E_state)", st.max_slots, mine->state_max_slots);
    KVTWIN_SIZING_SAME("state min_slot_index (ceil(floor / E_state))", st.min_slot_index, mine->state_min_slot_index);
    KVTWIN_SIZING_SAME("state token cost (ceil(E_state / token entries))", core.geometry.state_token_cost,
                       mine->state_token_cost);
  }
  // SPEC 2: byte addresses of every layer and part of the first and last slot of page 0, of the
  // first usable page and of the last page, and of the pool's last slot (views end there).
  for (std::size_t i = 0; i < mine->sub_pools.size(); ++i) {
    const ShadowSubPoolSizing& s = mine->sub_pools[i];
    const DenseEntryLayout& l = core.layouts[i];
    const u128 ps = mine->page_size;
    const u128 pages[] = {0, s.min_page_index, s.num_pages - 1};
    std::vector<u128> tokens;
    for (u128 p : pages) {
      tokens.push_back(p * ps);
      tokens.push_back(p * ps + ps - 1);
    }
    tokens.push_back(s.max_slots - 1);
    for (u128 pt : tokens) {
      if (pt > static_cast<u128>(INT64_MAX)) continue;  // not a physical token id (core refuses it by type)
      for (std::size_t k = 0; k < s.parts.size(); ++k)
        for (std::uint32_t layer = 0; layer < s.parts[k].layers; ++layer) {
          const u128 want = shadow_row_address(s, pt, k, layer);
          const std::string what = "sub-pool '" + s.name + "' row (token " + u128_text(pt) + ", part '" +
                                   s.parts[k].name + "', layer " + std::to_string(layer) + ") byte address";
          // The row lies inside the pool's total_bytes (SPEC 3: views end at the last slot).
          if (want + s.parts[k].row_bytes > mine->total_bytes)
            return what + " " + u128_text(want) + " ends past the pool's " + u128_text(mine->total_bytes) + " bytes";
          Result<std::uint64_t> got =
              row_byte_address(l, PhysicalTokenId{static_cast<std::int64_t>(pt)}, l.parts[k], layer);
          if (!got.ok())
            return what + ": core refuses it (" + got.error().message + "), the shadow says " + u128_text(want);
          KVTWIN_SIZING_SAME(what, *got, want);
        }
    }
  }
#undef KVTWIN_SIZING_SAME
  return std::nullopt;
}

}  // namespace kvtwin::props
