// kvtwin_model_bench: how fast the reference model plays operations, so that a million-operation
// fuzz run or a real-scale trace replay is a matter of seconds.
//
//   BM_AllocFree     tables-only, a real pool (64 GiB per rank, page size 16): allocations of
//                    1-8 pages until the pool is three quarters full, then a random live
//                    allocation is freed for every new one (eager or lazy). items/s = page
//                    operations (pages allocated + pages freed) through Model::apply.
//   BM_Translate     tables-only, the same pool three quarters full: translate 256 live virtual
//                    tokens per op. items/s = ids translated.
//   BM_Compaction    with bytes (512 MiB): frees pages at the bottom of a full band so eager
//                    compaction moves the top pages down, then allocates them again.
//                    bytes/s = page envelope bytes moved.
//   BM_MemcpyPage    the reference for BM_Compaction: std::memcpy of the same 2 MiB envelopes
//                    within a 512 MiB buffer; report compaction as a fraction of it.
//   BM_FuzzStep      one fuzz step as `kvtwin fuzz` plays it: generate an operation (props/),
//                    predict it with the shadow, apply it to the model (with bytes), verify().
//                    items/s = operations.
// Run it from a Release build: build/default/tools/bench/kvtwin_model_bench.
#include <benchmark/benchmark.h>

#include <cstring>
#include <deque>
#include <vector>

#include "core/catalogue.h"
#include "core/check.h"
#include "core/rng.h"
#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "sim/model.h"

namespace {

using namespace kvtwin;

PoolConfig real_pool(const char* model, std::uint64_t total_bytes, CompactionMode mode, bool tables_only) {
  PoolConfig c;
  c.shape = *find_model(model);
  c.page_size = 16;
  c.total_bytes = total_bytes;
  c.mode = mode;
  c.tables_only = tables_only;
  c.seed = 1;
  return c;
}

const char* kModels[] = {"llama-3.1-8b", "gpt-oss-20b"};

// Keeps a pool about three quarters full of live allocations of 1-8 pages.
class Churn {
 public:
  Churn(sim::Model& model, std::uint64_t seed) : model_(model), rng_(seed) {
    const std::uint64_t usable = model.derived().geometry.sub_pools[0].usable_pages();
    target_pages_ = usable * 3 / 4 / (model.derived().is_composite() ? 2 : 1);
    while (live_pages_ < target_pages_) alloc();
  }
  // One step: free a random live allocation, allocate a new one. Returns the page operations.
  std::uint64_t step() {
    std::uint64_t ops = free_random();
    return ops + alloc();
  }
  std::vector<std::int64_t> live_tokens(std::size_t n) {
    std::vector<std::int64_t> out;
    const auto ps = static_cast<std::int64_t>(model_.config().page_size);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& a = live_[rng_.below(live_.size())];
      out.push_back(a[rng_.below(a.size())] * ps + static_cast<std::int64_t>(rng_.below(static_cast<std::uint64_t>(ps))));
    }
    return out;
  }

 private:
  std::uint64_t alloc() {
    const std::uint64_t pages = 1 + rng_.below(8);
    OpResult r = model_.apply(Alloc{pages * model_.config().page_size});
    KVTWIN_CHECK(r.ok(), "benchmark alloc");
    if (const auto* a = std::get_if<Allocated>(&r.value())) {
      live_.push_back(a->pages);
      live_pages_ += pages;
      return pages;
    }
    return 0;  // no room
  }
  std::uint64_t free_random() {
    if (live_.empty()) return 0;
    const std::size_t i = rng_.below(live_.size());
    std::vector<std::int64_t> pages = std::move(live_[i]);
    live_[i] = std::move(live_.back());
    live_.pop_back();
    OpResult r = model_.apply(Free{IdUnit::pages, pages});
    KVTWIN_CHECK(r.ok(), "benchmark free");
    live_pages_ -= pages.size();
    return pages.size();
  }

  sim::Model& model_;
  Rng rng_;
  std::vector<std::vector<std::int64_t>> live_;
  std::uint64_t live_pages_ = 0;
  std::uint64_t target_pages_ = 0;
};

void BM_AllocFree(benchmark::State& state) {
  const char* model_name = kModels[state.range(0)];
  const auto mode = state.range(1) == 0 ? CompactionMode::eager : CompactionMode::lazy;
  sim::Model model;
  KVTWIN_CHECK(model.apply(BuildPool{real_pool(model_name, std::uint64_t{64} << 30, mode, true)}).ok(), "build");
  Churn churn(model, 7);
  std::uint64_t page_ops = 0;
  for (auto _ : state) page_ops += churn.step();
  state.SetItemsProcessed(static_cast<std::int64_t>(page_ops));
  state.SetLabel(std::string(model_name) + (mode == CompactionMode::eager ? " eager" : " lazy") + ", " +
                 std::to_string(model.derived().geometry.sub_pools[0].num_pages) + " pages");
}
BENCHMARK(BM_AllocFree)->ArgsProduct({{0, 1}, {0, 1}});

