// kvtwin record --from REQUESTS --out TRACE.jsonl: runs a request trace (Mooncake, Azure) through
// the serving simulator against the model (or the GPU, or both, checking as it goes) and writes
// the pool trace it produced, every line with the model's result as its expectation, so that
// `kvtwin replay TRACE.jsonl` plays it back anywhere.
//
// The trace is written whole or not at all (core/files.h): under a temporary name, renamed over
// --out when the run ends, with the end line that tells a complete trace from a truncated one.
// --out must differ from --from (and --json from both), and both outputs are checked before the
// run, so a run never ends in a file it cannot write.
//
// Exit: 0 recorded and every check passed, 1 a check failed (the trace so far is written), 2 bad
// usage or input (nothing is written).
#include <cstdio>

#include "core/files.h"

#include "tools/kvtwin/command.h"
#include "tools/kvtwin/trace_options.h"
#include "traces/replay.h"

namespace kvtwin::cli {
namespace {

struct RecordOptions {
  std::string from;
  std::string out;
  std::string format = "auto";
  std::string backend = "model";
  std::string json_file;
  bool quiet = false;
  ServingOptions serving;
  CadenceOptions cadence;
};

// --out and --json: writable, and none of them the input or each other.
Status check_outputs(const RecordOptions& o) {
  if (same_file(o.from, o.out))
    return make_error(ErrorKind::invalid_argument, "--out " + o.out + " is the request trace given by --from " + o.from +
                                                       "; recording would overwrite its input: give another --out");
  if (!o.json_file.empty() && o.json_file != "-") {
    if (same_file(o.json_file, o.from) || same_file(o.json_file, o.out))
      return make_error(ErrorKind::invalid_argument,
                        "--json " + o.json_file + " is the same file as --from or --out; give another --json");
    KVTWIN_TRY_STATUS(check_output_path(o.json_file, "--json"));
  }
  return check_output_path(o.out, "--out");
}

int run_record(const RecordOptions& o, const std::string& command) {
  if (Status s = check_outputs(o); !s.ok()) return bad_input("record", s.error());
  Result<traces::BackendChoice> choice = traces::parse_backend_choice(o.backend);
  if (!choice.ok()) return bad_input("record", choice.error());
  Result<traces::TraceFormat> format =
      o.format == "auto" ? traces::detect_format(o.from) : traces::parse_format_name(o.format);
  if (!format.ok()) return bad_input("record", format.error());
  if (*format == traces::TraceFormat::pool)
    return bad_input("record", make_error(ErrorKind::invalid_argument,
                                          o.from + " is already a pool trace; record reads request traces (Mooncake "
                                                   "or Azure); replay it with kvtwin replay"));
  Result<traces::ServingParams> params = serving_params(o.serving);
  if (!params.ok()) return bad_input("record", params.error());
  Result<PoolConfig> config = traces::serving_pool_config(*params);
  if (!config.ok()) return bad_input("record", config.error());
  Result<traces::RequestTrace> trace =
      traces::read_request_trace(o.from, *format, request_read_options(o.serving));
  if (!trace.ok()) return bad_input("record", trace.error());
  Result<traces::CheckCadence> checks = cadence(o.cadence);
  if (!checks.ok()) return bad_input("record", checks.error());
  Result<traces::BackendSet> backends = traces::make_backend_set(*choice, "", backend_options(o.serving));
  if (!backends.ok()) return bad_input("record", backends.error());

  traces::TraceHeader header;
  header.config = *config;
  header.seed = params->seed;
  header.origin = traces::serving_params_json(*params, *trace);
  Result<traces::PoolTraceWriter> writer = traces::PoolTraceWriter::open(o.out, header);
  if (!writer.ok()) return bad_input("record", writer.error());

  std::printf("kvtwin record: %s (%s request trace, %zu requests, token scale %llu, oracle seed %llu) on %s -> %s\n",
              o.from.c_str(), std::string(traces::format_name(*format)).c_str(), trace->requests.size(),
              static_cast<unsigned long long>(params->token_scale), static_cast<unsigned long long>(params->seed),
              backends->names().c_str(), o.out.c_str());
  std::fflush(stdout);
  ProgressBar bar("record");
  const traces::Progress progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!o.quiet) bar.update(done, total);
  };
  Result<traces::ReplayReport> report =
      traces::simulate_request_trace(*trace, *params, *backends, *checks, &*writer, progress);
  bar.finish();
  if (!report.ok()) return bad_input("record", report.error());  // the writer leaves no file
  if (Status closed = writer->close(); !closed.ok()) return bad_input("record", closed.error());
  std::printf("%s\n", traces::report_text(*report).c_str());
  std::printf("wrote %llu operation lines to %s\n", static_cast<unsigned long long>(writer->lines_written()),
              o.out.c_str());
  if (!report->passed()) std::printf("reproduce: %s\n", command.c_str());
  if (!o.json_file.empty()) {
    Status s = write_json_file(o.json_file, traces::report_json(*report));
    if (!s.ok()) return bad_input("record", s.error());
  }
  return report->passed() ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_record_command(CLI::App& root) {
  auto options = std::make_shared<RecordOptions>();
  CLI::App* app = root.add_subcommand(
      "record", "Simulate a server on a request trace (Mooncake, Azure) and write the pool trace it produces");
  app->add_option("--from", options->from, "the request trace")->required();
  app->add_option("--out", options->out, "the pool trace to write (.jsonl)")->required();
  app->add_option("--format", options->format, "auto, mooncake or azure")->capture_default_str();
  app->add_option("--backend", options->backend, "model, gpu or both (results recorded from the first)")
      ->capture_default_str();
  app->add_option("--json", options->json_file, "also write the report as JSON to FILE ('-': stdout)");
  app->add_flag("--quiet", options->quiet, "no progress bar");
  add_serving_options(*app, options->serving);
  add_cadence_options(*app, options->cadence);
  Command c;
  c.app = app;
  c.run = [options, app]() { return run_record(*options, command_line(*app)); };
  return c;
}

}  // namespace kvtwin::cli
