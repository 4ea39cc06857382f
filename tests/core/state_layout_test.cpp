// The state entry law and hybrid chains (SPEC.md section 11) with worked numbers: the catalogue's
// hybrid models' E_state, blocks and views, the sink charged once, the 3 * E_state boot floor, the
// token cost of a fresh state slot, the chains in the pool configuration, and every refusal.
//
// Expected numbers are computed here by hand from the public model configurations (cited in
// core/catalogue.cpp) with SPEC 11's formula, never read back from the code under test.
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/planted_sizing.h"
#include "core/pool_config.h"
#include "core/state_layout.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;

PoolDerived derived_of(const std::string& model, std::uint64_t page_size, std::uint64_t total_bytes) {
  PoolConfig c;
  c.shape = *find_model(model);
  c.page_size = page_size;
  c.total_bytes = total_bytes;
  auto d = derive_pool(c);
  EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message);
  return *d;
}

TEST(StateLaw, Qwen35_9bEntryBlocksAndViews) {
  // Qwen/Qwen3.5-9B: 24 GDN layers; conv (8192, 3) bf16 = 49,152 bytes; temporal (32, 128, 128)
  // fp32 = 2,097,152 bytes. E_state = 24 * 49,152 + 24 * 2,097,152.
  const ModelShape m = *find_model("qwen3.5-9b");
  ASSERT_TRUE(m.state);
  auto layout = state_entry_layout(*m.state);
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->entry_bytes, 24u * 49152 + 24u * 2097152);
  EXPECT_EQ(layout->entry_bytes, 51511296u);  // SPEC 11's figure
  ASSERT_EQ(layout->blocks.size(), 2u);
  EXPECT_EQ(layout->blocks[0].name, "conv_0");
  EXPECT_EQ(layout->blocks[0].offset_bytes, 0u);
  EXPECT_EQ(layout->blocks[0].layer_stride_bytes, 49152u);
  EXPECT_EQ(layout->blocks[1].name, "temporal");
  EXPECT_EQ(layout->blocks[1].offset_bytes, 24u * 49152);  // 1,179,648: after every layer's conv
  EXPECT_EQ(layout->blocks[1].layer_stride_bytes, 2097152u);

  // Views: the slot stride is the whole entry, never the product of the shape.
  auto conv = state_view(*layout, layout->blocks[0], 5, 83);
  ASSERT_TRUE(conv.ok());
  EXPECT_EQ(conv->shape, (std::vector<std::int64_t>{83, 8192, 3}));
  EXPECT_EQ(conv->strides, (std::vector<std::int64_t>{51511296 / 2, 3, 1}));
  EXPECT_EQ(conv->storage_offset, 5 * 49152 / 2);
  auto temporal = state_view(*layout, layout->blocks[1], 23, 83);
  ASSERT_TRUE(temporal.ok());
  EXPECT_EQ(temporal->shape, (std::vector<std::int64_t>{83, 32, 128, 128}));
  EXPECT_EQ(temporal->strides, (std::vector<std::int64_t>{51511296 / 4, 128 * 128, 128, 1}));
  EXPECT_EQ(temporal->storage_offset, (1179648 + 23 * 2097152) / 4);
  EXPECT_NE(temporal->strides[0], 32 * 128 * 128);  // not the shape's product

  // byte(slot, block, l) = slot * E_state + offset + l * stride.
  auto at = state_byte_address(*layout, 7, layout->blocks[1], 2);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, 7u * 51511296 + 1179648 + 2u * 2097152);
  EXPECT_FALSE(state_byte_address(*layout, 7, layout->blocks[1], 24).ok());
  EXPECT_FALSE(state_byte_address(*layout, -1, layout->blocks[1], 0).ok());
}

TEST(StateLaw, KimiLinearThreeConvBlocks) {
  // moonshotai/Kimi-Linear-48B-A3B-Instruct: 20 KDA layers; q, k, v convs (4096, 3) bf16 = 24,576
  // bytes each; temporal (32, 128, 128) fp32 = 2,097,152 bytes.
  const ModelShape m = *find_model("kimi-linear-48b-a3b");
  ASSERT_TRUE(m.state);
  auto layout = state_entry_layout(*m.state);
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->entry_bytes, 20u * 3 * 24576 + 20u * 2097152);
  EXPECT_EQ(layout->entry_bytes, 43417600u);  // SPEC 11's figure
  ASSERT_EQ(layout->blocks.size(), 4u);
  EXPECT_EQ(layout->blocks[1].name, "conv_1");
  EXPECT_EQ(layout->blocks[1].offset_bytes, 20u * 24576);      // 491,520
  EXPECT_EQ(layout->blocks[2].offset_bytes, 2u * 20 * 24576);  // 983,040
  EXPECT_EQ(layout->blocks[3].offset_bytes, 3u * 20 * 24576);  // 1,474,560
  EXPECT_EQ((*layout->block("temporal"))->offset_bytes, 1474560u);
  EXPECT_THAT(layout->block("ssm").error().message, HasSubstr("conv_0, conv_1, conv_2, temporal"));
}

