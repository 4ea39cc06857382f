// kvtwin check: the gate. With no argument it runs, on the model (and side by side with the GPU
// when a device exists):
//   properties  seeded swarm cases of the stateful properties (traces/fuzz.h) over random
//               configurations and every catalogue model, eager and lazy, several page sizes;
//   regress     every pool trace under traces/regress/;
//   requests    the committed request-trace samples (traces/samples/), and a slice from the
//               middle of each shared request trace (../shared/traces-external/) through the
//               serving simulator, with bytes.
// GPU parts are reported as skipped, by name, when no device exists (or none is built), and
// the shared traces are skipped, by name, when their folder is absent. Work items run on
// --jobs threads and are reported in a fixed order; --shard-index/--shard-count (or GoogleTest's
// GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS) split them over machines. A summary table ends the run;
// --junit and --json write reports for CI systems (check_report.h); --merge combines the JSON
// reports of every shard into the report of the whole run. Durations appear only in those reports
// and the table; no result depends on them (except the property cases --seconds allows).
//
// --html FILE writes the same as a self-contained HTML page: the table of parts, charts of
// items and time per part, and every failure with its reproduce command (html_report.h).
//
// Exit: 0 everything passed, 1 something failed, 2 bad usage.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <sys/resource.h>
#endif

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/files.h"
#include "core/printable.h"
#include "core/profile_switch.h"
#include "tools/kvtwin/check_report.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/command.h"
#include "tools/kvtwin/fresh_process.h"
#include "tools/kvtwin/shard_reports.h"
#include "tools/kvtwin/trace_options.h"
#include "props/fuzz.h"
#include "props/observers.h"
#include "traces/replay.h"

#ifndef KVTWIN_SOURCE_DIR
#define KVTWIN_SOURCE_DIR "."
#endif

