// Random pool configurations. See config_gen.h.
#include "props/config_gen.h"

#include <algorithm>

#include "core/checked.h"

namespace kvtwin::props {
namespace {

const std::vector<std::uint32_t> kHeadDims = {16, 32, 48, 64};
const std::vector<std::uint64_t> kPageSizes = {1, 2, 4, 8, 16, 32, 64};

enum Family : std::uint64_t { kFullOnly = 0, kComposite = 1, kMla = 2 };

ModelShape generate_shape(Choices& c) {
  ModelShape s;
  const auto family = static_cast<Family>(c.below(3));
  if (family == kMla) {
    s.name = "prop-mla";
    s.attention = AttentionKind::mla;
    s.layers.assign(static_cast<std::size_t>(c.between(1, 8)), LayerKind::mla);
    s.kv_lora_rank = c.pick(kHeadDims);
    s.qk_rope_head_dim = c.chance(1, 2) ? 16 : 0;
  } else {
    s.name = family == kComposite ? "prop-composite" : "prop-mha";
    s.attention = AttentionKind::mha;
    const auto n = static_cast<std::size_t>(c.between(family == kComposite ? 2 : 1, 8));
    s.layers.assign(n, LayerKind::full);
    if (family == kComposite) {
      for (LayerKind& k : s.layers) k = c.chance(1, 2) ? LayerKind::swa : LayerKind::full;
      // At least one layer of each kind: the full side owns the ids, the SWA side makes it a composite.
      if (std::none_of(s.layers.begin(), s.layers.end(), [](LayerKind k) { return k == LayerKind::swa; }))
        s.layers.back() = LayerKind::swa;
      if (std::none_of(s.layers.begin(), s.layers.end(), [](LayerKind k) { return k == LayerKind::full; }))
        s.layers.front() = LayerKind::full;
      s.sliding_window_tokens = 8;
      if (c.chance(1, 4)) s.swa_num_kv_heads = static_cast<std::uint32_t>(c.between(1, 4));
    }
    // Occasionally one full layer is a cross-attention layer (written through the encoder loc).
    if (c.chance(1, 8)) {
      std::vector<std::size_t> full;
      for (std::size_t i = 0; i < n; ++i)
        if (s.layers[i] == LayerKind::full) full.push_back(i);
      if (full.size() > 1) s.layers[c.pick(full)] = LayerKind::cross;
    }
    s.num_kv_heads = static_cast<std::uint32_t>(c.between(1, 4));
    s.k_head_dim = c.pick(kHeadDims);
    s.v_head_dim = c.chance(1, 4) ? c.pick(kHeadDims) : s.k_head_dim;
  }
  s.source = "generated (props/config_gen)";
  const std::uint64_t d = c.below(8);  // mostly bf16
  s.dtype = d < 5 ? DType::bf16 : d == 5 ? DType::fp16 : d == 6 ? DType::fp8_e4m3 : DType::fp32;
  return s;
}

}  // namespace

PoolConfig generate_config(Choices& c, const ConfigLimits& limits) {
  PoolConfig config;
  config.shape = generate_shape(c);
  config.tp = 1;
  config.page_size = c.chance(1, 2) ? c.pick(kPageSizes) : static_cast<std::uint64_t>(c.between(1, 64));
  config.mode = c.chance(1, 2) ? CompactionMode::lazy : CompactionMode::eager;
  config.tables_only = c.chance(1, 8);
  config.seed = c.below(std::uint64_t{1} << 32);
  const std::int64_t usable_wanted = c.between(2, std::max<std::int64_t>(2, limits.max_usable_pages));
  const std::uint64_t tail_draw = c.below(1 << 16);

  // Entry sizes do not depend on total_bytes: derive them once from a roomy pool.
  auto entries = [&](std::uint64_t page_size) {
    PoolConfig probe = config;
    probe.page_size = page_size;
    probe.total_bytes = std::uint64_t{1} << 40;
    Result<PoolDerived> d = derive_pool(probe);
    KVTWIN_CHECK(d.ok(), d.ok() ? std::string() : "generated shape does not derive: " + d.error().message);
    return *d;
  };
  PoolDerived d = entries(config.page_size);
  auto owner_page_bytes = [&] { return d.geometry.sub_pools[0].page_bytes; };
  auto owner_min_page = [&] { return ceil_div(d.geometry.reserved_floor_bytes, owner_page_bytes()); };
  // Lower the page size until a pool of a few usable pages fits the byte budget.
  while (config.page_size > 1 && (owner_min_page() + 4) * owner_page_bytes() > limits.max_total_bytes) {
    config.page_size = std::max<std::uint64_t>(1, config.page_size / 2);
    d = entries(config.page_size);
  }
  const std::uint64_t fit = limits.max_total_bytes / owner_page_bytes();
  std::uint64_t usable = static_cast<std::uint64_t>(usable_wanted);
  // Leave one page of the budget for the ragged tail below.
  if (owner_min_page() + usable + 1 > fit && fit > owner_min_page() + 3) usable = fit - owner_min_page() - 1;
  // A ragged tail past the last whole page: views end at the last slot, not at a page.
  for (int attempt = 0; attempt < 16; ++attempt, usable += 2) {
    config.total_bytes = (owner_min_page() + usable) * owner_page_bytes() + tail_draw % owner_page_bytes();
    if (derive_pool(config).ok()) return config;
  }
  KVTWIN_CHECK(false, "generate_config found no size that builds");
  return config;
}

}  // namespace kvtwin::props
