// The shadow's own sizing (props/shadow_sizing.h) against core's derive_pool() and
// row_byte_address(): a worked example by hand, every catalogue model over several ranks, page
// sizes and totals past 2 GiB and 4 GiB, and a RapidCheck property over random and catalogue
// shapes, page sizes 1 to 256 and totals from a few pages to a TiB. Only derivations: no pool
// is allocated (the configurations are tables-only), so pools of any size cost nothing.
#include <algorithm>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/catalogue.h"
#include "props/rc_choices.h"
#include "props/shadow_sizing.h"

namespace kvtwin::props {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

PoolConfig config_of(const ModelShape& shape, std::uint32_t tp, std::uint64_t page_size, std::uint64_t total) {
  PoolConfig c;
  c.shape = shape;
  c.tp = tp;
  c.page_size = page_size;
  c.total_bytes = total;
  c.tables_only = true;
  return c;
}

TEST(ShadowSizing, LlamaAtTp8ByHand) {
  // llama-3.1-8b at TP 8: one KV head of 128 bf16 per rank, K and V rows of 256 bytes, 32 layers:
  // E = 32 * 512 = 16384 (no padding); page 16 -> 262144 bytes, the floor, so min_page_index 1.
  const PoolConfig c = config_of(*find_model("llama-3.1-8b"), 8, 16, 5 * kGiB + 12345);
  const std::optional<ShadowSizing> z = shadow_sizing(c);
  ASSERT_TRUE(z.has_value());
  ASSERT_EQ(z->sub_pools.size(), 1u);
  const ShadowSubPoolSizing& s = z->sub_pools[0];
  EXPECT_EQ(u128_text(s.entry_bytes), "16384");
  EXPECT_EQ(u128_text(s.padding_bytes), "0");
  EXPECT_EQ(u128_text(z->reserved_floor_bytes), "262144");
  EXPECT_EQ(u128_text(s.max_slots), std::to_string((5 * kGiB + 12345) / 16384));
  EXPECT_EQ(u128_text(s.min_slot_index), "16");
  EXPECT_EQ(u128_text(s.min_page_index), "1");
  // The last slot's V row of layer 31: pt * E + 256 + 31 * 512, past 4 GiB.
  const u128 last = s.max_slots - 1;
  EXPECT_EQ(u128_text(shadow_row_address(s, last, 1, 31)), std::to_string(static_cast<std::uint64_t>(last) * 16384 + 256 + 31 * 512));
  Result<PoolDerived> d = derive_pool(c);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(compare_sizing(c, *d), std::nullopt);
}

TEST(ShadowSizing, AgreesWithCoreOnEveryCatalogueModelPast2And4GiB) {
  int compared = 0;
  for (const ModelShape& shape : model_catalogue())
    for (std::uint32_t tp : {1u, 2u, 8u})
      for (std::uint64_t ps : {1u, 16u, 64u, 256u})
        for (std::uint64_t total : {3 * kGiB - 7, 4 * kGiB + 4096 * 3 + 1, 9 * kGiB, std::uint64_t{1} << 40}) {
          const PoolConfig c = config_of(shape, tp, ps, total);
          Result<PoolDerived> d = derive_pool(c);
          if (!d.ok()) continue;
          ++compared;
          const std::optional<std::string> diff = compare_sizing(c, *d);
          EXPECT_EQ(diff, std::nullopt) << shape.name << " tp " << tp << " ps " << ps << " total " << total;
        }
  EXPECT_GT(compared, 200);
}

TEST(ShadowSizing, SaysWhereCoreWouldBeWrong) {
  // A core derivation with one number changed is named by that number.
  const PoolConfig c = config_of(*find_model("mimo-v2-flash"), 4, 16, 6 * kGiB);
  Result<PoolDerived> d = derive_pool(c);
  ASSERT_TRUE(d.ok()) << d.error().message;
  PoolDerived wrong = *d;
  wrong.geometry.sub_pools[0].min_page_index -= 1;
  const std::optional<std::string> diff = compare_sizing(c, wrong);
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("sub-pool 'full' min_page_index"), std::string::npos) << *diff;
  PoolDerived padded = *d;
  padded.layouts[1].parts[1].offset_bytes += 16;
  ASSERT_TRUE(compare_sizing(c, padded).has_value());
  EXPECT_NE(compare_sizing(c, padded)->find("part 1 ('v') offset"), std::string::npos) << *compare_sizing(c, padded);
}

