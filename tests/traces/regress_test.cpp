// Every trace under traces/regress/ replays clean on the model (SPEC 9: the test suite replays
// them all), and every one a planted fault produced fails again with that fault planted.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/traces/test_support.h"
#include "traces/backends.h"
#include "traces/replay.h"

namespace kvtwin::traces {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> regress_traces() {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(testing::source_dir() + "/traces/regress"))
    if (e.path().extension() == ".jsonl") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found;
}

TEST(RegressTraces, EveryOneReplaysCleanOnTheModel) {
  const std::vector<fs::path> traces = regress_traces();
  ASSERT_GE(traces.size(), 5u);
  for (const fs::path& path : traces) {
    Result<BackendSet> model = make_backend_set(BackendChoice::model);
    Result<ReplayReport> r = replay_pool_trace_file(path.string(), *model, {});
    ASSERT_TRUE(r.ok()) << path << ": " << r.error().message;
    EXPECT_TRUE(r->passed()) << path << ": " << r->failure->describe();
    EXPECT_GT(r->stats.expects_checked, 0u) << path << " expects nothing";
  }
}

TEST(RegressTraces, EveryOneAPlantedFaultFoundFailsAgainWithIt) {
  int planted = 0;
  for (const fs::path& path : regress_traces()) {
    Result<PoolTrace> t = read_pool_trace_file(path.string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    const nlohmann::json& origin = t->header.origin;
    if (!origin.contains("fault") || origin["fault"].get<std::string>().empty() || origin["backend"] != "model")
      continue;
    ++planted;
    const std::string fault = origin["fault"];
    Result<BackendSet> faulty = make_backend_set(BackendChoice::model, fault);
    Result<ReplayReport> r = replay_pool_trace_file(path.string(), *faulty, {});
    ASSERT_TRUE(r.ok());
    ASSERT_FALSE(r->passed()) << path << " passes with " << fault << " planted";
    EXPECT_EQ(r->failure->check, origin["check"].get<std::string>()) << path;
  }
  EXPECT_GE(planted, 5);
}

}  // namespace
}  // namespace kvtwin::traces
