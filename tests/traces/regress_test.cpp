// Every trace under traces/regress/ replays clean on the model (SPEC 9: the test suite replays
// them all), and every one a planted fault produced fails again with that fault planted; the
// traces of pools past 2 GiB (traces/regress-large/) do the same side by side where a device is.
// All replay with the property observers, as `kvtwin check` replays them (the sizing check among
// them: a bug in core's sizing shows only there, not in any answer a trace expects).
#include <algorithm>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "props/observers.h"
#include "tests/traces/test_support.h"
#include "traces/backends.h"
#include "traces/replay.h"

namespace kvtwin::traces {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> regress_traces(const std::string& folder = "/traces/regress") {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(testing::source_dir() + folder))
    if (e.path().extension() == ".jsonl") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found;
}

TEST(RegressTraces, EveryOneReplaysCleanOnTheModel) {
  const std::vector<fs::path> traces = regress_traces();
  ASSERT_GE(traces.size(), 5u);
  for (const fs::path& path : traces) {
    Result<BackendSet> model = make_backend_set(BackendChoice::model);
    Result<ReplayReport> r = replay_pool_trace_file(path.string(), *model, {}, {}, props::property_observer_factory());
    ASSERT_TRUE(r.ok()) << path << ": " << r.error().message;
    EXPECT_TRUE(r->passed()) << path << ": " << r->failure->describe();
    EXPECT_GT(r->stats.expects_checked, 0u) << path << " expects nothing";
  }
}

// Every trace names the faults it pins (origin.faults); with each planted, on the backend the
// fault lives in, the trace fails. Model faults run here; GPU faults where a device is.
TEST(RegressTraces, EachFailsWithEveryFaultItNames) {
  int planted = 0;
  const std::vector<std::string> model_faults = planted_faults();
  std::set<std::string> model_faults_pinned;
  for (const fs::path& path : regress_traces()) {
    Result<PoolTrace> t = read_pool_trace_file(path.string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    const nlohmann::json& origin = t->header.origin;
    if (!origin.contains("faults")) continue;
    for (const auto& f : origin["faults"]) {
      const std::string fault = f.get<std::string>();
      const bool in_model = std::find(model_faults.begin(), model_faults.end(), fault) != model_faults.end();
      if (!in_model && !gpu_device_available()) continue;
      Result<BackendSet> faulty = make_backend_set(in_model ? BackendChoice::model : BackendChoice::both, fault);
      ASSERT_TRUE(faulty.ok()) << fault << ": " << faulty.error().message;
      Result<ReplayReport> r = replay_pool_trace_file(path.string(), *faulty, {}, {}, props::property_observer_factory());
      ASSERT_TRUE(r.ok());
      EXPECT_FALSE(r->passed()) << path << " passes with " << fault << " planted";
      ++planted;
      if (in_model) model_faults_pinned.insert(fault);
    }
  }
  EXPECT_GE(planted, 5);
  for (const std::string& f : model_faults)
    EXPECT_TRUE(model_faults_pinned.count(f)) << "no regression trace pins the model fault " << f;
}

// traces/regress-large/: pools past 2 GiB of bytes (2.4 GiB of host memory for the model each),
// replayed where a device is, as kvtwin check does: side by side clean, against their blessed
// expectations, and failing with each GPU fault they name.
TEST(RegressTraces, LargeOnesPassSideBySideAndFailWithTheirGpuFaults) {
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<fs::path> traces = regress_traces("/traces/regress-large");
  ASSERT_GE(traces.size(), 2u);
  for (const fs::path& path : traces) {
    Result<PoolTrace> t = read_pool_trace_file(path.string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    Result<BackendSet> clean = make_backend_set(BackendChoice::both);
    ASSERT_TRUE(clean.ok()) << clean.error().message;
    Result<ReplayReport> r = replay_pool_trace_file(path.string(), *clean, {}, {}, props::property_observer_factory());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->passed()) << path << ": " << r->failure->describe();
    EXPECT_GT(r->stats.expects_checked, 0u) << path << " expects nothing";
    ASSERT_TRUE(t->header.origin.contains("faults")) << path << " names no fault";
    for (const auto& f : t->header.origin["faults"]) {
      Result<BackendSet> faulty = make_backend_set(BackendChoice::both, f.get<std::string>());
      ASSERT_TRUE(faulty.ok()) << faulty.error().message;
      Result<ReplayReport> bad =
          replay_pool_trace_file(path.string(), *faulty, {}, {}, props::property_observer_factory());
      ASSERT_TRUE(bad.ok());
      EXPECT_FALSE(bad->passed()) << path << " passes with " << f.get<std::string>() << " planted";
    }
  }
}

}  // namespace
}  // namespace kvtwin::traces
