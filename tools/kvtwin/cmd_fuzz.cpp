// kvtwin fuzz: seeded swarm fuzzing of the stateful properties (traces/fuzz.h). The seed is
// printed first; a failing case is shrunk, written to --out as a pool trace that reproduces it
// alone, and the exact kvtwin replay command is printed. --json and --junit write the report
// (fuzz_report.h); --merge combines the JSON reports of every shard into the report of the run.
//
// --html FILE writes a self-contained HTML report: the campaign, and for a failure the shrunk
// trace replayed with a recorder (the ops before the failure, every backend's answer, the pages
// involved on the strip map).
//
// Exit: 0 no case failed, 1 a case failed (its trace is written), 2 bad usage.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/rng.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/fuzz_report.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/shard_reports.h"
#include "tools/kvtwin/trace_options.h"
#include "props/fuzz.h"
#include "props/observers.h"
#include "traces/replay.h"

namespace kvtwin::cli {
namespace {

struct FuzzOptions {
  std::string backend = "model";
  std::uint64_t seconds = 0;
  std::uint64_t cases = 0;
  std::uint64_t seed = 1;
  std::string config = "random";
  std::string out = "kvtwin-out/fuzz-failures";  // git-ignored
  std::uint64_t ops = 200;
  std::int64_t only_case = -1;
  std::string fault;
  std::string json_file;
  std::string junit_file;
  std::string html_file;
  bool quiet = false;
  ShardOptions shard;
  std::vector<std::string> merge;  // shard reports to combine instead of running
};

int run_fuzz(const FuzzOptions& o, const std::string& command) {
  // The seed first, before anything can fail.
  std::printf("kvtwin fuzz: seed %llu\n", static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);
  Result<traces::BackendChoice> choice = traces::parse_backend_choice(o.backend);
  if (!choice.ok()) return bad_input("fuzz", choice.error());
  Result<Shard> shard = resolve_shard(o.shard);
  if (!shard.ok()) return bad_input("fuzz", shard.error());
  if (o.seconds != 0 && o.cases != 0)
    return bad_input("fuzz", make_error(ErrorKind::invalid_argument, "give --seconds or --cases, not both"));
  if (!o.json_file.empty()) {
    if (Status s = check_output_path(o.json_file, "--json"); !s.ok()) return bad_input("fuzz", s.error());
  }
  if (!o.junit_file.empty()) {
    if (Status s = check_output_path(o.junit_file, "--junit"); !s.ok()) return bad_input("fuzz", s.error());
  }
  if (Status s = check_output_folder(o.out, "--out"); !s.ok()) return bad_input("fuzz", s.error());
  if (Result<PoolConfig> c = props::named_config(o.config, o.seed); !c.ok()) return bad_input("fuzz", c.error());
  const props::BackendFactory factory = [&] { return traces::make_backend_set(*choice, o.fault); };
  if (Result<traces::BackendSet> probe = factory(); !probe.ok()) return bad_input("fuzz", probe.error());

  if (!o.html_file.empty()) {
    if (Status s = check_html_file_writable(o.html_file); !s.ok()) return bad_input("fuzz", s.error());
  }
  const std::uint64_t cases = o.only_case >= 0 ? 0 : (o.cases != 0 ? o.cases : (o.seconds != 0 ? UINT64_MAX : 100));
  const auto started = std::chrono::steady_clock::now();
  const auto out_of_time = [&] {
    return o.seconds != 0 &&
           std::chrono::steady_clock::now() - started >= std::chrono::seconds(static_cast<std::int64_t>(o.seconds));
  };
  std::printf("backend %s%s, configuration %s, %llu ops a case, shard %llu of %llu, %s\n",
              std::string(traces::backend_choice_name(*choice)).c_str(),
              o.fault.empty() ? "" : (" with planted fault " + o.fault).c_str(), o.config.c_str(),
              static_cast<unsigned long long>(o.ops), static_cast<unsigned long long>(shard->index),
              static_cast<unsigned long long>(shard->count),
              o.only_case >= 0 ? ("case " + std::to_string(o.only_case) + " only").c_str()
              : o.seconds != 0 ? (std::to_string(o.seconds) + " seconds").c_str()
                               : (std::to_string(cases) + " cases").c_str());
  std::fflush(stdout);

  ProgressBar bar("fuzz");
  std::uint64_t ran = 0, ops = 0, checks = 0;
  std::map<std::string, std::uint64_t> cases_by_model;  // for the HTML report
  std::optional<props::CaseResult> failed;
  const auto run_one = [&](std::uint64_t index) -> Status {
    props::CaseSpec spec;
    spec.index = index;
    spec.seed = props::case_seed(o.seed, index, o.config);
    spec.config = o.config;
    spec.ops = o.ops;
    KVTWIN_TRY(props::CaseResult r, props::run_case(spec, factory));
    ++ran;
    ++cases_by_model[r.config.shape.name];
    ops += r.stats.ops;
    checks += r.stats.checks_passed() + r.shadow_checks;
    if (r.failure) failed = std::move(r);
    return ok_status();
  };
  if (o.only_case >= 0) {
    if (Status s = run_one(static_cast<std::uint64_t>(o.only_case)); !s.ok()) return bad_input("fuzz", s.error());
  } else {
    for (std::uint64_t i = 0; i < cases && !failed && !out_of_time(); ++i) {
      if (!shard->mine(i)) continue;
      if (Status s = run_one(i); !s.ok()) return bad_input("fuzz", s.error());
      if (!o.quiet && o.seconds == 0) bar.update(i + 1, cases);
    }
  }
  bar.finish();
  FuzzReport report;
  report.seed = o.seed;
  report.backend = o.backend;
  report.config = o.config;
  report.fault = o.fault;
  report.options = {{"cases", o.cases},
                    {"seconds", o.seconds},
                    {"ops", o.ops},
                    {"case", o.only_case >= 0 ? nlohmann::json(o.only_case) : nlohmann::json()}};
  report.shard_index = shard->index;
  report.shard_count = shard->count;
  report.cases = ran;
  report.ops = ops;
  report.checks_passed = checks;
  FuzzHtml html;
  html.seed = o.seed;
  html.backend = o.backend;
  html.configuration = o.config;
  html.fault = o.fault;
  html.ops_per_case = o.ops;
  html.shard_index = shard->index;
  html.shard_count = shard->count;
  html.cases = ran;
  html.ops = ops;
  html.checks = checks;
  html.cases_by_model.assign(cases_by_model.begin(), cases_by_model.end());
  if (failed) {
    props::CaseResult& r = *failed;
    std::printf("case %llu failed: %s check at op %llu of the case; shrinking\n",
                static_cast<unsigned long long>(r.spec.index), r.failure->failure.check.c_str(),
                static_cast<unsigned long long>(r.failure->ops.size()));
    std::fflush(stdout);
    props::shrink_case(r, factory);
    std::printf("shrunk %llu ops to %llu in %llu replays\n",
                static_cast<unsigned long long>(r.failure->shrink_stats.ops_before),
                static_cast<unsigned long long>(r.failure->shrink_stats.ops_after),
                static_cast<unsigned long long>(r.failure->shrink_stats.replays));
    std::string reproduce_fuzz = "kvtwin fuzz --seed " + std::to_string(o.seed) + " --case " +
                                 std::to_string(r.spec.index) + " --ops " + std::to_string(o.ops) + " --config " +
                                 o.config + " --backend " + o.backend + (o.fault.empty() ? "" : " --fault " + o.fault);
    nlohmann::json origin = {{"producer", "kvtwin fuzz"},
                             {"run_seed", o.seed},
                             {"case", r.spec.index},
                             {"case_seed", r.spec.seed},
                             {"config", o.config},
                             {"swarm", r.swarm},
                             {"backend", o.backend},
                             {"fault", o.fault},
                             {"check", r.failure->failure.check},
                             {"ops_before_shrinking", r.failure->shrink_stats.ops_before},
                             {"reproduce", reproduce_fuzz}};
    const traces::PoolTrace trace = props::failure_trace(r, factory, origin);
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    const std::string path = (std::filesystem::path(o.out) / ("fuzz-seed" + std::to_string(o.seed) + "-case" +
                                                              std::to_string(r.spec.index) + ".jsonl"))
                                 .string();
    // Serialized once: the file and its digest are the same bytes.
    std::ostringstream trace_text;
    traces::write_pool_trace(trace_text, trace);
    if (Status s = write_file_atomically(path, trace_text.str()); !s.ok()) return bad_input("fuzz", s.error());
    std::printf("wrote the shrunk failure (%zu ops) to %s\n", trace.lines.size(), path.c_str());
    FuzzFailure f;
    f.case_index = r.spec.index;
    f.case_seed = r.spec.seed;
    f.configuration = r.config.shape.name;
    f.swarm = r.swarm;
    f.check = r.failure->failure.check;
    f.message = r.failure->failure.message;
    f.description = r.failure->failure.describe();
    f.trace = path;
    f.replay = "kvtwin replay " + path + " --backend " + o.backend + (o.fault.empty() ? "" : " --fault " + o.fault);
    f.reproduce = reproduce_fuzz;
    f.ops_before = r.failure->shrink_stats.ops_before;
    f.ops_after = r.failure->shrink_stats.ops_after;
    f.trace_digest = hex_digest(fnv1a64(trace_text.str()));
    if (!o.html_file.empty()) {
      FuzzHtmlFailure h;
      h.case_index = f.case_index;
      h.case_seed = f.case_seed;
      h.configuration = r.config.shape.name + " (" + o.config + ")";
      h.swarm = f.swarm;
      h.check = f.check;
      h.message = f.description;
      h.ops_before_shrinking = f.ops_before;
      h.ops_after_shrinking = f.ops_after;
      h.trace_path = path;
      h.reproduce_replay = f.replay;
      h.reproduce_case = f.reproduce;
      html.failure = h;
      // The shrunk trace replayed as `kvtwin replay` would (the gate's checks too), with a
      // recorder watching.
      Result<traces::BackendSet> backends = factory();
      if (!backends.ok()) return bad_input("fuzz", backends.error());
      RunRecorder recorder(/*serving=*/false);
      Result<traces::ReplayReport> replayed = traces::replay_pool_trace_file(
          path, *backends, {}, {}, props::property_observer_factory(), recorder.watchers());
      if (!replayed.ok()) return bad_input("fuzz", replayed.error());
      html.failure_replay = recorder.finish(*replayed);
    }
    report.failures.push_back(std::move(f));
  }
  const int exit_code = finish_fuzz_report(report, o.json_file, o.junit_file);
  if (!o.html_file.empty() && exit_code != kExitBadInput) {
    if (Status s = write_html_file(o.html_file, render_fuzz_html(html, command)); !s.ok())
      return bad_input("fuzz", s.error());
    std::printf("wrote the HTML report to %s\n", o.html_file.c_str());
  }
  return exit_code;
}

}  // namespace

Command add_fuzz_command(CLI::App& root) {
  auto o = std::make_shared<FuzzOptions>();
  CLI::App* app = root.add_subcommand(
      "fuzz", "Seeded swarm fuzzing of the stateful properties; a failure is shrunk and written as a pool trace");
  app->add_option("--backend", o->backend, "model, gpu or both")->capture_default_str();
  auto* seconds = add_count(*app, "--seconds", o->seconds, "run cases for this long (checked between cases)", 0,
                            UINT64_MAX, false);
  auto* cases = add_count(*app, "--cases", o->cases, "run this many cases (default 100)", 0, UINT64_MAX, false);
  seconds->excludes(cases);
  add_count(*app, "--seed", o->seed, "the run's seed; every case's seed derives from it");
  app->add_option("--config", o->config,
                  "random, or MODEL[/tpN][/psN][/eager|lazy][/tables] (e.g. gpt-oss-20b/ps4/lazy)")
      ->capture_default_str();
  app->add_option("--out", o->out, "where a shrunk failure's trace is written")->capture_default_str();
  add_count(*app, "--ops", o->ops, "operations a case", 1, kMaxOpsPerCase);
  add_optional_count(*app, "--case", o->only_case, "run only this case of the run (to reproduce one)");
  app->add_option("--fault", o->fault, "plant a named bug in the second backend (a self-test: the run must fail)");
  app->add_option("--json", o->json_file, "also write the report as JSON to FILE ('-': stdout)");
  app->add_option("--junit", o->junit_file, "also write a JUnit XML report to FILE");
  app->add_option("--html", o->html_file,
                  "also write a self-contained HTML report (the campaign; a failure's shrunk trace replayed and drawn)");
  app->add_flag("--quiet", o->quiet, "no progress bar");
  add_shard_options(*app, o->shard);
  app->add_option("--merge", o->merge,
                  "instead of running, combine the --json reports of every shard of one run into its report");
  Command c;
  c.app = app;
  c.run = [o, app] {
    if (o->merge.empty()) return run_fuzz(*o, command_line(*app));
    if (Status s = only_merge_options(*app); !s.ok()) return bad_input("fuzz", s.error());
    return merge_fuzz_reports(o->merge, o->json_file, o->junit_file);
  };
  return c;
}

}  // namespace kvtwin::cli
