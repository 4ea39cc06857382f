// kvtwin replay, record, fuzz and check end to end: runs the built binary
// ($KVTWIN_BINARY_DIR/tools/kvtwin) and checks exit codes (0 pass, 1 a check failed, 2 bad usage
// or input), what is printed, and the files written: a planted failure found by kvtwin fuzz,
// shrunk, written, and failing again under the printed kvtwin replay command; byte-identical
// recordings; kvtwin check's skips by name, reports and sharding; merging shard reports.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <expat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
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

// A fresh folder per test (suite and name: two suites have tests of the same name, and ctest runs
// them at once).
fs::path scratch() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::temp_directory_path() /
                       (std::string("kvtwin-trace-cli-") + info->test_suite_name() + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string source(const std::string& relative) {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/" + relative;
}

// Runs kvtwin with `args` (and `env` assignments), capturing stdout and stderr.
CliRun kvtwin(const std::vector<std::string>& args, const std::string& env = "") {
  const char* bin_dir = std::getenv("KVTWIN_BINARY_DIR");
  const std::string bin = std::string(bin_dir != nullptr ? bin_dir : "build/default") + "/tools/kvtwin";
  const fs::path dir = fs::temp_directory_path();
  const fs::path out = dir / ("kvtwin-cli-out-" + std::to_string(::getpid()));
  const fs::path err = dir / ("kvtwin-cli-err-" + std::to_string(::getpid()));
  std::string cmd = env + (env.empty() ? "" : " ") + quote(bin);
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

std::string docs_example(const fs::path& dir) {
  std::ifstream in(source("docs/traces.md"));
  std::string line, text;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "```jsonl")
      inside = true;
    else if (inside && line == "```")
      break;
    else if (inside)
      text += line + "\n";
  }
  const fs::path path = dir / "example.jsonl";
  std::ofstream(path) << text;
  return path.string();
}

TEST(ReplayCli, ACleanTracePassesAndAPlantedFaultFailsAtItsLine) {
  const std::string trace = docs_example(scratch());
  CliRun ok = kvtwin({"replay", trace});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("on model: PASS"));
  EXPECT_THAT(ok.out, HasSubstr("trace seed 7"));
  // The planted model runs alone: the trace's expectation at line 8 catches it.
  CliRun bad = kvtwin({"replay", trace, "--fault", "model_negative_not_sink", "--json", "-"});
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_THAT(bad.out, HasSubstr("line 8 (step 7): expect check failed"));
  EXPECT_THAT(bad.out, HasSubstr("reproduce: kvtwin replay " + trace + " --json - --fault model_negative_not_sink\n"))
      << "the exact command, every option given";
  // The JSON report follows the text on stdout.
  const std::string json_text = bad.out.substr(bad.out.find("\n{") + 1);
  const nlohmann::json j = nlohmann::json::parse(json_text);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["failure"]["line"], 8);
  EXPECT_EQ(j["failure"]["check"], "expect");
}

