// The report of a kvtwin fuzz run and its writers, shared by a run and a merge: see fuzz_report.h.
#include "tools/kvtwin/fuzz_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/files.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/shard_reports.h"
#include "tools/kvtwin/trace_options.h"

namespace kvtwin::cli {
namespace {

std::string indented(const std::string& text) {
  std::istringstream lines(text);
  std::string out;
  for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  return out;
}

std::string failure_title(const FuzzFailure& f) {
  return "case " + std::to_string(f.case_index) + " (case seed " + std::to_string(f.case_seed) + "), configuration " +
         f.configuration + ", swarm " + f.swarm + ": " + f.check + " check failed";
}

void print_fuzz_report(const FuzzReport& report, const std::string& digest) {
  std::printf("%llu cases, %llu ops, %llu checks passed\n", static_cast<unsigned long long>(report.cases),
              static_cast<unsigned long long>(report.ops), static_cast<unsigned long long>(report.checks_passed));
  for (const FuzzFailure& f : report.failures) {
    std::printf("FAIL: %s\n%s", failure_title(f).c_str(), indented(f.description).c_str());
    std::printf("  shrunk %llu ops to %llu: %s\n", static_cast<unsigned long long>(f.ops_before),
                static_cast<unsigned long long>(f.ops_after), f.trace.c_str());
    std::printf("reproduce: %s\n", f.replay.c_str());
    std::printf("reproduce the case: %s\n", f.reproduce.c_str());
  }
  std::printf("digest %s (seed %llu: the report and the trace written)\n", digest.c_str(),
              static_cast<unsigned long long>(report.seed));
  std::printf("%s\n", report.failures.empty() ? "kvtwin fuzz: PASS" : "kvtwin fuzz: FAIL");
  std::fflush(stdout);
}

Status write_fuzz_junit(const FuzzReport& report, const std::string& path) {
  std::ostringstream out;
  const std::string suite =
      "kvtwin fuzz (" + report.config + ", " + report.backend + (report.fault.empty() ? "" : ", fault " + report.fault) + ")";
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvtwin fuzz\">\n";
  out << "  <testsuite name=\"" << xml_escape(suite) << "\" tests=\"" << report.failures.size() + 1 << "\" failures=\""
      << report.failures.size() << "\" errors=\"0\" skipped=\"0\">\n";
  // One test case for the cases that passed, one for each failure.
  out << "    <testcase classname=\"" << xml_escape(suite) << "\" name=\""
      << xml_escape("seed " + std::to_string(report.seed) + ": " +
                    std::to_string(report.cases - std::min<std::uint64_t>(report.cases, report.failures.size())) +
                    " cases without a failure")
      << "\"/>\n";
  for (const FuzzFailure& f : report.failures) {
    out << "    <testcase classname=\"" << xml_escape(suite) << "\" name=\""
        << xml_escape("case " + std::to_string(f.case_index)) << "\">\n      <failure message=\""
        << xml_escape(failure_title(f)) << "\">"
        << xml_escape(f.description + "\nreproduce: " + f.replay + "\nreproduce the case: " + f.reproduce)
        << "</failure>\n    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
  return write_file_atomically(path, out.str());
}

}  // namespace

nlohmann::json fuzz_report_json(const FuzzReport& report) {
  nlohmann::json failures = nlohmann::json::array();
  for (const FuzzFailure& f : report.failures) {
    failures.push_back({{"case", f.case_index},
                        {"case_seed", f.case_seed},
                        {"configuration", f.configuration},
                        {"swarm", f.swarm},
                        {"check", f.check},
                        {"message", f.message},
                        {"description", f.description},
                        {"trace", f.trace},
                        {"replay", f.replay},
                        {"reproduce", f.reproduce},
                        {"ops_before", f.ops_before},
                        {"ops_after", f.ops_after},
                        {"trace_digest", f.trace_digest}});
  }
  nlohmann::json j = {{"report", "kvtwin fuzz"},
          {"seed", report.seed},
          {"backend", report.backend},
          {"config", report.config},
          {"fault", report.fault},
          {"options", report.options},
          {"shard_index", report.shard_index},
          {"shard_count", report.shard_count},
          {"cases", report.cases},
          {"ops", report.ops},
          {"checks_passed", report.checks_passed},
          {"passed", report.failures.empty()},
          {"failures", failures}};
  // One value to compare runs by, across runs and machines: the report, the written traces'
  // digests included, not its times (README "Determinism").
  j["digest"] = report_digest(j);
  return j;
}

Result<FuzzReport> fuzz_report_from_json(const nlohmann::json& j, const std::string& file) {
  const ReportFields f(file);
  FuzzReport r;
  KVTWIN_TRY(r.seed, f.uint(j, "/seed"));
  KVTWIN_TRY(r.backend, f.string(j, "/backend"));
  KVTWIN_TRY(r.config, f.string(j, "/config"));
  KVTWIN_TRY(r.fault, f.string(j, "/fault"));
  if (!j.contains("options") || !j["options"].is_object()) return f.error("/options", "missing, or not an object");
  r.options = j["options"];
  KVTWIN_TRY(r.shard_index, f.uint(j, "/shard_index"));
  KVTWIN_TRY(r.shard_count, f.uint(j, "/shard_count"));
  KVTWIN_TRY(r.cases, f.uint(j, "/cases"));
  KVTWIN_TRY(r.ops, f.uint(j, "/ops"));
  KVTWIN_TRY(r.checks_passed, f.uint(j, "/checks_passed"));
  KVTWIN_TRY(const nlohmann::json* failures, f.array(j, "/failures"));
  for (std::size_t k = 0; k < failures->size(); ++k) {
    const std::string at = "/failures/" + std::to_string(k);
    FuzzFailure x;
    KVTWIN_TRY(x.case_index, f.uint(j, at + "/case"));
    KVTWIN_TRY(x.case_seed, f.uint(j, at + "/case_seed"));
    KVTWIN_TRY(x.configuration, f.string(j, at + "/configuration"));
    KVTWIN_TRY(x.swarm, f.string(j, at + "/swarm"));
    KVTWIN_TRY(x.check, f.string(j, at + "/check"));
    KVTWIN_TRY(x.message, f.string(j, at + "/message"));
    KVTWIN_TRY(x.description, f.string(j, at + "/description"));
    KVTWIN_TRY(x.trace, f.string(j, at + "/trace"));
    KVTWIN_TRY(x.replay, f.string(j, at + "/replay"));
    KVTWIN_TRY(x.reproduce, f.string(j, at + "/reproduce"));
    KVTWIN_TRY(x.ops_before, f.uint(j, at + "/ops_before"));
    KVTWIN_TRY(x.ops_after, f.uint(j, at + "/ops_after"));
    KVTWIN_TRY(x.trace_digest, f.string(j, at + "/trace_digest"));
    // A --case run reruns one case wherever it lies; otherwise a shard runs only its own cases.
    if (j["options"].value("case", nlohmann::json()).is_null() && r.shard_count != 0 &&
        x.case_index % r.shard_count != r.shard_index)
      return f.error(at + "/case", "case " + std::to_string(x.case_index) + " belongs to shard " +
                                       std::to_string(x.case_index % r.shard_count) +
                                       ", not to this report's shard " + std::to_string(r.shard_index));
    r.failures.push_back(std::move(x));
  }
  return r;
}

int finish_fuzz_report(const FuzzReport& report, const std::string& json_file, const std::string& junit_file) {
  const nlohmann::json json = fuzz_report_json(report);
  print_fuzz_report(report, json["digest"].get<std::string>());
  if (!json_file.empty()) {
    if (Status s = write_json_file(json_file, json); !s.ok()) return bad_input("fuzz", s.error());
  }
  if (!junit_file.empty()) {
    if (Status s = write_fuzz_junit(report, junit_file); !s.ok()) return bad_input("fuzz", s.error());
  }
  return report.failures.empty() ? kExitOk : kExitCheckFailed;
}

int merge_fuzz_reports(const std::vector<std::string>& files, const std::string& json_file,
                       const std::string& junit_file) {
  Result<std::vector<ShardReport>> shards =
      read_shard_reports(files, "fuzz", {"/seed", "/backend", "/config", "/fault", "/options"});
  if (!shards.ok()) return bad_input("fuzz", shards.error());
  FuzzReport merged;
  for (const ShardReport& shard : *shards) {
    Result<FuzzReport> r = fuzz_report_from_json(shard.json, shard.file);
    if (!r.ok()) return bad_input("fuzz", r.error());
    if (&shard == &shards->front()) {
      merged.seed = r->seed;
      merged.backend = r->backend;
      merged.config = r->config;
      merged.fault = r->fault;
      merged.options = r->options;
    }
    merged.cases += r->cases;
    merged.ops += r->ops;
    merged.checks_passed += r->checks_passed;
    for (FuzzFailure& f : r->failures) merged.failures.push_back(std::move(f));
  }
  std::stable_sort(merged.failures.begin(), merged.failures.end(),
                   [](const FuzzFailure& a, const FuzzFailure& b) { return a.case_index < b.case_index; });
  std::string names;
  for (const ShardReport& shard : *shards) names += (names.empty() ? "" : ", ") + shard.file;
  std::printf("kvtwin fuzz: seed %llu, merging %zu shard reports: %s\n", static_cast<unsigned long long>(merged.seed),
              shards->size(), names.c_str());
  std::fflush(stdout);
  return finish_fuzz_report(merged, json_file, junit_file);
}

}  // namespace kvtwin::cli