namespace kvtwin::cli {
namespace {

namespace fs = std::filesystem;

struct CheckOptions {
  std::string backend = "auto";
  std::uint64_t seconds = 0;
  std::uint64_t cases = 24;
  std::uint64_t random_cases = 200;
  std::uint64_t ops = 200;
  std::uint64_t seed = 1;
  std::string junit_file;
  std::string json_file;
  std::string html_file;
  std::string traces_dir;
  std::string regress_dir;
  std::string regress_large_dir;
  std::string samples_dir;
  std::string out = "kvtwin-out/check-failures";  // git-ignored
  std::string fault;
  std::uint32_t jobs = 0;
  bool quiet = false;
  ShardOptions shard;
  std::vector<std::string> merge;  // shard reports to combine instead of running
  std::uint64_t cases_per_item = 0;  // 0: one property item per configuration (selftest: small items)
};

struct Item {
  std::string part;  // properties, regress, requests
  std::string name;
  std::string backend;  // model, model+gpu
  std::string skip;     // non-empty: skipped, and why
  std::function<ItemResult()> run;
  ItemResult result;
  // Among the items of its part, a heavier one starts earlier (longest_first): an estimate of its
  // cost, never of its result.
  double weight = 0;
};

// Where the repository is: the working folder when it holds traces/regress, else the source
// folder this kvtwin was built from.
fs::path repository_root() {
  if (fs::exists("traces/regress")) return fs::path(".");
  return fs::path(KVTWIN_SOURCE_DIR);
}

// A property item: `cases` seeded cases of one configuration (or cases until `deadline`).
// Cases [first, first + cases) of one configuration (or, with a deadline, from `first` until it).
ItemResult run_property_item(const std::string& config, const props::BackendFactory& factory, const CheckOptions& o,
                             std::uint64_t first, std::uint64_t cases,
                             std::optional<std::chrono::steady_clock::time_point> deadline,
                             const std::string& backend_flag) {
  ItemResult r;
  std::uint64_t ran = 0;
  for (std::uint64_t j = first;
       deadline ? (j == first || std::chrono::steady_clock::now() < *deadline) : j < first + cases; ++j) {
    props::CaseSpec spec;
    spec.index = j;
    spec.seed = props::case_seed(o.seed, j, config);
    spec.config = config;
    spec.ops = o.ops;
    set_failure_context("case " + std::to_string(j) + " of configuration " + config + " (case seed " +
                        std::to_string(spec.seed) + "); reproduce with: kvtwin fuzz --seed " + std::to_string(o.seed) +
                        " --case " + std::to_string(j) + " --ops " + std::to_string(o.ops) + " --config " + config +
                        " --backend " + backend_flag);
    Result<props::CaseResult> c = props::run_case(spec, factory);
    if (!c.ok()) {
      r.state = ItemResult::State::failed;
      r.failure = "case " + std::to_string(j) + " could not run: " + c.error().message;
      return r;
    }
    ++ran;
    r.ops += c->stats.ops;
    r.checks += c->stats.checks_passed() + c->shadow_checks;
    if (c->failure) {
      props::ShrinkOptions shrink;
      // The gate reports many items; kvtwin fuzz shrinks harder. An operation on a pool of more
      // than 64 MiB of bytes (the catalogue's largest MLA entries at 64-token pages) copies
      // multi-MiB page envelopes, about 2 ms an operation: there the gate shrinks for at most
      // 8000 replayed operations (a deterministic budget); `kvtwin fuzz --case` shrinks fully.
      shrink.max_replays = 1000;
      if (!c->config.tables_only && c->config.total_bytes > (std::uint64_t{64} << 20)) shrink.max_replayed_ops = 8000;
      props::shrink_case(*c, factory, shrink);
      const std::string reproduce_fuzz = "kvtwin fuzz --seed " + std::to_string(o.seed) + " --case " +
                                         std::to_string(j) + " --ops " + std::to_string(o.ops) + " --config " + config +
                                         " --backend " + backend_flag;
      nlohmann::json origin = {{"producer", "kvtwin check"},
                               {"run_seed", o.seed},
                               {"case", j},
                               {"case_seed", spec.seed},
                               {"config", config},
                               {"swarm", c->swarm},
                               {"backend", backend_flag},
                               {"check", c->failure->failure.check},
                               {"reproduce", reproduce_fuzz}};
      const traces::PoolTrace trace = props::failure_trace(*c, factory, origin);
      std::error_code ec;
      fs::create_directories(o.out, ec);
      std::string safe = config;
      std::replace(safe.begin(), safe.end(), '/', '_');
      const std::string path = (fs::path(o.out) / ("check-" + safe + "-case" + std::to_string(j) + ".jsonl")).string();
      Status written = traces::write_pool_trace_file(path, trace);
      r.state = ItemResult::State::failed;
      r.check = c->failure->failure.check;
      r.reproducer_ops = c->failure->shrunk.size();
      r.failure = "case " + std::to_string(j) + " (case seed " + std::to_string(spec.seed) + ", swarm " + c->swarm +
                  ") failed; shrunk " + std::to_string(c->failure->shrink_stats.ops_before) + " ops to " +
                  std::to_string(c->failure->shrink_stats.ops_after) + "\n" + c->failure->failure.describe();
      if (written.ok()) {
        r.reproduce = "kvtwin replay " + path + " --backend " + backend_flag + "\n  or: " + reproduce_fuzz;
      } else {
        r.reproduce = reproduce_fuzz + "   (the trace could not be written: " + written.error().message + ")";
      }
      break;
    }
  }
  r.detail = std::to_string(ran) + " cases";
  return r;
}

ItemResult from_report(const traces::ReplayReport& report, const std::string& reproduce) {
  ItemResult r;
  r.ops = report.stats.ops;
  r.checks = report.stats.checks_passed();
  if (!report.passed()) {
    r.state = ItemResult::State::failed;
    r.failure = report.failure->describe();
    r.reproduce = reproduce;
    r.check = report.failure->check;
    r.reproducer_ops = report.failure->step + 1;
  }
  return r;
}

struct RequestSlice {
  std::string name;
  std::string file;  // relative to its folder
  traces::TraceFormat format;
  std::uint64_t skip = 0;
  std::uint64_t requests = 0;
  traces::ServingParams params;
  std::string flags;  // the replay options that reproduce it
};

traces::ServingParams slice_params(const std::string& model, std::uint32_t tp, std::uint64_t page_size,
                                   std::uint64_t pool_bytes, std::uint64_t scale, CompactionMode mode,
                                   std::uint64_t requests) {
  traces::ServingParams p;
  p.model = model;
  p.tp = tp;
  p.page_size = page_size;
  p.pool_bytes = pool_bytes;
  p.token_scale = scale;
  p.mode = mode;
  p.max_requests = requests;
  p.max_running = 32;
  p.checkpoint_every = 64;
  p.seed = 1;
  return p;
}

std::string slice_flags(const traces::ServingParams& p, std::uint64_t skip) {
  return (skip != 0 ? "--skip-requests " + std::to_string(skip) + " " : std::string()) + "--model " + p.model +
         " --tp " + std::to_string(p.tp) + " --page-size " + std::to_string(p.page_size) + " --pool-bytes " +
         std::to_string(p.pool_bytes) + " --token-scale " + std::to_string(p.token_scale) + " --mode " +
         (p.mode == CompactionMode::lazy ? "lazy" : "eager") + " --max-running " + std::to_string(p.max_running) +
         " --checkpoint-every " + std::to_string(p.checkpoint_every) + " --requests " + std::to_string(p.max_requests) +
         (p.tables_only ? " --tables-only" : "") +
         // The gate's slices write real entries; replay's default with bytes is shrunk ones.
         (!p.tables_only && !p.shrink_entries ? " --entries full" : "");
}

ItemResult run_request_item(const fs::path& path, const RequestSlice& slice, const props::BackendFactory& factory,
                            const std::string& backend_flag) {
  ItemResult r;
  Result<traces::RequestTrace> trace =
      traces::read_request_trace(path.string(), slice.format, {slice.requests, slice.skip});
  if (!trace.ok()) {
    r.state = ItemResult::State::failed;
    r.failure = trace.error().message;
    return r;
  }
  Result<traces::BackendSet> backends = factory();
  if (!backends.ok()) {
    r.state = ItemResult::State::failed;
    r.failure = backends.error().message;
    return r;
  }
  Result<traces::ReplayReport> report = traces::simulate_request_trace(*trace, slice.params, *backends, {});
  if (!report.ok()) {
    r.state = ItemResult::State::failed;
    r.failure = report.error().message;
    return r;
  }
  r = from_report(*report, "kvtwin replay " + path.string() + " " + slice.flags + " --backend " + backend_flag);
  const traces::ServingSummary& s = *report->serving;
  char hit[32];
  std::snprintf(hit, sizeof hit, "%.1f%%", 100.0 * s.prefix_hit_rate());
  r.detail = std::to_string(s.requests_served) + " requests, " + std::to_string(s.retractions) + " retractions, hit " +
             hit + ", " + std::to_string(s.compaction_moves) + " moves, " + std::to_string(s.swa_freed_pages) +
             " sliding-window frees";
  return r;
}

// What a gate run plays against and where its inputs are.
struct GateSetup {
  bool with_gpu = false;
  std::string backend_flag;  // what a reproduce command passes: "model", "both --fault X"
  std::string backend_names;
  props::BackendFactory factory;
  fs::path regress_dir, regress_large_dir, samples_dir, traces_dir;
  std::uint32_t jobs = 1;
};

// Resolves the backends, the fault and the folders. Bad usage is an Error (exit 2): an unknown
// backend or fault, a GPU asked for where none is, a folder named explicitly that is missing.
Result<GateSetup> gate_setup(const CheckOptions& o) {
  GateSetup g;
  if (o.backend != "auto" && o.backend != "model" && o.backend != "gpu" && o.backend != "both")
    return make_error(ErrorKind::invalid_argument, "unknown backend '" + o.backend + "'; use auto, model, gpu or both");
  const bool gpu_here = traces::gpu_device_available();
  if ((o.backend == "gpu" || o.backend == "both") && !gpu_here)
    return make_error(ErrorKind::unsupported, traces::gpu_unavailable_reason());
  KVTWIN_TRY(const traces::FaultChoice fault, traces::parse_fault_choice(o.fault));
  const bool gpu_fault = !fault.names.empty() && fault.site == traces::FaultSite::gpu;
  if (gpu_fault && !gpu_here)
    return make_error(ErrorKind::unsupported,
                      "fault '" + o.fault + "' is a GPU switch: " + traces::gpu_unavailable_reason());
  // What runs: the model alone, or the model and the GPU side by side (`gpu` alone plays the GPU
  // with every runner check: its table invariants, its own verify, the shadow's predictions).
  g.with_gpu = o.backend == "gpu" || o.backend == "both" || (o.backend == "auto" && gpu_here);
  const traces::BackendChoice choice = o.backend == "gpu" ? traces::BackendChoice::gpu
                                       : g.with_gpu       ? traces::BackendChoice::both
                                                          : traces::BackendChoice::model;
  g.backend_flag = std::string(traces::backend_choice_name(choice)) + (o.fault.empty() ? "" : " --fault " + o.fault);
  const std::string fault_text = o.fault;
  g.factory = [choice, fault_text] { return traces::make_backend_set(choice, fault_text); };
  KVTWIN_TRY(const traces::BackendSet probe, g.factory());
  g.backend_names = probe.names();

  const fs::path root = repository_root();
  g.regress_dir = o.regress_dir.empty() ? root / "traces" / "regress" : fs::path(o.regress_dir);
  g.regress_large_dir = o.regress_large_dir.empty() ? root / "traces" / "regress-large" : fs::path(o.regress_large_dir);
  g.samples_dir = o.samples_dir.empty() ? root / "traces" / "samples" : fs::path(o.samples_dir);
  g.traces_dir = o.traces_dir.empty() ? root / ".." / "shared" / "traces-external" : fs::path(o.traces_dir);
  // A folder named on the command line must exist: a typo must not turn into a skipped part.
  const std::pair<const std::string*, const char*> named[] = {{&o.regress_dir, "--regress-dir"},
                                                              {&o.regress_large_dir, "--regress-large-dir"},
                                                              {&o.samples_dir, "--samples-dir"},
                                                              {&o.traces_dir, "--traces-dir"}};
  for (const auto& [value, flag] : named)
    if (!value->empty() && !fs::is_directory(*value))
      return make_error(ErrorKind::io, std::string(flag) + " " + *value + " is not a folder");
  g.jobs = std::max<std::uint32_t>(1, o.jobs != 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency()));
  return g;
}

// Every work item of the gate, in its fixed order: properties, regression traces, request traces,
// then the GPU's parts skipped by name where they cannot run.
std::vector<Item> gate_items(const CheckOptions& o, const GateSetup& g) {
  const bool with_gpu = g.with_gpu;
  const std::string& backend_flag = g.backend_flag;
  const std::string& backend_names = g.backend_names;
  const props::BackendFactory& factory = g.factory;
  const fs::path& regress_dir = g.regress_dir;
  const fs::path& regress_large_dir = g.regress_large_dir;
  const fs::path& samples_dir = g.samples_dir;
  const fs::path& traces_dir = g.traces_dir;
  const std::uint32_t jobs = g.jobs;
  std::vector<Item> items;
  // Properties.
  std::vector<std::string> configs = {"random"};
  for (const std::string& c : props::catalogue_config_names()) configs.push_back(c);
  const std::uint64_t property_items = configs.size();
  const auto cases_of = [&o](const std::string& config) { return config == "random" ? o.random_cases : o.cases; };
  // Cases [first, first + cases) of one configuration, named by their range unless they are all of it.
  // A property item's weight: the bytes its cases' pools hold (tables-only pools none), times its
  // cases; the random configuration's pools vary, weighed as the catalogue's mean.
  const auto pool_bytes_of = [](const std::string& config) -> double {
    const Result<PoolConfig> c = props::named_config(config, 1);
    return c.ok() && !c->tables_only ? static_cast<double>(c->total_bytes) : 0.0;
  };
  double mean_pool = 0;
  for (const std::string& config : configs)
    if (config != "random") mean_pool += pool_bytes_of(config) / static_cast<double>(configs.size() - 1);
  const auto add_cases = [&](const std::string& config, std::uint64_t first, std::uint64_t cases) {
    Item item;
    item.weight = static_cast<double>(cases) * (config == "random" ? mean_pool : pool_bytes_of(config));
    item.part = "properties";
    item.name = cases == cases_of(config)
                    ? config
                    : config + " cases " + std::to_string(first) + ".." + std::to_string(first + cases - 1);
    item.backend = backend_names;
    item.run = [config, factory, &o, first, cases, backend_flag] {
      return run_property_item(config, factory, o, first, cases, std::nullopt, backend_flag);
    };
    items.push_back(std::move(item));
  };
  if (o.cases_per_item != 0) {
    // Small items, case-major (cases 0..k-1 of every configuration, then the next k, ...): a
    // self-test that stops at the earliest failed item reaches it soon, on any number of threads.
    const std::uint64_t most = std::max(o.cases, o.random_cases);
    for (std::uint64_t first = 0; first < most; first += o.cases_per_item)
      for (const std::string& config : configs)
        if (first < cases_of(config)) add_cases(config, first, std::min(o.cases_per_item, cases_of(config) - first));
  } else if (o.seconds == 0) {
    // Without a time budget, a configuration's cases go in items of at most kGateChunkCases (the
    // random configuration's of 4x that), so that no item is many times longer than the rest and
    // the gate's wall time on N threads stays near its thread time over N. Cases are seeded by
    // their index: the split changes no case.
    constexpr std::uint64_t kGateChunkCases = 12;
    for (const std::string& config : configs) {
      const std::uint64_t chunk = config == "random" ? 4 * kGateChunkCases : kGateChunkCases;
      for (std::uint64_t first = 0; first < cases_of(config); first += chunk)
        add_cases(config, first, std::min(chunk, cases_of(config) - first));
    }
  } else {
    // With --seconds, one item a configuration, with an equal share of the threads' time (and at
    // least one case), so the property part takes about --seconds of wall time.
    for (const std::string& config : configs) {
      Item item;
      item.part = "properties";
      item.name = config;
      item.backend = backend_names;
      item.run = [config, factory, &o, cases = cases_of(config), property_items, jobs, backend_flag] {
        const auto share = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
            static_cast<double>(o.seconds) * jobs / static_cast<double>(property_items)));
        return run_property_item(config, factory, o, 0, cases, std::chrono::steady_clock::now() + share, backend_flag);
      };
      items.push_back(std::move(item));
    }
  }
  // Regression traces. Those of pools past 2 GiB of bytes (traces/regress-large/, SPEC 10.18:
  // offsets past 2^31) are compared model against GPU; without a device they are skipped by name.
  const auto list_traces = [](const fs::path& dir) {
    std::vector<fs::path> found;
    if (fs::is_directory(dir))
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".jsonl") found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found;
  };
  const std::vector<fs::path> regress = list_traces(regress_dir);
  std::vector<std::pair<fs::path, bool>> regress_items;  // (trace, large)
  for (const fs::path& p : regress) regress_items.emplace_back(p, false);
  for (const fs::path& p : list_traces(regress_large_dir)) regress_items.emplace_back(p, true);
  for (const auto& [path, large] : regress_items) {
    Item item;
    item.part = "regress";
    item.name = (large ? "large/" : "") + path.filename().string();
    item.backend = backend_names;
    if (large && !with_gpu) {
      item.backend = "model+gpu";
      item.skip = "a pool past 2 GiB of bytes, compared with the GPU: " +
                  std::string(traces::gpu_backend_built() ? "no CUDA device" : "GPU backend not built");
      items.push_back(std::move(item));
      continue;
    }
    // A copy: clang 14 cannot capture a structured binding (C++20 allows it; the asan preset builds with clang).
    item.run = [path = fs::path(path), factory, backend_flag] {
      Result<traces::BackendSet> backends = factory();
      ItemResult r;
      if (!backends.ok()) {
        r.state = ItemResult::State::failed;
        r.failure = backends.error().message;
        return r;
      }
      // SPEC 8's host operations need a host arena in every backend (KVTWIN_GPU_HOST_OPS=0 leaves
      // them out of runs with the GPU): a run with the GPU looks at the trace first (host_ops is
      // false only there).
      const bool gpu_plays = std::any_of(backends->players.begin(), backends->players.end(),
                                         [](const traces::Player& p) { return p.backend->name() == "gpu"; });
      if (gpu_plays) {
        if (Result<traces::PoolTrace> trace = traces::read_pool_trace_file(path.string()); trace.ok()) {
          const auto& lines = trace->lines;
          if (!backends->host_ops &&
              std::any_of(lines.begin(), lines.end(), [](const traces::TraceLine& l) { return is_host_op(l.op); })) {
            r.state = ItemResult::State::skipped;
            r.detail = "host arena operations (SPEC 8) are off in runs with the GPU (KVTWIN_GPU_HOST_OPS=0); kvtwin "
                       "check --backend model replays this trace";
            return r;
          }
        }
      }
      Result<traces::ReplayReport> report =
          traces::replay_pool_trace_file(path.string(), *backends, {}, {}, props::property_observer_factory());
      if (!report.ok()) {
        r.state = ItemResult::State::failed;
        r.failure = report.error().message;
        return r;
      }
      r = from_report(*report, "kvtwin replay " + path.string() + " --backend " + backend_flag);
      r.detail = std::to_string(report->stats.ops) + " ops";
      return r;
    };
    items.push_back(std::move(item));
  }
  if (regress.empty()) {
    Item item;
    item.part = "regress";
    item.name = regress_dir.string();
    item.backend = backend_names;
    item.skip = "no .jsonl traces in " + regress_dir.string();
    items.push_back(std::move(item));
  }
  // Request traces: the committed samples, and slices from the middle of the shared traces.
  std::vector<std::pair<fs::path, RequestSlice>> slices;
  const auto add_slice = [&](const fs::path& dir, const std::string& name, const std::string& file,
                             traces::TraceFormat format, std::uint64_t skip, traces::ServingParams params) {
    RequestSlice s;
    s.name = name;
    s.file = file;
    s.format = format;
    s.skip = skip;
    s.requests = params.max_requests;
    s.params = params;
    s.flags = slice_flags(params, skip);
    slices.emplace_back(dir / file, s);
  };
  add_slice(samples_dir, "samples/mooncake llama-3.1-8b tp8 eager", "mooncake_conversation_head.jsonl",
            traces::TraceFormat::mooncake, 0,
            slice_params("llama-3.1-8b", 8, 16, 64ull << 20, 32, CompactionMode::eager, 150));
  add_slice(samples_dir, "samples/azure gpt-oss-20b tp8 lazy (sliding window)", "azure_code_head.csv",
            traces::TraceFormat::azure, 0,
            slice_params("gpt-oss-20b", 8, 16, 32ull << 20, 4, CompactionMode::lazy, 200));
  add_slice(traces_dir / "mooncake", "shared/mooncake deepseek-v2-lite lazy (MLA)", "conversation_trace.jsonl",
            traces::TraceFormat::mooncake, 6000,
            slice_params("deepseek-v2-lite", 1, 16, 128ull << 20, 16, CompactionMode::lazy, 150));
  add_slice(traces_dir / "azure-llm-2023", "shared/azure gpt-oss-20b tp8 eager (sliding window)",
            "AzureLLMInferenceTrace_code.csv", traces::TraceFormat::azure, 4000,
            slice_params("gpt-oss-20b", 8, 16, 32ull << 20, 4, CompactionMode::eager, 200));
  // Real-scale pools, tables only (verify() after every operation): the first 1500 and 1000 requests.
  traces::ServingParams mooncake_real =
      slice_params("llama-3.1-8b", 1, 16, 16ull << 30, 16, CompactionMode::eager, 1500);
  mooncake_real.tables_only = true;
  mooncake_real.max_running = 128;
  add_slice(traces_dir / "mooncake", "shared/mooncake llama-3.1-8b tp1 16GiB tables-only",
            "conversation_trace.jsonl", traces::TraceFormat::mooncake, 0, mooncake_real);
  traces::ServingParams azure_real = slice_params("gpt-oss-20b", 8, 16, 256ull << 20, 4, CompactionMode::lazy, 1000);
  azure_real.tables_only = true;
  azure_real.max_running = 128;
  add_slice(traces_dir / "azure-llm-2023", "shared/azure gpt-oss-20b tp8 256MiB tables-only",
            "AzureLLMInferenceTrace_code.csv", traces::TraceFormat::azure, 0, azure_real);
  for (const auto& [path, slice] : slices) {
    Item item;
    item.part = "requests";
    item.name = slice.name;
    item.backend = backend_names;
    if (!fs::exists(path)) {
      item.skip = path.string() + " not found (give " +
                  (slice.name.rfind("samples/", 0) == 0 ? "--samples-dir" : "--traces-dir") + ")";
    } else {
      item.run = [path = fs::path(path), slice = RequestSlice(slice), factory, backend_flag] {
        return run_request_item(path, slice, factory, backend_flag);
      };
    }
    items.push_back(std::move(item));
  }
  // The GPU's share, by name, when it cannot run here.
  if (!with_gpu) {
    const std::string why = traces::gpu_backend_built() ? "no CUDA device" : "GPU backend not built";
    for (const char* part : {"properties", "regress", "requests"}) {
      Item item;
      item.part = part;
      item.name = "gpu side by side with the model";
      item.backend = "model+gpu";
      item.skip = why;
      items.push_back(std::move(item));
    }
  }

  return items;
}