TEST(StateLaw, FalconH1_7bEveryLayerBothAttentionAndMamba) {
  // tiiuae/Falcon-H1-7B-Base: 44 layers; conv (3072 + 2 * 256 = 3584, 3) bf16 = 21,504 bytes;
  // temporal (24, 128, 256) fp32 = 3,145,728 bytes.
  const ModelShape m = *find_model("falcon-h1-7b");
  ASSERT_TRUE(m.state);
  EXPECT_EQ(m.layers.size(), 44u);
  auto layout = state_entry_layout(*m.state);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->entry_bytes, 44u * 21504 + 44u * 3145728);
  EXPECT_EQ(layout->entry_bytes, 139358208u);  // SPEC 11's figure
  EXPECT_EQ(layout->blocks[1].offset_bytes, 44u * 21504);  // 946,176, a multiple of 4
}

TEST(StateLaw, TensorParallelSplitsTheFirstDimension) {
  const ModelShape m = *find_model("qwen3.5-9b");
  auto two = state_shape_per_rank(*m.state, 2, m.name);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->conv[0].shape, (std::vector<std::uint32_t>{4096, 3}));
  EXPECT_EQ(two->temporal.shape, (std::vector<std::uint32_t>{16, 128, 128}));
  EXPECT_EQ(state_entry_layout(*two)->entry_bytes, 51511296u / 2);
  auto uneven = state_shape_per_rank(*m.state, 3, m.name);
  ASSERT_FALSE(uneven.ok());
  EXPECT_THAT(uneven.error().message, HasSubstr("conv_0"));
  EXPECT_THAT(uneven.error().message, HasSubstr("3 tensor-parallel ranks"));
}

TEST(StateLaw, NoPaddingButAlignedBlocks) {
  // One layer: conv (3, 1) bf16 = 6 bytes, then a temporal fp32 block at byte 6: not a multiple of 4.
  StateShape s;
  s.layers = 1;
  s.conv.push_back(StateTensor{{3, 1}, DType::bf16});
  s.temporal = StateTensor{{4}, DType::fp32};
  auto misaligned = state_entry_layout(s);
  ASSERT_FALSE(misaligned.ok());
  EXPECT_EQ(misaligned.error().kind, ErrorKind::layout);
  EXPECT_THAT(misaligned.error().message, HasSubstr("sub-pool 'state', block 'temporal'"));
  EXPECT_THAT(misaligned.error().message, HasSubstr("offset 6 bytes"));
  // Two layers of the same conv: 12 bytes, a multiple of 4, and the entry is not padded to 32.
  s.layers = 2;
  auto aligned = state_entry_layout(s);
  ASSERT_TRUE(aligned.ok()) << aligned.error().message;
  EXPECT_EQ(aligned->entry_bytes, 2u * 6 + 2u * 16);  // 44, not align_up(44, 32) = 64
  // The entry a multiple of every itemsize: conv fp32 4 bytes, temporal (1) bf16: E = 6.
  StateShape t;
  t.layers = 1;
  t.conv.push_back(StateTensor{{1}, DType::fp32});
  t.temporal = StateTensor{{1}, DType::bf16};
  auto odd = state_entry_layout(t);
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(odd.error().message, HasSubstr("state entry of 6 bytes is not a multiple of block 'conv_0''s 4-byte"));
  // Shapes: no zero dimension, a temporal tensor, a layer.
  t.temporal.shape = {2, 0};
  EXPECT_THAT(state_entry_layout(t).error().message, HasSubstr("every dimension must be at least 1"));
  t.temporal.shape = {2};
  t.layers = 0;
  EXPECT_THAT(state_entry_layout(t).error().message, HasSubstr("0 layers"));
}

