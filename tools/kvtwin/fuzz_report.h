// The report of a kvtwin fuzz run, and its writers: the closing lines on stdout (cases, ops and
// checks, every failure with the commands that reproduce it, "kvtwin fuzz: PASS" or "FAIL"), the
// JSON report and a JUnit report. A run and a merge of shard reports (kvtwin fuzz --merge A.json
// B.json ...) share them.
//
// A run stops at its first failing case; so does each shard, at the first failing case among its
// own. A merge of passing shards therefore equals the unsharded run's report exactly; a merge
// with failures lists every shard's failure in case order, the first of them being the one the
// unsharded run stops at (its totals count the cases every shard ran, which may be more).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kvtwin::cli {

struct FuzzFailure {
  std::uint64_t case_index = 0;
  std::uint64_t case_seed = 0;
  std::string configuration;  // the configuration the case drew
  std::string swarm;
  std::string check;        // the check that fired
  std::string message;      // its one-line message
  std::string description;  // the failure, described in full
  std::string trace;        // the shrunk failure's pool trace
  std::string replay;       // the command that replays the trace
  std::string reproduce;    // the command that reruns the case
  std::string trace_digest;  // fnv1a64 of the trace's bytes as written (the run's digest covers it)
  std::uint64_t ops_before = 0;
  std::uint64_t ops_after = 0;
};

struct FuzzReport {
  std::uint64_t seed = 1;
  std::string backend;
  std::string config;
  std::string fault;
  // The options that decide which cases run: shards of one run must agree on every one.
  nlohmann::json options = nlohmann::json::object();
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
  std::uint64_t cases = 0;  // cases run
  std::uint64_t ops = 0;
  std::uint64_t checks_passed = 0;
  std::vector<FuzzFailure> failures;  // by case
};

// Prints the closing lines and writes the JSON and JUnit reports where a file is named (empty:
// none; "-" is stdout for JSON). Returns the exit code: 0 no failure, 1 a case failed, 2 a report
// could not be written.
int finish_fuzz_report(const FuzzReport& report, const std::string& json_file, const std::string& junit_file);

nlohmann::json fuzz_report_json(const FuzzReport& report);
Result<FuzzReport> fuzz_report_from_json(const nlohmann::json& j, const std::string& file);

// kvtwin fuzz --merge: reads the shard reports, checks they are every shard of one run, and
// finishes the merged report as a run would; exit 2 (naming the file and field) when they are not.
int merge_fuzz_reports(const std::vector<std::string>& files, const std::string& json_file,
                       const std::string& junit_file);

}  // namespace kvtwin::cli