// How much lower a gate thread's priority goes once it runs an item other than a request slice
// (nice values): the request slices are the gate's longest items, started first, and side by side
// its wall (on an H100 the four with bytes took 3.8-4.0 s from the start while the properties had
// all ended at 3.46 s), so the threads off that path yield the cores to them. KVTWIN_GATE_NICE=N
// (0 to 19) sets it; 0 leaves every thread as it is; anything else is said and ignored. Only a
// run's speed depends on it: no item's result depends on when it runs. Linux only, where a nice
// value is a thread's own (elsewhere it would be the process's).
int gate_nice_off_critical_path() {
  constexpr int kDefault = 10;
  const char* v = std::getenv("KVTWIN_GATE_NICE");
  if (v == nullptr) return kDefault;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end != v && *end == '\0' && n >= 0 && n <= 19) return static_cast<int>(n);
  std::fprintf(stderr, "kvtwin check: KVTWIN_GATE_NICE='%s' is not a whole number from 0 to 19; using %d\n",
               printable(v).c_str(), kDefault);
  return kDefault;
}

// Lowers the calling thread's priority by `by` nice values, to 19 at most (a refusal leaves it as it
// is); threads it starts afterwards (a runner's second player) inherit it.
void lower_this_threads_priority([[maybe_unused]] int by) {
#if defined(__linux__)
  if (by <= 0) return;
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, 0);  // PRIO_PROCESS 0: this thread, on Linux
  if (now == -1 && errno != 0) return;
  (void)setpriority(PRIO_PROCESS, 0, std::min(19, now + by));
