// The report of a kvtwin check run and its writers, shared by a run and a merge: see check_report.h.
#include "tools/kvtwin/check_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/files.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/shard_reports.h"
#include "tools/kvtwin/trace_options.h"
#include "traces/backends.h"

namespace kvtwin::cli {

std::string_view item_state_name(ItemResult::State state) {
  switch (state) {
    case ItemResult::State::passed:
      return "passed";
    case ItemResult::State::failed:
      return "failed";
    case ItemResult::State::skipped:
      return "skipped";
  }
  return "?";
}

namespace {

std::string part_key(const CheckReportItem& item) { return item.part + " (" + item.backend + ")"; }

// The table's rows: one a part and backend, in the order the items first name them.
struct Tally {
  std::uint64_t items = 0, passed = 0, failed = 0, skipped = 0, ops = 0, checks = 0;
  double seconds = 0;
};
struct Tallies {
  std::vector<std::string> order;
  std::map<std::string, Tally> by_part;
};

Tallies tally(const CheckReport& report) {
  Tallies t;
  for (const CheckReportItem& item : report.items) {
    const std::string key = part_key(item);
    if (!t.by_part.count(key)) t.order.push_back(key);
    Tally& row = t.by_part[key];
    ++row.items;
    row.ops += item.result.ops;
    row.checks += item.result.checks;
    row.seconds += item.result.seconds;
    switch (item.result.state) {
      case ItemResult::State::passed:
        ++row.passed;
        break;
      case ItemResult::State::failed:
        ++row.failed;
        break;
      case ItemResult::State::skipped:
        ++row.skipped;
        break;
    }
  }
  return t;
}

void print_check_report(const CheckReport& report, const Tallies& tallies, const std::string& digest) {
  for (const CheckReportItem& item : report.items) {
    if (item.result.state == ItemResult::State::skipped)
      std::printf("SKIP %s: %s: %s\n", item.part.c_str(), item.name.c_str(), item.result.detail.c_str());
  }
  for (const CheckReportItem& item : report.items) {
    if (item.result.state != ItemResult::State::failed) continue;
    std::printf("FAIL %s: %s (%s)\n  %s\n", item.part.c_str(), item.name.c_str(), item.backend.c_str(),
                item.result.failure.c_str());
    if (!item.result.reproduce.empty()) std::printf("  reproduce: %s\n", item.result.reproduce.c_str());
  }
  int width = 4;
  for (const std::string& key : tallies.order) width = std::max(width, static_cast<int>(key.size()));
  std::printf("\n%-*s %6s %6s %6s %7s %10s %12s %8s\n", width, "part", "items", "passed", "failed", "skipped", "ops",
              "checks", "seconds");
  for (const std::string& key : tallies.order) {
    const Tally& t = tallies.by_part.at(key);
    std::printf("%-*s %6llu %6llu %6llu %7llu %10llu %12llu %8.1f\n", width, key.c_str(),
                static_cast<unsigned long long>(t.items), static_cast<unsigned long long>(t.passed),
                static_cast<unsigned long long>(t.failed), static_cast<unsigned long long>(t.skipped),
                static_cast<unsigned long long>(t.ops), static_cast<unsigned long long>(t.checks), t.seconds);
  }
  std::printf("digest %s (seed %llu: every item's result, not the times)\n", digest.c_str(),
              static_cast<unsigned long long>(report.seed));
  // SPEC 8: which backend's host arena the run checked.
  const bool model = report.backend.find("model") != std::string::npos;
  const bool gpu = report.backend.find("gpu") != std::string::npos;
  if (model && !gpu)
    std::printf("host arena (SPEC 8): the model's, checked (host operations in the properties and regression traces)\n");
  else if (traces::gpu_host_ops_requested())
    std::printf("host arena (SPEC 8): the model's and the GPU's, side by side (host operations in the properties and "
                "regression traces)\n");
  else
    std::printf("host arena (SPEC 8): not checked side by side in this run (KVTWIN_GPU_HOST_OPS=0 left host operations "
                "out; kvtwin check --backend model checks the model's)\n");
  // The last line says what was not checked: a pass with parts skipped is said to be one, and a
  // run that checked nothing is not a pass.
  std::uint64_t skipped = 0, passed = 0;
  for (const CheckReportItem& item : report.items) {
    skipped += item.result.state == ItemResult::State::skipped;
    passed += item.result.state == ItemResult::State::passed;
  }
  if (report.failed_items() != 0)
    std::printf("kvtwin check: FAIL\n");
  else if (passed == 0)
    std::printf("kvtwin check: FAIL (nothing was checked: every work item was skipped)\n");
  else if (skipped != 0)
    std::printf("kvtwin check: PASS (%llu of %zu work items skipped: see SKIP above)\n",
                static_cast<unsigned long long>(skipped), report.items.size());
  else
    std::printf("kvtwin check: PASS\n");
  std::fflush(stdout);
}

Status write_check_junit(const CheckReport& report, const Tallies& tallies, const std::string& path) {
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvtwin check\">\n";
  for (const std::string& key : tallies.order) {
    const Tally& t = tallies.by_part.at(key);
    out << "  <testsuite name=\"" << xml_escape(key) << "\" tests=\"" << t.items << "\" failures=\"" << t.failed
        << "\" errors=\"0\" skipped=\"" << t.skipped << "\" time=\"" << t.seconds << "\">\n";
    for (const CheckReportItem& item : report.items) {
      if (part_key(item) != key) continue;
      out << "    <testcase classname=\"" << xml_escape(key) << "\" name=\"" << xml_escape(item.name) << "\" time=\""
          << item.result.seconds << "\">";
      if (item.result.state == ItemResult::State::failed) {
        out << "\n      <failure message=\"" << xml_escape(item.result.failure.substr(0, 200)) << "\">"
            << xml_escape(item.result.failure + "\nreproduce: " + item.result.reproduce) << "</failure>\n    ";
      } else if (item.result.state == ItemResult::State::skipped) {
        out << "\n      <skipped message=\"" << xml_escape(item.result.detail) << "\"/>\n    ";
      }
      out << "</testcase>\n";
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return write_file_atomically(path, out.str());
}

}  // namespace

bool CheckReport::passed() const {
  if (failed_items() != 0) return false;
  for (const CheckReportItem& item : items)
    if (item.result.state == ItemResult::State::passed) return true;
  return false;  // nothing was checked
}

std::uint64_t CheckReport::failed_items() const {
  return static_cast<std::uint64_t>(std::count_if(items.begin(), items.end(), [](const CheckReportItem& item) {
    return item.result.state == ItemResult::State::failed;
  }));
}

nlohmann::json check_report_json(const CheckReport& report) {
  nlohmann::json j;
  j["report"] = "kvtwin check";
  j["seed"] = report.seed;
  j["backend"] = report.backend;
  j["options"] = report.options;
  j["shard_index"] = report.shard_index;
  j["shard_count"] = report.shard_count;
  j["items_total"] = report.items_total;
  j["passed"] = report.passed();
  nlohmann::json list = nlohmann::json::array();
  for (const CheckReportItem& item : report.items) {
    list.push_back({{"index", item.index},
                    {"part", item.part},
                    {"name", item.name},
                    {"backend", item.backend},
                    {"state", item_state_name(item.result.state)},
                    {"detail", item.result.detail},
                    {"failure", item.result.failure},
                    {"reproduce", item.result.reproduce},
                    {"ops", item.result.ops},
                    {"checks", item.result.checks},
                    {"seconds", item.result.seconds}});
  }
  j["items"] = list;
  // One value to compare runs by: every item's result, not its time (the same with any --jobs, on
  // any machine; README "Determinism").
  j["digest"] = report_digest(j);
  return j;
}

Result<CheckReport> check_report_from_json(const nlohmann::json& j, const std::string& file) {
  const ReportFields f(file);
  CheckReport r;
  KVTWIN_TRY(r.seed, f.uint(j, "/seed"));
  KVTWIN_TRY(r.backend, f.string(j, "/backend"));
  if (!j.contains("options") || !j["options"].is_object()) return f.error("/options", "missing, or not an object");
  r.options = j["options"];
  KVTWIN_TRY(r.shard_index, f.uint(j, "/shard_index"));
  KVTWIN_TRY(r.shard_count, f.uint(j, "/shard_count"));
  KVTWIN_TRY(r.items_total, f.uint(j, "/items_total"));
  KVTWIN_TRY(const nlohmann::json* items, f.array(j, "/items"));
  for (std::size_t k = 0; k < items->size(); ++k) {
    const std::string at = "/items/" + std::to_string(k);
    CheckReportItem item;
    KVTWIN_TRY(item.index, f.uint(j, at + "/index"));
    KVTWIN_TRY(item.part, f.string(j, at + "/part"));
    KVTWIN_TRY(item.name, f.string(j, at + "/name"));
    KVTWIN_TRY(item.backend, f.string(j, at + "/backend"));
    KVTWIN_TRY(const std::string state, f.string(j, at + "/state"));
    if (state == "passed")
      item.result.state = ItemResult::State::passed;
    else if (state == "failed")
      item.result.state = ItemResult::State::failed;
    else if (state == "skipped")
      item.result.state = ItemResult::State::skipped;
    else
      return f.error(at + "/state", "is '" + state + "'; one of passed, failed, skipped");
    KVTWIN_TRY(item.result.detail, f.string(j, at + "/detail"));
    KVTWIN_TRY(item.result.failure, f.string(j, at + "/failure"));
    KVTWIN_TRY(item.result.reproduce, f.string(j, at + "/reproduce"));
    KVTWIN_TRY(item.result.ops, f.uint(j, at + "/ops"));
    KVTWIN_TRY(item.result.checks, f.uint(j, at + "/checks"));
    KVTWIN_TRY(item.result.seconds, f.number(j, at + "/seconds"));
    if (item.index >= r.items_total)
      return f.error(at + "/index", std::to_string(item.index) + " is past the run's " +
                                        std::to_string(r.items_total) + " items");
    if (r.shard_count != 0 && item.index % r.shard_count != r.shard_index)
      return f.error(at + "/index", "item " + std::to_string(item.index) + " belongs to shard " +
                                        std::to_string(item.index % r.shard_count) + ", not to this report's shard " +
                                        std::to_string(r.shard_index));
    r.items.push_back(std::move(item));
  }
  return r;
}

int finish_check_report(const CheckReport& report, const std::string& json_file, const std::string& junit_file) {
  const Tallies tallies = tally(report);
  const nlohmann::json json = check_report_json(report);
  print_check_report(report, tallies, json["digest"].get<std::string>());
  if (!json_file.empty()) {
    if (Status s = write_json_file(json_file, json); !s.ok()) return bad_input("check", s.error());
  }
  if (!junit_file.empty()) {
    if (Status s = write_check_junit(report, tallies, junit_file); !s.ok()) return bad_input("check", s.error());
  }
  return report.passed() ? kExitOk : kExitCheckFailed;
}

int merge_check_reports(const std::vector<std::string>& files, const std::string& json_file,
                        const std::string& junit_file) {
  Result<std::vector<ShardReport>> shards =
      read_shard_reports(files, "check", {"/seed", "/backend", "/options", "/items_total"});
  if (!shards.ok()) return bad_input("check", shards.error());
  CheckReport merged;
  std::map<std::uint64_t, std::string> item_file;  // index -> the report that holds it
  for (const ShardReport& shard : *shards) {
    Result<CheckReport> r = check_report_from_json(shard.json, shard.file);
    if (!r.ok()) return bad_input("check", r.error());
    if (&shard == &shards->front()) {
      merged.seed = r->seed;
      merged.backend = r->backend;
      merged.options = r->options;
      merged.items_total = r->items_total;
    }
    for (CheckReportItem& item : r->items) {
      auto [at, fresh] = item_file.emplace(item.index, shard.file);
      if (!fresh)
        return bad_input("check", make_error(ErrorKind::malformed, shard.file + ": item " + std::to_string(item.index) +
                                                                       " is listed twice (also in " + at->second + ")"));
      merged.items.push_back(std::move(item));
    }
  }
  // Every item of the run, once: a report cut short is not a whole shard.
  for (std::uint64_t i = 0; i < merged.items_total; ++i) {
    if (item_file.count(i)) continue;
    const ShardReport& owner = (*shards)[i % shards->size()];
    return bad_input("check", make_error(ErrorKind::malformed,
                                         owner.file + ": item " + std::to_string(i) + " of the run's " +
                                             std::to_string(merged.items_total) + " is not in the report of shard " +
                                             std::to_string(owner.shard_index) + " (cut short?)"));
  }
  std::sort(merged.items.begin(), merged.items.end(),
            [](const CheckReportItem& a, const CheckReportItem& b) { return a.index < b.index; });
  std::string names;
  for (const ShardReport& shard : *shards) names += (names.empty() ? "" : ", ") + shard.file;
  std::printf("kvtwin check: seed %llu, merging %zu shard reports: %s\n", static_cast<unsigned long long>(merged.seed),
              shards->size(), names.c_str());
  std::fflush(stdout);
  return finish_check_report(merged, json_file, junit_file);
}

}  // namespace kvtwin::cli
