// kvtwin_traces_bench: the speed of the trace tools (Google Benchmark; speed is measured here,
// never in timed tests).
//
//   BM_MooncakeWholeTablesOnly  the whole Mooncake conversation trace (12,031 requests, 59
//                               minutes of arrivals) through the serving simulator and the model,
//                               tables only: Llama-3.1-8B at TP 1, 16-token pages, token scale 16,
//                               a 16 GiB pool (256 GiB of KV at full scale). Arg: verify() every N
//                               ops (0: at the end only). items/s = operations.
//   BM_CheckCostByPoolSize      the whole Azure code trace, tables only, at 1 GiB, 64 GiB and 1 TiB,
//                               unchecked, with the default (incremental) checks, and paranoid.
//   BM_RequestSliceWithBytes    200 requests of the Mooncake sample with bytes (Llama-3.1-8B TP 8,
//                               64 MiB, token scale 32), verify() at checkpoints: what kvtwin check
//                               spends on a request slice. items/s = operations.
//   BM_FuzzCase                 one kvtwin fuzz case (random configuration, 200 operations, every
//                               check). items/s = operations.
//   BM_MooncakeWholeTiers       the same with a host tier of 4 GiB, and with it a storage tier of
//                               64 GiB, against the device alone in the same run (host_over_plain,
//                               storage_over_plain).
//   BM_MooncakeSampleStorageWithBytes  300 requests with bytes through all three tiers, against the
//                               device alone (storage_over_plain).
//   BM_ReadPoolTrace            reading a recorded pool trace (parsing and checking every line).
//                               bytes/s = file bytes.
// BM_CheckCostByPoolSize reports two rates: items_per_second over the whole replay (the pool's
// build and the end's full verify included, each O(pool) once), and steady_ops_per_s over the
// operations between the first simulated step and the last (what one operation and its check
// cost, which must not grow with the pool).
// The Mooncake trace is read from ../shared/traces-external/ next to the source tree (or
// $KVTWIN_TRACES_DIR); the benchmark is skipped when it is absent. Run from a Release build:
//   build/default/tools/bench/kvtwin_traces_bench --benchmark_filter=Mooncake
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <variant>

#include "core/check.h"
#include "props/fuzz.h"
#include "traces/replay.h"

#ifndef KVTWIN_SOURCE_DIR
#define KVTWIN_SOURCE_DIR "."
#endif

namespace {

using namespace kvtwin;
using namespace kvtwin::traces;
using namespace kvtwin::props;

// Times a replay's operations between the pool's build and the end's checks: it counts every op
// played after the build (after_apply), and the replay's progress callback, called once a
// simulated step, takes the time and the count at each step's end; the span from the first
// step's end to the last's leaves out the one-time work (building the tables, the first step's
// admissions, the drain and the final verify).
class SteadyOps : public RunObserver {
 public:
  void after_apply(const Runner&, const OpEvent& event) override {
    if (!std::holds_alternative<BuildPool>(event.op)) ++ops_;
  }
  Progress progress() {
    return [this](std::uint64_t, std::uint64_t) {
      const auto now = std::chrono::steady_clock::now();
      if (!first_) first_.emplace(now, ops_);
      last_.emplace(now, ops_);
    };
  }
  // Operations a second between the first step's end and the last's (0 before two steps).
  double ops_per_second() const {
    if (!first_ || !last_ || last_->second <= first_->second) return 0;
    const double seconds = std::chrono::duration<double>(last_->first - first_->first).count();
    return seconds > 0 ? static_cast<double>(last_->second - first_->second) / seconds : 0;
  }