#endif
}

// With KVTWIN_PROFILE=1, once the items have run: each part's item-seconds and when its last item
// ended, then the item that ended last. Whichever part ends last bounds the run's wall: its items
// are the ones to shorten (side by side on a fast host, the request slices; where the properties
// end last, their sum over the threads).
void print_parts_profile(const std::vector<Item>& items, const std::vector<std::size_t>& mine,
                         const std::vector<double>& started_at) {
  struct Part {
    std::size_t items = 0;
    double item_seconds = 0, last_end = 0;
    std::string last;
  };
  std::map<std::string, Part> parts;  // by name: a fixed order
  const Item* last_item = nullptr;
  double last_end = 0, last_start = 0;
  for (std::size_t k = 0; k < mine.size(); ++k) {
    if (started_at[k] < 0) continue;  // not started (a deadline, an earlier failure)
    const Item& item = items[mine[k]];
    const double end = started_at[k] + item.result.seconds;
    Part& part = parts[item.part];
    ++part.items;
    part.item_seconds += item.result.seconds;
    if (end >= part.last_end) {
      part.last_end = end;
      part.last = item.name;
    }
    if (last_item == nullptr || end >= last_end) {
      last_item = &item;
      last_end = end;
      last_start = started_at[k];
    }
  }
  for (const auto& [name, part] : parts)
    std::fprintf(stderr, "kvtwin profile: part %s: %zu items, %.3f item-seconds, the last ended at %.3f s (%s)\n",
                 name.c_str(), part.items, part.item_seconds, part.last_end, part.last.c_str());
  if (last_item != nullptr)
    std::fprintf(stderr, "kvtwin profile: the last item to end: %s: %s (started at %.3f s, ended at %.3f s)\n",
                 last_item->part.c_str(), last_item->name.c_str(), last_start, last_end);
}

