// Replays, as the commands run them: a pool trace file through the runner, an in-memory op
// sequence (fuzz cases and their shrinking), or a request trace through the serving simulator
// (optionally recording the pool trace it produces). Each returns a ReplayReport: what ran,
// every check's count, and the first failure with its line. Input that cannot be read is an
// Error (the commands exit 2); a failed check is a report with a failure (they exit 1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/backends.h"
#include "traces/pool_trace.h"
#include "traces/request_trace.h"
#include "traces/runner.h"
#include "traces/serving_sim.h"

namespace kvtwin::traces {

struct ReplayReport {
  std::string source;    // the file (or a case name)
  std::string format;    // "pool", "mooncake", "azure", "ops"
  std::string backends;  // "model", "model+gpu"
  std::uint64_t seed = 0;
  std::optional<PoolConfig> config;
  RunStats stats;
  std::optional<Failure> failure;
  std::optional<ServingSummary> serving;
  nlohmann::json parameters = nlohmann::json::object();  // the serving parameters, or the trace's origin

  bool passed() const { return !failure.has_value(); }
};

nlohmann::json report_json(const ReplayReport& report);
// The human summary printed at the end of a replay (several lines, no trailing newline).
std::string report_text(const ReplayReport& report);

// Checks a replay adds to its runner once the pool is built (props/ passes the shadow, the policy
// and the refusal observers this way; traces/ does not know them).
using ObserverFactory = std::function<std::vector<std::unique_ptr<RunObserver>>(const PoolConfig& config)>;

// Called with work done and work total (bytes of a trace file, or requests) for progress bars.
using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Who watches a replay from outside without checking anything (kvtwin replay --html's recorder);
// none by default. The checks come from the ObserverFactory.
struct ReplayWatchers {
  RunObserver* run = nullptr;          // every op and each backend's answer (after_apply)
  ServingObserver* serving = nullptr;  // the serving simulator's decisions (request traces)
};

// Replays a pool trace file, one line at a time: the header's pool is built, then every line is
// played and checked; the run stops at the first failure. A header whose pool no backend can
// build is bad input (an Error), never a pass that checked nothing.
Result<ReplayReport> replay_pool_trace_file(const std::string& path, BackendSet& backends, const CheckCadence& cadence,
                                            const Progress& progress = {}, const ObserverFactory& observers = {},
                                            const ReplayWatchers& watchers = {});

// Replays header + lines held in memory (fuzz cases, shrinking, tests). An unbuildable pool is an
// Error, as above.
Result<ReplayReport> replay_lines(const TraceHeader& header, const std::vector<TraceLine>& lines, BackendSet& backends,
                                  const CheckCadence& cadence, const std::string& source = "<memory>",
                                  const ObserverFactory& observers = {}, const ReplayWatchers& watchers = {});

// Runs a request trace through the serving simulator against the backends, checking as it
// goes. When `record` is given, every op is written to it with the first backend's result as
// its expectation. Parameter errors are Errors.
Result<ReplayReport> simulate_request_trace(const RequestTrace& trace, const ServingParams& params,
                                            BackendSet& backends, const CheckCadence& cadence,
                                            PoolTraceWriter* record = nullptr, const Progress& progress = {},
                                            const ReplayWatchers& watchers = {});

}  // namespace kvtwin::traces