void BM_Translate(benchmark::State& state) {
  const char* model_name = kModels[state.range(0)];
  sim::Model model;
  KVTWIN_CHECK(model.apply(BuildPool{real_pool(model_name, std::uint64_t{64} << 30, CompactionMode::eager, true)}).ok(),
               "build");
  Churn churn(model, 11);
  Translate op;
  op.ids = churn.live_tokens(256);
  op.shape = {256};
  std::uint64_t ids = 0;
  for (auto _ : state) {
    OpResult r = model.apply(op);
    benchmark::DoNotOptimize(r);
    ids += op.ids.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ids));
  state.SetLabel(model_name);
}
BENCHMARK(BM_Translate)->Arg(0)->Arg(1);

void BM_Compaction(benchmark::State& state) {
  sim::Model model;
  KVTWIN_CHECK(
      model.apply(BuildPool{real_pool("llama-3.1-8b", std::uint64_t{512} << 20, CompactionMode::eager, false)}).ok(),
      "build");
  const SubPoolGeometry& g = model.derived().geometry.sub_pools[0];
  const std::uint64_t ps = g.page_size;
  // Fill the band, one allocation per page.
  std::vector<std::int64_t> pages;
  for (;;) {
    OpResult r = model.apply(Alloc{ps});
    if (!std::holds_alternative<Allocated>(r.value())) break;
    pages.push_back(std::get<Allocated>(r.value()).pages[0]);
  }
  const std::size_t k = static_cast<std::size_t>(state.range(0));
  std::uint64_t moved = 0;
  for (auto _ : state) {
    // Free k of the lowest pages (virtual ids still bound there): k survivors move down.
    const OpResult r = model.apply(Free{IdUnit::pages, std::vector<std::int64_t>(pages.begin(), pages.begin() + k)});
    moved += std::get<Compaction>(r.value()).moves.size() * g.page_bytes;
    pages.erase(pages.begin(), pages.begin() + k);
    const OpResult a = model.apply(Alloc{k * ps});
    const auto& fresh = std::get<Allocated>(a.value()).pages;
    // Keep the freed-and-reallocated ids at the back; the next frees take the next lowest.
    pages.insert(pages.end(), fresh.begin(), fresh.end());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(moved));
  state.SetLabel("llama-3.1-8b, " + std::to_string(g.page_bytes >> 10) + " KiB pages, " + std::to_string(k) +
                 " moves per free");
}
BENCHMARK(BM_Compaction)->Arg(1)->Arg(8);

void BM_MemcpyPage(benchmark::State& state) {
  const std::uint64_t page = std::uint64_t{2} << 20;
  std::vector<std::uint8_t> buffer(std::uint64_t{512} << 20, 1);
  const std::uint64_t pages = buffer.size() / page;
  std::uint64_t i = 0, moved = 0;
  for (auto _ : state) {
    const std::uint64_t src = (pages - 1 - i % (pages / 2)) * page, dst = (i % (pages / 2)) * page;
    std::memcpy(buffer.data() + dst, buffer.data() + src, page);
    benchmark::ClobberMemory();
    moved += page;
    ++i;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(moved));
}
BENCHMARK(BM_MemcpyPage);

void BM_FuzzStep(benchmark::State& state) {
  props::RngChoices choices(state.range(0));
  const PoolConfig config = props::generate_config(choices);
  const props::SwarmWeights weights = props::SwarmWeights::uniform();
  sim::Model model;
  KVTWIN_CHECK(model.apply(BuildPool{config}).ok(), "build");
  props::PoolShadow shadow(config);
  std::uint64_t ops = 0;
  for (auto _ : state) {
    const Op op = props::generate_op(choices, shadow, weights);
    const props::Expectation e = shadow.apply(op);
    const OpResult r = model.apply(op);
    KVTWIN_CHECK(!props::mismatch(e, r).has_value(), "the model answers what the shadow predicts");
    KVTWIN_CHECK(model.verify().ok(), "verify");
    ++ops;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
  state.SetLabel(config.shape.name + ", " + std::to_string(config.total_bytes >> 10) + " KiB");
}
BENCHMARK(BM_FuzzStep)->Arg(1)->Arg(2)->Arg(3);

}  // namespace

BENCHMARK_MAIN();