// Runs the items `mine` on `jobs` threads (reported in item order). With `stop_at_first_failure`
// no item after the earliest failed one is started, so the failure reported is the same for
// every number of threads. Each worker names its case in the failure context (check.h). With
// `nice_off_critical_path` > 0 a thread lowers its priority to it before its first item that is not
// a request slice, and keeps it (a nice value cannot be raised back without privilege).
void run_items(std::vector<Item>& items, const std::vector<std::size_t>& mine, std::uint32_t jobs,
               bool stop_at_first_failure, bool quiet, const std::string& context,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
               int nice_off_critical_path = 0) {
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::atomic<std::size_t> first_failed{SIZE_MAX};
  std::mutex progress_mutex;
  ProgressBar bar(quiet ? "" : "check");
  // KVTWIN_PROFILE=1: each item's start and length, to stderr (which item ends the run).
  const bool profile = profile_requested();
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<double> started_at(mine.size(), -1.0);  // seconds since run_start; each slot one worker's
  const auto worker = [&] {
    bool lowered = false;
    for (std::size_t k = next++; k < mine.size(); k = next++) {
      if (stop_at_first_failure && k > first_failed.load()) continue;
      if (deadline && std::chrono::steady_clock::now() > *deadline) continue;  // not started
      Item& item = items[mine[k]];
      if (nice_off_critical_path > 0 && !lowered && item.part != "requests") {
        lowered = true;
        lower_this_threads_priority(nice_off_critical_path);
      }
      set_failure_context("work item '" + item.part + ": " + item.name + "' of " + context);
      const auto t0 = std::chrono::steady_clock::now();
      if (!item.skip.empty()) {
        item.result.state = ItemResult::State::skipped;
        item.result.detail = item.skip;
      } else {
        item.result = item.run();
      }
      item.result.ran = true;
      item.result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      started_at[k] = std::chrono::duration<double>(t0 - run_start).count();
      if (profile)
        std::fprintf(stderr, "kvtwin profile: item started at %.3f s, took %.3f s: %s: %s\n", started_at[k],
                     item.result.seconds, item.part.c_str(), item.name.c_str());
      if (item.result.state == ItemResult::State::failed) {
        std::size_t seen = first_failed.load();
        while (k < seen && !first_failed.compare_exchange_weak(seen, k)) {
        }
      }
      const std::size_t finished = ++done;
      if (!quiet) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        bar.update(finished, mine.size());
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::uint32_t t = 1; t < jobs; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  bar.finish();
  if (profile) print_parts_profile(items, mine, started_at);
}

// The order the gate starts its items in: the request slices first (the longest items), then the
// properties, the heaviest first (Item::weight: side by side, the deepseek-v3 items started last
// were the last to end, a second after everything else), then the short regression traces, so
// the last item to finish is rarely a long one started late. No item's result depends on when it
// runs, and the report keeps the fixed item order; the self-test, which stops at its earliest
// failed item, runs in item order.
std::vector<std::size_t> longest_first(const std::vector<Item>& items, std::vector<std::size_t> order) {
  const auto rank = [&](std::size_t i) {
    if (items[i].part == "requests") return 0;
    if (items[i].part == "properties") return 1;
    return 2;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return items[a].weight > items[b].weight;
  });
  return order;
}

// With KVTWIN_PROFILE=1: when the gate's stages end, in seconds since run_check began, to stderr
// (what the items' own times leave out: the device's set-up, the report, and with the process's
// wall time, its exit).
class GateTimeline {
 public:
  GateTimeline() : on_(profile_requested()) {}
  void mark(const char* stage) {
    if (!on_) return;
    std::fprintf(stderr, "kvtwin profile: gate %s at %.3f s\n", stage,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

int run_check(const CheckOptions& o, const std::string& command) {
  GateTimeline timeline;
  std::printf("kvtwin check: seed %llu\n", static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);
  Result<Shard> shard = resolve_shard(o.shard);
  if (!shard.ok()) return bad_input("check", shard.error());
  for (const auto& [path, option] : {std::pair{o.json_file, "--json"}, std::pair{o.junit_file, "--junit"}})
    if (!path.empty())
      if (Status s = check_output_path(path, option); !s.ok()) return bad_input("check", s.error());
  if (!o.html_file.empty())
    if (Status s = check_html_file_writable(o.html_file); !s.ok()) return bad_input("check", s.error());
  if (Status s = check_output_folder(o.out, "--out"); !s.ok()) return bad_input("check", s.error());
  Result<GateSetup> setup = gate_setup(o);
  if (!setup.ok()) return bad_input("check", setup.error());
  const std::string& backend_names = setup->backend_names;
  const std::uint32_t jobs = setup->jobs;
  std::vector<Item> items = gate_items(o, *setup);

  // Run this shard's items on --jobs threads; report in item order.
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (shard->mine(i)) mine.push_back(i);
  std::printf("%zu work items (shard %llu of %llu) on %s, %u threads\n", mine.size(),
              static_cast<unsigned long long>(shard->index), static_cast<unsigned long long>(shard->count),
              backend_names.c_str(), jobs);
  std::fflush(stdout);
  timeline.mark("set-up done, items start");
  // With --seconds every property item runs to its share of the time: its priority stays. Read
  // once, before the threads start (a bad value is said once).
  run_items(items, longest_first(items, mine), jobs, false, o.quiet, "kvtwin check --seed " + std::to_string(o.seed),
            std::nullopt, o.seconds == 0 ? gate_nice_off_critical_path() : 0);
  timeline.mark("items done");

  CheckReport report;
  report.seed = o.seed;
  report.backend = backend_names;
  report.options = {{"cases", o.cases}, {"random_cases", o.random_cases}, {"ops", o.ops}, {"seconds", o.seconds},
                    {"fault", o.fault}};
  report.shard_index = shard->index;
  report.shard_count = shard->count;
  report.items_total = items.size();
  for (std::size_t i : mine) report.items.push_back({i, items[i].part, items[i].name, items[i].backend, items[i].result});
  const int exit_code = finish_check_report(report, o.json_file, o.junit_file);
  timeline.mark("report done");
  if (!o.html_file.empty() && exit_code != kExitBadInput) {
    GateReport gate;
    gate.seed = report.seed;
    gate.backend = report.backend;
    gate.shard_index = report.shard_index;
    gate.shard_count = report.shard_count;
    gate.passed = report.passed();
    for (const CheckReportItem& item : report.items) {
      gate.items.push_back(GateItem{item.part, item.name, item.backend, std::string(item_state_name(item.result.state)),
                                    item.result.detail, item.result.failure, item.result.reproduce, item.result.ops,
                                    item.result.checks, item.result.seconds});
    }
    if (Status s = write_html_file(o.html_file, render_gate_html(gate, command)); !s.ok())
      return bad_input("check", s.error());
    std::printf("wrote the HTML report to %s\n", o.html_file.c_str());
  }
  return exit_code;
}

}  // namespace

Command add_check_command(CLI::App& root) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* app = root.add_subcommand(
      "check",
      "The gate: stateful properties over the catalogue, the regression traces, and request-trace slices, "
      "on the model and (when a device exists) the GPU");
  app->add_option("--backend", o->backend, "auto (the GPU too when a device exists), model, gpu or both")
      ->capture_default_str();
  add_count(*app, "--seconds", o->seconds,
            "run the property suite for this long instead of a fixed number of cases (shared equally)", 0,
            UINT64_MAX, false);
  add_count(*app, "--cases", o->cases, "property cases per catalogue configuration");
  add_count(*app, "--random-cases", o->random_cases, "property cases over random configurations");
  add_count(*app, "--ops", o->ops, "operations per property case", 1, kMaxOpsPerCase);
  add_count(*app, "--seed", o->seed, "the run's seed; every case derives from it");
  app->add_option("--junit", o->junit_file, "write a JUnit XML report");
  app->add_option("--json", o->json_file, "write a JSON report ('-': stdout)");
  app->add_option("--html", o->html_file, "write a self-contained HTML report (parts, failures, reproduce commands)");
  app->add_option("--traces-dir", o->traces_dir, "the shared request traces (default ../shared/traces-external)");
  app->add_option("--regress-dir", o->regress_dir, "regression traces (default traces/regress)");
  app->add_option("--regress-large-dir", o->regress_large_dir,
                  "regression traces of pools past 2 GiB, replayed with the GPU (default traces/regress-large)");
  app->add_option("--samples-dir", o->samples_dir, "committed request-trace samples (default traces/samples)");
  app->add_option("--out", o->out, "where shrunk property failures are written")->capture_default_str();
  add_count(*app, "--jobs", o->jobs, "threads (default: the machine's cores)", 0, kMaxJobs, false);
  app->add_option("--fault", o->fault,
                  "a self-test: plant a named bug in the second backend (the model's copy, or the GPU's switches); "
                  "the gate must fail");
  app->add_flag("--quiet", o->quiet, "no progress bar");
  add_shard_options(*app, o->shard);
  app->add_option("--merge", o->merge,
                  "instead of running, combine the --json reports of every shard of one run into its report");
  Command c;
  c.app = app;
  c.run = [o, app] {
    if (o->merge.empty()) return run_check(*o, command_line(*app));
    if (Status s = only_merge_options(*app); !s.ok()) return bad_input("check", s.error());
    return merge_check_reports(o->merge, o->json_file, o->junit_file);
  };
  return c;
}

// ---------------------------------------------------------------- kvtwin faults, kvtwin selftest

Command add_faults_command(CLI::App& root) {
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand(
      "faults", "Every planted fault (the model's and the GPU's switches), the SPEC.md section 10 class it reproduces "
                "and where it applies");
  app->add_flag("--json", *json, "print JSON");
  Command c;
  c.app = app;
  c.run = [json] {
    const std::vector<traces::FaultInfo> all = traces::fault_catalogue();
    if (*json) {
      nlohmann::json list = nlohmann::json::array();
      for (const traces::FaultInfo& f : all)
        list.push_back({{"name", f.name}, {"site", traces::fault_site_name(f.site)}, {"spec_class", f.spec_class}, {"what", f.what}});
      std::printf("%s\n", list.dump(2).c_str());
      return kExitOk;
    }
    std::printf("%-28s %-6s %-6s %s\n", "fault", "where", "SPEC10", "the bug");
    for (const traces::FaultInfo& f : all)
      std::printf("%-28s %-6s %-6s %s\n", f.name.c_str(), std::string(traces::fault_site_name(f.site)).c_str(),
                  f.spec_class.empty() ? "-" : f.spec_class.c_str(), f.what.c_str());
    if (!traces::gpu_backend_built()) std::printf("(GPU faults: the GPU backend is not built)\n");
    std::printf("Plant one with --fault NAME (kvtwin check, fuzz, replay); kvtwin selftest runs the gate with each.\n");
    return kExitOk;
  };
  return c;
}

struct SelftestOptions {
  CheckOptions gate;
  std::string only;              // comma-separated fault names; empty: all
  double fault_seconds = 60;     // each fault's time limit
  bool skip_clean = false;
  bool isolate = false;          // every fault in a fresh process of its own
  bool as_part = false;          // run by another selftest for some of its faults: rows to --json, no table
  std::string json_file;
};

struct SelftestRow {
  std::string fault;
  std::string site;
  std::string spec_class;
  std::string state;  // caught, missed, skipped, false alarm, passed (the clean run)
  std::string why;    // skipped: why; caught: the item that caught it
  double seconds = 0;
  std::uint64_t ops = 0;
  std::uint64_t reproducer_ops = 0;
  std::string check;
  std::string reproduce;
};

// Runs the gate once with `o` (a fault or none), stopping at the first failure; fills the row.
void selftest_run(const CheckOptions& o, double seconds_limit, SelftestRow& row) {
  Result<GateSetup> setup = gate_setup(o);
  if (!setup.ok()) {
    row.state = "skipped";
    row.why = setup.error().message;
    return;
  }
  std::vector<Item> items = gate_items(o, *setup);
  // The regression traces first, each written for one bug class: the small ones one at a time
  // (a transfer race, as the GPU's fault 13 plants, shows only while nothing else runs on the
  // device: another thread's device-wide synchronization, as a pool's teardown makes, lands the
  // slow producer before the consumer is even submitted; on the H200 the trace caught fault 13
  // alone, and missed it beside 15 busy threads), then those of pools past 2 GiB (offsets past
  // 2^31 that no property case of a small pool reaches) with the rest of the gate, in its order,
  // on every thread. A fault the traces miss is left to what the generators find.
  const auto small_regress = [&](std::size_t i) {
    return items[i].part == "regress" && items[i].name.rfind("large/", 0) != 0;
  };
  std::vector<std::size_t> all(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) all[i] = i;
  std::stable_partition(all.begin(), all.end(), [&](std::size_t i) { return items[i].part == "regress"; });
  std::stable_partition(all.begin(), all.end(), small_regress);
  const auto split = static_cast<std::size_t>(std::count_if(all.begin(), all.end(), small_regress));
  const std::vector<std::size_t> alone(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(split));
  const std::vector<std::size_t> rest(all.begin() + static_cast<std::ptrdiff_t>(split), all.end());
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds_limit));
  const std::string context = "kvtwin selftest --seed " + std::to_string(o.seed);
  run_items(items, alone, 1, true, true, context, deadline);
  const bool caught_alone = std::any_of(alone.begin(), alone.end(), [&](std::size_t i) {
    return items[i].result.state == ItemResult::State::failed;
  });
  if (!caught_alone) run_items(items, rest, setup->jobs, true, true, context, deadline);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The earliest failed item in run order (run_items started nothing after it); ops count what
  // ran before it.
  double until = 0;
  for (std::size_t i : all) {
    const ItemResult& r = items[i].result;
    until += r.seconds;
    row.ops += r.ops;
    if (r.state != ItemResult::State::failed) continue;
    row.state = o.fault.empty() ? "false alarm" : "caught";
    row.why = items[i].part + ": " + items[i].name;
    row.check = r.check;
    row.reproducer_ops = r.reproducer_ops;
    row.reproduce = r.reproduce.substr(0, r.reproduce.find('\n'));
    row.seconds = std::min(wall, until);
    return;
  }
  bool all_ran = true;
  for (const Item& item : items) all_ran = all_ran && item.result.ran;
  row.seconds = wall;
  row.state = o.fault.empty() ? "passed" : "missed";
  if (!all_ran) row.why = "time limit reached before the gate finished";
}

