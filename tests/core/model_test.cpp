// Model shapes: tensor-parallel division, sub-pool planning, the built-in catalogue and spec
// files (core/model.h, core/catalogue.h).
//
// Catalogue expectations are the public configs' numbers, restated here next to their source,
// and the entry sizes are recomputed from them with SPEC 2's formula.
#include <cstdint>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/model.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// ---------------------------------------------------------------- tensor parallelism

TEST(TensorParallel, HeadsSplitEvenlyOrReplicate) {
  // Even split: 8 heads over 1, 2, 4, 8 ranks.
  for (std::uint32_t tp : {1u, 2u, 4u, 8u}) {
    auto h = kv_heads_per_rank(8, tp, "m");
    ASSERT_TRUE(h.ok()) << tp;
    EXPECT_EQ(*h, 8 / tp);
  }
  // Fewer heads than ranks: each rank holds one (replicated), when ranks are a multiple of heads.
  for (std::uint32_t tp : {16u, 24u, 64u}) {
    auto h = kv_heads_per_rank(8, tp, "m");
    ASSERT_TRUE(h.ok()) << tp;
    EXPECT_EQ(*h, 1u);
  }
  auto one_head = kv_heads_per_rank(1, 7, "m");
  ASSERT_TRUE(one_head.ok());
  EXPECT_EQ(*one_head, 1u);
}

TEST(TensorParallel, UnevenSplitsAreErrors) {
  auto uneven = kv_heads_per_rank(8, 3, "llama");
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.error().kind, ErrorKind::invalid_argument);
  EXPECT_THAT(uneven.error().message, HasSubstr("'llama'"));
  EXPECT_THAT(uneven.error().message, HasSubstr("8 KV heads"));
  EXPECT_THAT(uneven.error().message, HasSubstr("3 tensor-parallel ranks"));
  EXPECT_THAT(uneven.error().message, HasSubstr("divides 8"));

  auto bad_replication = kv_heads_per_rank(8, 12, "llama");
  ASSERT_FALSE(bad_replication.ok());
  EXPECT_THAT(bad_replication.error().message, HasSubstr("12 tensor-parallel ranks"));
  EXPECT_THAT(bad_replication.error().message, HasSubstr("multiple of 8"));

  EXPECT_FALSE(kv_heads_per_rank(8, 0, "m").ok());
  EXPECT_FALSE(kv_heads_per_rank(0, 1, "m").ok());
}

TEST(TensorParallel, PlanDividesFullAndSwaHeadsSeparately) {
  auto mimo = find_model("mimo-v2-flash");
  ASSERT_TRUE(mimo.ok());
  // 4 full-attention KV heads, 8 sliding-window ones; TP 8 replicates the full ones.
  auto plan = plan_sub_pools(*mimo, 8);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->sub_pools.size(), 2u);
  EXPECT_EQ(plan->sub_pools[0].heads_per_rank, 1u);
  EXPECT_EQ(plan->sub_pools[1].heads_per_rank, 1u);
  auto tp2 = plan_sub_pools(*mimo, 2);
  ASSERT_TRUE(tp2.ok());
  EXPECT_EQ(tp2->sub_pools[0].heads_per_rank, 2u);
  EXPECT_EQ(tp2->sub_pools[1].heads_per_rank, 4u);
  // 8 ranks cannot take 4 + 8 heads at TP 3.
  EXPECT_FALSE(plan_sub_pools(*mimo, 3).ok());
}

TEST(TensorParallel, MlaLatentIsNotSplit) {
  auto ds = find_model("deepseek-v2-lite");
  ASSERT_TRUE(ds.ok());
  for (std::uint32_t tp : {1u, 2u, 8u, 16u}) {
    auto plan = plan_sub_pools(*ds, tp);
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->sub_pools.size(), 1u);
    EXPECT_EQ(plan->sub_pools[0].heads_per_rank, 1u);
    EXPECT_EQ(plan->sub_pools[0].k_head_dim, 512u + 64u);
    EXPECT_EQ(plan->sub_pools[0].v_head_dim, 512u);
  }
}

