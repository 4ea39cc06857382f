// Units for the generators and the shadow: configurations always build and stay small, the
// same seed gives the same run, generated operations are mostly accepted with a share refused,
// every operation kind is generated, and the shadow agrees with SPEC's worked examples.
#include <cstdio>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"

namespace kvtwin::props {
namespace {

TEST(ConfigGen, EveryConfigurationBuildsAndStaysSmall) {
  std::map<std::string, int> families;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    RngChoices c(seed);
    const PoolConfig config = generate_config(c);
    Result<PoolDerived> d = derive_pool(config);
    ASSERT_TRUE(d.ok()) << "seed " << seed << ": " << d.error().message;
    EXPECT_LE(config.total_bytes, ConfigLimits{}.max_total_bytes) << "seed " << seed;
    EXPECT_GE(config.page_size, 1u);
    EXPECT_LE(config.page_size, 64u);
    EXPECT_LE(config.shape.layers.size(), 8u);
    families[config.shape.name]++;
    if (config.shape.name.find("-scaled") != std::string::npos) families["scaled"]++;
    if (d->is_composite()) families["composite"]++;
    if (std::find(config.shape.layers.begin(), config.shape.layers.end(), LayerKind::cross) != config.shape.layers.end())
      families["cross"]++;
    families[config.mode == CompactionMode::lazy ? "lazy" : "eager"]++;
    if (config.tables_only) families["tables_only"]++;
  }
  for (const char* family : {"prop-mha", "prop-composite", "prop-mla", "scaled", "gpt-oss-20b-scaled",
                             "deepseek-v3-scaled", "mimo-v2-flash-scaled", "composite", "cross", "lazy", "eager",
                             "tables_only"})
    EXPECT_GT(families[family], 0) << family << " never generated";
}

TEST(Swarm, SameSeedSameWeightsAndAllocAlwaysOn) {
  EXPECT_EQ(swarm_from_seed(42).weight, swarm_from_seed(42).weight);
  int off = 0;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    const SwarmWeights w = swarm_from_seed(seed);
    EXPECT_TRUE(w.enabled(OpKind::alloc));
    for (std::uint32_t x : w.weight) off += x == 0;
  }
  EXPECT_GT(off, 50 * 21 / 6) << "swarm runs switch about a third of the operations off";
  EXPECT_NE(swarm_from_seed(1).describe(), swarm_from_seed(2).describe());
}

// Plays `count` generated operations against a model and a shadow; returns per-kind counts of
// accepted and refused operations and checks that the shadow predicted every answer.
struct Tally {
  std::map<std::string, int> accepted, refused;
};
Tally play(std::uint64_t seed, int count, const SwarmWeights& weights) {
  RngChoices c(seed);
  const PoolConfig config = generate_config(c);
  sim::Model model;
  EXPECT_TRUE(model.apply(BuildPool{config}).ok());
  PoolShadow shadow(config);
  Tally t;
  for (int i = 0; i < count; ++i) {
    const Op op = generate_op(c, shadow, weights);
    const Expectation e = shadow.apply(op);
    const OpResult r = model.apply(op);
    const auto m = mismatch(e, r);
    EXPECT_FALSE(m.has_value()) << "seed " << seed << " step " << i << " " << to_string(op) << ": " << *m;
    if (m) break;
    (r.ok() ? t.accepted : t.refused)[std::string(op_name(op))]++;
  }
  return t;
}

TEST(OpGen, SameSeedSameOperations) {
  for (std::uint64_t seed : {3u, 4u}) {
    RngChoices a(seed), b(seed);
    const PoolConfig ca = generate_config(a), cb = generate_config(b);
    ASSERT_EQ(ca, cb);
    PoolShadow sa(ca), sb(cb);
    for (int i = 0; i < 200; ++i) {
      const Op x = generate_op(a, sa, SwarmWeights::uniform());
      const Op y = generate_op(b, sb, SwarmWeights::uniform());
      ASSERT_EQ(to_string(x), to_string(y));
      sa.apply(x);
      sb.apply(y);
    }
  }
}