// The command line of a selftest that judges `faults` (in catalogue order) for this one, in a
// fresh process, and writes their rows to `json`: the same gate, the same seed and limits.
std::vector<std::string> selftest_part_args(const SelftestOptions& so, const std::vector<std::string>& faults,
                                            const std::string& json) {
  std::string only;
  for (const std::string& f : faults) only += (only.empty() ? "" : ",") + f;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.17g", so.fault_seconds);
  std::vector<std::string> args = {"selftest", "--backend", so.gate.backend, "--seed", std::to_string(so.gate.seed),
                                   "--fault-seconds", seconds, "--cases", std::to_string(so.gate.cases),
                                   "--random-cases", std::to_string(so.gate.random_cases), "--ops",
                                   std::to_string(so.gate.ops), "--out", so.gate.out, "--skip-clean", "--only", only,
                                   "--json", json, "--as-part"};
  if (so.gate.jobs != 0) args.insert(args.end(), {"--jobs", std::to_string(so.gate.jobs)});
  if (!so.gate.traces_dir.empty()) args.insert(args.end(), {"--traces-dir", so.gate.traces_dir});
  return args;
}

// The rows a selftest wrote with --json (selftest_part_args), by fault.
std::map<std::string, SelftestRow> selftest_rows_from_json(const nlohmann::json& j) {
  std::map<std::string, SelftestRow> rows;
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array()) return rows;
  for (const nlohmann::json& r : j["rows"]) {
    SelftestRow row;
    row.fault = r.value("fault", "");
    row.site = r.value("site", "");
    row.spec_class = r.value("spec_class", "");
    row.state = r.value("state", "");
    row.why = r.value("why", "");
    row.seconds = r.value("seconds", 0.0);
    row.ops = r.value("ops", std::uint64_t{0});
    row.reproducer_ops = r.value("reproducer_ops", std::uint64_t{0});
    row.check = r.value("check", "");
    row.reproduce = r.value("reproduce", "");
    if (!row.fault.empty()) rows[row.fault] = row;
  }
  return rows;
}