 private:
  std::uint64_t ops_ = 0;
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> first_, last_;
};

std::string traces_dir() {
  const char* env = std::getenv("KVTWIN_TRACES_DIR");
  return env != nullptr ? env : std::string(KVTWIN_SOURCE_DIR) + "/../shared/traces-external";
}

// The shared Mooncake conversation trace (its first `limit` requests; 0: all), or nullopt with the
// benchmark skipped when it is absent.
std::optional<RequestTrace> shared_mooncake(benchmark::State& state, std::uint64_t limit) {
  const std::string path = traces_dir() + "/mooncake/conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no " + path + " (set KVTWIN_TRACES_DIR)").c_str());
    return std::nullopt;
  }
  Result<RequestTrace> trace = read_request_trace(path, TraceFormat::mooncake, {limit});
  KVTWIN_CHECK(trace.ok(), "the Mooncake trace reads");
  return std::move(trace).value();
}

// The whole-trace replays' serving parameters: Llama-3.1-8B at TP 1, 16-token pages, token scale
// 16, a 16 GiB pool, 128 running, tables only.
ServingParams whole_mooncake_params() {
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{16} << 30;
  p.token_scale = 16;
  p.max_running = 128;
  p.tables_only = true;
  return p;
}

void BM_MooncakeWholeTablesOnly(benchmark::State& state) {
  const std::optional<RequestTrace> trace = shared_mooncake(state, 0);
  if (!trace) return;
  ServingParams p = whole_mooncake_params();
  CheckCadence cadence;
  cadence.verify_every = static_cast<std::uint64_t>(state.range(0));
  std::uint64_t ops = 0;
  for (auto _ : state) {
    Result<BackendSet> backends = make_backend_set(BackendChoice::model);
    Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, cadence);
    KVTWIN_CHECK(r.ok() && r->passed(), "the whole trace replays clean");
    ops += r->stats.ops;
    state.counters["requests"] = static_cast<double>(r->serving->requests_served);
    state.counters["verifies"] = static_cast<double>(r->stats.verifies);
    state.counters["hit_rate"] = r->serving->prefix_hit_rate();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
}
BENCHMARK(BM_MooncakeWholeTablesOnly)->Arg(0)->Arg(1000)->Unit(benchmark::kSecond)->Iterations(1);

// The tiers' cost (issue 9): the whole Mooncake conversation trace as above, tables only, three
// times in this run: the device alone, with a host tier of Arg 0 GiB (write-back), and with that
// host tier and a storage tier of Arg 1 GiB of page files below it (a real page store in the
// temporary folder; tables only, a page file holds the page's row identities). Counters:
// host_over_plain and storage_over_plain (seconds over the device-only replay's), each run's hit
// rate, and the tiers' traffic.
void BM_MooncakeWholeTiers(benchmark::State& state) {
  const std::optional<RequestTrace> trace = shared_mooncake(state, 0);
  if (!trace) return;
  ServingParams p = whole_mooncake_params();
  p.write_policy = WritePolicy::write_back;
  const std::uint64_t host = static_cast<std::uint64_t>(state.range(0)) << 30;
  const std::uint64_t storage = static_cast<std::uint64_t>(state.range(1)) << 30;
  double seconds[3] = {0, 0, 0};
  for (auto _ : state) {
    for (int run = 0; run < 3; ++run) {
      p.host_bytes = run == 0 ? 0 : host;
      p.storage_bytes = run == 2 ? storage : 0;
      const auto start = std::chrono::steady_clock::now();
      Result<BackendSet> backends = make_backend_set(BackendChoice::model);
      Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, CheckCadence{});
      KVTWIN_CHECK(r.ok() && r->passed(), "the whole trace replays clean");
      seconds[run] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const char* rate[3] = {"hit_rate_device", "hit_rate_host", "hit_rate_storage"};
      state.counters[rate[run]] = r->serving->prefix_hit_rate();
      const ServingSummary& v = *r->serving;
      if (run == 1) state.counters["host_evicted_blocks"] = static_cast<double>(v.host_evicted_blocks);
      if (run == 2) {
        state.counters["ops"] = static_cast<double>(r->stats.ops);
        state.counters["offloads"] = static_cast<double>(v.offloads);
        state.counters["load_backs"] = static_cast<double>(v.load_backs);
        state.counters["pages_stored"] = static_cast<double>(v.pages_stored);
        state.counters["storage_hit_pages"] = static_cast<double>(v.storage_hit_pages);
      }
    }
  }
  state.counters["plain_s"] = seconds[0];
  state.counters["host_s"] = seconds[1];
  state.counters["storage_s"] = seconds[2];
  state.counters["host_over_plain"] = seconds[1] / seconds[0];
  state.counters["storage_over_plain"] = seconds[2] / seconds[0];
}
BENCHMARK(BM_MooncakeWholeTiers)->Args({4, 64})->Unit(benchmark::kSecond)->Iterations(1);

