// The model's state digest covers every piece of state it claims to. The refusal check ("a
// refused operation changes nothing", props/observers.h) compares state_digest() before and after
// a refusal, so a piece the digest forgot could change unseen. This property plays seeded swarm
// cases (the gate's generators, pools with bytes) into a model, changes one element of each
// piece of state in turn (each table of each side, the free queue, the readers' holds, the
// content ledger, batches, readers, graphs, one byte of the pool; SPEC 8's host tables, host
// rows, a host byte, a transfer in flight and the pages transfers hold), and requires the digest
// to change every time; without the bytes (state_digest(false), what the refusal check uses beside
// touched_bytes()) only a byte of the pool or of the host arena goes unseen.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "props/choices.h"
#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"

namespace kvtwin::props {
namespace {

class PerturbableModel : public sim::Model {
 public:
  using sim::Model::perturb_for_test;
};

std::vector<Op> seeded_case(std::uint64_t seed, std::size_t count) {
  RngChoices choices(seed);
  PoolConfig config = generate_config(choices);
  config.tables_only = false;
  config.host_bytes = generate_host_bytes(choices, config);
  const SwarmWeights weights = draw_swarm(choices, true);
  OpGenOptions options;
  options.host_ops = true;
  PoolShadow shadow(config);
  std::vector<Op> ops = {BuildPool{config}};
  for (std::size_t i = 0; i < count; ++i) {
    ops.push_back(generate_op(choices, shadow, weights, options));
    (void)shadow.apply(ops.back());
  }
  return ops;
}

TEST(StateDigest, ChangingAnyPieceOfTheStateChangesTheDigest) {
  const std::vector<std::string> pieces = {"v2p",    "p2v",         "watermark",  "holes",     "allocated",
                                           "free_queue", "held",     "ledger",     "batch",     "reader",
                                           "graph",  "bytes",       "host_tables", "host_rows", "host_bytes",
                                           "transfer", "transfer_held"};
  std::map<std::string, int> changed;  // piece -> states where it could be changed (and was seen)
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const std::vector<Op> ops = seeded_case(seed, 80);
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      PerturbableModel m;
      for (const Op& op : ops) (void)m.apply(op);
      if (!m.built()) break;
      const std::uint64_t with_bytes = m.state_digest(true), without_bytes = m.state_digest(false);
      if (!m.perturb_for_test(pieces[k], seed * 31 + k)) continue;
      SCOPED_TRACE("seed " + std::to_string(seed) + ", piece " + pieces[k]);
      EXPECT_NE(m.state_digest(true), with_bytes) << "the digest missed a change of " << pieces[k];
      if (pieces[k] == "bytes" || pieces[k] == "host_bytes")
        EXPECT_EQ(m.state_digest(false), without_bytes) << "state_digest(false) leaves the bytes out";
      else
        EXPECT_NE(m.state_digest(false), without_bytes) << "the digest without bytes missed " << pieces[k];
      ++changed[pieces[k]];
    }
  }
  for (const std::string& piece : pieces)
    EXPECT_GT(changed[piece], 0) << "no generated state had a " << piece << " to change: the property is vacuous there";
}

}  // namespace
}  // namespace kvtwin::props
