// kvtwin replay FILE: plays a pool trace against the model, the GPU or both, checking after every
// operation, and stops at the first divergence with the operation's line. On a request trace
// (Mooncake, Azure) it runs the serving simulator and checks in one go.
//
// --html FILE writes a self-contained HTML report of the run (html_report.h): occupancy, the strip
// map, the serving charts, and the failure with the pages it involves.
//
// Exit: 0 every check passed, 1 a check failed, 2 bad usage or a file that cannot be read.
#include <cstdio>
#include <iostream>

#include "core/files.h"

#include "tools/kvtwin/command.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/trace_options.h"
#include "props/observers.h"
#include "sim/model.h"
#include "traces/replay.h"

namespace kvtwin::cli {
namespace {

struct ReplayOptions {
  std::string file;
  std::string format = "auto";
  std::string backend = "model";
  std::string json_file;
  std::string html_file;
  std::string fault;
  bool quiet = false;
  ServingOptions serving;
  CadenceOptions cadence;
  std::string bless_out;
};

// --bless OUT: the pool trace's operations with the reference model's answers as expectations
// (for hand-written regression traces: the model is the definition, SPEC.md's preamble).
int run_bless(const ReplayOptions& o) {
  Result<traces::PoolTrace> trace = traces::read_pool_trace_file(o.file);
  if (!trace.ok()) return bad_input("replay", trace.error());
  sim::Model model;
  const OpResult built = model.apply(Op(BuildPool{trace->header.config}));
  if (!built.ok())
    return bad_input("replay", make_error(ErrorKind::invalid_argument,
                                          o.file + ":1: the trace's pool cannot be built: " + built.error().message));
  for (traces::TraceLine& line : trace->lines) line.expect = model.apply(line.op);
  if (Status s = traces::write_pool_trace_file(o.bless_out, *trace); !s.ok()) return bad_input("replay", s.error());
  std::printf("kvtwin replay: wrote %s: %zu lines, each expecting the reference model's answer\n", o.bless_out.c_str(),
              trace->lines.size());
  return kExitOk;
}

int run_replay(const ReplayOptions& o, const std::string& command) {
  if (Status s = check_model_source(o.serving.source); !s.ok()) return bad_input("replay", s.error());
  if (!o.json_file.empty()) {
    if (o.json_file != "-" && same_file(o.json_file, o.file))
      return bad_input("replay", make_error(ErrorKind::invalid_argument,
                                            "--json " + o.json_file + " is the trace being replayed; give another --json"));
    if (Status s = check_output_path(o.json_file, "--json"); !s.ok()) return bad_input("replay", s.error());
  }
  if (!o.bless_out.empty()) {
    if (same_file(o.bless_out, o.file))
      return bad_input("replay", make_error(ErrorKind::invalid_argument,
                                            "--bless " + o.bless_out + " is the trace being replayed; give another path"));
    if (Status s = check_output_path(o.bless_out, "--bless"); !s.ok()) return bad_input("replay", s.error());
    return run_bless(o);
  }
  Result<traces::BackendChoice> choice = traces::parse_backend_choice(o.backend);
  if (!choice.ok()) return bad_input("replay", choice.error());
  traces::TraceFormat format{};
  if (o.format == "auto") {
    Result<traces::TraceFormat> f = traces::detect_format(o.file);
    if (!f.ok()) return bad_input("replay", f.error());
    format = *f;
  } else {
    Result<traces::TraceFormat> f = traces::parse_format_name(o.format);
    if (!f.ok()) return bad_input("replay", f.error());
    format = *f;
  }
  Result<traces::BackendSet> backends = traces::make_backend_set(*choice, o.fault, backend_options(o.serving));
  if (!backends.ok()) return bad_input("replay", backends.error());

  if (!o.html_file.empty()) {
    if (Status s = check_html_file_writable(o.html_file); !s.ok()) return bad_input("replay", s.error());
  }
  ProgressBar bar(o.quiet ? "" : "replay");
  const traces::Progress progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!o.quiet) bar.update(done, total);
  };
  Result<traces::ReplayReport> report = make_error(ErrorKind::internal, "not run");
  // The HTML report's recorder watches the run (it changes nothing in it).
  std::optional<RunRecorder> recorder;
  if (!o.html_file.empty()) recorder.emplace(format != traces::TraceFormat::pool);
  const traces::ReplayWatchers watchers = recorder ? recorder->watchers() : traces::ReplayWatchers{};
  if (format == traces::TraceFormat::pool) {
    std::printf("kvtwin replay: %s (pool trace) on %s\n", o.file.c_str(), backends->names().c_str());
    std::fflush(stdout);
    Result<traces::CheckCadence> checks = cadence(o.cadence);
    if (!checks.ok()) return bad_input("replay", checks.error());
    // The shadow, the policy and the refusal checks join the trace's own expectations whenever
    // tables are checked after every line (the default); a sparser cadence skips them.
    report = traces::replay_pool_trace_file(o.file, *backends, *checks, progress,
                                            checks->tables_every == 1 ? props::property_observer_factory()
                                                                      : traces::ObserverFactory{},
                                            watchers);
  } else {
    Result<traces::ServingParams> params = serving_params(o.serving);
    if (!params.ok()) return bad_input("replay", params.error());
    Result<traces::RequestTrace> trace =
        traces::read_request_trace(o.file, format, request_read_options(o.serving));
    if (!trace.ok()) return bad_input("replay", trace.error());
    std::printf("kvtwin replay: %s (%s request trace, %zu requests, token scale %llu, oracle seed %llu) on %s\n",
                o.file.c_str(), std::string(traces::format_name(format)).c_str(), trace->requests.size(),
                static_cast<unsigned long long>(params->token_scale), static_cast<unsigned long long>(params->seed),
                backends->names().c_str());
    std::fflush(stdout);
    Result<traces::CheckCadence> checks = cadence(o.cadence);
    if (!checks.ok()) return bad_input("replay", checks.error());
    report = traces::simulate_request_trace(*trace, *params, *backends, *checks, nullptr, progress, watchers);
  }
  bar.finish();
  if (!report.ok()) return bad_input("replay", report.error());
  if (format == traces::TraceFormat::pool)
    std::printf("trace seed %llu\n", static_cast<unsigned long long>(report->seed));
  std::printf("%s\n", traces::report_text(*report).c_str());
  if (!report->passed()) std::printf("reproduce: %s\n", command.c_str());
  if (!o.json_file.empty()) {
    Status s = write_json_file(o.json_file, traces::report_json(*report));
    if (!s.ok()) return bad_input("replay", s.error());
  }
  if (recorder) {
    Status s = write_html_file(o.html_file, render_run_html(recorder->finish(*report), command));
    if (!s.ok()) return bad_input("replay", s.error());
    std::printf("wrote the HTML report to %s\n", o.html_file.c_str());
  }
  return report->passed() ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_replay_command(CLI::App& root) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* app = root.add_subcommand(
      "replay",
      "Replay a pool trace against the model, the GPU or both, checking after every operation; on a request "
      "trace (Mooncake, Azure), simulate a server and check in one go");
  app->add_option("FILE", options->file, "a pool trace (.jsonl) or a request trace (Mooncake .jsonl, Azure .csv)")
      ->required();
  app->add_option("--format", options->format, "auto, pool, mooncake or azure")->capture_default_str();
  app->add_option("--backend", options->backend, "model, gpu or both")->capture_default_str();
  app->add_option("--json", options->json_file, "also write the report as JSON to FILE ('-': stdout)");
  app->add_option("--bless", options->bless_out,
                  "write the pool trace to FILE with the reference model's answers as every line's expectation");
  app->add_option(
      "--html", options->html_file,
      "also write a self-contained HTML report (occupancy, strip map, serving charts, the failure) to FILE");
  app->add_option("--fault", options->fault,
                  "plant a named bug in the second backend (a self-test: the replay must fail)");
  app->add_flag("--quiet", options->quiet, "no progress bar");
  add_serving_options(*app, options->serving);
  add_cadence_options(*app, options->cadence);
  Command c;
  c.app = app;
  c.run = [options, app]() { return run_replay(*options, command_line(*app)); };
  return c;
}

}  // namespace kvtwin::cli
