// An interrupted run leaves no torn output: kvtwin is started on a long run, interrupted (SIGINT,
// SIGTERM) once it is writing, and must die of that signal, say on stderr what was written and
// what was not, leave an output it was rewriting exactly as it was, and leave no temporary file.
// The signal is sent only once the run's temporary output exists (or its first line is printed),
// so the test does not depend on how fast the machine is.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cli/scratch_folder.h"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch() { return kvtwin::cli_test::scratch_folder("kvtwin-interrupt"); }

std::string binary() {
  const char* dir = std::getenv("KVTWIN_BINARY_DIR");
  return std::string(dir != nullptr ? dir : "build/default") + "/tools/kvtwin";
}

// Starts kvtwin with `args`, stdout and stderr to files in `dir`.
pid_t start(const std::vector<std::string>& args, const fs::path& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* out = std::freopen((dir / "stdout.txt").c_str(), "w", stdout);
    std::FILE* err = std::freopen((dir / "stderr.txt").c_str(), "w", stderr);
    if (out == nullptr || err == nullptr) ::_exit(127);
    std::vector<char*> argv;
    std::string bin = binary();
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits (up to a minute) until `ready` holds; false if the process ended first.
template <class F>
bool wait_until(pid_t pid, F ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// The temporary files of outputs being written (".tmp-"); with `probes`, also those of the
// writability probes made while the options are checked (".probe-"), which must never be
// mistaken for an output in progress: an interrupt then finds nothing open.
std::vector<std::string> temporaries(const fs::path& dir, bool probes = false) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || (probes && name.find(".probe-") != std::string::npos))
      found.push_back(e.path().string());
  }
  return found;
}

TEST(InterruptCli, AnInterruptedRecordLeavesTheOldTraceAndSaysSo) {
  const fs::path dir = scratch();
  const fs::path requests = dir / "requests.jsonl";
  {
    std::ofstream out(requests);
    for (int i = 0; i < 20000; ++i)
      out << "{\"timestamp\": " << i << ", \"input_length\": 600, \"output_length\": 40, \"hash_ids\": [0, "
          << (1 + i % 7) << "]}\n";
  }
  const fs::path trace = dir / "trace.jsonl";
  std::ofstream(trace) << "the previous recording\n";
  const pid_t pid = start({"record", "--from", requests.string(), "--out", trace.string(), "--model", "llama-3.1-8b",
                           "--tp", "8", "--pool-bytes", "16MiB", "--quiet"},
                          dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_until(pid, [&] { return !temporaries(dir).empty(); }))
      << "the run ended before it wrote:\n" << read_file(dir / "stderr.txt");
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status) << ": " << read_file(dir / "stderr.txt");
  EXPECT_EQ(WTERMSIG(status), SIGINT) << "dies of the signal, as a shell expects";
  const std::string err = read_file(dir / "stderr.txt");
  EXPECT_THAT(err, HasSubstr("kvtwin: interrupted by SIGINT; wrote: nothing; not written (left as it was, or "
                             "absent): " + trace.string()));
  EXPECT_EQ(read_file(trace), "the previous recording\n") << "the old trace, untouched";
  EXPECT_TRUE(temporaries(dir, true).empty()) << "no temporary file left behind";
}

TEST(InterruptCli, ATerminatedCheckWritesNoHalfReport) {
  const fs::path dir = scratch();
  const fs::path json = dir / "check.json";
  const pid_t pid = start({"check", "--json", json.string(), "--junit", (dir / "check.xml").string(), "--cases",
                           "100000", "--jobs", "1", "--quiet"},
                          dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_until(pid, [&] { return read_file(dir / "stdout.txt").find("work items") != std::string::npos; }))
      << read_file(dir / "stderr.txt");
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_THAT(read_file(dir / "stderr.txt"), HasSubstr("kvtwin: interrupted by SIGTERM; wrote: nothing"));
  EXPECT_FALSE(fs::exists(json));
  EXPECT_FALSE(fs::exists(dir / "check.xml"));
  EXPECT_TRUE(temporaries(dir, true).empty());
}

}  // namespace
