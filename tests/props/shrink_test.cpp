// The shrinker: delta debugging finds the few operations a failure needs, simplification trims
// id lists, the result is deterministic, and the replay budget is respected.
#include "props/shrink.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "tests/traces/test_support.h"

namespace kvtwin::props {
namespace {
namespace testing = ::kvtwin::traces::testing;

// "Fails" when an alloc of 48 tokens comes somewhere before a flush, and a free naming page 7
// comes somewhere after that flush.
bool planted(const std::vector<Op>& ops) {
  int stage = 0;
  for (const Op& op : ops) {
    if (stage == 0 && std::holds_alternative<Alloc>(op) && std::get<Alloc>(op).tokens == 48)
      stage = 1;
    else if (stage == 1 && std::holds_alternative<Flush>(op))
      stage = 2;
    else if (stage == 2 && std::holds_alternative<Free>(op)) {
      const auto& ids = std::get<Free>(op).ids;
      if (std::find(ids.begin(), ids.end(), 7) != ids.end()) return true;
    }
  }
  return false;
}

std::vector<Op> noisy_failing_sequence(std::uint64_t seed) {
  Rng rng(seed);
  std::vector<Op> ops;
  for (int i = 0; i < 300; ++i) ops.push_back(testing::any_op(rng));
  ops.insert(ops.begin() + 40, Op(Alloc{48}));
  ops.insert(ops.begin() + 150, Op(Flush{}));
  ops.insert(ops.begin() + 260, Op(Free{IdUnit::pages, {1, 9, 7, 3, 12}}));
  return ops;
}

TEST(Shrink, FindsTheThreeOpsAFailureNeedsAndTrimsTheirIds) {
  const std::uint64_t seed = 5;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<Op> ops = noisy_failing_sequence(seed);
  ASSERT_TRUE(planted(ops));
  ShrinkStats stats;
  const std::vector<Op> shrunk = shrink_ops(ops, planted, {}, &stats);
  ASSERT_TRUE(planted(shrunk));
  const std::vector<Op> expected = {Alloc{48}, Flush{}, Free{IdUnit::pages, {7}}};
  EXPECT_EQ(shrunk, expected);
  EXPECT_EQ(stats.ops_before, ops.size());
  EXPECT_EQ(stats.ops_after, 3u);
  EXPECT_LT(stats.replays, 1000u);
  // Deterministic: the same input shrinks to the same output with the same number of replays.
  ShrinkStats again;
  EXPECT_EQ(shrink_ops(ops, planted, {}, &again), shrunk);
  EXPECT_EQ(again.replays, stats.replays);
}

TEST(Shrink, RespectsTheReplayBudget) {
  std::vector<Op> ops = noisy_failing_sequence(6);
  ShrinkStats stats;
  const std::vector<Op> shrunk = shrink_ops(ops, planted, ShrinkOptions{10}, &stats);
  EXPECT_EQ(stats.replays, 10u);
  EXPECT_TRUE(planted(shrunk)) << "whatever it returns still fails";
  EXPECT_LE(shrunk.size(), ops.size());
}

TEST(Shrink, SimplerVariantsKeepTranslateShapesConsistent) {
  Translate t;
  t.ids = {4, 5, 6, 7};
  t.shape = {4};
  t.out_width = 4;
  for (const Op& v : simpler_variants(Op(t))) {
    const auto& s = std::get<Translate>(v);
    ASSERT_EQ(s.shape.size(), 1u);
    EXPECT_EQ(static_cast<std::size_t>(s.shape[0]), s.ids.size());
    EXPECT_TRUE(s.out_width == 0 || s.out_width >= s.ids.size());
    EXPECT_LT(s.ids.size(), t.ids.size());
  }
  EXPECT_TRUE(simpler_variants(Op(Flush{})).empty());
}

}  // namespace
}  // namespace kvtwin::props
