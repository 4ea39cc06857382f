// The report of a kvtwin check run, and its writers: the SKIP and FAIL lines, the summary table
// part by part and the final PASS/FAIL line on stdout, the JSON report and the JUnit report.
// A run and a merge of shard reports (kvtwin check --merge A.json B.json ...) share them, so a
// merged campaign prints and writes exactly what the unsharded run would (durations aside).
//
// A shard's JSON report carries what a merge needs to restore the whole run: every item's index
// in the unsharded run (shard I of N runs the items i with i % N == I), the number of items in the
// run, and the options every shard must share (shard_reports.h refuses a set that differs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kvtwin::cli {

// What one work item of the gate found.
struct ItemResult {
  enum class State { passed, failed, skipped } state = State::passed;
  std::string detail;     // one line: what ran
  std::string failure;    // the failure report
  std::string reproduce;  // the command that reproduces a failure
  std::uint64_t ops = 0;
  std::uint64_t checks = 0;
  double seconds = 0;
  bool ran = false;  // false: not started (a selftest stopped before it)
  // A failure's evidence, for selftest: the check that fired and the reproducer's length in ops.
  std::string check;
  std::uint64_t reproducer_ops = 0;
};

// "passed", "failed" or "skipped", as the reports name a state.
std::string_view item_state_name(ItemResult::State state);

struct CheckReportItem {
  std::uint64_t index = 0;  // the item's place in the unsharded run
  std::string part;         // properties, regress, requests
  std::string name;
  std::string backend;  // model, model+gpu
  ItemResult result;
};

struct CheckReport {
  std::uint64_t seed = 1;
  std::string backend;  // the backends that ran, e.g. "model" or "model+gpu"
  // The options that decide what the items run (cases, ops, a planted fault, ...): shards of one
  // run must agree on every one.
  nlohmann::json options = nlohmann::json::object();
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
  std::uint64_t items_total = 0;       // items of the whole run, over every shard
  std::vector<CheckReportItem> items;  // this report's items, by index

  std::uint64_t failed_items() const;
  // No failed item, and at least one that passed (a run that checked nothing is not a pass).
  bool passed() const;
};

// Prints the report (SKIP and FAIL lines, the table, "kvtwin check: PASS" or "FAIL") and writes
// the JSON and JUnit reports where a file is named (empty: none; "-" is stdout for JSON).
// Returns the exit code: 0 passed, 1 an item failed, 2 a report could not be written.
int finish_check_report(const CheckReport& report, const std::string& json_file, const std::string& junit_file);

nlohmann::json check_report_json(const CheckReport& report);
Result<CheckReport> check_report_from_json(const nlohmann::json& j, const std::string& file);

// kvtwin check --merge: reads the shard reports, checks they are every shard of one run, and
// finishes the merged report as a run would. Exit 2 (with the file and field named) when they
// are not.
int merge_check_reports(const std::vector<std::string>& files, const std::string& json_file,
                        const std::string& junit_file);

}  // namespace kvtwin::cli
