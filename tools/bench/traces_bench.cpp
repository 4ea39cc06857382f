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
//   BM_MooncakeWholeHostTier    the same with a host tier of 64 GiB, against the same replay without
//                               one in the same run (tiered_over_plain).
//   BM_ReadPoolTrace            reading a recorded pool trace (parsing and checking every line).
//                               bytes/s = file bytes.
// The Mooncake trace is read from ../shared/traces-external/ next to the source tree (or
// $KVTWIN_TRACES_DIR); the benchmark is skipped when it is absent. Run from a Release build:
//   build/default/tools/bench/kvtwin_traces_bench --benchmark_filter=Mooncake
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string traces_dir() {
  const char* env = std::getenv("KVTWIN_TRACES_DIR");
  return env != nullptr ? env : std::string(KVTWIN_SOURCE_DIR) + "/../shared/traces-external";
}

void BM_MooncakeWholeTablesOnly(benchmark::State& state) {
  const std::string path = traces_dir() + "/mooncake/conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no " + path + " (set KVTWIN_TRACES_DIR)").c_str());
    return;
  }
  Result<RequestTrace> trace = read_request_trace(path, TraceFormat::mooncake, {});
  KVTWIN_CHECK(trace.ok(), "the Mooncake trace reads");
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{16} << 30;
  p.token_scale = 16;
  p.max_running = 128;
  p.tables_only = true;
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

// The host tier's cost (issue 9): the whole Mooncake conversation trace as above, tables only,
// with a host tier of `Arg` GiB (write-back) and the same replay without one, both in this run;
// counters: tiered_over_plain (the tiered replay's seconds over the plain one's), the hit rates
// with and without the host, and the host's transfers. The storage tier is not wired in yet.
void BM_MooncakeWholeHostTier(benchmark::State& state) {
  const std::string path = traces_dir() + "/mooncake/conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no " + path + " (set KVTWIN_TRACES_DIR)").c_str());
    return;
  }
  Result<RequestTrace> trace = read_request_trace(path, TraceFormat::mooncake, {});
  KVTWIN_CHECK(trace.ok(), "the Mooncake trace reads");
  ServingParams p;
  p.model = "llama-3.1-8b";
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{16} << 30;
  p.token_scale = 16;
  p.max_running = 128;
  p.tables_only = true;
  p.write_policy = WritePolicy::write_back;
  double plain_s = 0, tiered_s = 0;
  for (auto _ : state) {
    for (std::uint64_t host_gib : {std::uint64_t{0}, static_cast<std::uint64_t>(state.range(0))}) {
      p.host_bytes = host_gib << 30;
      const auto start = std::chrono::steady_clock::now();
      Result<BackendSet> backends = make_backend_set(BackendChoice::model);
      Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, CheckCadence{});
      KVTWIN_CHECK(r.ok() && r->passed(), "the whole trace replays clean");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (host_gib == 0 ? plain_s : tiered_s) += s;
      state.counters[host_gib == 0 ? "hit_rate_device_only" : "hit_rate_tiered"] = r->serving->prefix_hit_rate();
      if (host_gib != 0) {
        state.counters["offloads"] = static_cast<double>(r->serving->offloads);
        state.counters["load_backs"] = static_cast<double>(r->serving->load_backs);
        state.counters["ops"] = static_cast<double>(r->stats.ops);
      }
    }
  }
  state.counters["plain_s"] = plain_s;
  state.counters["tiered_s"] = tiered_s;
  state.counters["tiered_over_plain"] = tiered_s / plain_s;
}
BENCHMARK(BM_MooncakeWholeHostTier)->Arg(64)->Unit(benchmark::kSecond)->Iterations(1);

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
  for (auto _ : state) {
    Result<BackendSet> backends = make_backend_set(BackendChoice::model);
    Result<ReplayReport> r = simulate_request_trace(*trace, p, *backends, cadence);
    KVTWIN_CHECK(r.ok() && r->passed(), "the whole trace replays clean");
    ops += r->stats.ops;
    state.counters["verifies"] = static_cast<double>(r->stats.verifies);
    state.counters["incremental"] = static_cast<double>(r->stats.changed_verifies);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
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
