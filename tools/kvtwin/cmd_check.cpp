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
// --junit and --json write reports for CI systems. Durations appear only in those reports and
// the table; no result depends on them (except the property cases --seconds allows).
//
// --html FILE writes the same as a self-contained HTML page: the table of parts, charts of
// items and time per part, and every failure with its reproduce command (html_report.h).
//
// Exit: 0 everything passed, 1 something failed, 2 bad usage.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "tools/kvtwin/command.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/trace_options.h"
#include "traces/fuzz.h"
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
  std::string out = "check-failures";
  std::string fault;
  std::uint32_t jobs = 0;
  bool quiet = false;
  ShardOptions shard;
};

struct ItemResult {
  enum class State { passed, failed, skipped } state = State::passed;
  std::string detail;     // one line: what ran
  std::string failure;    // the failure report
  std::string reproduce;  // the command that reproduces a failure
  std::uint64_t ops = 0;
  std::uint64_t checks = 0;
  double seconds = 0;
};

struct Item {
  std::string part;  // properties, regress, requests
  std::string name;
  std::string backend;  // model, model+gpu
  std::string skip;     // non-empty: skipped, and why
  std::function<ItemResult()> run;
  ItemResult result;
};

// Where the repository is: the working folder when it holds traces/regress, else the source
// folder this kvtwin was built from.
fs::path repository_root() {
  if (fs::exists("traces/regress")) return fs::path(".");
  return fs::path(KVTWIN_SOURCE_DIR);
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

// A property item: `cases` seeded cases of one configuration (or cases until `deadline`).
ItemResult run_property_item(const std::string& config, const traces::BackendFactory& factory, const CheckOptions& o,
                             std::uint64_t cases, std::optional<std::chrono::steady_clock::time_point> deadline,
                             const std::string& backend_flag) {
  ItemResult r;
  std::uint64_t ran = 0;
  for (std::uint64_t j = 0; deadline ? (j == 0 || std::chrono::steady_clock::now() < *deadline) : j < cases; ++j) {
    traces::CaseSpec spec;
    spec.index = j;
    spec.seed = traces::case_seed(o.seed, j, config);
    spec.config = config;
    spec.ops = o.ops;
    Result<traces::CaseResult> c = traces::run_case(spec, factory);
    if (!c.ok()) {
      r.state = ItemResult::State::failed;
      r.failure = "case " + std::to_string(j) + " could not run: " + c.error().message;
      return r;
    }
    ++ran;
    r.ops += c->stats.ops;
    r.checks += c->stats.checks_passed() + c->shadow_checks;
    if (c->failure) {
      traces::ShrinkOptions shrink;
      shrink.max_replays = 1000;  // the gate reports many items; kvtwin fuzz shrinks harder
      traces::shrink_case(*c, factory, shrink);
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
      const traces::PoolTrace trace = traces::failure_trace(*c, factory, origin);
      std::error_code ec;
      fs::create_directories(o.out, ec);
      std::string safe = config;
      std::replace(safe.begin(), safe.end(), '/', '_');
      const std::string path = (fs::path(o.out) / ("check-" + safe + "-case" + std::to_string(j) + ".jsonl")).string();
      Status written = traces::write_pool_trace_file(path, trace);
      r.state = ItemResult::State::failed;
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
         (p.tables_only ? " --tables-only" : "");
}

ItemResult run_request_item(const fs::path& path, const RequestSlice& slice, const traces::BackendFactory& factory,
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

const char* state_name(ItemResult::State state) {
  return state == ItemResult::State::passed ? "passed" : state == ItemResult::State::failed ? "failed" : "skipped";
}

int run_check(const CheckOptions& o, const std::string& command) {
  std::printf("kvtwin check: seed %llu\n", static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);
  Result<Shard> shard = resolve_shard(o.shard);
  if (!shard.ok()) return bad_input("check", shard.error());
  if (o.backend != "auto" && o.backend != "model" && o.backend != "gpu" && o.backend != "both")
    return bad_input("check", make_error(ErrorKind::invalid_argument,
                                         "unknown backend '" + o.backend + "'; use auto, model, gpu or both"));
  const bool gpu_here = traces::gpu_device_available();
  if ((o.backend == "gpu" || o.backend == "both") && !gpu_here)
    return bad_input("check", make_error(ErrorKind::unsupported, traces::gpu_unavailable_reason()));
  // What runs: the model alone, or the model and the GPU side by side.
  const bool with_gpu = o.backend == "gpu" || o.backend == "both" || (o.backend == "auto" && gpu_here);
  const traces::BackendChoice choice = with_gpu ? traces::BackendChoice::both : traces::BackendChoice::model;
  const std::string backend_flag =
      std::string(traces::backend_choice_name(choice)) + (o.fault.empty() ? "" : " --fault " + o.fault);
  const std::string fault = o.fault;
  const traces::BackendFactory factory = [choice, fault] { return traces::make_backend_set(choice, fault); };
  Result<traces::BackendSet> probe = factory();
  if (!probe.ok()) return bad_input("check", probe.error());
  const std::string backend_names = probe->names();

  if (!o.html_file.empty()) {
    if (Status s = check_html_file_writable(o.html_file); !s.ok()) return bad_input("check", s.error());
  }
  const fs::path root = repository_root();
  const fs::path regress_dir = o.regress_dir.empty() ? root / "traces" / "regress" : fs::path(o.regress_dir);
  const fs::path regress_large_dir =
      o.regress_large_dir.empty() ? root / "traces" / "regress-large" : fs::path(o.regress_large_dir);
  const fs::path samples_dir = o.samples_dir.empty() ? root / "traces" / "samples" : fs::path(o.samples_dir);
  const fs::path traces_dir =
      o.traces_dir.empty() ? root / ".." / "shared" / "traces-external" : fs::path(o.traces_dir);
  if (!o.regress_dir.empty() && !fs::is_directory(regress_dir))
    return bad_input("check", make_error(ErrorKind::io, "--regress-dir " + o.regress_dir + " is not a folder"));

  const std::uint32_t jobs =
      std::max<std::uint32_t>(1, o.jobs != 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Item> items;
  // Properties.
  std::vector<std::string> configs = {"random"};
  for (const std::string& c : traces::catalogue_config_names()) configs.push_back(c);
  const std::uint64_t property_items = configs.size();
  for (const std::string& config : configs) {
    Item item;
    item.part = "properties";
    item.name = config;
    item.backend = backend_names;
    const std::uint64_t cases = config == "random" ? o.random_cases : o.cases;
    item.run = [config, factory, &o, cases, property_items, jobs, backend_flag] {
      std::optional<std::chrono::steady_clock::time_point> deadline;
      if (o.seconds != 0) {
        // Each configuration gets an equal share of the threads' time (and at least one case),
        // so the property part takes about --seconds of wall time.
        const auto share = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
            static_cast<double>(o.seconds) * jobs / static_cast<double>(property_items)));
        deadline = std::chrono::steady_clock::now() + share;
      }
      return run_property_item(config, factory, o, cases, deadline, backend_flag);
    };
    items.push_back(std::move(item));
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
    item.run = [path, factory, backend_flag] {
      Result<traces::BackendSet> backends = factory();
      ItemResult r;
      if (!backends.ok()) {
        r.state = ItemResult::State::failed;
        r.failure = backends.error().message;
        return r;
      }
      Result<traces::ReplayReport> report = traces::replay_pool_trace_file(path.string(), *backends, {});
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
      item.run = [path, slice, factory, backend_flag] { return run_request_item(path, slice, factory, backend_flag); };
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

  // Run this shard's items on --jobs threads; report in item order.
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (shard->mine(i)) mine.push_back(i);
  std::printf("%zu work items (shard %llu of %llu) on %s, %u threads\n", mine.size(),
              static_cast<unsigned long long>(shard->index), static_cast<unsigned long long>(shard->count),
              backend_names.c_str(), jobs);
  std::fflush(stdout);
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex progress_mutex;
  ProgressBar bar("check");
  const auto worker = [&] {
    for (std::size_t k = next++; k < mine.size(); k = next++) {
      Item& item = items[mine[k]];
      const auto t0 = std::chrono::steady_clock::now();
      if (!item.skip.empty()) {
        item.result.state = ItemResult::State::skipped;
        item.result.detail = item.skip;
      } else {
        item.result = item.run();
      }
      item.result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::size_t finished = ++done;
      if (!o.quiet) {
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

  // The summary table, part by part.
  struct Tally {
    std::uint64_t items = 0, passed = 0, failed = 0, skipped = 0, ops = 0, checks = 0;
    double seconds = 0;
  };
  std::map<std::string, Tally> tallies;
  std::vector<std::string> part_order;
  std::uint64_t failed_total = 0;
  for (std::size_t i : mine) {
    const Item& item = items[i];
    const std::string key = item.part + " (" + item.backend + ")";
    if (!tallies.count(key)) part_order.push_back(key);
    Tally& t = tallies[key];
    ++t.items;
    t.ops += item.result.ops;
    t.checks += item.result.checks;
    t.seconds += item.result.seconds;
    switch (item.result.state) {
      case ItemResult::State::passed:
        ++t.passed;
        break;
      case ItemResult::State::failed:
        ++t.failed;
        ++failed_total;
        break;
      case ItemResult::State::skipped:
        ++t.skipped;
        break;
    }
  }
  for (std::size_t i : mine) {
    const Item& item = items[i];
    if (item.result.state == ItemResult::State::skipped)
      std::printf("SKIP %s: %s: %s\n", item.part.c_str(), item.name.c_str(), item.result.detail.c_str());
  }
  for (std::size_t i : mine) {
    const Item& item = items[i];
    if (item.result.state != ItemResult::State::failed) continue;
    std::printf("FAIL %s: %s (%s)\n  %s\n", item.part.c_str(), item.name.c_str(), item.backend.c_str(),
                item.result.failure.c_str());
    if (!item.result.reproduce.empty()) std::printf("  reproduce: %s\n", item.result.reproduce.c_str());
  }
  int width = 4;
  for (const std::string& key : part_order) width = std::max(width, static_cast<int>(key.size()));
  std::printf("\n%-*s %6s %6s %6s %7s %10s %12s %8s\n", width, "part", "items", "passed", "failed", "skipped", "ops",
              "checks", "seconds");
  for (const std::string& key : part_order) {
    const Tally& t = tallies[key];
    std::printf("%-*s %6llu %6llu %6llu %7llu %10llu %12llu %8.1f\n", width, key.c_str(),
                static_cast<unsigned long long>(t.items), static_cast<unsigned long long>(t.passed),
                static_cast<unsigned long long>(t.failed), static_cast<unsigned long long>(t.skipped),
                static_cast<unsigned long long>(t.ops), static_cast<unsigned long long>(t.checks), t.seconds);
  }
  std::printf("%s\n", failed_total == 0 ? "kvtwin check: PASS" : "kvtwin check: FAIL");

  if (!o.json_file.empty()) {
    nlohmann::json j;
    j["seed"] = o.seed;
    j["backend"] = backend_names;
    j["shard_index"] = shard->index;
    j["shard_count"] = shard->count;
    j["passed"] = failed_total == 0;
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t i : mine) {
      const Item& item = items[i];
      const char* state = state_name(item.result.state);
      list.push_back({{"part", item.part},
                      {"name", item.name},
                      {"backend", item.backend},
                      {"state", state},
                      {"detail", item.result.detail},
                      {"failure", item.result.failure},
                      {"reproduce", item.result.reproduce},
                      {"ops", item.result.ops},
                      {"checks", item.result.checks},
                      {"seconds", item.result.seconds}});
    }
    j["items"] = list;
    if (Status s = write_json_file(o.json_file, j); !s.ok()) return bad_input("check", s.error());
  }
  if (!o.html_file.empty()) {
    GateReport gate;
    gate.seed = o.seed;
    gate.backend = backend_names;
    gate.shard_index = shard->index;
    gate.shard_count = shard->count;
    gate.passed = failed_total == 0;
    for (std::size_t i : mine) {
      const Item& item = items[i];
      gate.items.push_back(GateItem{item.part, item.name, item.backend, state_name(item.result.state),
                                    item.result.detail, item.result.failure, item.result.reproduce, item.result.ops,
                                    item.result.checks, item.result.seconds});
    }
    if (Status s = write_html_file(o.html_file, render_gate_html(gate, command)); !s.ok())
      return bad_input("check", s.error());
    std::printf("wrote the HTML report to %s\n", o.html_file.c_str());
  }
  if (!o.junit_file.empty()) {
    std::ofstream out(o.junit_file, std::ios::binary | std::ios::trunc);
    if (!out) return bad_input("check", make_error(ErrorKind::io, o.junit_file + ": cannot open for writing"));
    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvtwin check\">\n";
    for (const std::string& key : part_order) {
      const Tally& t = tallies[key];
      out << "  <testsuite name=\"" << xml_escape(key) << "\" tests=\"" << t.items << "\" failures=\"" << t.failed
          << "\" errors=\"0\" skipped=\"" << t.skipped << "\" time=\"" << t.seconds << "\">\n";
      for (std::size_t i : mine) {
        const Item& item = items[i];
        if (item.part + " (" + item.backend + ")" != key) continue;
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
    out.close();
    if (out.fail()) return bad_input("check", make_error(ErrorKind::io, o.junit_file + ": writing failed"));
  }
  return failed_total == 0 ? kExitOk : kExitCheckFailed;
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
  app->add_option("--seconds", o->seconds,
                  "run the property suite for this long instead of a fixed number of cases (shared equally)");
  app->add_option("--cases", o->cases, "property cases per catalogue configuration")->capture_default_str();
  app->add_option("--random-cases", o->random_cases, "property cases over random configurations")
      ->capture_default_str();
  app->add_option("--ops", o->ops, "operations per property case")->capture_default_str();
  app->add_option("--seed", o->seed, "the run's seed; every case derives from it")->capture_default_str();
  app->add_option("--junit", o->junit_file, "write a JUnit XML report");
  app->add_option("--json", o->json_file, "write a JSON report ('-': stdout)");
  app->add_option("--html", o->html_file, "write a self-contained HTML report (parts, failures, reproduce commands)");
  app->add_option("--traces-dir", o->traces_dir, "the shared request traces (default ../shared/traces-external)");
  app->add_option("--regress-dir", o->regress_dir, "regression traces (default traces/regress)");
  app->add_option("--regress-large-dir", o->regress_large_dir,
                  "regression traces of pools past 2 GiB, replayed with the GPU (default traces/regress-large)");
  app->add_option("--samples-dir", o->samples_dir, "committed request-trace samples (default traces/samples)");
  app->add_option("--out", o->out, "where shrunk property failures are written")->capture_default_str();
  app->add_option("--jobs", o->jobs, "threads (default: the machine's cores)");
  app->add_option("--fault", o->fault,
                  "a self-test: plant a named bug in the second backend (the model's copy, or the GPU's switches); "
                  "the gate must fail");
  app->add_flag("--quiet", o->quiet, "no progress bar");
  add_shard_options(*app, o->shard);
  Command c;
  c.app = app;
  c.run = [o, app] { return run_check(*o, command_line(*app)); };
  return c;
}

}  // namespace kvtwin::cli