TEST(StateSizing, Qwen35_9bInFourGiB) {
  // total 4 GiB, page size 64. full: 8 layers x 4 heads x 256 x 2 bytes x (K + V) = 32,768 bytes.
  const std::uint64_t total = 4294967296ULL, e_state = 51511296, e_full = 32768;
  const PoolDerived d = derived_of("qwen3.5-9b", 64, total);
  EXPECT_EQ(d.chain, (std::vector<std::string>{"state", "full"}));
  ASSERT_TRUE(d.has_state());
  EXPECT_FALSE(d.has_float());
  const PoolGeometry& g = d.geometry;
  // SPEC 11: the sink charged once: max(E_full, 64 * E_full, E_state), never 64 * E_state.
  EXPECT_EQ(g.reserved_floor_bytes, std::max({e_full, 64 * e_full, e_state}));
  EXPECT_EQ(g.reserved_floor_bytes, e_state);
  ASSERT_TRUE(g.state);
  EXPECT_EQ(g.state->page_size, 1u);
  EXPECT_EQ(g.state->direction, GrowDirection::up);
  EXPECT_EQ(g.state->max_slots, total / e_state);  // 83
  EXPECT_EQ(g.state->max_slots, 83u);
  EXPECT_EQ(g.state->min_slot_index, 1u);  // ceil(E_state / E_state): only slot 0 is the sink
  EXPECT_EQ(g.state->page_bytes, e_state);
  const SubPoolGeometry& full = g.sub_pools[0];
  EXPECT_EQ(full.direction, GrowDirection::down);  // [state up | full down]
  EXPECT_EQ(full.max_slots, total / e_full);       // 131,072
  EXPECT_EQ(full.min_slot_index, e_state / e_full);  // 1572 exactly
  EXPECT_EQ(full.num_pages, 2048u);
  EXPECT_EQ(full.min_page_index, 25u);  // ceil(1572 / 64)
  // A fresh state slot costs ceil(E_state / E_full) tokens.
  EXPECT_EQ(g.state_token_cost, 1572u);
}

TEST(StateSizing, TheSinkChargedPerPageIsThePlantedBug) {
  // SPEC 10.23: page_size * E_state in the floor moves every first usable page.
  PlantedSizingHold bug(PlantedSizingBug::state_sink_per_page);
  const PoolDerived d = derived_of("qwen3.5-9b", 64, 4294967296ULL);
  EXPECT_EQ(d.geometry.reserved_floor_bytes, 64u * 51511296);
  EXPECT_EQ(d.geometry.state->min_slot_index, 64u);
  EXPECT_EQ(d.geometry.sub_pools[0].min_page_index, 1572u);
}

TEST(StateSizing, BootFloorOfThreeStatesAndAPage) {
  // Qwen3.5-9B at page size 64: above the floor (one state) the chain needs 3 * E_state plus one
  // full page of 64 * 32,768 = 2,097,152 bytes: 156,631,040 bytes, so the owner's top must reach
  // E_state + 156,631,040 = 208,142,336, i.e. 100 full pages: 209,715,200 bytes.
  PoolConfig c;
  c.shape = *find_model("qwen3.5-9b");
  c.page_size = 64;
  c.total_bytes = 209715200;
  EXPECT_TRUE(derive_pool(c).ok());
  c.total_bytes = 209715199;  // 99 full pages: 207,618,048 - 51,511,296 = 156,106,752 above the floor
  auto refused = derive_pool(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::sizing);
  EXPECT_THAT(refused.error().message, HasSubstr("sub-pool 'state'"));
  EXPECT_THAT(refused.error().message, HasSubstr("3 * E_state = 3 * 51511296 = 154533888"));
  EXPECT_THAT(refused.error().message, HasSubstr("holds 156106752 bytes above the reserved floor"));
  EXPECT_THAT(refused.error().message, HasSubstr("at least 209715200 bytes"));
}