// The storage tier with bytes, on a sample: 300 requests of the Mooncake trace, Llama-3.1-8B TP 8,
// shrunk entries (every byte written, offloaded, stored, read back and checked by the content
// oracle), a device and a host too small for the working set, against the same replay with the
// device alone. Counters: storage_over_plain, the bytes stored and read, the hit rates.
void BM_MooncakeSampleStorageWithBytes(benchmark::State& state) {
  const std::optional<RequestTrace> trace = shared_mooncake(state, 300);
  if (!trace) return;
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.tp = 8;
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{256} << 20;
  p.token_scale = 16;
  p.max_running = 64;
  p.shrink_entries = true;
  p.checkpoint_every = 64;
  p.write_policy = WritePolicy::write_back;
  double seconds[2] = {0, 0};
  for (auto _ : state) {
    for (int run = 0; run < 2; ++run) {
      p.host_bytes = run == 0 ? 0 : std::uint64_t{256} << 20;
      p.storage_bytes = run == 0 ? 0 : std::uint64_t{16} << 30;
      const auto start = std::chrono::steady_clock::now();
      Result<BackendSet> backends = make_backend_set(BackendChoice::model);
      Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, CheckCadence{});
      KVTWIN_CHECK(r.ok() && r->passed(), "the sample replays clean");
      seconds[run] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state.counters[run == 0 ? "hit_rate_device" : "hit_rate_tiered"] = r->serving->prefix_hit_rate();
      if (run == 1) {
        state.counters["bytes_stored"] = static_cast<double>(r->serving->bytes_stored);
        state.counters["bytes_read"] = static_cast<double>(r->serving->bytes_read_from_storage);
        state.counters["storage_hit_pages"] = static_cast<double>(r->serving->storage_hit_pages);
      }
    }
  }
  state.counters["plain_s"] = seconds[0];
  state.counters["storage_s"] = seconds[1];
  state.counters["storage_over_plain"] = seconds[1] / seconds[0];
}
BENCHMARK(BM_MooncakeSampleStorageWithBytes)->Unit(benchmark::kSecond)->Iterations(1);

