// kvtwin fuzz: seeded swarm fuzzing of the stateful properties (traces/fuzz.h). The seed is
// printed first; a failing case is shrunk, written to --out as a pool trace that reproduces it
// alone, and the exact kvtwin replay command is printed.
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

#include <nlohmann/json.hpp>

#include "tools/kvtwin/command.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/trace_options.h"
#include "traces/fuzz.h"
#include "traces/replay.h"

namespace kvtwin::cli {
namespace {

struct FuzzOptions {
  std::string backend = "model";
  std::uint64_t seconds = 0;
  std::uint64_t cases = 0;
  std::uint64_t seed = 1;
  std::string config = "random";
  std::string out = "fuzz-failures";
  std::uint64_t ops = 200;
  std::int64_t only_case = -1;
  std::string fault;
  std::string json_file;
  std::string html_file;
  bool quiet = false;
  ShardOptions shard;
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
  if (o.ops == 0) return bad_input("fuzz", make_error(ErrorKind::invalid_argument, "--ops must be at least 1"));
  if (Result<PoolConfig> c = traces::named_config(o.config, o.seed); !c.ok()) return bad_input("fuzz", c.error());
  const traces::BackendFactory factory = [&] { return traces::make_backend_set(*choice, o.fault); };
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
  std::optional<traces::CaseResult> failed;
  const auto run_one = [&](std::uint64_t index) -> Status {
    traces::CaseSpec spec;
    spec.index = index;
    spec.seed = traces::case_seed(o.seed, index, o.config);
    spec.config = o.config;
    spec.ops = o.ops;
    KVTWIN_TRY(traces::CaseResult r, traces::run_case(spec, factory));
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
  std::printf("%llu cases, %llu ops, %llu checks passed\n", static_cast<unsigned long long>(ran),
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(checks));
  nlohmann::json report = {{"seed", o.seed},
                           {"backend", o.backend},
                           {"config", o.config},
                           {"cases", ran},
                           {"ops", ops},
                           {"checks_passed", checks},
                           {"fault", o.fault},
                           {"passed", !failed},
                           {"shard_index", shard->index},
                           {"shard_count", shard->count}};
  FuzzReport html;
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
  int exit_code = kExitOk;
  if (failed) {
    traces::CaseResult& r = *failed;
    std::printf("FAIL: case %llu (case seed %llu), configuration %s, swarm %s\n",
                static_cast<unsigned long long>(r.spec.index), static_cast<unsigned long long>(r.spec.seed),
                r.config.shape.name.c_str(), r.swarm.c_str());
    std::printf("  op %llu of the case: %s check failed\n  %s\n",
                static_cast<unsigned long long>(r.failure->ops.size()), r.failure->failure.check.c_str(),
                r.failure->failure.message.c_str());
    traces::shrink_case(r, factory);
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
    const traces::PoolTrace trace = traces::failure_trace(r, factory, origin);
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    const std::string path = (std::filesystem::path(o.out) / ("fuzz-seed" + std::to_string(o.seed) + "-case" +
                                                              std::to_string(r.spec.index) + ".jsonl"))
                                 .string();
    if (Status s = traces::write_pool_trace_file(path, trace); !s.ok()) return bad_input("fuzz", s.error());
    const std::string replay =
        "kvtwin replay " + path + " --backend " + o.backend + (o.fault.empty() ? "" : " --fault " + o.fault);
    std::printf("wrote the shrunk failure (%zu ops) to %s\n", trace.lines.size(), path.c_str());
    std::printf("%s\n", r.failure->failure.describe().c_str());
    std::printf("reproduce: %s\n", replay.c_str());
    std::printf("reproduce the case: %s\n", reproduce_fuzz.c_str());
    report["failure"] = {{"case", r.spec.index},
                         {"case_seed", r.spec.seed},
                         {"check", r.failure->failure.check},
                         {"message", r.failure->failure.message},
                         {"trace", path},
                         {"replay", replay},
                         {"ops_before", r.failure->shrink_stats.ops_before},
                         {"ops_after", r.failure->shrink_stats.ops_after}};
    exit_code = kExitCheckFailed;
    if (!o.html_file.empty()) {
      FuzzFailure f;
      f.case_index = r.spec.index;
      f.case_seed = r.spec.seed;
      f.configuration = r.config.shape.name + " (" + o.config + ")";
      f.swarm = r.swarm;
      f.check = r.failure->failure.check;
      f.message = r.failure->failure.describe();
      f.ops_before_shrinking = r.failure->shrink_stats.ops_before;
      f.ops_after_shrinking = r.failure->shrink_stats.ops_after;
      f.trace_path = path;
      f.reproduce_replay = replay;
      f.reproduce_case = reproduce_fuzz;
      html.failure = f;
      // The shrunk trace replayed as `kvtwin replay` would, with a recorder watching.
      Result<traces::BackendSet> backends = factory();
      if (!backends.ok()) return bad_input("fuzz", backends.error());
      RunRecorder recorder(/*serving=*/false);
      Result<traces::ReplayReport> replayed =
          traces::replay_pool_trace_file(path, *backends, {}, {}, recorder.observers());
      if (!replayed.ok()) return bad_input("fuzz", replayed.error());
      html.failure_replay = recorder.finish(*replayed);
    }
  }
  if (!o.html_file.empty()) {
    if (Status s = write_html_file(o.html_file, render_fuzz_html(html, command)); !s.ok())
      return bad_input("fuzz", s.error());
    std::printf("wrote the HTML report to %s\n", o.html_file.c_str());
  }
  if (!o.json_file.empty()) {
    if (Status s = write_json_file(o.json_file, report); !s.ok()) return bad_input("fuzz", s.error());
  }
  return exit_code;
}

}  // namespace

Command add_fuzz_command(CLI::App& root) {
  auto o = std::make_shared<FuzzOptions>();
  CLI::App* app = root.add_subcommand(
      "fuzz", "Seeded swarm fuzzing of the stateful properties; a failure is shrunk and written as a pool trace");
  app->add_option("--backend", o->backend, "model, gpu or both")->capture_default_str();
  auto* seconds = app->add_option("--seconds", o->seconds, "run cases for this long (checked between cases)");
  auto* cases = app->add_option("--cases", o->cases, "run this many cases (default 100)");
  seconds->excludes(cases);
  app->add_option("--seed", o->seed, "the run's seed; every case's seed derives from it")->capture_default_str();
  app->add_option("--config", o->config,
                  "random, or MODEL[/tpN][/psN][/eager|lazy][/tables] (e.g. gpt-oss-20b/ps4/lazy)")
      ->capture_default_str();
  app->add_option("--out", o->out, "where a shrunk failure's trace is written")->capture_default_str();
  app->add_option("--ops", o->ops, "operations a case")->capture_default_str();
  app->add_option("--case", o->only_case, "run only this case of the run (to reproduce one)");
  app->add_option("--fault", o->fault, "plant a named bug in the second backend (a self-test: the run must fail)");
  app->add_option("--json", o->json_file, "also write the report as JSON to FILE ('-': stdout)");
  app->add_option("--html", o->html_file,
                  "also write a self-contained HTML report (the campaign; a failure's shrunk trace replayed and drawn)");
  app->add_flag("--quiet", o->quiet, "no progress bar");
  add_shard_options(*app, o->shard);
  Command c;
  c.app = app;
  c.run = [o, app] { return run_fuzz(*o, command_line(*app)); };
  return c;
}

}  // namespace kvtwin::cli