// --html (tools/kvtwin/html_report.h; tests/cli opens the pages in a browser): a page is written
// after the run, and a file that cannot be written is bad usage found before the run.
TEST(ReplayCli, HtmlWritesAPageAndAnUnwritablePathIsRefusedBeforeTheRun) {
  const fs::path dir = scratch();
  const std::string trace = docs_example(dir);
  const fs::path page = dir / "report.html";
  CliRun ok = kvtwin({"replay", trace, "--html", page.string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("wrote the HTML report to " + page.string()));
  const std::string html = read_file(page);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_THAT(html, HasSubstr("<svg class=\"chart\" id=\"occupancy-full\""));
  EXPECT_THAT(html, HasSubstr("kvtwin replay " + trace + " --html " + page.string()));
  const std::string unwritable = (dir / "no-such-folder" / "report.html").string();
  CliRun bad = kvtwin({"replay", trace, "--html", unwritable});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--html"));
  EXPECT_THAT(bad.err, HasSubstr(unwritable));
  EXPECT_THAT(bad.out, Not(HasSubstr("replayed "))) << "refused before the run";
}

TEST(ReplayCli, UnreadableInputExitsTwoWithFileAndLine) {
  const std::string bad = source("tests/traces/data/bad/unknown_op.jsonl");
  CliRun r = kvtwin({"replay", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":3: unknown operation 'allocate'"));
  CliRun unsupported = kvtwin({"replay", source("tests/traces/data/bad/unsupported_burstgpt.csv")});
  EXPECT_EQ(unsupported.exit_code, 2);
  EXPECT_THAT(unsupported.err, HasSubstr("unsupported format"));
  CliRun missing = kvtwin({"replay", "/nonexistent/trace.jsonl"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
  CliRun bad_backend = kvtwin({"replay", bad, "--backend", "tpu"});
  EXPECT_EQ(bad_backend.exit_code, 2);
  EXPECT_THAT(bad_backend.err, HasSubstr("unknown backend 'tpu'; use model, gpu or both"));
  CliRun bad_flag = kvtwin({"replay", bad, "--no-such-flag"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  CliRun bad_bytes = kvtwin({"replay", source("traces/samples/azure_code_head.csv"), "--pool-bytes", "12XB"});
  EXPECT_EQ(bad_bytes.exit_code, 2);
  EXPECT_THAT(bad_bytes.err, HasSubstr("--pool-bytes '12XB' has an unknown unit 'XB'"));
}

TEST(ReplayCli, TheGpuIsRefusedCleanlyWhereItCannotRun) {
  CliRun r = kvtwin({"replay", docs_example(scratch()), "--backend", "gpu"});
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU backend runs here";
  EXPECT_EQ(r.exit_code, 2);
  // Either this kvtwin has no CUDA backend, or it has one and there is no device.
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("GPU backend not built"), HasSubstr("no CUDA device")));
  EXPECT_THAT(r.err, HasSubstr("use --backend model"));
}

TEST(RecordCli, RecordingIsByteIdenticalAndReplaysClean) {
  const fs::path dir = scratch();
  const std::vector<std::string> common = {"--from",        source("traces/samples/mooncake_conversation_head.jsonl"),
                                           "--model",       "gpt-oss-20b",
                                           "--tp",          "8",
                                           "--page-size",   "16",
                                           "--pool-bytes",  "32MiB",
                                           "--token-scale", "32",
                                           "--requests",    "25",
                                           "--mode",        "lazy",
                                           "--quiet"};
  std::vector<std::string> a = {"record", "--out", (dir / "a.jsonl").string()};
  std::vector<std::string> b = {"record", "--out", (dir / "b.jsonl").string()};
  a.insert(a.end(), common.begin(), common.end());
  b.insert(b.end(), common.begin(), common.end());
  CliRun ra = kvtwin(a);
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_THAT(ra.out, HasSubstr("requests served 25 of 25"));
  EXPECT_THAT(ra.out, HasSubstr("host tier: none (--host-bytes 0)"));
  EXPECT_THAT(ra.out, HasSubstr("token scale 32"));
  CliRun rb = kvtwin(b);
  ASSERT_EQ(rb.exit_code, 0);
  EXPECT_EQ(read_file(dir / "a.jsonl"), read_file(dir / "b.jsonl"));
  CliRun replay = kvtwin({"replay", (dir / "a.jsonl").string(), "--quiet"});
  EXPECT_EQ(replay.exit_code, 0) << replay.out << replay.err;
  CliRun pool = kvtwin({"record", "--from", (dir / "a.jsonl").string(), "--out", (dir / "c.jsonl").string()});
  EXPECT_EQ(pool.exit_code, 2);
  EXPECT_THAT(pool.err, HasSubstr("is already a pool trace"));
}

TEST(ReplayCli, ARequestTraceIsSimulatedAndCheckedInOneGo) {
  CliRun r = kvtwin({"replay", source("traces/samples/azure_code_head.csv"), "--model", "gpt-oss-20b", "--tp", "8",
                     "--pool-bytes", "16MiB", "--token-scale", "4", "--requests", "40", "--quiet", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("(azure request trace, 40 requests, token scale 4"));
  EXPECT_THAT(r.out, HasSubstr("peak occupancy: full "));
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find("\n{") + 1));
  EXPECT_EQ(j["serving"]["requests_served"], 40);
  EXPECT_EQ(j["serving"]["host"]["pages"], 0);
  EXPECT_EQ(j["parameters"]["host_tier"], "none");
  EXPECT_GT(j["serving"]["swa_freed_pages"].get<int>(), 0);
  EXPECT_EQ(j["parameters"]["token_scale"], 4);
}

// --block-tokens sets the hash_ids block size of a request trace for replay and record;
// --share-within-step turns same-step prefix sharing on or off. Bad values name the option.
TEST(ReplayCli, BlockTokensAndSameStepSharingAreOptionsOfReplayAndRecord) {
  const fs::path dir = scratch();
  const fs::path requests = dir / "blocks64.jsonl";
  {
    std::ofstream out(requests);
    for (int i = 0; i < 6; ++i)
      out << "{\"timestamp\": " << i * 2000 << ", \"input_length\": 200, \"output_length\": 16, \"hash_ids\": [1, 2, 3, "
          << 10 + i << "]}\n";
  }
  const std::vector<std::string> common = {"--model", "llama-3.1-8b", "--tp", "8", "--pool-bytes", "16MiB",
                                           "--token-scale", "4", "--quiet", "--block-tokens", "64"};
  std::vector<std::string> replay = {"replay", requests.string(), "--json", "-"};
  replay.insert(replay.end(), common.begin(), common.end());
  CliRun r = kvtwin(replay);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("64-token prefix blocks, shared within a step: on"));
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find("\n{") + 1));
  EXPECT_EQ(j["parameters"]["block_tokens"], 64);
  EXPECT_EQ(j["parameters"]["share_within_step"], true);
  // Three 64-token blocks of 200 tokens are shared: the five later requests reuse 3 * 16 scaled tokens each.
  EXPECT_EQ(j["serving"]["cached_tokens"], 5 * 48);

  std::vector<std::string> record = {"record", "--from", requests.string(), "--out", (dir / "pool.jsonl").string(),
                                     "--share-within-step", "off"};
  record.insert(record.end(), common.begin(), common.end());
  CliRun rec = kvtwin(record);
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  EXPECT_THAT(read_file(dir / "pool.jsonl"), HasSubstr("\"block_tokens\":64"));
  EXPECT_THAT(rec.out, HasSubstr("shared within a step: off"));

  // Without the option the hashes do not match Mooncake's 512-token blocks, and the error says so.
  CliRun default_size = kvtwin({"replay", requests.string(), "--quiet"});
  EXPECT_EQ(default_size.exit_code, 2);
  EXPECT_THAT(default_size.err, HasSubstr("a trace with other blocks needs --block-tokens N"));
  CliRun zero = kvtwin({"replay", requests.string(), "--block-tokens", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--block-tokens"));
  CliRun indivisible = kvtwin({"replay", requests.string(), "--block-tokens", "64", "--token-scale", "128"});
  EXPECT_EQ(indivisible.exit_code, 2);
  EXPECT_THAT(indivisible.err, HasSubstr("does not divide the trace's 64-token prefix blocks (--block-tokens 64)"));
  CliRun azure = kvtwin({"record", "--from", source("traces/samples/azure_code_head.csv"), "--out",
                         (dir / "azure.jsonl").string(), "--block-tokens", "64"});
  EXPECT_EQ(azure.exit_code, 2);
  EXPECT_THAT(azure.err, HasSubstr("--block-tokens 64: "));
  EXPECT_THAT(azure.err, HasSubstr("has no prefix hashes"));
  CliRun share = kvtwin({"replay", requests.string(), "--block-tokens", "64", "--share-within-step", "maybe"});
  EXPECT_EQ(share.exit_code, 2);
  EXPECT_THAT(share.err, HasSubstr("--share-within-step 'maybe' is neither on nor off"));
  CliRun entries = kvtwin({"replay", requests.string(), "--block-tokens", "64", "--entries", "half"});
  EXPECT_EQ(entries.exit_code, 2);
  EXPECT_THAT(entries.err, HasSubstr("--entries 'half' is not auto, full or shrunk"));
}

TEST(FuzzCli, APlantedFailureIsFoundShrunkWrittenAndReplaysAlone) {
  const fs::path dir = scratch();
  CliRun f = kvtwin({"fuzz", "--fault", "model_pairing_out_of_order", "--cases", "300", "--seed", "3", "--out",
                     dir.string(), "--quiet", "--html", (dir / "fuzz.html").string()});
  ASSERT_EQ(f.exit_code, 1) << f.out << f.err;
  EXPECT_EQ(f.out.rfind("kvtwin fuzz: seed 3\n", 0), 0u) << "the seed is printed first";
  EXPECT_THAT(f.out, HasSubstr("shrunk "));
  const std::string marker = "reproduce: ";
  const std::size_t at = f.out.find(marker);
  ASSERT_NE(at, std::string::npos) << f.out;
  const std::string command = f.out.substr(at + marker.size(), f.out.find('\n', at) - at - marker.size());
  // "kvtwin replay PATH --backend model --fault model_pairing_out_of_order"
  std::istringstream words(command);
  std::vector<std::string> args;
  for (std::string w; words >> w;) args.push_back(w);
  ASSERT_GE(args.size(), 3u);
  ASSERT_EQ(args[0], "kvtwin");
  args.erase(args.begin());
  ASSERT_TRUE(fs::exists(args[1])) << args[1];
  CliRun again = kvtwin(args);
  EXPECT_EQ(again.exit_code, 1) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("check failed"));
  CliRun clean = kvtwin({"replay", args[1]});
  EXPECT_EQ(clean.exit_code, 0) << "the trace passes on the model alone" << clean.out;
  // The page names the same reproduce command and draws the shrunk failure.
  const std::string html = read_file(dir / "fuzz.html");
  EXPECT_THAT(html, HasSubstr(command));
  EXPECT_THAT(html, HasSubstr("id=\"replay-failure-strips\""));
}

