// Bad input through the built binary, as a new user would give it: every case ends with exit 2
// and one message that names the command, the option or the file, the line and the field, and
// nothing runs. Negative values for unsigned options, CLI11's own errors, one parser per option
// across commands (the TP cap, byte units, --model/--spec), inputs that are folders, devices or
// binary, outputs that cannot be written or would overwrite the input, and recorded traces that
// were cut short.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cli/scratch_folder.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;  // negative: killed by that signal
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

fs::path scratch() { return kvtwin::cli_test::scratch_folder("kvtwin-bad-input"); }

std::string binary() {
  const char* dir = std::getenv("KVTWIN_BINARY_DIR");
  return std::string(dir != nullptr ? dir : "build/default") + "/tools/kvtwin";
}

std::string source(const std::string& relative) {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/" + relative;
}

CliRun kvtwin(const std::vector<std::string>& args) {
  const fs::path dir = fs::temp_directory_path();
  const fs::path out = dir / ("kvtwin-bad-input-out-" + std::to_string(::getpid()));
  const fs::path err = dir / ("kvtwin-bad-input-err-" + std::to_string(::getpid()));
  std::string cmd = quote(binary());
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

// A small Mooncake request trace: `n` requests, 600-token prompts over two shared blocks.
std::string requests(const fs::path& dir, int n) {
  const fs::path p = dir / "requests.jsonl";
  std::ofstream out(p);
  for (int i = 0; i < n; ++i)
    out << "{\"timestamp\": " << i * 10 << ", \"input_length\": 600, \"output_length\": 20, \"hash_ids\": [0, "
        << (1 + i % 3) << "]}\n";
  return p.string();
}

const std::vector<std::string> kSmallPool = {"--model", "llama-3.1-8b", "--tp", "8", "--pool-bytes", "16MiB",
                                             "--quiet"};

void expect_refused(const CliRun& r, const std::string& command, const std::vector<std::string>& words) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("kvtwin " + command + ": error: "));
  for (const std::string& w : words) EXPECT_THAT(r.err, HasSubstr(w));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one message, one line:\n" << r.err;
  for (char c : r.err) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 || c == '\n') << "a raw byte in:\n" << r.err;
}

