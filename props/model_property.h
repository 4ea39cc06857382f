// The stateful property (RapidCheck, rc::state): a random configuration, the run's swarm
// weights, then a random sequence of operations, each played through the one runner
// (traces/runner.h) against the system under test (the reference model alone, or the model and
// the GPU side by side) with the property observers (props/observers.h). After every command the
// runner's checks (results, tables and their invariants, verify, touched bytes) and the
// observers' (the shadow's prediction, the policy's postconditions, a refused command changing
// nothing) must all pass.
// Commands print in trace syntax, so a shrunk counterexample reads as a trace.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include <rapidcheck/state.h>

#include "props/observers.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"
#include "traces/backends.h"
#include "traces/runner.h"

namespace kvtwin {
// RapidCheck shows a generated configuration as the trace line that builds it.
void showValue(const PoolConfig& config, std::ostream& os);
}  // namespace kvtwin

namespace kvtwin::props {
void showValue(const SwarmWeights& weights, std::ostream& os);

using ModelFactory = std::function<std::unique_ptr<sim::Model>()>;
using BackendsFactory = std::function<Result<traces::BackendSet>()>;

// The system under test: its backends, the runner that plays them, and the observers.
struct PropertySystem {
  traces::BackendSet backends;
  std::unique_ptr<traces::Runner> runner;
  std::unique_ptr<PropertyObservers> observers;
};

// One command: an operation played through the runner.
class PlayCommand : public rc::state::Command<PoolShadow, PropertySystem> {
 public:
  explicit PlayCommand(Op op) : op_(std::move(op)) {}
  void apply(PoolShadow& shadow) const override;
  void run(const PoolShadow& shadow, PropertySystem& system) const override;
  void show(std::ostream& os) const override;
  const Op& op() const { return op_; }

 private:
  Op op_;
};

// The property body: call inside a RapidCheck property. `make_backends` builds fresh backends for
// each case (a test-only model subclass can plant a wrong policy; the GPU tests pass both).
void runner_matches_shadow(const BackendsFactory& make_backends);
// The same with the model alone, made by `make_model`.
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
