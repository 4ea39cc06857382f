// Random pool configurations. See config_gen.h. Half are catalogue models scaled down, half
// synthetic shapes (any mix of layer kinds, heads and dims within the same bounds).
#include "props/config_gen.h"

#include <algorithm>

#include "core/catalogue.h"
#include "core/checked.h"

namespace kvtwin::props {
namespace {

const std::vector<std::uint32_t> kHeadDims = {16, 32, 48, 64};
const std::vector<std::uint64_t> kPageSizes = {1, 2, 4, 8, 16, 32, 64};

enum Family : std::uint64_t { kFullOnly = 0, kComposite = 1, kMla = 2 };

// A catalogue model scaled down: a window of up to 8 of its layers (its full / SWA pattern
// kept), at most 4 KV heads, head dims divided by 4 and the latent rank by 8 (at least 16),
// the same attention kind.
ModelShape scaled_catalogue_shape(Choices& c) {
  const ModelShape& real = c.pick(model_catalogue());
  ModelShape s;
  s.name = real.name + "-scaled";
  s.attention = real.attention;
  const std::size_t n = std::min<std::size_t>(real.layers.size(), static_cast<std::size_t>(c.between(1, 8)));
  const std::size_t start = c.below(real.layers.size());
  for (std::size_t i = 0; i < n; ++i) s.layers.push_back(real.layers[(start + i) % real.layers.size()]);
  auto scale_dim = [](std::uint32_t d) { return std::max<std::uint32_t>(16, d / 4 / 16 * 16); };
  if (s.attention == AttentionKind::mla) {
    s.kv_lora_rank = std::max<std::uint32_t>(16, real.kv_lora_rank / 8 / 16 * 16);  // 512 -> 64
    s.qk_rope_head_dim = real.qk_rope_head_dim == 0 ? 0 : scale_dim(real.qk_rope_head_dim);
    return s;
  }
  // The full side owns the ids: a window of SWA layers only gets its first layer made full.
  if (std::none_of(s.layers.begin(), s.layers.end(), [](LayerKind k) { return k != LayerKind::swa; }))
    s.layers.front() = LayerKind::full;
  const bool has_swa = std::any_of(s.layers.begin(), s.layers.end(), [](LayerKind k) { return k == LayerKind::swa; });
  s.num_kv_heads = std::min<std::uint32_t>(real.num_kv_heads, 4);
  if (has_swa && real.swa_num_kv_heads != 0) s.swa_num_kv_heads = std::min<std::uint32_t>(real.swa_num_kv_heads, 4);
  if (has_swa) s.sliding_window_tokens = 8;
  s.k_head_dim = scale_dim(real.k_head_dim);
  s.v_head_dim = scale_dim(real.v_head_dim);
  return s;
}

ModelShape synthetic_shape(Choices& c) {
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
  return s;
}

ModelShape generate_shape(Choices& c) {
  ModelShape s = c.chance(1, 2) ? scaled_catalogue_shape(c) : synthetic_shape(c);
  s.source = "generated (props/config_gen)";
  const std::uint64_t d = c.below(8);  // mostly bf16
  s.dtype = d < 5 ? DType::bf16 : d == 5 ? DType::fp16 : d == 6 ? DType::fp8_e4m3 : DType::fp32;
  return s;
}

// A catalogue model as it is, at TP 1, tables-only, 4 to 8 GiB: the page size doubles from the
// drawn one until a side has at most 4096 pages (its tables stay quick to compare every step).
PoolConfig past_4gib_config(Choices& c) {
  PoolConfig config;
  config.shape = c.pick(model_catalogue());
  // A hybrid model plays its token chain alone here (the GPU plays these too; SPEC 11).
  if (config.shape.state) config.chain = token_chain(*plan_sub_pools(config.shape, 1));
  config.tp = 1;
  config.tables_only = true;
  config.mode = c.chance(1, 2) ? CompactionMode::lazy : CompactionMode::eager;
  config.seed = c.below(std::uint64_t{1} << 32);
  config.page_size = c.pick(std::vector<std::uint64_t>{16, 32, 64, 128, 256});
  config.total_bytes = (std::uint64_t{4} << 30) + (std::uint64_t{64} << 20) + c.below(std::uint64_t{4} << 30);
  for (;;) {
    Result<PoolDerived> d = derive_pool(config);
    KVTWIN_CHECK(d.ok(), d.ok() ? std::string() : "a catalogue model past 4 GiB derives: " + d.error().message);
    std::uint64_t pages = 0;
    for (const SubPoolGeometry& g : d->geometry.sub_pools) pages = std::max(pages, g.num_pages);
    if (pages <= 4096) return config;
    config.page_size *= 2;
  }
}

}  // namespace

PoolConfig generate_config(Choices& c, const ConfigLimits& limits) {
  if (limits.past_4gib_one_in != 0 && c.chance(1, limits.past_4gib_one_in)) return past_4gib_config(c);
  const bool large = limits.large_one_in != 0 && c.chance(1, limits.large_one_in);
  const std::uint64_t max_total_bytes = large ? std::max(limits.max_total_bytes, kLargeTotalBytes) : limits.max_total_bytes;
  PoolConfig config;
  config.shape = generate_shape(c);
  config.tp = 1;
  config.page_size = c.chance(1, 2) ? c.pick(kPageSizes) : static_cast<std::uint64_t>(c.between(1, 64));
  config.mode = c.chance(1, 2) ? CompactionMode::lazy : CompactionMode::eager;
  config.tables_only = c.chance(1, 8);
  config.seed = c.below(std::uint64_t{1} << 32);
  const std::int64_t usable_wanted = large ? c.between(256, kLargeUsablePages)
                                           : c.between(2, std::max<std::int64_t>(2, limits.max_usable_pages));
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
  // Size the owner side to the wanted usable pages (within the budget, one page left for a
  // ragged tail past the last whole page: views end at the last slot, not at a page), grow it
  // until every side builds, and halve the page size while that does not fit the budget.
  for (;;) {
    const PoolDerived d = entries(config.page_size);
    const std::uint64_t page_bytes = d.geometry.sub_pools[0].page_bytes;
    const std::uint64_t min_page = ceil_div(d.geometry.reserved_floor_bytes, page_bytes);
    const std::uint64_t fit = max_total_bytes / page_bytes;
    std::uint64_t usable = static_cast<std::uint64_t>(usable_wanted);
    if (min_page + usable + 1 > fit && fit > min_page + 3) usable = fit - min_page - 1;
    for (int attempt = 0; attempt < 16; ++attempt, usable += 2) {
      config.total_bytes = (min_page + usable) * page_bytes + tail_draw % page_bytes;
      if (!derive_pool(config).ok()) continue;
      if (config.total_bytes <= max_total_bytes || config.page_size == 1) return config;
      break;
    }
    if (config.page_size == 1) break;
    config.page_size /= 2;
  }
  KVTWIN_CHECK(false, "generate_config found no size that builds");
  return config;
}

std::uint64_t generate_host_bytes(Choices& choices, const PoolConfig& config) {
  if (choices.chance(1, 8)) return 0;
  Result<PoolDerived> d = derive_pool(config);
  if (!d.ok()) return 0;
  std::uint64_t largest = 0;
  for (const SubPoolGeometry& g : d->geometry.sub_pools) largest = std::max(largest, g.page_bytes);
  const std::uint64_t pages = static_cast<std::uint64_t>(choices.between(1, 24));
  const std::uint64_t bytes = pages * largest + static_cast<std::uint64_t>(choices.below(largest));
  // The model's byte buffer limit (4 GiB) for a pool with bytes; a tables-only one keeps none.
  constexpr std::uint64_t kLimit = std::uint64_t{4} << 30;
  if (!config.tables_only && bytes > kLimit) return largest <= kLimit ? largest : 0;
  return bytes;
}

PoolConfig generate_hybrid_config(Choices& c) {
  PoolConfig config;
  ModelShape& s = config.shape;
  const bool tri = c.chance(1, 2);
  s.name = tri ? "prop-tripool" : "prop-hybrid";
  s.source = "generated (props/config_gen)";
  s.attention = AttentionKind::mha;
  s.layers.assign(static_cast<std::size_t>(c.between(tri ? 2 : 1, 4)), LayerKind::full);
  if (tri) {
    for (std::size_t i = 1; i < s.layers.size(); ++i) s.layers[i] = c.chance(1, 2) ? LayerKind::swa : LayerKind::full;
    s.layers.back() = LayerKind::swa;
    s.sliding_window_tokens = 8;
  }
  s.num_kv_heads = static_cast<std::uint32_t>(c.between(1, 2));
  s.k_head_dim = s.v_head_dim = c.chance(1, 2) ? 16 : 32;
  StateShape st;
  st.layers = static_cast<std::uint32_t>(c.between(1, 3));
  const std::vector<std::uint32_t> channels = {8, 16, 32};
  for (std::int64_t i = 0, n = c.between(1, 2); i < n; ++i)
    st.conv.push_back(StateTensor{{c.pick(channels), static_cast<std::uint32_t>(c.between(2, 3))}, DType::bf16});
  st.temporal = StateTensor{{static_cast<std::uint32_t>(c.between(1, 2)), c.chance(1, 2) ? 4u : 8u, c.chance(1, 2) ? 4u : 8u},
                            DType::fp32};
  s.state = st;
  config.page_size = c.pick(std::vector<std::uint64_t>{1, 2, 4, 8});
  config.mode = c.chance(1, 2) ? CompactionMode::lazy : CompactionMode::eager;
  config.tables_only = c.chance(1, 8);
  config.seed = c.below(std::uint64_t{1} << 32);
  PoolConfig probe = config;
  probe.total_bytes = std::uint64_t{1} << 30;
  Result<PoolDerived> d = derive_pool(probe);
  KVTWIN_CHECK(d.ok(), d.ok() ? std::string() : "a generated hybrid shape derives: " + d.error().message);
  std::uint64_t token_pages = 0;
  for (const SubPoolGeometry& g : d->geometry.sub_pools) token_pages += g.page_bytes;
  const std::uint64_t e_state = d->state_layout->entry_bytes;
  // The floor, then room for 3 to 10 states and 2 to 24 pages of every token sub-pool.
  config.total_bytes = d->geometry.reserved_floor_bytes + static_cast<std::uint64_t>(c.between(3, 10)) * e_state +
                       static_cast<std::uint64_t>(c.between(2, 24)) * token_pages + c.below(64);
  for (int attempt = 0; attempt < 32 && !derive_pool(config).ok(); ++attempt) config.total_bytes += token_pages + e_state;
  KVTWIN_CHECK(derive_pool(config).ok(), "generate_hybrid_config found a size that builds");
  return config;
}

}  // namespace kvtwin::props
