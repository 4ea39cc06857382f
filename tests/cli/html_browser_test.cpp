// Every kind of HTML report, opened in a real browser: headless Chromium (Debian's `chromium`, or
// `chromium-headless-shell`; $KVTWIN_CHROMIUM names another) loads the page from a file with a
// fresh profile and no network, and the test asks three things:
//   - the page's own self-check (html_report.h) ran and says "ok": every <svg class="chart">
//     drew something (a non-empty bounding box in its marks) and the page raised no error
//     (script errors, console.error, anything its security policy blocked); read from the DOM
//     Chromium dumps after the load;
//   - the browser logged no console message at all (--enable-logging=stderr prints each as a
//     "CONSOLE" line; a kvtwin page logs nothing when it is well);
//   - a screenshot, saved under the build folder ($KVTWIN_BINARY_DIR/html-reports/), so a person
//     can look at it.
// The reports: a request trace through the serving simulator (Mooncake's and Azure's committed
// samples), a pool trace with a planted bug (the failure view), a failing fuzz campaign, and
// the gate with a planted bug (failures with their reproduce commands). Where no browser is
// installed each test skips, saying so.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

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

std::string source(const std::string& relative) {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/" + relative;
}

fs::path binary_dir() {
  const char* dir = std::getenv("KVTWIN_BINARY_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path("build/default");
}

// Where the reports and screenshots go: under the build folder, kept after the test.
fs::path out_dir() {
  const fs::path dir = binary_dir() / "html-reports";
  fs::create_directories(dir);
  return dir;
}

int run_shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The browser: $KVTWIN_CHROMIUM, or the first of Debian's names on the PATH; "" when none.
std::string find_browser() {
  if (const char* env = std::getenv("KVTWIN_CHROMIUM"); env != nullptr && *env != '\0') return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin");
  std::vector<std::string> folders;
  for (std::string d; std::getline(dirs, d, ':');) folders.push_back(d);
  for (const char* name : {"chromium", "chromium-headless-shell", "chromium-browser"})
    for (const std::string& d : folders)
      if (!d.empty() && fs::exists(fs::path(d) / name)) return (fs::path(d) / name).string();
  return "";
}

// Runs kvtwin with `args`; its exit code (output into `log`).
int kvtwin(const std::vector<std::string>& args, const fs::path& log) {
  std::string cmd = quote((binary_dir() / "tools" / "kvtwin").string());
  for (const std::string& a : args) cmd += " " + quote(a);
  return run_shell(cmd + " >" + quote(log.string()) + " 2>&1 </dev/null");
}

struct BrowserRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// One headless Chromium run on a file, with a fresh profile and nothing that reaches out.
BrowserRun chromium(const std::string& browser, const fs::path& page, const std::vector<std::string>& extra) {
  const fs::path profile = fs::temp_directory_path() / ("kvtwin-chromium-profile-" + std::to_string(::getpid()));
  fs::remove_all(profile);
  fs::create_directories(profile);
  const fs::path out = profile.string() + ".out";
  const fs::path err = profile.string() + ".err";
  std::string cmd = "timeout 120 " + quote(browser) +
                    " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                    " --disable-background-networking --disable-component-update --disable-sync"
                    " --enable-logging=stderr --v=0 --user-data-dir=" +
                    quote(profile.string());
  for (const std::string& e : extra) cmd += " " + quote(e);
  cmd += " " + quote("file://" + fs::absolute(page).string());
  BrowserRun r;
  r.exit_code = run_shell(cmd + " >" + quote(out.string()) + " 2>" + quote(err.string()) + " </dev/null");
  r.out = read_file(out);
  r.err = read_file(err);
  fs::remove_all(profile);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// Opens the report in the browser and checks it as the file's comment says.
void expect_opens_clean(const fs::path& page, int min_charts) {
  const std::string browser = find_browser();
  ASSERT_FALSE(browser.empty());
  ASSERT_TRUE(fs::exists(page)) << page;
  EXPECT_LT(fs::file_size(page), 5u << 20) << "a report stays under 5 MiB";

  const BrowserRun dom = chromium(browser, page, {"--dump-dom"});
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  std::smatch m;
  const std::regex selfcheck(R"re(<div id="kvtwin-selfcheck"([^>]*)>([^<]*)<)re");
  ASSERT_TRUE(std::regex_search(dom.out, m, selfcheck)) << "no self-check element in the DOM";
  const std::string attributes = m[1].str();
  const std::string verdict = m[2].str();
  EXPECT_THAT(attributes, HasSubstr("data-status=\"ok\"")) << verdict;
  std::smatch charts;
  ASSERT_TRUE(std::regex_search(attributes, charts, std::regex(R"re(data-charts="(\d+)")re"))) << attributes;
  EXPECT_GE(std::stoi(charts[1].str()), min_charts) << verdict;
  // Every chart says how many of its marks drew (the self-check writes it); none drew nothing.
  EXPECT_THAT(dom.out, Not(HasSubstr("data-drawn=\"0\"")));
  // No console message at all.
  std::stringstream lines(dom.err);
  for (std::string line; std::getline(lines, line);)
    EXPECT_THAT(line, Not(HasSubstr(":CONSOLE"))) << "the page logged to the console";

  const fs::path png = page.parent_path() / (page.stem().string() + ".png");
  fs::remove(png);
  const BrowserRun shot =
      chromium(browser, page, {"--hide-scrollbars", "--window-size=1100,2600", "--screenshot=" + png.string()});
  ASSERT_EQ(shot.exit_code, 0) << shot.err;
  ASSERT_TRUE(fs::exists(png)) << shot.err;
  const std::string bytes = read_file(png);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(bytes.size(), 20000u) << "a screenshot of a drawn page is not a blank one";
}

class HtmlInBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (find_browser().empty()) GTEST_SKIP() << "no browser: chromium is not installed (./quickstart installs it)";
  }
};