TEST(FuzzCli, CleanRunsPassAndBadUsageExitsTwo) {
  CliRun ok = kvtwin({"fuzz", "--cases", "15", "--seed", "9", "--quiet", "--json", "-"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_EQ(ok.out.rfind("kvtwin fuzz: seed 9\n", 0), 0u);
  EXPECT_THAT(ok.out, HasSubstr("15 cases, 3015 ops"));
  CliRun named = kvtwin({"fuzz", "--cases", "2", "--config", "mimo-v2-flash/ps4/lazy", "--quiet"});
  EXPECT_EQ(named.exit_code, 0) << named.out << named.err;
  CliRun both = kvtwin({"fuzz", "--cases", "2", "--seconds", "2"});
  EXPECT_EQ(both.exit_code, 2);
  CliRun config = kvtwin({"fuzz", "--config", "llama-9b"});
  EXPECT_EQ(config.exit_code, 2);
  EXPECT_THAT(config.out, HasSubstr("kvtwin fuzz: seed 1")) << "the seed comes first even then";
  EXPECT_THAT(config.err, HasSubstr("unknown model 'llama-9b'"));
  CliRun shard = kvtwin({"fuzz", "--shard-index", "2", "--shard-count", "2"});
  EXPECT_EQ(shard.exit_code, 2);
  EXPECT_THAT(shard.err, HasSubstr("0 <= I < N"));
}

TEST(FuzzCli, ShardsSplitTheCasesOfOneRun) {
  CliRun s0 = kvtwin({"fuzz", "--cases", "9", "--quiet", "--shard-index", "0", "--shard-count", "3"});
  CliRun s1 = kvtwin({"fuzz", "--cases", "9", "--quiet"}, "GTEST_SHARD_INDEX=1 GTEST_TOTAL_SHARDS=3");
  EXPECT_EQ(s0.exit_code, 0);
  EXPECT_EQ(s1.exit_code, 0);
  EXPECT_THAT(s0.out, HasSubstr("shard 0 of 3"));
  EXPECT_THAT(s0.out, HasSubstr("3 cases, 603 ops"));
  EXPECT_THAT(s1.out, HasSubstr("shard 1 of 3"));
}

// Counts elements and checks the document is well-formed XML.
struct XmlCount {
  int testcases = 0, skipped = 0, failures = 0;
};

XmlCount parse_junit(const std::string& text) {
  XmlCount c;
  XML_Parser p = XML_ParserCreate(nullptr);
  XML_SetUserData(p, &c);
  XML_SetStartElementHandler(p, [](void* data, const XML_Char* name, const XML_Char**) {
    auto* count = static_cast<XmlCount*>(data);
    const std::string n = name;
    if (n == "testcase") ++count->testcases;
    if (n == "skipped") ++count->skipped;
    if (n == "failure") ++count->failures;
  });
  const bool ok = XML_Parse(p, text.data(), static_cast<int>(text.size()), 1) == XML_STATUS_OK;
  XML_ParserFree(p);
  EXPECT_TRUE(ok) << "the JUnit report is not well-formed XML";
  return c;
}

// An existing folder with no traces in it: the request parts skip by name.
std::string empty_dir(const fs::path& dir) {
  fs::create_directories(dir / "empty");
  return (dir / "empty").string();
}

TEST(CheckCli, AFolderNamedOnTheCommandLineMustExist) {
  const fs::path dir = scratch();
  for (const char* flag : {"--traces-dir", "--samples-dir", "--regress-dir", "--regress-large-dir"}) {
    CliRun r = kvtwin({"check", flag, (dir / "absent").string(), "--quiet"});
    EXPECT_EQ(r.exit_code, 2) << flag << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(std::string(flag) + " " + (dir / "absent").string() + " is not a folder")) << r.err;
  }
}

TEST(CheckCli, ASmallGateRunsSkipsByNameAndWritesReports) {
  const fs::path dir = scratch();
  CliRun r = kvtwin({"check", "--cases", "1", "--random-cases", "3", "--ops", "60", "--traces-dir",
                     empty_dir(dir), "--samples-dir", empty_dir(dir), "--junit",
                     (dir / "junit.xml").string(), "--json", (dir / "check.json").string(), "--html",
                     (dir / "check.html").string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("kvtwin check: seed 1\n", 0), 0u);
  const std::string html = read_file(dir / "check.html");
  EXPECT_THAT(html, HasSubstr("kvtwin check: the gate <span class=\"verdict pass\">PASS</span>"));
  EXPECT_THAT(html, HasSubstr("<td>properties (model)</td>"));
  EXPECT_THAT(r.out, HasSubstr("SKIP requests: shared/mooncake deepseek-v2-lite lazy (MLA): "));
  EXPECT_THAT(r.out, HasSubstr("conversation_trace.jsonl not found"));
  EXPECT_THAT(r.out, HasSubstr("kvtwin check: PASS ("));
  EXPECT_THAT(r.out, HasSubstr("work items skipped: see SKIP above)")) << "the last line says what was not checked";
  EXPECT_THAT(r.out, HasSubstr("part "));
  if (r.out.find("SKIP properties: gpu") != std::string::npos) {
    EXPECT_THAT(r.out, ::testing::AnyOf(HasSubstr("GPU backend not built"), HasSubstr("no CUDA device")));
  }
  const nlohmann::json j = nlohmann::json::parse(read_file(dir / "check.json"));
  EXPECT_EQ(j["passed"], true);
  std::set<std::string> parts;
  int passed = 0, skipped = 0;
  for (const auto& item : j["items"]) {
    parts.insert(item["part"].get<std::string>());
    passed += item["state"] == "passed";
    skipped += item["state"] == "skipped";
  }
  EXPECT_EQ(parts, (std::set<std::string>{"properties", "regress", "requests"}));
  EXPECT_GE(passed, 19);  // random and every catalogue configuration, at least
  EXPECT_GE(skipped, 4);  // the samples and the shared slices here, at least
  const XmlCount x = parse_junit(read_file(dir / "junit.xml"));
  EXPECT_EQ(x.testcases, static_cast<int>(j["items"].size()));
  EXPECT_EQ(x.skipped, skipped);
  EXPECT_EQ(x.failures, 0);
}

// KVTWIN_GATE_NICE (how much lower the threads off the gate's critical path run): a value outside
// 0..19 is said once and the default used; the results are the same with every value.
TEST(CheckCli, AGateNiceOutsideItsRangeIsSaidOnceAndChangesNoResult) {
  const fs::path dir = scratch();
  const std::vector<std::string> args = {"check", "--cases", "1", "--random-cases", "1", "--ops", "20",
                                         "--traces-dir", empty_dir(dir), "--samples-dir", empty_dir(dir),
                                         "--quiet"};
  const auto digest = [](const std::string& out) {
    const std::size_t at = out.find("digest ");
    return at == std::string::npos ? std::string() : out.substr(at, 23);
  };
  CliRun bad = kvtwin(args, "KVTWIN_GATE_NICE=high");
  ASSERT_EQ(bad.exit_code, 0) << bad.out << bad.err;
  const std::string said = "kvtwin check: KVTWIN_GATE_NICE='high' is not a whole number from 0 to 19; using 10\n";
  EXPECT_THAT(bad.err, HasSubstr(said));
  EXPECT_EQ(bad.err.find(said), bad.err.rfind(said)) << "said once, not once a thread";
  CliRun off = kvtwin(args, "KVTWIN_GATE_NICE=0");
  ASSERT_EQ(off.exit_code, 0) << off.out << off.err;
  EXPECT_THAT(off.err, Not(HasSubstr("KVTWIN_GATE_NICE")));
  CliRun lowest = kvtwin(args, "KVTWIN_GATE_NICE=19");
  ASSERT_EQ(lowest.exit_code, 0) << lowest.out << lowest.err;
  EXPECT_FALSE(digest(off.out).empty()) << off.out;
  EXPECT_EQ(digest(bad.out), digest(off.out));
  EXPECT_EQ(digest(lowest.out), digest(off.out));
}

// KVTWIN_PROFILE=1: after the items, each part's item-seconds and when its last item ended, and
// the item that ended last (the part that bounds the run's wall).
TEST(CheckCli, TheProfileNamesWhenEachPartEndedAndTheLastItem) {
  const fs::path dir = scratch();
  CliRun r = kvtwin({"check", "--cases", "1", "--random-cases", "1", "--ops", "20", "--traces-dir", empty_dir(dir),
                     "--samples-dir", empty_dir(dir), "--quiet"},
                    "KVTWIN_PROFILE=1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"properties", "regress", "requests"})
    EXPECT_THAT(r.err, ::testing::ContainsRegex(std::string("kvtwin profile: part ") + part +
                                                ": [0-9]+ items, [0-9.]+ item-seconds, the last ended at [0-9.]+ s \\("))
        << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex("kvtwin profile: the last item to end: [a-z]+: .* \\(started at [0-9.]+ "
                                              "s, ended at [0-9.]+ s\\)"))
      << r.err;
  CliRun quiet = kvtwin({"check", "--cases", "1", "--random-cases", "1", "--ops", "20", "--traces-dir", empty_dir(dir),
                         "--samples-dir", empty_dir(dir), "--quiet"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
  EXPECT_THAT(quiet.err, Not(HasSubstr("kvtwin profile:"))) << "only with KVTWIN_PROFILE";
}

TEST(CheckCli, ShardsPartitionTheWorkAndBadUsageExitsTwo) {
  const fs::path dir = scratch();
  std::set<std::string> seen;
  std::size_t total = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string json = (dir / ("s" + std::to_string(i) + ".json")).string();
    CliRun r = kvtwin({"check", "--cases", "1", "--random-cases", "1", "--ops", "20", "--traces-dir",
                       empty_dir(dir), "--samples-dir", empty_dir(dir), "--shard-index",
                       std::to_string(i), "--shard-count", "2", "--json", json, "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json report = nlohmann::json::parse(read_file(json));
    for (const auto& item : report["items"]) {
      seen.insert(item["part"].get<std::string>() + "/" + item["name"].get<std::string>() + "/" +
                  item["backend"].get<std::string>());
      ++total;
    }
  }
  EXPECT_EQ(seen.size(), total) << "no item runs on two shards";
  CliRun whole =
      kvtwin({"check", "--cases", "1", "--random-cases", "1", "--ops", "20", "--traces-dir", empty_dir(dir),
              "--samples-dir", empty_dir(dir), "--json", (dir / "all.json").string(), "--quiet"});
  ASSERT_EQ(whole.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "all.json"))["items"].size(), total) << "and none is lost";
  CliRun bad = kvtwin({"check", "--backend", "fpga"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown backend 'fpga'"));
  CliRun no_dir = kvtwin({"check", "--regress-dir", (dir / "absent").string()});
  EXPECT_EQ(no_dir.exit_code, 2);
}

TEST(CheckCli, ResultsDoNotDependOnTheNumberOfThreads) {
  const fs::path dir = scratch();
  std::vector<nlohmann::json> reports;
  for (const char* jobs : {"1", "2"}) {
    const std::string json = (dir / (std::string("j") + jobs + ".json")).string();
    CliRun r = kvtwin({"check", "--cases", "1", "--random-cases", "4", "--ops", "50", "--traces-dir",
                       empty_dir(dir), "--samples-dir", empty_dir(dir), "--jobs", jobs,
                       "--json", json, "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    nlohmann::json j = nlohmann::json::parse(read_file(json));
    for (auto& item : j["items"]) item.erase("seconds");  // the only field that may differ
    reports.push_back(j);
  }
  EXPECT_EQ(reports[0], reports[1]);
}

// Merging shard reports (kvtwin check --merge, kvtwin fuzz --merge).

nlohmann::json without_seconds(nlohmann::json j) {
  for (auto& item : j["items"]) item.erase("seconds");  // durations are the only field that may differ
  return j;
}

// The table's rows without their last column (seconds), and the lines before it.
std::string table_without_seconds(const std::string& out) {
  std::istringstream lines(out);
  std::string text;
  bool inside = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("SKIP ", 0) == 0 || line.rfind("FAIL ", 0) == 0 || line.rfind("  ", 0) == 0) text += line + "\n";
    if (line.rfind("part ", 0) == 0) inside = true;
    if (inside) text += line.substr(0, line.rfind(' ')) + "\n";
  }
  return text;
}

std::vector<std::string> check_args(const fs::path& dir, std::vector<std::string> more) {
  fs::create_directories(dir / "empty");
  std::vector<std::string> args = {"check",         "--cases", "1", "--random-cases",     "1",  "--ops", "20",
                                   "--traces-dir",  (dir / "empty").string(), "--samples-dir", (dir / "empty").string(),
                                   "--quiet"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> shard_args(int index, int count, const std::string& json) {
  return {"--shard-index", std::to_string(index), "--shard-count", std::to_string(count), "--json", json};
}

TEST(CheckCli, MergedShardsEqualTheUnshardedRun) {
  const fs::path dir = scratch();
  for (int i = 0; i < 3; ++i) {
    CliRun r = kvtwin(check_args(dir, shard_args(i, 3, (dir / ("s" + std::to_string(i) + ".json")).string())));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  CliRun whole = kvtwin(
      check_args(dir, {"--json", (dir / "whole.json").string(), "--junit", (dir / "whole.xml").string()}));
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  // Given in any order.
  CliRun merged = kvtwin({"check", "--merge", (dir / "s2.json").string(), (dir / "s0.json").string(),
                          (dir / "s1.json").string(), "--json", (dir / "merged.json").string(), "--junit",
                          (dir / "merged.xml").string()});
  ASSERT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_THAT(merged.out, HasSubstr("kvtwin check: seed 1, merging 3 shard reports"));
  // The same last line as the unsharded run's ("PASS (N of M work items skipped: ...)").
  const std::string last_line = whole.out.substr(whole.out.rfind("\nkvtwin check: "));
  EXPECT_THAT(last_line, HasSubstr("work items skipped: see SKIP above)"));
  EXPECT_THAT(merged.out, HasSubstr(last_line));
  const nlohmann::json whole_json = nlohmann::json::parse(read_file(dir / "whole.json"));
  const nlohmann::json merged_json = nlohmann::json::parse(read_file(dir / "merged.json"));
  EXPECT_EQ(without_seconds(merged_json), without_seconds(whole_json));
  EXPECT_EQ(merged_json["shard_count"], 1);
  EXPECT_GE(merged_json["items"].size(), 30u);
  EXPECT_EQ(table_without_seconds(merged.out), table_without_seconds(whole.out));
  // "random" and two configurations per catalogue model (12 of them).
  EXPECT_THAT(table_without_seconds(merged.out), HasSubstr("properties (model)         25     25"));
  const XmlCount merged_xml = parse_junit(read_file(dir / "merged.xml"));
  const XmlCount whole_xml = parse_junit(read_file(dir / "whole.xml"));
  EXPECT_EQ(merged_xml.testcases, whole_xml.testcases);
  EXPECT_EQ(merged_xml.skipped, whole_xml.skipped);
  EXPECT_EQ(merged_xml.failures, 0);
  // A whole run's report is one complete shard: merging it alone gives it back.
  CliRun alone = kvtwin({"check", "--merge", (dir / "whole.json").string(), "--json", "-"});
  ASSERT_EQ(alone.exit_code, 0) << alone.out << alone.err;
  EXPECT_EQ(without_seconds(nlohmann::json::parse(alone.out.substr(alone.out.find("\n{") + 1))),
            without_seconds(whole_json));
}

TEST(CheckCli, AMergeOfShardsThatAreNotOneWholeRunExitsTwoNamingWhy) {
  const fs::path dir = scratch();
  const auto shard = [&](int i) { return (dir / ("s" + std::to_string(i) + ".json")).string(); };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(kvtwin(check_args(dir, shard_args(i, 3, shard(i)))).exit_code, 0);
  CliRun missing = kvtwin({"check", "--merge", shard(0), shard(2)});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("shard 1 of 3 is missing"));
  CliRun twice = kvtwin({"check", "--merge", shard(0), shard(1), shard(2), shard(1)});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("shard 1 of 3 is given twice: " + shard(1) + " and " + shard(1)));
  // A shard of another seed, of other options, of another number of shards.
  const std::string other_seed = (dir / "seed2.json").string();
  ASSERT_EQ(kvtwin(check_args(dir, {"--seed", "2", "--shard-index", "1", "--shard-count", "3", "--json", other_seed}))
                .exit_code,
            0);
  CliRun seed = kvtwin({"check", "--merge", shard(0), other_seed, shard(2)});
  EXPECT_EQ(seed.exit_code, 2);
  EXPECT_THAT(seed.err, HasSubstr(shard(0) + " and " + other_seed + " differ in /seed (1 and 2)"));
  nlohmann::json edited = nlohmann::json::parse(read_file(shard(1)));
  edited["options"]["ops"] = 21;
  std::ofstream(dir / "ops21.json") << edited.dump();
  CliRun ops = kvtwin({"check", "--merge", shard(0), (dir / "ops21.json").string(), shard(2)});
  EXPECT_EQ(ops.exit_code, 2);
  EXPECT_THAT(ops.err, HasSubstr("differ in /options/ops (20 and 21)"));
  CliRun count = kvtwin({"check", "--merge", shard(0), shard(1), shard(2), (dir / "other.json").string()});
  EXPECT_EQ(count.exit_code, 2) << "a file that does not exist";
  EXPECT_THAT(count.err, HasSubstr((dir / "other.json").string() + ": cannot open the report"));
  // A report cut short, and one written by another command.
  edited = nlohmann::json::parse(read_file(shard(1)));
  edited["items"].erase(edited["items"].size() - 1);
  std::ofstream(dir / "short.json") << edited.dump();
  CliRun cut = kvtwin({"check", "--merge", shard(0), (dir / "short.json").string(), shard(2)});
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_THAT(cut.err, HasSubstr("is not in the report of shard 1 (cut short?)"));
  ASSERT_EQ(kvtwin({"fuzz", "--cases", "2", "--quiet", "--json", (dir / "fuzz.json").string()}).exit_code, 0);
  CliRun fuzz = kvtwin({"check", "--merge", (dir / "fuzz.json").string()});
  EXPECT_EQ(fuzz.exit_code, 2);
  EXPECT_THAT(fuzz.err, HasSubstr("field /report: is 'kvtwin fuzz'"));
  CliRun with_run_option = kvtwin({"check", "--merge", shard(0), shard(1), shard(2), "--cases", "3"});
  EXPECT_EQ(with_run_option.exit_code, 2);
  EXPECT_THAT(with_run_option.err, HasSubstr("--cases is an option of a run"));
}

TEST(CheckCli, AFailureInOneShardFailsTheMergeWithItsReproduceCommand) {
  const fs::path dir = scratch();
  // Two regression traces: the docs' example, and a copy whose line 3 expects another page.
  fs::create_directories(dir / "regress");
  const std::string clean = read_file(docs_example(dir));
  std::string broken = clean;
  const std::string expect = R"("expect":{"pages":[3]})";
  ASSERT_NE(broken.find(expect), std::string::npos);
  broken.replace(broken.find(expect), expect.size(), R"("expect":{"pages":[4]})");
  std::ofstream(dir / "regress" / "broken.jsonl") << broken;
  std::ofstream(dir / "regress" / "example.jsonl") << clean;
  const std::string regress = (dir / "regress").string();
  int failed_shards = 0;
  for (int i = 0; i < 2; ++i) {
    CliRun r = kvtwin(check_args(
        dir, {"--regress-dir", regress, "--shard-index", std::to_string(i), "--shard-count", "2", "--json",
              (dir / ("s" + std::to_string(i) + ".json")).string()}));
    ASSERT_LE(r.exit_code, 1) << r.out << r.err;
    failed_shards += r.exit_code;
  }
  EXPECT_EQ(failed_shards, 1) << "the broken trace is one item, on one shard";
  CliRun whole = kvtwin(check_args(dir, {"--regress-dir", regress, "--json", (dir / "whole.json").string()}));
  ASSERT_EQ(whole.exit_code, 1) << whole.out << whole.err;
  CliRun merged = kvtwin({"check", "--merge", (dir / "s0.json").string(), (dir / "s1.json").string(), "--json",
                          (dir / "merged.json").string(), "--junit", (dir / "merged.xml").string()});
  EXPECT_EQ(merged.exit_code, 1) << merged.out << merged.err;
  EXPECT_THAT(merged.out, HasSubstr("FAIL regress: broken.jsonl (model)"));
  EXPECT_THAT(merged.out, HasSubstr("  reproduce: kvtwin replay " + (dir / "regress" / "broken.jsonl").string() +
                                    " --backend model\n"));
  EXPECT_THAT(merged.out, HasSubstr("\nkvtwin check: FAIL\n"));
  EXPECT_EQ(table_without_seconds(merged.out), table_without_seconds(whole.out));
  EXPECT_EQ(without_seconds(nlohmann::json::parse(read_file(dir / "merged.json"))),
            without_seconds(nlohmann::json::parse(read_file(dir / "whole.json"))));
  EXPECT_EQ(parse_junit(read_file(dir / "merged.xml")).failures, 1);
}

std::vector<std::string> fuzz_args(std::vector<std::string> more) {
  std::vector<std::string> args = {"fuzz", "--cases", "12", "--ops", "30", "--seed", "9", "--quiet"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(FuzzCli, MergedShardsEqualTheUnshardedRunAndOthersExitTwo) {
  const fs::path dir = scratch();
  const auto shard = [&](int i) { return (dir / ("s" + std::to_string(i) + ".json")).string(); };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(kvtwin(fuzz_args(shard_args(i, 3, shard(i)))).exit_code, 0);
  CliRun whole = kvtwin(fuzz_args({"--json", (dir / "whole.json").string()}));
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  CliRun merged = kvtwin({"fuzz", "--merge", shard(1), shard(2), shard(0), "--json", (dir / "merged.json").string(),
                          "--junit", (dir / "merged.xml").string()});
  ASSERT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_EQ(read_file(dir / "merged.json"), read_file(dir / "whole.json")) << "a fuzz report has no durations";
  const nlohmann::json j = nlohmann::json::parse(read_file(dir / "merged.json"));
  EXPECT_EQ(j["cases"], 12);
  EXPECT_EQ(j["shard_count"], 1);
  const std::string totals = whole.out.substr(whole.out.find("12 cases, "));
  EXPECT_EQ(merged.out.substr(merged.out.find("12 cases, ")), totals);  // the totals and "kvtwin fuzz: PASS"
  EXPECT_THAT(totals, HasSubstr("kvtwin fuzz: PASS"));
  EXPECT_EQ(parse_junit(read_file(dir / "merged.xml")).failures, 0);

  CliRun missing = kvtwin({"fuzz", "--merge", shard(1)});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("shards 0, 2 of 3 are missing"));
  CliRun twice = kvtwin({"fuzz", "--merge", shard(0), shard(0), shard(1), shard(2)});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("shard 0 of 3 is given twice"));
  const std::string other_ops = (dir / "ops31.json").string();
  ASSERT_EQ(kvtwin({"fuzz", "--cases", "12", "--ops", "31", "--seed", "9", "--quiet", "--shard-index", "2",
                    "--shard-count", "3", "--json", other_ops})
                .exit_code,
            0);
  CliRun ops = kvtwin({"fuzz", "--merge", shard(0), shard(1), other_ops});
  EXPECT_EQ(ops.exit_code, 2);
  EXPECT_THAT(ops.err, HasSubstr(shard(0) + " and " + other_ops + " differ in /options/ops (30 and 31)"));
  const std::string other_config = (dir / "config.json").string();
  ASSERT_EQ(kvtwin({"fuzz", "--cases", "12", "--ops", "30", "--seed", "9", "--quiet", "--config", "qwen3-8b",
                    "--shard-index", "2", "--shard-count", "3", "--json", other_config})
                .exit_code,
            0);
  CliRun config = kvtwin({"fuzz", "--merge", shard(0), shard(1), other_config});
  EXPECT_EQ(config.exit_code, 2);
  EXPECT_THAT(config.err, HasSubstr("differ in /config (\"random\" and \"qwen3-8b\")"));
  CliRun with_run_option = kvtwin({"fuzz", "--merge", shard(0), shard(1), shard(2), "--seed", "4"});
  EXPECT_EQ(with_run_option.exit_code, 2);
  EXPECT_THAT(with_run_option.err, HasSubstr("--seed is an option of a run"));
}

TEST(FuzzCli, AFailureInOneShardFailsTheMergeWithItsReproduceCommand) {
  const fs::path dir = scratch();
  // Seed 5 with this fault: case 0 fails, case 1 passes. Shard 0 of 2 runs case 0, shard 1 case 1.
  const auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"fuzz",    "--fault", "model_pairing_out_of_order", "--seed", "5", "--cases", "3",
                                     "--quiet", "--out",   (dir / "failures").string()};
    args.insert(args.end(), more.begin(), more.end());
    return kvtwin(args);
  };
  EXPECT_EQ(run(shard_args(0, 2, (dir / "s0.json").string())).exit_code, 1);
  EXPECT_EQ(run(shard_args(1, 2, (dir / "s1.json").string())).exit_code, 0);
  CliRun whole = run({"--json", (dir / "whole.json").string()});
  ASSERT_EQ(whole.exit_code, 1) << whole.out << whole.err;
  CliRun merged = kvtwin({"fuzz", "--merge", (dir / "s0.json").string(), (dir / "s1.json").string(), "--json",
                          (dir / "merged.json").string(), "--junit", (dir / "merged.xml").string()});
  EXPECT_EQ(merged.exit_code, 1) << merged.out << merged.err;
  const nlohmann::json m = nlohmann::json::parse(read_file(dir / "merged.json"));
  const nlohmann::json w = nlohmann::json::parse(read_file(dir / "whole.json"));
  ASSERT_EQ(m["failures"].size(), 1u);
  EXPECT_EQ(m["failures"], w["failures"]) << "the failure the unsharded run stops at, with its commands";
  EXPECT_EQ(m["passed"], false);
  EXPECT_EQ(m["cases"], 2) << "shard 0 stopped at case 0; shard 1 ran case 1";
  const std::string replay = w["failures"][0]["replay"];
  EXPECT_THAT(replay, HasSubstr("kvtwin replay " + (dir / "failures").string()));
  EXPECT_THAT(merged.out, HasSubstr("\nreproduce: " + replay + "\n"));
  EXPECT_THAT(merged.out, HasSubstr("\nreproduce the case: kvtwin fuzz --seed 5 --case 0 "));
  EXPECT_THAT(merged.out, HasSubstr("\nkvtwin fuzz: FAIL\n"));
  EXPECT_EQ(parse_junit(read_file(dir / "merged.xml")).failures, 1);
}

}  // namespace
