// Reading shard reports back for a merge (kvtwin check --merge, kvtwin fuzz --merge). A campaign
// split with --shard-index I --shard-count N writes one JSON report per shard; the merge must
// refuse a set that is not one whole run: a report that cannot be read, a shard given twice, a
// shard missing, or shards run with different seeds, backends or options. Each refusal names the
// file and the field, so the person running a campaign knows which job to look at. The JUnit
// writers of both reports share xml_escape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kvtwin::cli {

// One shard's report, parsed.
struct ShardReport {
  std::string file;
  nlohmann::json json;
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
};

// Reads every file as a JSON report of `command` ("check", "fuzz"), then checks that together they
// are the shards 0..N-1 of one run, each exactly once, and that the fields named by `must_agree`
// (JSON pointers such as "/seed" or "/options/ops") hold the same value in every report. Returns
// the reports in shard order. Every error names the file(s) and the field.
Result<std::vector<ShardReport>> read_shard_reports(const std::vector<std::string>& files, std::string_view command,
                                                    const std::vector<std::string>& must_agree);

// A merge reads reports and writes one: of the command's options only --merge, --json, --junit and
// --quiet apply. An invalid_argument Error naming the first other option given.
Status only_merge_options(const CLI::App& app);

// Escapes text for an XML attribute or element (the JUnit writers); control characters other
// than newline and tab become spaces.
std::string xml_escape(const std::string& s);

// Typed field access on a report being read back: an Error naming the file and the field (as a
// JSON pointer, e.g. "/items/3/ops") when it is missing or of another type.
class ReportFields {
 public:
  explicit ReportFields(std::string file) : file_(std::move(file)) {}
  Result<std::uint64_t> uint(const nlohmann::json& j, const std::string& pointer) const;
  Result<std::string> string(const nlohmann::json& j, const std::string& pointer) const;
  Result<bool> boolean(const nlohmann::json& j, const std::string& pointer) const;
  Result<double> number(const nlohmann::json& j, const std::string& pointer) const;
  Result<const nlohmann::json*> array(const nlohmann::json& j, const std::string& pointer) const;
  Error error(const std::string& pointer, const std::string& what) const;

 private:
  Result<const nlohmann::json*> field(const nlohmann::json& j, const std::string& pointer) const;
  std::string file_;
};

}  // namespace kvtwin::cli