// Judges `faults` in a fresh kvtwin process (selftest_part_args) and returns their rows; a fault
// the process left without a row (it could not start, or ended early) is "not judged", which
// fails the self-test like a miss.
std::map<std::string, SelftestRow> selftest_in_fresh_process(const SelftestOptions& so,
                                                             const std::vector<traces::FaultInfo>& faults) {
  std::vector<std::string> names;
  for (const traces::FaultInfo& f : faults) names.push_back(f.name);
  const fs::path json = fs::path(so.gate.out) / "selftest" / ("part-" + names.front() + ".json");
  std::error_code ec;
  fs::create_directories(json.parent_path(), ec);
  fs::remove(json, ec);
  const std::vector<std::string> args = selftest_part_args(so, names, json.string());
  Result<int> status = run_this_binary(args);
  std::map<std::string, SelftestRow> rows;
  std::string why;
  if (!status.ok()) {
    why = status.error().message;
  } else if (*status == kExitBadInput || !fs::exists(json)) {
    why = "the fresh kvtwin process ended with status " + std::to_string(*status) + " and no report";
  } else {
    {
      std::ifstream in(json);
      rows = selftest_rows_from_json(nlohmann::json::parse(in, nullptr, false));
    }
    fs::remove(json, ec);  // read: its rows are this run's now
    why = "the fresh kvtwin process wrote no row for it (" + json.string() + ")";
  }
  for (const traces::FaultInfo& f : faults) {
    if (rows.count(f.name) != 0) continue;
    SelftestRow row;
    row.fault = f.name;
    row.site = std::string(traces::fault_site_name(f.site));
    row.spec_class = f.spec_class;
    row.state = "not judged";
    row.why = why;
    rows[f.name] = row;
  }
  return rows;
}