TEST(TensorParallel, TheRowAlignmentDependsOnTheRankAndTheDtype) {
  // 2 KV heads of dim 8: at TP 1 bf16 a row is 2*8*2 = 32 bytes; at TP 2 it is 16; fp8 TP 2 is 8.
  ModelShape s;
  s.name = "tiny";
  s.layers = std::vector<LayerKind>(4, LayerKind::full);
  s.num_kv_heads = 2;
  s.k_head_dim = 8;
  s.v_head_dim = 8;
  EXPECT_TRUE(plan_sub_pools(s, 1).ok());
  EXPECT_TRUE(plan_sub_pools(s, 2).ok());
  s.dtype = DType::fp8_e4m3;
  auto fp8 = plan_sub_pools(s, 2);
  ASSERT_FALSE(fp8.ok());
  EXPECT_THAT(fp8.error().message, HasSubstr("model 'tiny', TP 2"));
  EXPECT_THAT(fp8.error().message, HasSubstr("row of 8 bytes"));
}

// ---------------------------------------------------------------- planning

TEST(Plan, LayerMapFollowsModelOrder) {
  auto gpt = find_model("gpt-oss-20b");
  ASSERT_TRUE(gpt.ok());
  auto plan = plan_sub_pools(*gpt, 1);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->layer_map.size(), 24u);
  // layer_types alternate sliding / full, starting with sliding.
  for (std::uint32_t l = 0; l < 24; ++l) {
    const LayerPlacement& p = plan->layer_map[l];
    EXPECT_EQ(p.sub_pool, l % 2 == 0 ? 1u : 0u) << l;
    EXPECT_EQ(p.local_layer, l / 2) << l;
  }
  EXPECT_EQ(plan->sub_pools[0].name, "full");
  EXPECT_EQ(plan->sub_pools[1].name, "swa");
  EXPECT_EQ(plan->sub_pools[0].layers, 12u);
  EXPECT_EQ(plan->sub_pools[1].layers, 12u);
}

TEST(Plan, CrossLayersLiveInTheFullSubPool) {
  ModelShape s;
  s.name = "enc-dec";
  s.layers = {LayerKind::full, LayerKind::cross, LayerKind::full, LayerKind::cross};
  s.num_kv_heads = 4;
  s.k_head_dim = s.v_head_dim = 64;
  auto plan = plan_sub_pools(s, 1);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->sub_pools.size(), 1u);
  EXPECT_EQ(plan->sub_pools[0].layers, 4u);
  EXPECT_EQ(plan->layer_map[1].kind, LayerKind::cross);
  EXPECT_EQ(plan->layer_map[3].local_layer, 3u);
}

struct BadShape {
  std::string what;
  ModelShape shape;
  std::string must_mention;
};