TEST(OpGen, MostlyValidWithAShareRefusedAndEveryKindGenerated) {
  std::map<std::string, int> accepted, refused;
  for (std::uint64_t seed = 100; seed < 140; ++seed) {
    const Tally t = play(seed, 150, SwarmWeights::uniform());
    for (const auto& [k, n] : t.accepted) accepted[k] += n;
    for (const auto& [k, n] : t.refused) refused[k] += n;
  }
  int ok = 0, bad = 0;
  for (const auto& [k, n] : accepted) ok += n;
  for (const auto& [k, n] : refused) bad += n;
  EXPECT_GT(ok, 2 * bad) << "generated operations should be mostly valid";
  EXPECT_GT(bad, ok / 20) << "a share of generated operations should be refused";
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    const std::string name(op_name(
        [&] {
          // The trace name of each kind: the op a generator of that kind emits.
          SwarmWeights only;
          only.weight[i] = 1;
          RngChoices c(i + 1);
          PoolConfig config = generate_config(c);
          return generate_op(c, PoolShadow(config), only);
        }()));
    EXPECT_GT(accepted[name], 0) << name << " was never accepted";
  }
  for (const char* kind : {"free", "free_swa", "write", "translate", "begin_read", "move_pages", "replay", "alloc"})
    EXPECT_GT(refused[kind], 0) << kind << " was never refused";
}

TEST(Shadow, AgreesWithTheSpecsWorkedExample) {
  // Shapes as in the model's units: one full layer, head 16, page size 4 (min_page_index 1).
  PoolConfig c;
  c.shape.name = "t";
  c.shape.layers = {LayerKind::full};
  c.shape.num_kv_heads = 1;
  c.shape.k_head_dim = c.shape.v_head_dim = 16;
  c.page_size = 4;
  c.total_bytes = 12 * 256;
  PoolShadow s(c);
  s.apply(Alloc{16});
  s.apply(Alloc{20});  // pages 5..9
  const Expectation e = s.apply(Free{IdUnit::pages, {6, 8}});
  ASSERT_TRUE(e.result.ok());
  EXPECT_EQ(std::get<Compaction>(e.result.value()).moves, (std::vector<PageMove>{{"full", 9, 6}}));
  EXPECT_EQ(s.tables().sides[0].watermark, 8);
}

