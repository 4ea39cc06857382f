// Units for the generators and the shadow: configurations always build and stay small, the
// same seed gives the same run, generated operations are mostly accepted with a share refused,
// every operation kind is generated, and the shadow agrees with SPEC's worked examples.
#include <map>

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

}  // namespace
}  // namespace kvtwin::props
