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
//   BM_StateAllocFree  SPEC 11, tables-only: Qwen3.5-9B's [state up | full down] chain in 64 GiB
//                    (1,333 state slots of 51,511,296 bytes), kept three quarters full of request
//                    states: a random live state freed, a new one allocated (eager compaction
//                    moves a slot; lazy leaves a hole, flushed every 64 frees). items/s = slot
//                    operations (state_alloc + state_free).
//   BM_StateSlotMove with bytes: kvtwin's tri-pool model in 512 MiB (states of 4,390,912 bytes):
//                    the lowest slot freed, so eager compaction moves the top slot's whole
//                    envelope down, then a new state allocated. bytes/s = state bytes moved;
//                    compare with BM_MemcpyPage.
//   BM_FloatChurn    SPEC 11, tables-only: the tri-pool [state up | swa float | full down] in
//                    64 GiB, allocations of 1-8 pages (1/5 or 1/4 of the owner's pages), a random one leaving the
//                    window (free_swa) or freed, state slots coming and going: the float's holes,
//                    extension, absorption and make_room. items/s = page and slot operations.
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

// ---------------------------------------------------------------- the state sub-pool and the float (SPEC 11)

void BM_StateAllocFree(benchmark::State& state) {
  const auto mode = state.range(0) == 0 ? CompactionMode::eager : CompactionMode::lazy;
  sim::Model model;
  KVTWIN_CHECK(model.apply(BuildPool{real_pool("qwen3.5-9b", std::uint64_t{64} << 30, mode, true)}).ok(), "build");
  const std::uint64_t slots = model.derived().geometry.state->usable_pages();
  Rng rng(5);
  std::vector<std::uint64_t> live;
  std::uint64_t next_request = 0;
  while (live.size() < slots * 3 / 4) {
    KVTWIN_CHECK(model.apply(StateAlloc{next_request}).ok(), "state_alloc");
    live.push_back(next_request++);
  }
  std::uint64_t slot_ops = 0, frees = 0;
  for (auto _ : state) {
    const std::size_t i = rng.below(live.size());
    KVTWIN_CHECK(model.apply(StateFree{live[i]}).ok(), "state_free");
    live[i] = live.back();
    live.pop_back();
    if (mode == CompactionMode::lazy && ++frees % 64 == 0) KVTWIN_CHECK(model.apply(Flush{}).ok(), "flush");
    OpResult r = model.apply(StateAlloc{next_request});
    KVTWIN_CHECK(r.ok() && std::holds_alternative<Allocated>(r.value()), "state_alloc has room");
    live.push_back(next_request++);
    slot_ops += 2;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(slot_ops));
  state.SetLabel(std::string("qwen3.5-9b ") + (mode == CompactionMode::eager ? "eager" : "lazy") + ", " +
                 std::to_string(slots) + " state slots");
}
BENCHMARK(BM_StateAllocFree)->Arg(0)->Arg(1);

void BM_StateSlotMove(benchmark::State& state) {
  sim::Model model;
  KVTWIN_CHECK(
      model.apply(BuildPool{real_pool("kvtwin-tripool-8l", std::uint64_t{512} << 20, CompactionMode::eager, false)}).ok(),
      "build");
  const std::uint64_t e_state = model.derived().state_layout->entry_bytes;
  // As many states as fit with room for the tokens' first pages: 64 of them.
  std::deque<std::uint64_t> live;
  std::uint64_t next_request = 0;
  for (int i = 0; i < 64; ++i) {
    KVTWIN_CHECK(model.apply(StateAlloc{next_request}).ok(), "state_alloc");
    KVTWIN_CHECK(model.apply(StateWrite{next_request, 1}).ok(), "state_write");
    live.push_back(next_request++);
  }
  std::uint64_t moved = 0;
  for (auto _ : state) {
    // The oldest request holds the lowest slot: freeing it moves the top slot down into it.
    const OpResult r = model.apply(StateFree{live.front()});
    live.pop_front();
    moved += std::get<Compaction>(r.value()).moves.size() * e_state;
    KVTWIN_CHECK(model.apply(StateAlloc{next_request}).ok(), "state_alloc");
    live.push_back(next_request++);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(moved));
  state.SetLabel("kvtwin-tripool-8l, " + std::to_string(e_state) + "-byte states, the top slot moved down at most frees");
}
BENCHMARK(BM_StateSlotMove);

void BM_FloatChurn(benchmark::State& state) {
  sim::Model model;
  KVTWIN_CHECK(
      model.apply(BuildPool{real_pool("kvtwin-tripool-8l", std::uint64_t{64} << 30, CompactionMode::eager, true)}).ok(),
      "build");
  const std::uint64_t ps = model.config().page_size;
  // 1/5 of the owner's pages live, with their float pages (3x larger): the float fits beside the
  // owner; 1/4: a tight pool, where the owner's growth cuts into the float and make_room runs.
  const std::uint64_t target = model.derived().geometry.sub_pools[0].usable_pages() / static_cast<std::uint64_t>(state.range(0));
  Rng rng(9);
  std::vector<std::vector<std::int64_t>> live;  // allocations still in the window
  std::vector<std::uint64_t> states;
  std::uint64_t live_pages = 0, next_request = 0, ops = 0, relocated = 0;
  const auto alloc = [&] {
    const std::uint64_t pages = 1 + rng.below(8);
    OpResult r = model.apply(Alloc{pages * ps});
    if (const auto* a = std::get_if<Allocated>(&r.value())) {
      relocated += a->moves.size();
      live.push_back(a->pages);
      live_pages += pages;
      return pages;
    }
    return std::uint64_t{0};
  };
  while (live_pages < target && alloc() != 0) {
  }
  for (auto _ : state) {
    const std::size_t i = rng.below(live.size());
    std::vector<std::int64_t> pages = std::move(live[i]);
    live[i] = std::move(live.back());
    live.pop_back();
    // Half leave the window first (free_swa: the float's holes), all are freed.
    if (rng.below(2) == 0) {
      KVTWIN_CHECK(model.apply(FreeSwa{IdUnit::pages, pages}).ok(), "free_swa");
      ops += pages.size();
    }
    KVTWIN_CHECK(model.apply(Free{IdUnit::pages, pages}).ok(), "free");
    ops += pages.size();
    live_pages -= pages.size();
    ops += alloc();
    if (rng.below(4) == 0) {
      OpResult r = model.apply(StateAlloc{next_request});
      if (const auto* a = std::get_if<Allocated>(&r.value())) {
        relocated += a->moves.size();
        states.push_back(next_request++);
        ++ops;
      }
      if (states.size() > 8) {
        KVTWIN_CHECK(model.apply(StateFree{states.front()}).ok(), "state_free");
        states.erase(states.begin());
        ++ops;
      }
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
  state.SetLabel("kvtwin-tripool-8l eager, 1/" + std::to_string(state.range(0)) + " of the owner's pages live, " +
                 std::to_string(relocated) + " float pages relocated by make_room in " + std::to_string(ops) + " operations");
}
BENCHMARK(BM_FloatChurn)->Arg(5)->Arg(4);

}  // namespace

BENCHMARK_MAIN();