// The cost of checking against the pool's size: the whole Azure code trace (8,819 requests,
// 206k operations), tables only, Llama-3.1-8B at 16-token pages, at 1 GiB, 64 GiB and 1 TiB.
// Args: pool GiB, then checks: 0 none (full verify at the end only), 1 the default (the
// incremental verify after every op, the full one at the end), 2 paranoid (the full verify after
// every op). The default's items/s stays flat as the pool grows and within 1.5x of none; the
// paranoid one falls with the pool (not run at 1 TiB: hours).
void BM_CheckCostByPoolSize(benchmark::State& state) {
  const std::string path = traces_dir() + "/azure-llm-2023/AzureLLMInferenceTrace_code.csv";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no " + path + " (set KVTWIN_TRACES_DIR)").c_str());
    return;
  }
  Result<RequestTrace> trace = read_request_trace(path, TraceFormat::azure, {});
  KVTWIN_CHECK(trace.ok(), "the Azure trace reads");
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.page_size = 16;
  p.pool_bytes = static_cast<std::uint64_t>(state.range(0)) << 30;
  p.token_scale = 16;
  p.tables_only = true;
  CheckCadence cadence;
  cadence.verify_every = state.range(1) == 2 ? 1 : 0;
  cadence.verify_changed = state.range(1) == 1;
  if (state.range(1) == 0) cadence.tables_every = 0;  // no table check between either
  std::uint64_t ops = 0;
  double steady_rates = 0;
  for (auto _ : state) {
    Result<BackendSet> backends = make_backend_set(BackendChoice::model);
    SteadyOps steady;
    ReplayWatchers watchers;
    watchers.run = &steady;
    Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, cadence, nullptr, steady.progress(), watchers);
    KVTWIN_CHECK(r.ok() && r->passed(), "the whole trace replays clean");
    ops += r->stats.ops;
    steady_rates += steady.ops_per_second();
    state.counters["verifies"] = static_cast<double>(r->stats.verifies);
    state.counters["incremental"] = static_cast<double>(r->stats.changed_verifies);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
  state.counters["steady_ops_per_s"] = steady_rates / static_cast<double>(state.iterations());
}
BENCHMARK(BM_CheckCostByPoolSize)
    ->ArgNames({"GiB", "checks"})
    ->Args({1, 0})->Args({1, 1})->Args({1, 2})
    ->Args({64, 0})->Args({64, 1})->Args({64, 2})
    ->Args({1024, 0})->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_RequestSliceWithBytes(benchmark::State& state) {
  Result<RequestTrace> trace =
      read_request_trace(std::string(KVTWIN_SOURCE_DIR) + "/traces/samples/mooncake_conversation_head.jsonl",
                         TraceFormat::mooncake, {200});
  KVTWIN_CHECK(trace.ok(), "the sample reads");
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.tp = 8;
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{64} << 20;
  p.token_scale = 32;
  p.max_running = 32;
  p.checkpoint_every = 64;
  std::uint64_t ops = 0;
  for (auto _ : state) {
    Result<BackendSet> backends = make_backend_set(BackendChoice::model);
    Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, {});
    KVTWIN_CHECK(r.ok() && r->passed(), "the slice replays clean");
    ops += r->stats.ops;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
}
BENCHMARK(BM_RequestSliceWithBytes)->Unit(benchmark::kMillisecond);

void BM_FuzzCase(benchmark::State& state) {
  const BackendFactory factory = [] { return make_backend_set(BackendChoice::model); };
  std::uint64_t ops = 0, index = 0;
  for (auto _ : state) {
    CaseSpec spec;
    spec.index = index;
    spec.seed = case_seed(1, index++, "random");
    Result<CaseResult> r = run_case(spec, factory);
    KVTWIN_CHECK(r.ok() && !r->failure, "a clean case");
    ops += r->stats.ops;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
}
BENCHMARK(BM_FuzzCase)->Unit(benchmark::kMillisecond);

void BM_ReadPoolTrace(benchmark::State& state) {
  // Record a slice once, then read it again and again.
  Result<RequestTrace> trace = read_request_trace(
      std::string(KVTWIN_SOURCE_DIR) + "/traces/samples/azure_code_head.csv", TraceFormat::azure, {100});
  KVTWIN_CHECK(trace.ok(), "the sample reads");
  ServingParams p;
  p.model = "gpt-oss-20b";
  p.tp = 8;
  p.pool_bytes = std::uint64_t{32} << 20;
  p.token_scale = 4;
  p.tables_only = true;
  const std::string path = (std::filesystem::temp_directory_path() / "kvtwin_bench_trace.jsonl").string();
  TraceHeader h{*serving_pool_config(p), p.seed, serving_params_json(p, *trace)};
  Result<PoolTraceWriter> w = PoolTraceWriter::open(path, h);
  Result<BackendSet> backends = make_backend_set(BackendChoice::model);
  KVTWIN_CHECK(simulate_request_trace(*trace, p, *backends, {}, &*w).ok() && w->close().ok(), "recorded");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string bytes = text.str();
  for (auto _ : state) {
    std::istringstream s(bytes);
    Result<PoolTrace> t = parse_pool_trace(s, path);
    KVTWIN_CHECK(t.ok(), "it reads back");
    benchmark::DoNotOptimize(t->lines.size());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
  std::filesystem::remove(path);
}
BENCHMARK(BM_ReadPoolTrace)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