TEST(StateSizing, TokenCostsOfTheCatalogue) {
  // Kimi-Linear: MLA entry align_up(7 * (512 + 64) * 2, 32) = 8064; ceil(43,417,600 / 8064) = 5385.
  EXPECT_EQ(derived_of("kimi-linear-48b-a3b", 16, 4294967296ULL).geometry.state_token_cost, 5385u);
  EXPECT_EQ(derived_of("kimi-linear-48b-a3b", 16, 4294967296ULL).chain, (std::vector<std::string>{"state", "mla"}));
  // Falcon-H1-7B: 44 * 2 * 128 * 2 * 2 = 45,056 bytes a token; 139,358,208 / 45,056 = 3093 exactly.
  EXPECT_EQ(derived_of("falcon-h1-7b", 16, 4294967296ULL).geometry.state_token_cost, 3093u);
  // The tri-pool: full 2 * 4 * 128 * 2 * 2 = 4096, swa 6 * 2048 = 12,288; 4,390,912 / 16,384 = 268.
  const PoolDerived tri = derived_of("kvtwin-tripool-8l", 16, 64ULL << 20);
  EXPECT_EQ(tri.geometry.state_token_cost, 268u);
  EXPECT_EQ(tri.chain, (std::vector<std::string>{"state", "swa", "full"}));
  EXPECT_TRUE(tri.has_float());
  EXPECT_EQ(tri.geometry.sub_pools[0].direction, GrowDirection::down);
  EXPECT_EQ(tri.geometry.sub_pools[1].direction, GrowDirection::float_middle);
  // The empty float starts at the middle of the buffer: (64 MiB / 2) / (16 * 12,288) = 170.
  EXPECT_EQ(tri.geometry.float_start_page, (32u << 20) / (16u * 12288));
  // floor = max(16 * 12,288, 4,390,912) = E_state.
  EXPECT_EQ(tri.geometry.reserved_floor_bytes, 4390912u);
}

TEST(StateChain, ConfigJsonBothWaysAndOldConfigs) {
  PoolConfig c;
  c.shape = *find_model("kimi-linear-48b-a3b");
  c.page_size = 16;
  c.total_bytes = 1ULL << 30;
  c.chain = {"state", "mla"};
  const nlohmann::json j = pool_config_to_json(c);
  EXPECT_EQ(j.at("chain"), nlohmann::json({"state", "mla"}));
  auto back = pool_config_from_json(j, "test");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, c);
  EXPECT_EQ(back->shape.state, c.shape.state);  // the state shape travels in the model object

  // An old configuration (no 'chain') reads as before and writes no 'chain'.
  nlohmann::json old = {{"model", "llama-3.1-8b"}, {"page_size", 16u}, {"total_bytes", std::uint64_t{1} << 24}};
  auto old_config = pool_config_from_json(old, "old");
  ASSERT_TRUE(old_config.ok()) << old_config.error().message;
  EXPECT_TRUE(old_config->chain.empty());
  EXPECT_FALSE(pool_config_to_json(*old_config).contains("chain"));
  EXPECT_EQ(derive_pool(*old_config)->chain, (std::vector<std::string>{"full"}));

  // A hybrid model's token chain alone drops the state sub-pool.
  c.chain = {"mla"};
  auto token_only = derive_pool(c);
  ASSERT_TRUE(token_only.ok());
  EXPECT_FALSE(token_only->has_state());
  EXPECT_FALSE(token_only->geometry.has_state());
  // Any other chain is refused, naming the model's.
  c.chain = {"state", "swa", "full"};
  auto wrong = derive_pool(c);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.error().message, HasSubstr("its chain is [state, mla] (or [mla] without its state)"));
  nlohmann::json bad = j;
  bad["chain"] = {"state", "ssm"};
  EXPECT_THAT(pool_config_from_json(bad, "t.json").error().message, HasSubstr("unknown sub-pool 'ssm'"));
}

TEST(StateChain, SpecFileStateObject) {
  const std::string text = R"({"name": "tiny-hybrid", "num_layers": 2, "num_kv_heads": 1, "head_dim": 16,
    "state": {"layers": 3, "conv": [{"shape": [32, 3]}], "temporal": {"shape": [2, 8, 8]}}})";
  auto shape = parse_shape_text(text, "tiny.json");
  ASSERT_TRUE(shape.ok()) << shape.error().message;
  ASSERT_TRUE(shape->state);
  EXPECT_EQ(shape->state->conv[0].dtype, DType::bf16);   // conv defaults to bf16
  EXPECT_EQ(shape->state->temporal.dtype, DType::fp32);  // temporal to fp32
  EXPECT_EQ(state_entry_layout(*shape->state)->entry_bytes, 3u * 32 * 3 * 2 + 3u * 2 * 8 * 8 * 4);
  auto again = shape_from_json(shape_to_json(*shape), "again");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *shape);
  auto typo = parse_shape_text(R"({"name": "t", "num_layers": 1, "num_kv_heads": 1, "head_dim": 16,
    "state": {"layers": 1, "temporal": {"shape": [2]}, "ssm": 1}})", "typo.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.error().message, HasSubstr("unknown field 'ssm'"));
}

}  // namespace
}  // namespace kvtwin
