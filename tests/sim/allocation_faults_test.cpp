// The model under failing allocations (sim/allocation_faults.h), every injection site in turn.
//
// A few seeded swarm cases (props/ generators, pools with bytes) are played once to count the
// allocation points each operation passes; then, for every point n, a fresh model plays the same
// case with point n failing. The contract (issue 13): the operation where it fails is refused
// with ErrorKind::environment and either leaves the state exactly as it was (a build: the state
// digest and every later answer are those of a model that never saw the operation) or poisons the
// model (every later operation, and tables(), refused with the reason). Before the failure every
// answer equals the fault-free run's: never a wrong answer.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "props/choices.h"
#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/allocation_faults.h"
#include "sim/model.h"

namespace kvtwin::sim {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::vector<Op> ops;  // the build first
};

// A seeded case on a pool with bytes (writes, captures and replays allocate), `count` ops.
Case make_case(std::uint64_t seed, std::size_t count) {
  props::RngChoices choices(seed);
  PoolConfig config = props::generate_config(choices);
  config.tables_only = false;
  const props::SwarmWeights weights = props::draw_swarm(choices);
  props::PoolShadow shadow(config);
  Case c;
  c.ops.push_back(BuildPool{config});
  for (std::size_t i = 0; i < count; ++i) {
    c.ops.push_back(props::generate_op(choices, shadow, weights));
    (void)shadow.apply(c.ops.back());
  }
  // A rebuild midway would be a second build site: the case ends with one (a pool as it was).
  c.ops.push_back(BuildPool{config});
  c.ops.push_back(c.ops[1]);
  return c;
}

// The fault-free run: every answer, and the allocation points counted up to the end of each op.
struct Baseline {
  std::vector<OpResult> results;
  std::vector<std::uint64_t> points_after;
};

Baseline baseline(const Case& c) {
  Baseline b;
  Model m;
  arm_allocation_faults(0);  // count only
  for (const Op& op : c.ops) {
    b.results.push_back(m.apply(op));
    b.points_after.push_back(allocation_points_counted());
  }
  disarm_allocation_faults();
  return b;
}

struct Walk {
  std::uint64_t sites = 0;
  std::uint64_t refused_unchanged = 0;
  std::uint64_t poisoned = 0;
  std::map<std::string, std::uint64_t> by_op;  // op name -> sites in it
};

void walk(const Case& c, Walk& w) {
  const Baseline base = baseline(c);
  const std::uint64_t total = base.points_after.back();
  ASSERT_GT(total, 10u) << "the case passes allocation points";
  for (std::uint64_t n = 1; n <= total; ++n) {
    SCOPED_TRACE("allocation point " + std::to_string(n) + " of " + std::to_string(total));
    // The op in which point n falls.
    std::size_t k = 0;
    while (base.points_after[k] < n) ++k;
    Model m;
    arm_allocation_faults(n);
    for (std::size_t i = 0; i < k; ++i)
      ASSERT_TRUE(same_result(m.apply(c.ops[i]), base.results[i])) << "op " << i << " before the fault";
    const bool had_pool = m.built();
    const std::uint64_t digest_before = had_pool ? m.state_digest() : 0;
    const OpResult failed = m.apply(c.ops[k]);
    disarm_allocation_faults();
    ++w.sites;
    ++w.by_op[std::string(op_name(c.ops[k]))];
    ASSERT_FALSE(failed.ok()) << "the failing allocation is reported";
    ASSERT_EQ(failed.error().kind, ErrorKind::environment) << failed.error().message;
    EXPECT_THAT(failed.error().message, HasSubstr("out of memory in '" + std::string(op_name(c.ops[k])) + "'"));
    if (std::holds_alternative<BuildPool>(c.ops[k])) {
      // Refused, the state exactly as it was: the same digest, and from here on the same answers
      // as a model that never saw this op.
      ++w.refused_unchanged;
      ASSERT_EQ(m.built(), had_pool);
      if (had_pool) {
        EXPECT_EQ(m.state_digest(), digest_before);
        EXPECT_TRUE(m.verify().ok());
      }
      Model reference;
      for (std::size_t i = 0; i < c.ops.size(); ++i) {
        if (i == k) continue;
        const OpResult expected = reference.apply(c.ops[i]);
        if (i > k) {
          ASSERT_TRUE(same_result(m.apply(c.ops[i]), expected)) << "op " << i << " after the refused build";
        }
      }
    } else {
      // Poisoned: everything after is refused, with the reason.
      ++w.poisoned;
      for (std::size_t i = k + 1; i < c.ops.size(); ++i) {
        const OpResult r = m.apply(c.ops[i]);
        ASSERT_FALSE(r.ok()) << "op " << i << " answered after the model was poisoned";
        EXPECT_EQ(r.error().kind, ErrorKind::environment);
        EXPECT_THAT(r.error().message, HasSubstr("refuses every operation since it ran out of memory"));
      }
      EXPECT_FALSE(m.tables().ok());
    }
  }
}

TEST(ModelAllocationFaults, EverySiteInTurnCompletesRefusesUnchangedOrPoisons) {
  Walk w;
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE("case seed " + std::to_string(seed));
    walk(make_case(seed, 120), w);
    if (HasFatalFailure()) return;
  }
  std::string where;
  for (const auto& [op, n] : w.by_op) where += " " + op + ":" + std::to_string(n);
  std::printf("model allocation sites walked: %llu (refused unchanged %llu, poisoned %llu); by op:%s\n",
              static_cast<unsigned long long>(w.sites), static_cast<unsigned long long>(w.refused_unchanged),
              static_cast<unsigned long long>(w.poisoned), where.c_str());
  EXPECT_GT(w.refused_unchanged, 0u) << "builds were walked";
  EXPECT_GT(w.poisoned, 0u) << "operations past build were walked";
  EXPECT_GE(w.by_op.size(), 3u) << "several kinds of operation allocate";
}

TEST(ModelAllocationFaults, ARealOutOfMemoryAtBuildIsARefusalNotACrash) {
  // Disarmed, a point counts nothing.
  arm_allocation_faults(0);
  disarm_allocation_faults();
  const std::uint64_t counted = allocation_points_counted();
  props::RngChoices choices(3);
  Model m;
  ASSERT_TRUE(m.apply(Op(BuildPool{props::generate_config(choices)})).ok());
  EXPECT_EQ(allocation_points_counted(), counted);
  // Point 1 of a build is the first table: the build is refused, the old pool stays.
  const std::uint64_t before = m.state_digest();
  arm_allocation_faults(1);
  const OpResult r = m.apply(Op(BuildPool{m.config()}));
  disarm_allocation_faults();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::environment);
  EXPECT_THAT(r.error().message, HasSubstr("the pool is as it was"));
  EXPECT_EQ(m.state_digest(), before);
}

}  // namespace
}  // namespace kvtwin::sim
