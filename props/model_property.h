// The stateful property of the reference model (RapidCheck, rc::state): a random configuration,
// the run's swarm weights, then a random sequence of operations, each played against the model
// and the shadow (props/shadow.h). After every command:
//   - the model's answer is what the shadow predicts (allocated virtual pages, no room, moves,
//     ids, tables, marks; errors by kind; bytes by size), and a refused command left the model's
//     state digest unchanged;
//   - the policy postconditions hold on the model's own tables: an allocation binds queue-front
//     virtual pages to ascending physical pages at the frontier (lazy mode: the lowest holes
//     first), and a compaction's moves have ascending, distinct sources beyond the new watermark
//     and ascending, distinct destinations inside it (mirrored for a down side);
//   - the model's tables equal the shadow's, and the model's verify() passes.
// Commands print in trace syntax, so a shrunk counterexample reads as a trace.
//
// What it does not cover: comparing bytes with another implementation (the GPU's differential
// property does that on top of the same generators).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include <rapidcheck/state.h>

#include "props/policy.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"

namespace kvtwin {
// RapidCheck shows a generated configuration as the trace line that builds it.
void showValue(const PoolConfig& config, std::ostream& os);
}  // namespace kvtwin

namespace kvtwin::props {
void showValue(const SwarmWeights& weights, std::ostream& os);

using ModelFactory = std::function<std::unique_ptr<sim::Model>()>;

// One command: an operation played against the model, checked against the shadow.
class ModelCommand : public rc::state::Command<PoolShadow, sim::Model> {
 public:
  explicit ModelCommand(Op op) : op_(std::move(op)) {}
  void apply(PoolShadow& shadow) const override;
  void run(const PoolShadow& shadow, sim::Model& model) const override;
  void show(std::ostream& os) const override;
  const Op& op() const { return op_; }

 private:
  Op op_;
};

// The property body: call inside a RapidCheck property. `make_model` builds the system under
// test (a test-only subclass can plant a wrong policy).
void model_matches_shadow(const ModelFactory& make_model);

// Runs the property with RapidCheck's programmatic API and reports without failing anything.
struct PropertyRun {
  bool passed = false;
  int cases = 0;                   // successful cases before the end (or the failure)
  std::uint64_t seed = 0;
  std::string message;             // RapidCheck's report (the counterexample on a failure)
  std::string reproduce;           // RC_PARAMS value that replays the failure
  std::size_t counterexample_commands = 0;  // commands of the shrunk counterexample
};

struct PropertyParams {
  std::uint64_t seed = 0;
  int max_success = 100;
  int max_size = 60;
  bool disable_shrinking = false;
};

// Parameters for CI: the given defaults, unless RC_PARAMS is set in the environment, in which
// case RapidCheck's own configuration (its seed, max_success, ...) is used as it is.
PropertyParams params_from_environment(const PropertyParams& defaults);

PropertyRun run_model_property(const std::string& id, const ModelFactory& make_model, const PropertyParams& params);

}  // namespace kvtwin::props