TEST(BadInputCli, NegativeValuesForUnsignedOptionsAreRefusedByName) {
  const fs::path dir = scratch();
  const std::string trace = requests(dir, 3);
  struct Case {
    std::vector<std::string> args;
    std::string command, option;
  };
  const std::vector<Case> cases = {
      {{"replay", trace, "--requests", "-5"}, "replay", "--requests '-5'"},
      {{"fuzz", "--cases", "-1"}, "fuzz", "--cases '-1'"},
      {{"check", "--seed", "-1"}, "check", "--seed '-1'"},
      {{"replay", trace, "--page-size", "-16"}, "replay", "--page-size '-16'"},
      {{"record", "--from", trace, "--out", (dir / "o.jsonl").string(), "--decode-step-us", "-1"}, "record",
       "--decode-step-us '-1'"},
      {{"layout", "--model", "llama-3.1-8b", "--tp", "-1"}, "layout", "--tp '-1'"},
      {{"fuzz", "--case", "-3"}, "fuzz", "--case '-3'"},
      {{"check", "--shard-index", "-1", "--shard-count", "2"}, "check", "--shard-index '-1'"},
      {{"check", "--jobs", "-2"}, "check", "--jobs '-2'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option);
    const CliRun r = kvtwin(c.args);
    expect_refused(r, c.command, {c.option, "negative values are refused"});
    EXPECT_EQ(r.out, "") << "nothing ran";
  }
  // Other spellings that CLI11 would have read as something else.
  expect_refused(kvtwin({"replay", trace, "--requests", "0x10"}), "replay", {"--requests '0x10' is not a whole number"});
  expect_refused(kvtwin({"fuzz", "--ops", "1e3"}), "fuzz", {"--ops '1e3' is not a whole number"});
  expect_refused(kvtwin({"check", "--seed", "18446744073709551616"}), "check", {"does not fit in 64 bits"});
}

TEST(BadInputCli, CliElevensOwnMessagesCarryTheCommand) {
  expect_refused(kvtwin({"replay", "x.jsonl", "--bogus"}), "replay", {"--bogus"});
  expect_refused(kvtwin({"fuzz", "--seconds", "1", "--cases", "2"}), "fuzz", {"--seconds excludes --cases"});
  expect_refused(kvtwin({"record", "--from", "x"}), "record", {"--out is required"});
  const CliRun none = kvtwin({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("kvtwin: error: "));
}

TEST(BadInputCli, EveryCommandSharesOneParserPerOption) {
  const fs::path dir = scratch();
  const std::string trace = requests(dir, 3);
  // The TP cap: record refuses what replay would refuse, instead of writing an unreplayable trace.
  const CliRun tp = kvtwin({"record", "--from", trace, "--out", (dir / "tp.jsonl").string(), "--tp", "2000"});
  expect_refused(tp, "record", {"--tp 2000 is too large; at most 1024"});
  EXPECT_FALSE(fs::exists(dir / "tp.jsonl"));
  expect_refused(kvtwin({"layout", "--model", "llama-3.1-8b", "--tp", "2000"}), "layout", {"--tp 2000 is too large"});
  // Byte units: layout takes what replay takes.
  const CliRun gb = kvtwin({"layout", "--model", "llama-3.1-8b", "--total-bytes", "4GB"});
  EXPECT_EQ(gb.exit_code, 0) << gb.err;
  EXPECT_THAT(gb.out, HasSubstr("4000000000"));
  // --spec and --model together: refused by every command, not silently resolved.
  const fs::path spec = dir / "spec.json";
  std::ofstream(spec) << R"({"name": "s", "num_layers": 2, "num_kv_heads": 8, "head_dim": 128})";
  expect_refused(kvtwin({"replay", trace, "--spec", spec.string(), "--model", "llama-3.1-8b"}), "replay",
                 {"give only one of --model and --spec"});
  expect_refused(kvtwin({"record", "--from", trace, "--out", (dir / "x.jsonl").string(), "--spec", spec.string(),
                         "--model", "llama-3.1-8b"}),
                 "record", {"give only one of --model and --spec"});
  expect_refused(kvtwin({"layout", "--spec", spec.string(), "--model", "llama-3.1-8b"}), "layout", {"only one of"});
  // An operation count that would grow memory without bound.
  expect_refused(kvtwin({"fuzz", "--ops", "18446744073709551615"}), "fuzz", {"--ops", "is too large; at most 100000"});
}

TEST(BadInputCli, InputsThatAreFoldersDevicesOrBinaryAreRefused) {
  const fs::path dir = scratch();
  expect_refused(kvtwin({"replay", dir.string()}), "replay", {"is a folder"});
  expect_refused(kvtwin({"replay", "/dev/zero", "--format", "pool"}), "replay",
                 {"/dev/zero:1: the line is longer than 16777216 bytes"});
  expect_refused(kvtwin({"replay", "/dev/zero", "--format", "mooncake"}), "replay",
                 {"/dev/zero:1: the line is longer than"});
  expect_refused(kvtwin({"layout", "--spec", "/dev/zero"}), "layout", {"a spec file is at most 1048576 bytes"});
  const fs::path binary_file = dir / "binary.jsonl";
  std::ofstream(binary_file, std::ios::binary) << std::string("\x00\x01\xff\xfe\x1b[2J garbage\n", 14);
  expect_refused(kvtwin({"replay", binary_file.string()}), "replay", {"\\x00\\x01\\xff\\xfe\\x1b[2J"});
  // A Mooncake file whose first line is bad JSON: placed, not "unsupported".
  const fs::path broken = dir / "broken.jsonl";
  std::ofstream(broken) << "{\"timestamp\": 0, \"input_length\": 600 \"output_length\": 5}\n";
  expect_refused(kvtwin({"replay", broken.string()}), "replay", {"broken.jsonl:1: malformed JSON at column 52"});
  // A repeated key, where the last one used to win silently.
  const fs::path twice = dir / "twice.jsonl";
  std::ofstream(twice) << "{\"timestamp\": 0, \"input_length\": 600, \"input_length\": 6, \"output_length\": 5, "
                          "\"hash_ids\": [0, 1]}\n";
  expect_refused(kvtwin({"replay", twice.string(), "--format", "mooncake"}), "replay",
                 {"twice.jsonl:1: duplicate key 'input_length'"});
}

TEST(BadInputCli, OutputsAreCheckedBeforeTheRun) {
  const fs::path dir = scratch();
  const std::string trace = requests(dir, 3);
  const std::string nowhere = (dir / "no" / "such" / "folder" / "r.json").string();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"replay", trace, "--json", nowhere},
           {"record", "--from", trace, "--out", nowhere},
           {"record", "--from", trace, "--out", (dir / "ok.jsonl").string(), "--json", nowhere},
           {"fuzz", "--cases", "1", "--json", nowhere},
           {"check", "--junit", nowhere},
           {"check", "--json", nowhere},
           {"layout", "--model", "llama-3.1-8b", "--svg", nowhere}}) {
    SCOPED_TRACE(args[0] + " " + args[args.size() - 2]);
    std::vector<std::string> all = args;
    if (args[0] == "replay" || args[0] == "record") all.insert(all.end(), kSmallPool.begin(), kSmallPool.end());
    const CliRun r = kvtwin(all);
    expect_refused(r, args[0], {"cannot write", "does not exist; create it first"});
    EXPECT_THAT(r.out, Not(HasSubstr("PASS"))) << "refused before running, not after";
  }
  EXPECT_FALSE(fs::exists(dir / "ok.jsonl")) << "nothing is written when the run is refused";
}