TEST_F(HtmlInBrowser, ARequestTraceReportOfMooncakeOpensWithEveryChartDrawn) {
  const fs::path page = out_dir() / "replay-mooncake-sample.html";
  ASSERT_EQ(kvtwin({"replay", source("traces/samples/mooncake_conversation_head.jsonl"), "--model", "llama-3.1-8b",
                    "--tp", "8", "--pool-bytes", "64MiB", "--token-scale", "32", "--requests", "150", "--quiet",
                    "--html", page.string()},
                   out_dir() / "replay-mooncake-sample.log"),
            0);
  expect_opens_clean(page, 7);
}

TEST_F(HtmlInBrowser, ARequestTraceReportOfAzureWithASlidingWindowOpensWithEveryChartDrawn) {
  const fs::path page = out_dir() / "replay-azure-sample.html";
  ASSERT_EQ(kvtwin({"replay", source("traces/samples/azure_code_head.csv"), "--model", "gpt-oss-20b", "--tp", "8",
                    "--pool-bytes", "32MiB", "--token-scale", "4", "--mode", "lazy", "--tables-only", "--quiet",
                    "--html", page.string()},
                   out_dir() / "replay-azure-sample.log"),
            0);
  expect_opens_clean(page, 8);  // two sub-pools
}

// The whole shared request traces (../shared/traces-external, beside the repository; skipped by
// name where they are not), at the replay's defaults, tables only: each page under 5 MiB
// (expect_opens_clean), every chart drawn.
TEST_F(HtmlInBrowser, TheWholeSharedRequestTracesOpenWithEveryChartDrawn) {
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"mooncake", "../shared/traces-external/mooncake/conversation_trace.jsonl"},
      {"azure", "../shared/traces-external/azure-llm-2023/AzureLLMInferenceTrace_code.csv"}};
  for (const auto& [name, relative] : traces) {
    const std::string trace = source(relative);
    if (!fs::exists(trace)) GTEST_SKIP() << "the shared traces are not beside the repository: " << trace;
    const fs::path page = out_dir() / ("replay-shared-" + name + ".html");
    ASSERT_EQ(kvtwin({"replay", trace, "--tables-only", "--quiet", "--html", page.string()},
                     out_dir() / ("replay-shared-" + name + ".log")),
              0)
        << name;
    expect_opens_clean(page, 7);
  }
}

TEST_F(HtmlInBrowser, AFailingPoolTraceReportOpensWithThePagesInvolvedDrawn) {
  const fs::path page = out_dir() / "replay-planted-failure.html";
  ASSERT_EQ(kvtwin({"replay", source("traces/regress/compaction_pairs_survivors_and_holes_in_order.jsonl"), "--fault",
                    "model_pairing_out_of_order", "--quiet", "--html", page.string()},
                   out_dir() / "replay-planted-failure.log"),
            1);
  expect_opens_clean(page, 4);
  EXPECT_THAT(read_file(page), HasSubstr("class=\"highlight\""));
}

TEST_F(HtmlInBrowser, AFailingFuzzCampaignReportOpensWithItsShrunkFailureDrawn) {
  const fs::path page = out_dir() / "fuzz-planted-failure.html";
  ASSERT_EQ(kvtwin({"fuzz", "--fault", "model_pairing_out_of_order", "--cases", "20", "--out",
                    (out_dir() / "fuzz-failures").string(), "--quiet", "--html", page.string()},
                   out_dir() / "fuzz-planted-failure.log"),
            1);
  expect_opens_clean(page, 5);
  const std::string html = read_file(page);
  EXPECT_THAT(html, HasSubstr("kvtwin replay "));
  EXPECT_THAT(html, HasSubstr("class=\"highlight\""));
}

TEST_F(HtmlInBrowser, TheGateReportOpensWithItsPartsAndEachFailuresReproduceCommand) {
  const fs::path page = out_dir() / "check-planted-failure.html";
  const fs::path empty = out_dir() / "no-traces";
  fs::create_directories(empty);
  ASSERT_EQ(kvtwin({"check",
                    "--cases",
                    "1",
                    "--random-cases",
                    "1",
                    "--ops",
                    "20",
                    "--fault",
                    "model_pairing_out_of_order",
                    "--traces-dir",
                    empty.string(),
                    "--samples-dir",
                    empty.string(),
                    "--out",
                    (out_dir() / "check-failures").string(),
                    "--jobs",
                    "2",
                    "--quiet",
                    "--html",
                    page.string()},
                   out_dir() / "check-planted-failure.log"),
            1);
  expect_opens_clean(page, 2);
  const std::string html = read_file(page);
  EXPECT_THAT(html, HasSubstr("Reproduce:"));
  EXPECT_THAT(html, HasSubstr("kvtwin replay "));
}

}  // namespace
