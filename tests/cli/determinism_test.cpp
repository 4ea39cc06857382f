// Determinism through the binary: the same seed gives the same bytes whatever the thread count and
// however often it runs. kvtwin check (with a planted fault, so that failures are shrunk and
// written) at --jobs 1 and 3, and 3 again; kvtwin fuzz twice: the printed digests agree, the JSON
// reports agree byte for byte (check's but for its durations), and every trace written is
// byte-identical. The digest line is what two machines compare (README "Determinism").
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cli/scratch_folder.h"
#include <nlohmann/json.hpp>

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch() { return kvtwin::cli_test::scratch_folder("kvtwin-determinism"); }

CliRun kvtwin(const std::vector<std::string>& args) {
  const char* bin_dir = std::getenv("KVTWIN_BINARY_DIR");
  const std::string bin = std::string(bin_dir != nullptr ? bin_dir : "build/default") + "/tools/kvtwin";
  const fs::path out = fs::temp_directory_path() / ("kvtwin-determinism-out-" + std::to_string(::getpid()));
  const fs::path err = fs::temp_directory_path() / ("kvtwin-determinism-err-" + std::to_string(::getpid()));
  std::string cmd = quote(bin);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string()) + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// "digest 0123456789abcdef (...)" from a run's output.
std::string digest_of(const std::string& out) {
  const std::size_t at = out.find("digest ");
  if (at == std::string::npos) return "";
  return out.substr(at + 7, 16);
}

// Every file of a folder, by name.
std::map<std::string, std::string> files_in(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_file(e.path());
  return out;
}

TEST(Determinism, CheckGivesTheSameResultsAndTracesWithAnyThreadCountAndOnEveryRun) {
  const fs::path dir = scratch();
  std::vector<std::string> digests;
  std::vector<nlohmann::json> reports;
  std::vector<std::map<std::string, std::string>> traces;
  // A third of the gate's items (a shard, itself deterministic), so that three runs stay short;
  // an empty folder for the request traces (their items skip by name).
  fs::create_directories(dir / "empty");
  for (const char* jobs : {"1", "3", "3"}) {
    const fs::path run = dir / ("run" + std::to_string(digests.size()));
    // The traces go to the same relative folder in every run (reports name their paths).
    fs::create_directories(run);
    const std::string out = (dir / "failures").string();
    fs::remove_all(out);
    const CliRun r = kvtwin({"check", "--backend", "model", "--fault", "model_pairing_out_of_order", "--cases", "1",
                             "--random-cases", "3", "--ops", "40", "--seed", "5", "--traces-dir",
                             (dir / "empty").string(), "--samples-dir", (dir / "empty").string(), "--out", out,
                             "--shard-index", "1", "--shard-count", "3", "--jobs", jobs, "--json",
                             (run / "check.json").string(), "--quiet"});
    ASSERT_EQ(r.exit_code, 1) << "the planted fault is found\n" << r.out << r.err;
    digests.push_back(digest_of(r.out));
    ASSERT_EQ(digests.back().size(), 16u) << r.out;
    nlohmann::json j = nlohmann::json::parse(read_file(run / "check.json"));
    for (auto& item : j["items"]) item.erase("seconds");
    reports.push_back(j);
    traces.push_back(files_in(out));
    ASSERT_FALSE(traces.back().empty()) << "failures were shrunk and written";
  }
  for (std::size_t i = 1; i < digests.size(); ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    EXPECT_EQ(digests[i], digests[0]);
    EXPECT_EQ(reports[i], reports[0]);
    EXPECT_EQ(traces[i], traces[0]) << "every failure trace, byte for byte";
  }
  EXPECT_EQ(reports[0]["digest"], digests[0]);
}

// kvtwin selftest judges faults in fresh processes where one process cannot go on (a GPU fault
// that leaves the device's context unusable); --isolate does it for every fault. Both ways give
// the same rows, and the fresh processes' reports are not left behind.
TEST(Determinism, SelftestGivesTheSameRowsWithEveryFaultInAFreshProcess) {
  const fs::path dir = scratch();
  fs::create_directories(dir / "empty");
  std::vector<nlohmann::json> rows;
  for (const bool isolate : {false, true}) {
    const fs::path json = dir / (isolate ? "isolated.json" : "shared.json");
    std::vector<std::string> args = {"selftest", "--backend", "model", "--skip-clean", "--only",
                                     "model_stale_write,model_negative_not_sink,model_pairing_out_of_order", "--cases",
                                     "1", "--random-cases", "3", "--ops", "40", "--seed", "5", "--traces-dir",
                                     (dir / "empty").string(), "--out", (dir / "out").string(), "--json",
                                     json.string()};
    if (isolate) args.push_back("--isolate");
    const CliRun r = kvtwin(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("kvtwin selftest: PASS (3 caught"));
    nlohmann::json j = nlohmann::json::parse(read_file(json));
    ASSERT_EQ(j["rows"].size(), 3u) << j.dump(1);
    for (auto& row : j["rows"]) {
      EXPECT_EQ(row["state"], "caught") << row.dump();
      row.erase("seconds");
    }
    rows.push_back(j["rows"]);
  }
  EXPECT_EQ(rows[1], rows[0]);
  for (const auto& [name, bytes] : files_in(dir / "out" / "selftest"))
    EXPECT_NE(name.rfind("part-", 0), 0u) << name << ": a fresh process's report is read, then removed";
}

TEST(Determinism, FuzzWritesTheSameReportAndTraceOnEveryRun) {
  const fs::path dir = scratch();
  std::vector<std::string> digests, reports;
  std::vector<std::map<std::string, std::string>> traces;
  for (int run = 0; run < 2; ++run) {
    const std::string out = (dir / "failures").string();
    fs::remove_all(out);
    const fs::path json = dir / ("fuzz" + std::to_string(run) + ".json");
    const CliRun r = kvtwin({"fuzz", "--fault", "model_stale_write", "--cases", "30", "--seed", "9", "--out", out, "--json",
                             json.string(), "--quiet"});
    ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
    digests.push_back(digest_of(r.out));
    reports.push_back(read_file(json));
    traces.push_back(files_in(out));
  }
  EXPECT_EQ(digests[0].size(), 16u);
  EXPECT_EQ(digests[1], digests[0]);
  EXPECT_EQ(reports[1], reports[0]) << "the JSON report, byte for byte";
  EXPECT_EQ(traces[1], traces[0]);
  EXPECT_THAT(reports[0], HasSubstr(digests[0]));
  // A clean run has a digest too, and another seed another one.
  const CliRun a = kvtwin({"fuzz", "--cases", "3", "--seed", "9", "--quiet"});
  const CliRun b = kvtwin({"fuzz", "--cases", "3", "--seed", "10", "--quiet"});
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  EXPECT_NE(digest_of(a.out), digest_of(b.out));
}

}  // namespace
