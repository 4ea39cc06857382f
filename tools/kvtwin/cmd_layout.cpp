// `kvtwin layout`: where every byte of a model's KV state lives in the unified pool.
//
//   kvtwin layout --model NAME [--tp N] [--page-size N] [--dtype bf16|fp16|fp8|fp32]
//                 [--total-bytes N] [--json] [--svg FILE]
//   kvtwin layout --spec FILE ...    a custom shape (docs/spec-files.md)
//   kvtwin layout --list             the built-in catalogue
//   kvtwin layout --all              every catalogue model, one compact line per sub-pool
//
// Numbers are parsed here, strictly (decimal digits; byte counts may end in KiB, MiB, GiB or
// TiB), so that "-1", "0x40" or "1e9" are refused with a message instead of being read as
// something else. Every bad input ends with one message on stderr and exit code 2; the report
// itself is built and rendered by layout_report.h.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "core/catalogue.h"
#include "core/checked.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/layout_report.h"

namespace kvtwin::cli {
namespace {

struct LayoutArgs {
  std::string model;
  std::string spec;
  std::string tp = "1";
  std::string page_size = std::to_string(kDefaultPageSize);
  std::string total_bytes = std::to_string(kDefaultTotalBytes);
  std::string dtype;
  std::string svg;
  bool json = false;
  bool list = false;
  bool all = false;
};

// Decimal digits only, at most max_value.
Result<std::uint64_t> parse_count(const std::string& text, const std::string& flag, std::uint64_t max_value,
                                  const std::string& example) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return make_error(ErrorKind::invalid_argument,
                      flag + " '" + text + "' is not a whole number; give decimal digits, e.g. " + flag + " " + example);
  std::uint64_t v = 0;
  for (char c : text) {
    auto next = checked_mul_add(v, 10, static_cast<std::uint64_t>(c - '0'), flag);
    if (!next.ok())
      return make_error(ErrorKind::overflow, flag + " '" + text + "' does not fit in 64 bits (at most " +
                                                 std::to_string(UINT64_MAX) + ")");
    v = *next;
  }
  if (v > max_value)
    return make_error(ErrorKind::invalid_argument,
                      flag + " " + text + " is too large; at most " + std::to_string(max_value));
  return v;
}

// Digits with an optional binary suffix: 4294967296, 4096MiB, 4GiB.
Result<std::uint64_t> parse_byte_count(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, std::uint64_t> kSuffixes[] = {
      {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30}, {"TiB", 1ULL << 40}};
  std::string digits = text;
  std::uint64_t scale = 1;
  for (const auto& [suffix, factor] : kSuffixes) {
    const std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      digits = text.substr(0, text.size() - s.size());
      scale = factor;
    }
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    return make_error(ErrorKind::invalid_argument, flag + " '" + text +
                                                       "' is not a byte count; give decimal digits, optionally "
                                                       "ending in KiB, MiB, GiB or TiB (e.g. 4GiB)");
  KVTWIN_TRY(std::uint64_t v, parse_count(digits, flag, UINT64_MAX, "4294967296"));
  auto bytes = checked_mul(v, scale, flag);
  if (!bytes.ok())
    return make_error(ErrorKind::overflow, flag + " '" + text + "' does not fit in 64 bits (at most " +
                                               std::to_string(UINT64_MAX) + " bytes)");
  return *bytes;
}

int fail(const Error& e) {
  std::cerr << "kvtwin layout: " << e.message << "\n";
  return kExitBadInput;
}

Result<LayoutOptions> parse_options(const LayoutArgs& a) {
  LayoutOptions o;
  KVTWIN_TRY(std::uint64_t tp, parse_count(a.tp, "--tp", 1024, "2"));
  if (tp == 0) return make_error(ErrorKind::invalid_argument, "--tp 0: the tensor-parallel size is at least 1");
  o.tp = static_cast<std::uint32_t>(tp);
  KVTWIN_TRY(o.page_size, parse_count(a.page_size, "--page-size", UINT64_MAX, "64"));
  if (o.page_size == 0)
    return make_error(ErrorKind::invalid_argument, "--page-size 0: a page holds at least one slot (e.g. --page-size 64)");
  KVTWIN_TRY(o.total_bytes, parse_byte_count(a.total_bytes, "--total-bytes"));
  if (o.total_bytes == 0)
    return make_error(ErrorKind::invalid_argument, "--total-bytes 0: the pool needs bytes (e.g. --total-bytes 4GiB)");
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d.ok()) return d.error().with_context("--dtype: ");
    o.dtype = *d;
  }
  return o;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorKind::io, "cannot write '" + path + "'; check that its folder exists and is writable");
  out << text;
  out.close();
  if (!out) return make_error(ErrorKind::io, "writing '" + path + "' failed; check the disk");
  return ok_status();
}