TEST(Plan, InvalidShapesAreErrors) {
  ModelShape good;
  good.name = "m";
  good.layers = std::vector<LayerKind>(2, LayerKind::full);
  good.num_kv_heads = 8;
  good.k_head_dim = good.v_head_dim = 128;
  ASSERT_TRUE(plan_sub_pools(good, 1).ok());

  std::vector<BadShape> cases;
  {
    ModelShape s = good;
    s.layers.clear();
    cases.push_back({"zero layers", s, "0 layers"});
  }
  {
    ModelShape s = good;
    s.layers = std::vector<LayerKind>(kMaxLayers + 1, LayerKind::full);
    cases.push_back({"too many layers", s, std::to_string(kMaxLayers + 1) + " layers"});
  }
  {
    ModelShape s = good;
    s.num_kv_heads = 0;
    cases.push_back({"zero heads", s, "0 KV heads"});
  }
  {
    ModelShape s = good;
    s.v_head_dim = 0;
    cases.push_back({"zero head dim", s, "head dim of 0"});
  }
  {
    ModelShape s = good;
    s.layers = {LayerKind::swa, LayerKind::swa};
    s.sliding_window_tokens = 128;
    cases.push_back({"only swa", s, "only sliding-window layers"});
  }
  {
    ModelShape s = good;
    s.layers = {LayerKind::full, LayerKind::swa};
    cases.push_back({"swa without a window", s, "window of 0 tokens"});
  }
  {
    ModelShape s = good;
    s.sliding_window_tokens = 128;
    cases.push_back({"window without swa layers", s, "no 'swa' layer"});
  }
  {
    ModelShape s = good;
    s.kv_lora_rank = 512;
    cases.push_back({"MLA field on MHA", s, "MLA fields"});
  }
  {
    ModelShape s = good;
    s.layers = {LayerKind::full, LayerKind::mla};
    cases.push_back({"mla layer on MHA", s, "'mla' layer"});
  }
  {
    ModelShape s;
    s.name = "m";
    s.attention = AttentionKind::mla;
    s.layers = {LayerKind::mla};
    cases.push_back({"MLA without rank", s, "kv_lora_rank is 0"});
    s.kv_lora_rank = 512;
    s.num_kv_heads = 8;
    cases.push_back({"MHA field on MLA", s, "MHA fields"});
    s.num_kv_heads = 0;
    s.kv_lora_rank = 0xffffffffu;
    s.qk_rope_head_dim = 64;
    cases.push_back({"latent past 32 bits", s, "does not fit 32 bits"});
  }
  for (const BadShape& c : cases) {
    SCOPED_TRACE(c.what);
    auto plan = plan_sub_pools(c.shape, 1);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.error().message, HasSubstr("model 'm'"));
    EXPECT_THAT(plan.error().message, HasSubstr(c.must_mention));
  }
  EXPECT_FALSE(plan_sub_pools(good, 0).ok());
}

// ---------------------------------------------------------------- catalogue

struct CatalogueExpectation {
  std::string name;
  std::size_t layers;
  std::size_t swa_layers;
  std::uint32_t kv_heads, swa_kv_heads, k_dim, v_dim;  // MHA
  std::uint32_t kv_lora_rank, rope;                    // MLA
};

TEST(Catalogue, HoldsTheRequiredPublicShapes) {
  // Numbers from each model's public config.json (see core/catalogue.cpp for the sources).
  const std::vector<CatalogueExpectation> expected = {
      {"llama-3.1-8b", 32, 0, 8, 0, 128, 128, 0, 0},
      {"gpt-oss-20b", 24, 12, 8, 0, 64, 64, 0, 0},
      {"mimo-v2-flash", 48, 39, 4, 8, 192, 128, 0, 0},  // unequal K and V head dims
      {"deepseek-v2-lite", 27, 0, 0, 0, 0, 0, 512, 64},
      {"kimi-linear-48b-a3b", 7, 0, 0, 0, 0, 0, 512, 64},  // its 7 MLA layers
  };
  for (const CatalogueExpectation& e : expected) {
    SCOPED_TRACE(e.name);
    auto m = find_model(e.name);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->layers.size(), e.layers);
    EXPECT_EQ(static_cast<std::size_t>(std::count(m->layers.begin(), m->layers.end(), LayerKind::swa)), e.swa_layers);
    EXPECT_EQ(m->num_kv_heads, e.kv_heads);
    EXPECT_EQ(m->swa_num_kv_heads, e.swa_kv_heads);
    EXPECT_EQ(m->k_head_dim, e.k_dim);
    EXPECT_EQ(m->v_head_dim, e.v_dim);
    EXPECT_EQ(m->kv_lora_rank, e.kv_lora_rank);
    EXPECT_EQ(m->qk_rope_head_dim, e.rope);
    EXPECT_FALSE(m->source.empty());
  }
}

TEST(Catalogue, EveryModelPlansAtTpOneWithTheSpecEntry) {
  ASSERT_GE(model_catalogue().size(), 5u);
  for (const ModelShape& m : model_catalogue()) {
    SCOPED_TRACE(m.name);
    auto plan = plan_sub_pools(m, 1);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    for (const SubPoolSpec& s : plan->sub_pools) {
      auto layout = s.layout();
      ASSERT_TRUE(layout.ok());
      const std::uint64_t is = dtype_size_bytes(m.dtype);
      const std::uint64_t expected =
          s.kind == SubPoolKind::mla
              ? align_up(std::uint64_t{s.layers} * (m.kv_lora_rank + m.qk_rope_head_dim) * is, 32)
              : align_up(std::uint64_t{s.layers} * s.heads_per_rank * (m.k_head_dim + m.v_head_dim) * is, 32);
      EXPECT_EQ(layout->entry_bytes, expected);
    }
  }
}

