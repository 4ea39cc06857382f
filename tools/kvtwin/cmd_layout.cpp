// `kvtwin layout`: where every byte of a model's KV state lives in the unified pool.
//
//   kvtwin layout --model NAME [--tp N] [--page-size N] [--dtype bf16|fp16|fp8|fp32]
//                 [--total-bytes N] [--json] [--svg FILE]
//   kvtwin layout --spec FILE ...    a custom shape (docs/spec-files.md)
//   kvtwin layout --list             the built-in catalogue
//   kvtwin layout --all              every catalogue model, one compact line per sub-pool
//
// Numbers are parsed by the parsers every command shares (options.h: decimal digits; byte counts
// may end in a unit), so that "-1", "0x40" or "1e9" are refused with a message instead of being
// read as something else. Every bad input ends with one message on stderr and exit code 2; the
// report itself is built and rendered by layout_report.h.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "core/catalogue.h"
#include "core/files.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/layout_report.h"
#include "tools/kvtwin/options.h"

namespace kvtwin::cli {
namespace {

struct LayoutArgs {
  ModelSource source;
  std::uint32_t tp = 1;
  std::uint64_t page_size = kDefaultPageSize;
  std::string total_bytes = std::to_string(kDefaultTotalBytes);
  std::string dtype;
  std::string svg;
  bool json = false;
  bool list = false;
  bool all = false;
};

int fail(const Error& e) { return bad_input("layout", e); }

Result<LayoutOptions> parse_options(const LayoutArgs& a) {
  LayoutOptions o;
  o.tp = a.tp;
  o.page_size = a.page_size;
  KVTWIN_TRY(o.total_bytes, parse_byte_size(a.total_bytes, "--total-bytes"));
  if (o.total_bytes == 0)
    return make_error(ErrorKind::invalid_argument, "--total-bytes 0: the pool needs bytes (e.g. --total-bytes 4GiB)");
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d.ok()) return d.error().with_context("--dtype: ");
    o.dtype = *d;
  }
  return o;
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
      (void)bad_input("layout", report.error());
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
  const int sources =
      (a.source.model.empty() ? 0 : 1) + (a.source.spec.empty() ? 0 : 1) + (a.list ? 1 : 0) + (a.all ? 1 : 0);
  if (sources == 0)
    return fail(make_error(ErrorKind::invalid_argument,
                           "say which model: --model NAME (see --list), --spec FILE, or --all"));
  if (sources > 1)
    return fail(make_error(ErrorKind::invalid_argument, "give only one of --model, --spec, --list and --all"));
  if (a.list) return run_list(a);

  auto options = parse_options(a);
  if (!options.ok()) return fail(options.error());
  if (!a.svg.empty()) {
    if (Status s = check_output_path(a.svg, "--svg"); !s.ok()) return fail(s.error());
  }
  if (a.all) {
    if (!a.svg.empty())
      return fail(make_error(ErrorKind::invalid_argument, "--svg draws one model; use it with --model or --spec"));
    return run_all(a, *options);
  }

  auto shape = resolve_model_source(a.source, "");
  if (!shape.ok()) return fail(shape.error());
  auto report = build_layout_report(*shape, *options);
  if (!report.ok()) return fail(report.error());

  if (!a.svg.empty()) {
    auto written = write_file_atomically(a.svg, render_svg(*report));
    if (!written.ok()) return fail(written.error().with_context("--svg: cannot write: "));
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
  add_model_source_options(*app, args->source, "");
  add_tp_option(*app, args->tp, "Tensor-parallel ranks; KV heads are split over them");
  add_count(*app, "--page-size", args->page_size, "Slots per page", 1);
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