int run_list(const LayoutArgs& a) {
  if (a.json)
    std::cout << render_catalogue_json(model_catalogue()).dump(2) << "\n";
  else
    std::cout << render_catalogue_text(model_catalogue());
  return kExitOk;
}

// Every catalogue model at the given options; a model that cannot be laid out prints its error.
int run_all(const LayoutArgs& a, const LayoutOptions& options) {
  int rc = kExitOk;
  nlohmann::json models = nlohmann::json::array();
  std::string text = render_compact_header();
  for (const ModelShape& shape : model_catalogue()) {
    auto report = build_layout_report(shape, options);
    if (!report.ok()) {
      std::cerr << "kvtwin layout: " << report.error().message << "\n";
      text += shape.name + ": cannot be laid out (see the message above)\n";
      rc = kExitBadInput;
      continue;
    }
    if (a.json)
      models.push_back(render_json(*report));
    else
      text += render_compact_rows(*report);
  }
  if (a.json)
    std::cout << nlohmann::json{{"kvtwin_layout", kLayoutJsonVersion}, {"models", models}}.dump(2) << "\n";
  else
    std::cout << text;
  return rc;
}

int run_layout(const LayoutArgs& a) {
  const int sources = (a.model.empty() ? 0 : 1) + (a.spec.empty() ? 0 : 1) + (a.list ? 1 : 0) + (a.all ? 1 : 0);
  if (sources == 0)
    return fail(make_error(ErrorKind::invalid_argument,
                           "say which model: --model NAME (see --list), --spec FILE, or --all"));
  if (sources > 1)
    return fail(make_error(ErrorKind::invalid_argument, "give only one of --model, --spec, --list and --all"));
  if (a.list) return run_list(a);

  auto options = parse_options(a);
  if (!options.ok()) return fail(options.error());
  if (a.all) {
    if (!a.svg.empty())
      return fail(make_error(ErrorKind::invalid_argument, "--svg draws one model; use it with --model or --spec"));
    return run_all(a, *options);
  }

  auto shape = a.model.empty() ? load_shape_file(a.spec) : find_model(a.model);
  if (!shape.ok()) return fail(shape.error());
  auto report = build_layout_report(*shape, *options);
  if (!report.ok()) return fail(report.error());

  if (!a.svg.empty()) {
    auto written = write_file(a.svg, render_svg(*report));
    if (!written.ok()) return fail(written.error().with_context("--svg: "));
  }
  if (a.json)
    std::cout << render_json(*report).dump(2) << "\n";
  else
    std::cout << render_text(*report);
  return kExitOk;
}

}  // namespace

Command add_layout_command(CLI::App& root) {
  auto args = std::make_shared<LayoutArgs>();
  CLI::App* app = root.add_subcommand(
      "layout", "Show where every byte of a model's KV state lives in the unified pool (the byte law, views, sizing)");
  app->add_option("--model", args->model, "A catalogue model (see --list)");
  app->add_option("--spec", args->spec, "A JSON file describing a custom shape (docs/spec-files.md)");
  app->add_option("--tp", args->tp, "Tensor-parallel ranks; KV heads are split over them (default 1)");
  app->add_option("--page-size", args->page_size, "Slots per page (default 64)");
  app->add_option("--dtype", args->dtype, "Element type, overriding the model's: bf16, fp16, fp8, fp32");
  app->add_option("--total-bytes", args->total_bytes,
                  "Pool bytes; digits, optionally ending in KiB, MiB, GiB or TiB (default 4294967296)");
  app->add_flag("--json", args->json, "Print the report as JSON (keys in docs/layout-json.md)");
  app->add_option("--svg", args->svg, "Also draw the entry's byte map and one page into this SVG file");
  app->add_flag("--list", args->list, "List the built-in catalogue");
  app->add_flag("--all", args->all, "Every catalogue model at these settings, one line per sub-pool");
  app->footer(
      "Examples:\n"
      "  kvtwin layout --model llama-3.1-8b --page-size 64\n"
      "  kvtwin layout --model gpt-oss-20b --tp 2 --json\n"
      "  kvtwin layout --spec my-model.json --svg layout.svg\n"
      "Exit codes: 0 ok, 2 bad usage or input.");
  return Command{app, [args] { return run_layout(*args); }};
}

}  // namespace kvtwin::cli
