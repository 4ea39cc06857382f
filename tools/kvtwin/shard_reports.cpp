// Reading shard reports back for a merge: see shard_reports.h.
#include "tools/kvtwin/shard_reports.h"

#include <algorithm>
#include <fstream>
#include <map>

namespace kvtwin::cli {
namespace {

std::string short_value(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string shard_list(const std::vector<ShardReport>& reports) {
  std::string s;
  for (const ShardReport& r : reports)
    s += (s.empty() ? "" : ", ") + r.file + " (shard " + std::to_string(r.shard_index) + ")";
  return s;
}

// The first place where two values differ, as a JSON pointer below `at` (objects are compared
// key by key, so a differing option is named, not the whole options object).
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& at) {
  if (!a.is_object() || !b.is_object()) return at;
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key)) return at + "/" + key;
    if (value != b.at(key)) return first_difference(value, b.at(key), at + "/" + key);
  }
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return at + "/" + key;
  return at;
}

std::string value_at(const nlohmann::json& j, const std::string& pointer) {
  const nlohmann::json::json_pointer p(pointer);
  return j.contains(p) ? short_value(j.at(p)) : std::string("absent");
}

}  // namespace

Status only_merge_options(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0) continue;
    const std::string name = option->get_name();
    if (name == "--merge" || name == "--json" || name == "--junit" || name == "--quiet") continue;
    return make_error(ErrorKind::invalid_argument,
                      name + " is an option of a run; --merge combines the shards' reports as they are (it takes "
                             "only --json, --junit and --quiet)");
  }
  return ok_status();
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

Error ReportFields::error(const std::string& pointer, const std::string& what) const {
  return make_error(ErrorKind::malformed, file_ + ": field " + pointer + ": " + what);
}

Result<const nlohmann::json*> ReportFields::field(const nlohmann::json& j, const std::string& pointer) const {
  const nlohmann::json::json_pointer p(pointer);
  if (!j.contains(p)) return error(pointer, "missing");
  return &j.at(p);
}

Result<std::uint64_t> ReportFields::uint(const nlohmann::json& j, const std::string& pointer) const {
  KVTWIN_TRY(const nlohmann::json* v, field(j, pointer));
  if (!v->is_number_unsigned()) return error(pointer, "is " + short_value(*v) + ", not a whole number");
  return v->get<std::uint64_t>();
}

Result<std::string> ReportFields::string(const nlohmann::json& j, const std::string& pointer) const {
  KVTWIN_TRY(const nlohmann::json* v, field(j, pointer));
  if (!v->is_string()) return error(pointer, "is " + short_value(*v) + ", not a string");
  return v->get<std::string>();
}

Result<bool> ReportFields::boolean(const nlohmann::json& j, const std::string& pointer) const {
  KVTWIN_TRY(const nlohmann::json* v, field(j, pointer));
  if (!v->is_boolean()) return error(pointer, "is " + short_value(*v) + ", not true or false");
  return v->get<bool>();
}

Result<double> ReportFields::number(const nlohmann::json& j, const std::string& pointer) const {
  KVTWIN_TRY(const nlohmann::json* v, field(j, pointer));
  if (!v->is_number()) return error(pointer, "is " + short_value(*v) + ", not a number");
  return v->get<double>();
}

Result<const nlohmann::json*> ReportFields::array(const nlohmann::json& j, const std::string& pointer) const {
  KVTWIN_TRY(const nlohmann::json* v, field(j, pointer));
  if (!v->is_array()) return error(pointer, "is " + short_value(*v) + ", not a list");
  return v;
}

Result<std::vector<ShardReport>> read_shard_reports(const std::vector<std::string>& files, std::string_view command,
                                                    const std::vector<std::string>& must_agree) {
  const std::string producer = "kvtwin " + std::string(command);
  if (files.empty())
    return make_error(ErrorKind::invalid_argument, "--merge needs the shard reports (the files " + producer +
                                                       " --json wrote, one a shard)");
  std::vector<ShardReport> reports;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return make_error(ErrorKind::io, file + ": cannot open the report");
    ShardReport r;
    r.file = file;
    try {
      r.json = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      // nlohmann's message names the line and column.
      return make_error(ErrorKind::malformed, file + ": not JSON: " + e.what());
    }
    const ReportFields fields(file);
    if (!r.json.is_object()) return fields.error("/", "a report is a JSON object");
    Result<std::string> kind = fields.string(r.json, "/report");
    if (!kind.ok() || *kind != producer)
      return fields.error("/report", (kind.ok() ? "is '" + *kind + "'" : std::string("missing")) +
                                         "; --merge takes the reports " + producer + " --json writes");
    KVTWIN_TRY(r.shard_index, fields.uint(r.json, "/shard_index"));
    KVTWIN_TRY(r.shard_count, fields.uint(r.json, "/shard_count"));
    if (r.shard_count == 0 || r.shard_index >= r.shard_count)
      return fields.error("/shard_index", "shard " + std::to_string(r.shard_index) + " of " +
                                              std::to_string(r.shard_count) + " is not a shard");
    reports.push_back(std::move(r));
  }
  // One run: the same shard count, seed, backend and options everywhere.
  std::vector<std::string> agree = {"/shard_count"};
  agree.insert(agree.end(), must_agree.begin(), must_agree.end());
  const ShardReport& first = reports.front();
  for (const std::string& pointer : agree) {
    const nlohmann::json::json_pointer p(pointer);
    for (const ShardReport& r : reports) {
      if (!r.json.contains(p)) return ReportFields(r.file).error(pointer, "missing");
      if (!first.json.contains(p)) return ReportFields(first.file).error(pointer, "missing");
      if (r.json.at(p) != first.json.at(p)) {
        const std::string where = first_difference(first.json.at(p), r.json.at(p), pointer);
        return make_error(ErrorKind::invalid_argument,
                          first.file + " and " + r.file + " differ in " + where + " (" + value_at(first.json, where) +
                              " and " + value_at(r.json, where) +
                              "): the shards of one run share every option but --shard-index");
      }
    }
  }
  // Each shard exactly once.
  const std::uint64_t count = first.shard_count;
  std::map<std::uint64_t, const ShardReport*> by_index;
  for (const ShardReport& r : reports) {
    auto [at, fresh] = by_index.emplace(r.shard_index, &r);
    if (!fresh)
      return make_error(ErrorKind::invalid_argument, "shard " + std::to_string(r.shard_index) + " of " +
                                                         std::to_string(count) + " is given twice: " + at->second->file +
                                                         " and " + r.file);
  }
  std::vector<std::uint64_t> missing;
  for (std::uint64_t i = 0; i < count; ++i)
    if (!by_index.count(i)) missing.push_back(i);
  if (!missing.empty()) {
    std::string which;
    for (std::uint64_t i : missing) which += (which.empty() ? "" : ", ") + std::to_string(i);
    return make_error(ErrorKind::invalid_argument,
                      (missing.size() == 1 ? "shard " : "shards ") + which + " of " + std::to_string(count) +
                          (missing.size() == 1 ? " is" : " are") + " missing (given: " + shard_list(reports) +
                          "); a merge takes every shard of the run");
  }
  std::sort(reports.begin(), reports.end(),
            [](const ShardReport& a, const ShardReport& b) { return a.shard_index < b.shard_index; });
  return reports;
}

}  // namespace kvtwin::cli