TEST(Catalogue, LookupIsCaseInsensitiveAndUnknownNamesListTheCatalogue) {
  auto upper = find_model("Llama-3.1-8B");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(upper->name, "llama-3.1-8b");
  auto unknown = find_model("llama-9");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, HasSubstr("unknown model 'llama-9'"));
  for (const ModelShape& m : model_catalogue()) EXPECT_THAT(unknown.error().message, HasSubstr(m.name));
  EXPECT_THAT(unknown.error().message, HasSubstr("--spec"));
}

TEST(Catalogue, NamesAreUnique) {
  std::set<std::string> names;
  for (const ModelShape& m : model_catalogue()) EXPECT_TRUE(names.insert(m.name).second) << m.name;
}

// ---------------------------------------------------------------- spec files

TEST(SpecFile, JsonRoundTripsEveryCatalogueModel) {
  for (const ModelShape& m : model_catalogue()) {
    auto back = shape_from_json(shape_to_json(m), "roundtrip");
    ASSERT_TRUE(back.ok()) << m.name << ": " << back.error().message;
    EXPECT_EQ(*back, m) << m.name;
  }
}

TEST(SpecFile, DefaultsAreTheDocumentedOnes) {
  auto s = shape_from_json(json{{"name", "d"}, {"num_layers", 3}, {"num_kv_heads", 2}, {"head_dim", 64}}, "d.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->attention, AttentionKind::mha);
  EXPECT_EQ(s->layers, std::vector<LayerKind>(3, LayerKind::full));
  EXPECT_EQ(s->v_head_dim, 64u);  // defaults to head_dim
  EXPECT_EQ(s->dtype, DType::bf16);
  EXPECT_EQ(s->source, "d.json");

  auto mla = shape_from_json(json{{"name", "m"}, {"attention", "mla"}, {"num_layers", 2}, {"kv_lora_rank", 512}}, "m");
  ASSERT_TRUE(mla.ok()) << mla.error().message;
  EXPECT_EQ(mla->layers, std::vector<LayerKind>(2, LayerKind::mla));
  EXPECT_EQ(mla->qk_rope_head_dim, 0u);
}

struct BadSpec {
  json j;
  std::vector<std::string> must_mention;
};

TEST(SpecFile, EveryMistakeIsAnErrorNamingTheField) {
  const json base = {{"name", "x"}, {"num_layers", 2}, {"num_kv_heads", 8}, {"head_dim", 128}};
  auto with = [&](const std::string& key, json value) {
    json j = base;
    j[key] = std::move(value);
    return j;
  };
  auto without = [&](const std::string& key) {
    json j = base;
    j.erase(key);
    return j;
  };
  const std::vector<BadSpec> cases = {
      {json::array({1, 2}), {"a model spec must be a JSON object"}},
      {with("heads", 8), {"unknown field 'heads'", "known fields:", "num_kv_heads"}},
      {with("num_layers", "32"), {"'num_layers'", "whole number", "\"32\""}},
      {with("num_layers", 2.5), {"'num_layers'", "whole number"}},
      {with("num_kv_heads", -8), {"'num_kv_heads'", "out of range"}},
      {with("head_dim", 4294967296ULL), {"'head_dim'", "out of range"}},
      {with("num_layers", 0), {"0 layers"}},
      {with("num_layers", 100000), {"num_layers", "4096"}},
      {without("num_layers"), {"missing field 'num_layers'"}},
      {without("head_dim"), {"missing field 'head_dim'"}},
      {without("name"), {"'name'"}},
      {with("attention", "gqa"), {"'attention'", "\"mha\" or \"mla\""}},
      {with("dtype", "int4"), {"unknown dtype 'int4'", "bf16, fp16, fp8, fp32"}},
      {with("layer_types", json::array({"full", "sliding_attention"})), {"layer_types[1]", "full, swa, cross, mla"}},
      {with("layer_types", json::array({"full", "full", "full"})), {"num_layers is 2", "lists 3"}},
      {with("layer_types", "full"), {"'layer_types'", "array"}},
      {with("kv_lora_rank", 512), {"MLA fields"}},
  };
  for (const BadSpec& c : cases) {
    SCOPED_TRACE(c.j.dump());
    auto s = shape_from_json(c.j, "spec.json");
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message, HasSubstr("spec.json"));
    for (const std::string& word : c.must_mention) EXPECT_THAT(s.error().message, HasSubstr(word));
  }
}

class SpecFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtwin-spec-test-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::filesystem::path dir_;
};

TEST_F(SpecFileOnDisk, ReadsAValidFile) {
  const std::string path = write("ok.json", R"({"name": "disk", "num_layers": 4, "num_kv_heads": 2, "head_dim": 64})");
  auto s = load_shape_file(path);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->name, "disk");
  EXPECT_EQ(s->source, path);
}

TEST_F(SpecFileOnDisk, UnreadableOrMalformedFilesAreErrors) {
  auto missing = load_shape_file((dir_ / "absent.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::io);
  EXPECT_THAT(missing.error().message, HasSubstr("absent.json"));

  auto directory = load_shape_file(dir_.string());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().kind, ErrorKind::io);
  EXPECT_THAT(directory.error().message, HasSubstr("directory"));

  auto truncated = load_shape_file(write("truncated.json", "{\"name\": \"x\",\n \"num_layers\": "));
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.error().kind, ErrorKind::malformed);
  EXPECT_THAT(truncated.error().message, HasSubstr("not valid JSON"));
  EXPECT_THAT(truncated.error().message, HasSubstr("line 2"));

  auto empty = load_shape_file(write("empty.json", ""));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().kind, ErrorKind::malformed);

  auto binary = load_shape_file(write("binary.json", std::string("\x00\xff\xfe{", 4)));
  ASSERT_FALSE(binary.ok());
  EXPECT_EQ(binary.error().kind, ErrorKind::malformed);
  EXPECT_THAT(binary.error().message, HasSubstr("binary.json:1: a NUL byte")) << "placed; and no raw byte in it";
}

TEST_F(SpecFileOnDisk, ARepeatedKeyIsRefusedWithItsLine) {
  auto twice = load_shape_file(
      write("twice.json", "{\n  \"name\": \"t\",\n  \"num_layers\": 4,\n  \"head_dim\": 64,\n  \"num_kv_heads\": 2,\n"
                          "  \"head_dim\": 128\n}\n"));
  ASSERT_FALSE(twice.ok()) << "the last head_dim would silently win";
  EXPECT_EQ(twice.error().kind, ErrorKind::malformed);
  EXPECT_THAT(twice.error().message, HasSubstr("twice.json:6: duplicate key 'head_dim'"));
}

TEST_F(SpecFileOnDisk, ASpecIsSmallAndItsNameShort) {
  // One byte past the cap is refused unread (as /dev/zero would be, after the cap).
  std::string big = R"({"name": "big", "num_layers": 4, "num_kv_heads": 2, "head_dim": 64, "source": ")";
  big += std::string(kMaxSpecFileBytes - big.size() - 2, 'x') + "\"}";
  ASSERT_EQ(big.size(), kMaxSpecFileBytes);
  EXPECT_TRUE(load_shape_file(write("at_cap.json", big)).ok()) << "exactly the cap reads";
  auto over = load_shape_file(write("over.json", big + " "));
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.error().message, HasSubstr("a spec file is at most 1048576 bytes"));
  auto zero = load_shape_file("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.error().message, HasSubstr("at most 1048576 bytes"));
  auto long_name = load_shape_file(
      write("name.json", R"({"name": ")" + std::string(300, 'n') + R"(", "num_layers": 4, "num_kv_heads": 2, "head_dim": 64})"));
  ASSERT_FALSE(long_name.ok());
  EXPECT_THAT(long_name.error().message, HasSubstr("field 'name' must be 1 to 256 characters, got 300"));
}

}  // namespace
}  // namespace kvtwin
