// Seeded swarm fuzzing of the stateful properties, and what `kvtwin fuzz` and `kvtwin check`
// build on it.
//
// A case is a function of one seed: the pool configuration (drawn by props/config_gen.h, or a
// named configuration), the run's swarm weights (props/swarm.h), then `ops_per_case`
// operations from props/op_gen.h, each generated from the shadow's state (props/shadow.h) and
// played through the runner against the backends. After every operation a case checks what
// the stateful properties check: the runner's checks (backends agree on results and tables;
// the model's verify()), the first backend's answer and tables against the shadow's
// prediction, and the policy's postconditions (props/model_property.h). The operations depend
// on the seed alone (the shadow predicts every answer), so any failing case replays exactly.
//
// A failure is shrunk (shrink.h): the shortest op sequence that still fails the same check,
// replayed from scratch each time; then written as a pool trace whose lines expect what the
// reference (the model, or the shadow where the model is the one wrong) answers, so the trace
// reproduces the failure alone under `kvtwin replay`.
//
// Sharding: case i belongs to shard i % shard_count; its seed derives from the run's seed and
// i, never from the shard, so a campaign split over machines runs exactly the cases one
// machine would.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/pool_config.h"
#include "core/result.h"
#include "traces/backends.h"
#include "traces/pool_trace.h"
#include "traces/runner.h"

namespace kvtwin::props {
using traces::BackendSet;
using traces::Failure;
using traces::PoolTrace;
using traces::RunStats;
}  // namespace kvtwin::props
#include "props/shrink.h"

namespace kvtwin::props {

// A named configuration: "random" (each case draws one), or "MODEL[/tpN][/psN][/eager|lazy]
// [/tables]" for a catalogue model scaled to `usable_pages` pages of the owner side. TP defaults
// to the one that leaves one KV head per rank (small entries), the page size to 16, eager.
Result<PoolConfig> named_config(std::string_view name, std::uint64_t seed, std::uint64_t usable_pages = 40);

// The configurations `kvtwin check` covers: every catalogue model, eager and lazy, several page
// sizes (composites and MLA included by the catalogue).
// Hybrid models (SPEC 11) play their state chain tables-only.
std::vector<std::string> catalogue_config_names();

struct CaseSpec {
  std::uint64_t index = 0;
  std::uint64_t seed = 0;  // everything in the case derives from it
  std::string config = "random";
  std::uint64_t ops = 200;
};

// The seed of case `index` of a run.
std::uint64_t case_seed(std::uint64_t run_seed, std::uint64_t index, std::string_view config);

struct CaseFailure {
  Failure failure;         // the check that failed and where (step = op index)
  std::vector<Op> ops;     // the ops up to and including the failing one
  std::vector<Op> shrunk;  // after shrinking
  ShrinkStats shrink_stats;
};

struct CaseResult {
  CaseSpec spec;
  PoolConfig config;
  std::string swarm;  // the swarm weights, described
  RunStats stats;
  std::uint64_t shadow_checks = 0;
  std::optional<CaseFailure> failure;
};

using BackendFactory = std::function<Result<BackendSet>()>;

// Generates and plays one case. Errors: the configuration cannot be built or the backends
// cannot be made (bad usage). A failed check is a CaseResult with a failure (not yet shrunk).
Result<CaseResult> run_case(const CaseSpec& spec, const BackendFactory& make_backends);

// Replays fixed ops on a configuration as a case does (shadow and all); the failure, if any.
std::optional<Failure> replay_case_ops(const PoolConfig& config, const std::vector<Op>& ops,
                                       const BackendFactory& make_backends);

// Shrinks a failed case in place (failure->shrunk, failure->shrink_stats).
void shrink_case(CaseResult& result, const BackendFactory& make_backends, const ShrinkOptions& options = {});

// The pool trace that reproduces a shrunk failure alone: the case's configuration, and each op
// with the reference's answer as its expectation.
PoolTrace failure_trace(const CaseResult& result, const BackendFactory& make_backends, nlohmann::json origin);

}  // namespace kvtwin::props