TEST(BadInputCli, RecordNeverOverwritesItsInputAndLeavesNoHalfFile) {
  const fs::path dir = scratch();
  const std::string trace = requests(dir, 3);
  const std::string before = read_file(trace);
  std::vector<std::string> same = {"record", "--from", trace, "--out", trace};
  same.insert(same.end(), kSmallPool.begin(), kSmallPool.end());
  expect_refused(kvtwin(same), "record", {"is the request trace given by --from", "give another --out"});
  std::vector<std::string> same_spelled = {"record", "--from", trace, "--out", (dir / "." / "requests.jsonl").string()};
  same_spelled.insert(same_spelled.end(), kSmallPool.begin(), kSmallPool.end());
  expect_refused(kvtwin(same_spelled), "record", {"would overwrite its input"});
  EXPECT_EQ(read_file(trace), before) << "the request trace is untouched";

  // A recording that fails (a pool that cannot be built) leaves the old output as it was.
  const fs::path out = dir / "out.jsonl";
  std::ofstream(out) << "an earlier recording\n";
  const CliRun failed = kvtwin({"record", "--from", trace, "--out", out.string(), "--model", "llama-3.1-8b",
                                "--pool-bytes", "4096", "--quiet"});
  EXPECT_EQ(failed.exit_code, 2) << failed.err;
  EXPECT_EQ(read_file(out), "an earlier recording\n") << "no header-only file replaces it";
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2u) << "and no temporary file is left beside it";

  // A whole recording ends with its end line; cut short, it is refused, not replayed as a pass.
  std::vector<std::string> ok = {"record", "--from", trace, "--out", out.string()};
  ok.insert(ok.end(), kSmallPool.begin(), kSmallPool.end());
  const CliRun recorded = kvtwin(ok);
  ASSERT_EQ(recorded.exit_code, 0) << recorded.out << recorded.err;
  const std::string text = read_file(out);
  ASSERT_THAT(text, HasSubstr("{\"kvtwin_trace_end\":"));
  EXPECT_EQ(kvtwin({"replay", out.string(), "--quiet"}).exit_code, 0);
  const std::size_t cut = text.rfind('\n', text.size() / 2) + 1;
  const fs::path truncated = dir / "truncated.jsonl";
  std::ofstream(truncated, std::ios::binary) << text.substr(0, cut);
  const CliRun r = kvtwin({"replay", truncated.string(), "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr("without its end line"));
  EXPECT_THAT(r.err, HasSubstr("it is truncated"));
  EXPECT_THAT(r.out, Not(HasSubstr("PASS")));
}

TEST(BadInputCli, TheCommittedVersion1TracesStillReplay) {
  for (const auto& e : fs::directory_iterator(source("traces/regress"))) {
    if (e.path().extension() != ".jsonl") continue;
    SCOPED_TRACE(e.path().filename().string());
    const CliRun r = kvtwin({"replay", e.path().string(), "--quiet"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  }
}

TEST(BadInputCli, TheStorageTiersOptionsAreCheckedAndAStoreThatCannotWriteIsSaidNotFatal) {
  const fs::path dir = scratch();
  const std::string trace = requests(dir, 30);
  std::vector<std::string> args = {"replay", trace};
  args.insert(args.end(), kSmallPool.begin(), kSmallPool.end());
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> all = args;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  expect_refused(kvtwin(with({"--storage-bytes", "1GiB"})), "replay", {"needs a host tier above it", "--host-bytes"});
  expect_refused(kvtwin(with({"--host-bytes", "4MiB", "--storage-dir", dir.string()})), "replay",
                 {"--storage-dir", "without --storage-bytes"});
  expect_refused(kvtwin(with({"--host-bytes", "4MiB", "--storage-bytes", "1KiB"})), "replay",
                 {"cannot hold one", "--storage-bytes"});
  // A working tier, in a folder of the user's: the summary has its line, and the store's folder
  // is gone after the run.
  const fs::path parent = dir / "store";
  fs::create_directories(parent);
  CliRun ok = kvtwin(with({"--host-bytes", "4MiB", "--storage-bytes", "1GiB", "--storage-dir", parent.string()}));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("storage tier: 1073741824 bytes of page files"));
  EXPECT_TRUE(fs::is_empty(parent)) << "the pool's store folder is removed with the pool";
  // A parent that is a file: the tier is off, the run passes, and says why.
  // (20 prefixes of two blocks each, in turn: more than a 4 MiB host holds, so it writes down.)
  const fs::path file = dir / "a-file";
  { std::ofstream(file) << "x"; }
  const fs::path cycling = dir / "cycling.jsonl";
  {
    std::ofstream out(cycling);
    for (int i = 0; i < 60; ++i)
      out << "{\"timestamp\": " << i * 1000 << ", \"input_length\": 1100, \"output_length\": 8, \"hash_ids\": ["
          << 10 * (i % 20) << ", " << 10 * (i % 20) + 1 << ", " << 1000 + i << "]}\n";
  }
  CliRun off = kvtwin({"replay", cycling.string(), "--model", "llama-3.1-8b", "--tp", "8", "--pool-bytes", "2MiB",
                       "--quiet", "--host-bytes", "4MiB", "--storage-bytes", "1GiB", "--storage-dir", file.string(),
                       "--write-policy", "write_back"});
  EXPECT_EQ(off.exit_code, 0) << off.out << off.err;
  EXPECT_THAT(off.out, HasSubstr("storage tier OFF since step"));
  EXPECT_THAT(off.out, HasSubstr("the run went on without it"));
}

}  // namespace