// The generators reach a serving engine's sizes and every refusal path: over runs on the larger
// pools of ConfigLimits::large_one_in, accepted operations of thousands of lanes, a capture of
// 256 requests, decode attention past 256 tokens over scattered pages, rebuilds accepted and
// refused, and every (operation, error kind) pair the shadow can answer.
TEST(OpGen, ReachesServingSizesAndEveryRefusalPath) {
  std::map<std::string, std::uint64_t> largest;  // accepted operations' sizes, by what was measured
  std::set<std::string> refusals;                 // "op error_kind"
  OpGenOptions options;
  options.large_one_in = 4;
  for (std::uint64_t seed = 1; seed <= 48; ++seed) {
    RngChoices c(seed);
    const PoolConfig config = generate_config(c, ConfigLimits{.large_one_in = 2});
    sim::Model model;
    ASSERT_TRUE(model.apply(BuildPool{config}).ok());
    PoolShadow shadow(config);
    for (int i = 0; i < 250; ++i) {
      const Op op = generate_op(c, shadow, SwarmWeights::uniform(), options);
      const Expectation e = shadow.apply(op);
      const OpResult r = model.apply(op);
      const auto m = mismatch(e, r);
      ASSERT_FALSE(m.has_value()) << "seed " << seed << " step " << i << " " << op_name(op) << ": " << *m;
      const std::string name(op_name(op));
      if (!r.ok()) {
        refusals.insert(name + " " + std::string(error_kind_name(r.error().kind)));
        continue;
      }
      auto note = [&](const std::string& what, std::uint64_t n) { largest[what] = std::max(largest[what], n); };
      if (const auto* b = std::get_if<MakeBatch>(&op)) note("batch lanes", b->tokens.size());
      if (const auto* w = std::get_if<Write>(&op)) note("write lanes", w->tokens.size());
      if (const auto* t = std::get_if<Translate>(&op)) note("translate ids", t->ids.size());
      if (const auto* rd = std::get_if<Read>(&op)) note("read ids", rd->ids.size());
      if (const auto* mv = std::get_if<MovePages>(&op)) note("moves", mv->src.size());
      if (const auto* cap = std::get_if<Capture>(&op)) note("capture batch", cap->max_batch);
      if (const auto* pt = std::get_if<PageTable>(&op)) note("page table requests", pt->req.size());
      if (const auto* rm = std::get_if<RemapIndices>(&op)) note("remap requests", rm->bs);
      if (std::holds_alternative<BuildPool>(op)) note("rebuilds", largest["rebuilds"] + 1);
      if (const auto* rp = std::get_if<Replay>(&op); rp != nullptr && !config.tables_only) {
        note("decode requests", rp->requests.size());
        for (const auto& req : rp->requests) {
          note("decode tokens", req.size());
          // Scattered: some page of the request is not the one after the page before it.
          const auto ps = static_cast<std::int64_t>(config.page_size);
          for (std::size_t k = static_cast<std::size_t>(ps); k < req.size(); k += static_cast<std::size_t>(ps))
            if (req[k] / ps != req[k - 1] / ps + 1) note("scattered decode tokens", req.size());
        }
      }
    }
  }
  for (const auto& [what, n] : largest) std::printf("largest accepted %s: %llu\n", what.c_str(), static_cast<unsigned long long>(n));
  EXPECT_GE(largest["batch lanes"], 1000u);
  EXPECT_GE(largest["write lanes"], 1000u);
  EXPECT_GE(largest["read ids"], 1000u);
  EXPECT_GE(largest["translate ids"], 100000u);
  EXPECT_GE(largest["moves"], 100u);
  EXPECT_GE(largest["capture batch"], 128u);
  EXPECT_GE(largest["page table requests"], 100u);
  EXPECT_GE(largest["remap requests"], 100u);
  EXPECT_GE(largest["decode requests"], 16u);
  EXPECT_GT(largest["decode tokens"], 256u) << "attention past 256 tokens";
  EXPECT_GT(largest["scattered decode tokens"], 256u);
  EXPECT_GE(largest["rebuilds"], 3u);
  std::string reached;
  for (const std::string& r : refusals) reached += " [" + r + "]";
  // Every refusal the shadow (props/shadow.cpp) can answer, per operation.
  for (const char* want :
       {"alloc invalid_argument", "alloc_many invalid_argument", "begin_read invalid_argument",
        "begin_read out_of_range", "build layout", "build sizing", "capture invalid_argument", "capture out_of_range",
        "drop_batch invalid_argument", "end_read invalid_argument", "free double_free", "free out_of_range",
        "free_swa double_free", "free_swa out_of_range", "batch invalid_argument", "move_pages invalid_argument",
        "move_pages out_of_range", "move_pages reader_conflict", "page_table invalid_argument",
        "page_table out_of_range", "read invalid_argument", "read out_of_range", "rebind invalid_argument",
        "remap_indices invalid_argument", "remap_indices out_of_range", "replay invalid_argument",
        "replay out_of_range", "split invalid_argument", "split out_of_range", "swa_translate invalid_argument",
        "translate invalid_argument", "write invalid_argument", "write out_of_range", "write unmarked_loc",
        "write duplicate_loc"})
    EXPECT_TRUE(refusals.count(want)) << want << " never reached; reached:" << reached;
}

}  // namespace
}  // namespace kvtwin::props