int run_selftest(const SelftestOptions& so) {
  if (!so.as_part) {
    std::printf("kvtwin selftest: seed %llu\n", static_cast<unsigned long long>(so.gate.seed));
    std::fflush(stdout);
  }
  if (so.gate.backend != "auto" && so.gate.backend != "model" && so.gate.backend != "gpu" && so.gate.backend != "both")
    return bad_input("selftest", make_error(ErrorKind::invalid_argument,
                                            "unknown backend '" + so.gate.backend + "'; use auto, model, gpu or both"));
  if (!so.json_file.empty())
    if (Status s = check_output_path(so.json_file, "--json"); !s.ok()) return bad_input("selftest", s.error());
  if (Status s = check_output_folder(so.gate.out, "--out"); !s.ok()) return bad_input("selftest", s.error());
  const bool gpu_here = traces::gpu_device_available();
  if ((so.gate.backend == "gpu" || so.gate.backend == "both") && !gpu_here)
    return bad_input("selftest", make_error(ErrorKind::unsupported, traces::gpu_unavailable_reason()));
  std::vector<traces::FaultInfo> faults = traces::fault_catalogue();
  if (!so.only.empty()) {
    Result<traces::FaultChoice> only = traces::parse_fault_choice_any_site(so.only);
    if (!only.ok()) return bad_input("selftest", only.error());
    std::vector<traces::FaultInfo> picked;
    for (const traces::FaultInfo& f : faults)
      if (std::find(only->names.begin(), only->names.end(), f.name) != only->names.end()) picked.push_back(f);
    faults = picked;
  }
  const bool gpu_wanted = so.gate.backend != "model";
  std::vector<SelftestRow> rows;
  if (!so.skip_clean) {
    SelftestRow clean;
    clean.fault = "(none: the clean gate)";
    clean.site = "-";
    CheckOptions o = so.gate;
    o.backend = gpu_here && gpu_wanted ? (so.gate.backend == "gpu" ? "gpu" : "both") : "model";
    std::printf("clean gate on %s ...\n", o.backend.c_str());
    std::fflush(stdout);
    selftest_run(o, 1e9, clean);
    rows.push_back(clean);
  }
  // A planted fault can make a kernel fault (an illegal address), after which every CUDA call of
  // this process fails: the faults after it would all be "caught" by the environment check at
  // their first operation, falsely. So after every run that used the GPU the context is asked
  // for; once it is lost, the GPU faults left run in a fresh process (which does the same).
  std::string context_lost;  // why, once lost
  const auto note_context = [&](const std::string& after, const std::string& backend) {
    if (!context_lost.empty() || backend == "model") return;
    if (Status h = traces::gpu_context_health(); !h.ok()) {
      context_lost = h.error().message;
      std::printf("%s: %s; the GPU faults after it run in a fresh kvtwin process\n", after.c_str(),
                  context_lost.c_str());
      std::fflush(stdout);
    }
  };
  if (!so.skip_clean) note_context("the clean gate", rows.back().state == "skipped" ? "model" : "gpu");
  std::map<std::string, SelftestRow> judged_elsewhere;
  for (std::size_t k = 0; k < faults.size(); ++k) {
    const traces::FaultInfo& f = faults[k];
    if (auto it = judged_elsewhere.find(f.name); it != judged_elsewhere.end()) {
      rows.push_back(it->second);
      continue;
    }
    SelftestRow row;
    row.fault = f.name;
    row.site = std::string(traces::fault_site_name(f.site));
    row.spec_class = f.spec_class;
    CheckOptions o = so.gate;
    o.fault = f.name;
    o.out = so.gate.out + "/selftest";
    o.cases_per_item = 2;
    if (f.site == traces::FaultSite::model) {
      // A model fault runs the model alone: only checks that do not trust the model can catch it.
      o.backend = "model";
    } else if (!gpu_here || !gpu_wanted) {
      row.state = "skipped";
      row.why = gpu_here ? "--backend model" : traces::gpu_unavailable_reason();
      rows.push_back(row);
      continue;
    } else {
      o.backend = so.gate.backend == "gpu" ? "gpu" : "both";
    }
    const bool uses_gpu = o.backend != "model";
    if (so.isolate || (uses_gpu && !context_lost.empty())) {
      // --isolate: this fault alone; a lost context: every GPU fault left, in one process.
      std::vector<traces::FaultInfo> part = {f};
      if (!so.isolate)
        for (std::size_t j = k + 1; j < faults.size(); ++j)
          if (faults[j].site != traces::FaultSite::model) part.push_back(faults[j]);
      judged_elsewhere = selftest_in_fresh_process(so, part);
      rows.push_back(judged_elsewhere[f.name]);
      continue;
    }
    selftest_run(o, so.fault_seconds, row);
    std::printf("%s on %s: %s in %.1f s (%s%s)\n", f.name.c_str(), o.backend.c_str(), row.state.c_str(), row.seconds,
                row.check.empty() ? "" : ("check " + row.check + ", reproducer " + std::to_string(row.reproducer_ops) +
                                          " ops, by ").c_str(),
                row.why.c_str());
    std::fflush(stdout);
    rows.push_back(row);
    note_context(f.name + "'s run", o.backend);
  }
  int fails = 0;
  for (const SelftestRow& r : rows)
    fails += r.state == "missed" || r.state == "false alarm" || r.state == "not judged";
  if (so.as_part) {
    // Rows only, for the selftest that started this one (selftest_in_fresh_process).
    if (!so.json_file.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const SelftestRow& r : rows)
        list.push_back({{"fault", r.fault}, {"site", r.site}, {"spec_class", r.spec_class}, {"state", r.state},
                        {"why", r.why}, {"seconds", r.seconds}, {"ops", r.ops}, {"reproducer_ops", r.reproducer_ops},
                        {"check", r.check}, {"reproduce", r.reproduce}});
      if (Status st = write_json_file(so.json_file, {{"seed", so.gate.seed}, {"rows", list}}); !st.ok())
        return bad_input("selftest", st.error());
    }
    return fails == 0 ? kExitOk : kExitCheckFailed;
  }
  fails = 0;
  std::printf("\n%-28s %-5s %-6s %-11s %8s %10s %6s %-10s\n", "fault", "where", "SPEC10", "result", "seconds", "ops",
              "repro", "check");
  for (const SelftestRow& r : rows) {
    const bool bad = r.state == "missed" || r.state == "false alarm" || r.state == "not judged";
    fails += bad;
    std::printf("%-28s %-5s %-6s %-11s %8.1f %10llu %6llu %-10s%s\n", r.fault.c_str(), r.site.c_str(),
                r.spec_class.empty() ? "-" : r.spec_class.c_str(), r.state.c_str(), r.seconds,
                static_cast<unsigned long long>(r.ops), static_cast<unsigned long long>(r.reproducer_ops),
                r.check.c_str(), r.state == "skipped" || r.state == "not judged" ? ("  " + r.why).c_str() : "");
  }
  for (const SelftestRow& r : rows)
    if (!r.reproduce.empty()) std::printf("%s: caught by %s; reproduce: %s\n", r.fault.c_str(), r.why.c_str(), r.reproduce.c_str());
  std::uint64_t caught = 0, skipped = 0;
  for (const SelftestRow& r : rows) {
    caught += r.state == "caught";
    skipped += r.state == "skipped";
  }
  std::printf("kvtwin selftest: %s (%llu caught, %d missed or false alarms, %llu skipped by name)\n",
              fails == 0 ? "PASS" : "FAIL", static_cast<unsigned long long>(caught), fails,
              static_cast<unsigned long long>(skipped));
  if (!so.json_file.empty()) {
    nlohmann::json j;
    j["seed"] = so.gate.seed;
    j["passed"] = fails == 0;
    nlohmann::json list = nlohmann::json::array();
    for (const SelftestRow& r : rows)
      list.push_back({{"fault", r.fault}, {"site", r.site}, {"spec_class", r.spec_class}, {"state", r.state},
                      {"why", r.why}, {"seconds", r.seconds}, {"ops", r.ops}, {"reproducer_ops", r.reproducer_ops},
                      {"check", r.check}, {"reproduce", r.reproduce}});
    j["rows"] = list;
    if (Status st = write_json_file(so.json_file, j); !st.ok()) return bad_input("selftest", st.error());
  }
  return fails == 0 ? kExitOk : kExitCheckFailed;
}

Command add_selftest_command(CLI::App& root) {
  auto so = std::make_shared<SelftestOptions>();
  CLI::App* app = root.add_subcommand(
      "selftest", "The gate with each planted fault (kvtwin faults), stopping at its first failure, and once clean: "
                  "a table of what was caught, how fast, by which check, and the reproducer's length");
  app->add_option("--backend", so->gate.backend,
                  "auto (GPU faults too when a device exists), model, gpu or both; model faults always run the model "
                  "alone")
      ->capture_default_str();
  app->add_option("--only", so->only, "only these faults (comma-separated)");
  add_count(*app, "--seed", so->gate.seed, "the run's seed");
  app->add_option("--fault-seconds", so->fault_seconds, "each fault's time limit")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_count(*app, "--cases", so->gate.cases, "property cases per catalogue configuration");
  add_count(*app, "--random-cases", so->gate.random_cases, "property cases over random configurations");
  add_count(*app, "--ops", so->gate.ops, "operations per property case", 1, kMaxOpsPerCase);
  add_count(*app, "--jobs", so->gate.jobs, "threads (default: the machine's cores)", 0, kMaxJobs, false);
  app->add_option("--traces-dir", so->gate.traces_dir, "the shared request traces (default ../shared/traces-external)");
  app->add_option("--out", so->gate.out, "where shrunk failures are written")->capture_default_str();
  app->add_flag("--skip-clean", so->skip_clean, "do not run the clean gate first");
  app->add_flag("--isolate", so->isolate,
                "run each fault's gate in a fresh process of its own (without it, the faults share this process "
                "until a GPU fault leaves the device's context unusable, and the GPU faults left then run in a "
                "fresh one)");
  app->add_flag("--as-part", so->as_part, "(internal) judge these faults for another selftest: rows to --json only")
      ->group("");
  app->add_option("--json", so->json_file, "write a JSON report ('-': stdout)");
  Command c;
  c.app = app;
  c.run = [so] { return run_selftest(*so); };
  return c;
}

}  // namespace kvtwin::cli