// A shape: a catalogue model as it is, or a synthetic one (MHA, full + SWA, MLA; any dtype).
ModelShape any_shape(Choices& c) {
  if (c.chance(1, 3)) return c.pick(model_catalogue());
  ModelShape s;
  s.name = "sizing-prop";
  const std::uint64_t family = c.below(3);
  const auto layers = static_cast<std::size_t>(c.between(1, 96));
  const std::vector<std::uint32_t> dims = {8, 16, 32, 64, 96, 128, 192, 256};
  if (family == 2) {
    s.attention = AttentionKind::mla;
    s.layers.assign(layers, LayerKind::mla);
    s.kv_lora_rank = c.pick(std::vector<std::uint32_t>{16, 64, 128, 512});
    s.qk_rope_head_dim = c.chance(1, 2) ? c.pick(dims) : 0;
  } else {
    s.layers.assign(layers, LayerKind::full);
    if (family == 1) {
      for (LayerKind& k : s.layers) k = c.chance(2, 3) ? LayerKind::swa : LayerKind::full;
      s.layers.front() = LayerKind::full;
      if (layers > 1) s.layers.back() = LayerKind::swa;
      if (std::find(s.layers.begin(), s.layers.end(), LayerKind::swa) != s.layers.end()) {
        s.sliding_window_tokens = 128;
        if (c.chance(1, 2)) s.swa_num_kv_heads = static_cast<std::uint32_t>(c.between(1, 16));
      }
    }
    s.num_kv_heads = static_cast<std::uint32_t>(c.between(1, 16));
    s.k_head_dim = c.pick(dims);
    s.v_head_dim = c.chance(1, 3) ? c.pick(dims) : s.k_head_dim;
  }
  const std::uint64_t d = c.below(4);
  s.dtype = d == 0 ? DType::bf16 : d == 1 ? DType::fp16 : d == 2 ? DType::fp8_e4m3 : DType::fp32;
  return s;
}

RC_GTEST_PROP(ShadowSizing, CoreAndTheShadowDeriveTheSamePool, ()) {
  RapidCheckChoices c;
  const ModelShape shape = any_shape(c);
  const std::uint32_t tp = c.pick(std::vector<std::uint32_t>{1, 2, 4, 8, 16});
  const std::uint64_t ps = static_cast<std::uint64_t>(c.between(1, 256));
  // Totals: a few pages of a large entry, just past 2 GiB, just past 4 GiB, or up to 2^40.
  const std::uint64_t regime = c.below(4);
  const std::uint64_t jitter = c.below(std::uint64_t{1} << 20);
  const std::uint64_t total = regime == 0   ? 1 + c.below(std::uint64_t{64} << 20)
                              : regime == 1 ? 2 * kGiB + jitter
                              : regime == 2 ? 4 * kGiB + jitter
                                            : 4 * kGiB + c.below(std::uint64_t{1} << 40);
  const PoolConfig config = config_of(shape, tp, ps, total);
  RC_CLASSIFY(total > 4 * kGiB, "past 4 GiB");
  RC_CLASSIFY(total > 2 * kGiB && total <= 4 * kGiB, "past 2 GiB");
  Result<PoolDerived> core = derive_pool(config);
  const std::optional<ShadowSizing> mine = shadow_sizing(config);
  if (core.ok()) {
    RC_TAG("builds");
    const std::optional<std::string> diff = compare_sizing(config, *core);
    RC_ASSERT_FALSE(diff.has_value());
  } else if (core.error().kind == ErrorKind::sizing) {
    // A pool core cannot size is one SPEC 3 (or 4.3) refuses too.
    RC_TAG("refused for its size");
    RC_ASSERT(mine.has_value());
    RC_ASSERT_FALSE(mine->builds);
  }
}

}  // namespace
}  // namespace kvtwin::props
