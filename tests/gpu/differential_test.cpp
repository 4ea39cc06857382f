// The differential property: the reference model (sim/) and the CUDA implementation (gpu/) driven
// by the same random operations, the model's property's generators and swarm weights (props/),
// played through the one runner (traces/runner.h) with the gate's observers (props/observers.h):
// answers and tables compared after every operation, the bytes each operation wrote right after
// it, whole raw pools at checkpoints and at the end, both backends' table invariants, and the
// shadow's predictions. Captured-graph replays are in the mix.
//
// Also one short reproducer per GPU fault switch (SPEC.md section 10), played through the same
// runner: with the switch off the two agree; with it on, the run reports a divergence.
//
// Runs: the default is small (CI skips it: no device). For the H200 run set
//   KVTWIN_DIFF_CASES=N  (RapidCheck cases; default 25)   KVTWIN_DIFF_SIZE=S (ops per case; default 40)
//   KVTWIN_SEED=X        (the run's seed; printed first)  RC_PARAMS="reproduce=..." (a failure's replay)
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unordered_map>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include "gpu/faults.h"
#include "props/model_property.h"
#include "props/observers.h"
#include "tests/gpu/gpu_test_util.h"
#include "traces/backends.h"
#include "traces/runner.h"

namespace kvtwin::gpu::testing {
namespace {

std::atomic<std::uint64_t> g_cases{0};

void twin_property() {
  props::runner_matches_shadow([]() -> Result<traces::BackendSet> {
    ++g_cases;
    return traces::make_backend_set(traces::BackendChoice::both);
  });
}

class Quiet : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

TEST(Differential, ModelAndGpuAgreeOnRandomOperations) {
  KVTWIN_REQUIRE_CUDA();
  rc::detail::TestParams params;
  params.seed = test_seed(20261129);
  params.maxSuccess = env_int("KVTWIN_DIFF_CASES", 25);
  params.maxSize = env_int("KVTWIN_DIFF_SIZE", 40);
  rc::detail::TestMetadata metadata;
  metadata.id = "model_and_gpu_agree";
  metadata.description = metadata.id;
  Quiet quiet;
  const bool from_environment = std::getenv("RC_PARAMS") != nullptr;
  g_cases = 0;
  const rc::detail::TestResult result = rc::detail::checkTestable(
      [] { twin_property(); }, metadata, params, quiet,
      from_environment ? rc::detail::configuration().reproduce : std::unordered_map<std::string, rc::detail::Reproduce>{});
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  std::printf("[ twin     ] %llu cases run side by side (shrinking included)\n",
              static_cast<unsigned long long>(g_cases.load()));
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    rc::detail::Configuration config;
    config.testParams = params;
    config.reproduce = {{metadata.id, failure.reproduce}};
    ADD_FAILURE() << message.str() << "\nreproduce with: RC_PARAMS=\"" << rc::detail::configToMinimalString(config)
                  << "\" KVTWIN_SEED=" << params.seed << " kvtwin_gpu_tests --gtest_filter=Differential.*";
  } else {
    std::printf("%s\n", message.str().c_str());
  }
}

// ---------------------------------------------------------------- fault switches (SPEC 10)

ModelShape tiny_shape(std::vector<LayerKind> layers, std::uint32_t heads = 2, std::uint32_t dim = 8) {
  ModelShape s;
  s.name = "tiny";
  s.attention = AttentionKind::mha;
  s.layers = std::move(layers);
  s.num_kv_heads = heads;
  s.k_head_dim = dim;
  s.v_head_dim = dim;
  // A window only where there are sliding-window layers (core refuses one without them).
  s.sliding_window_tokens = std::find(s.layers.begin(), s.layers.end(), LayerKind::swa) != s.layers.end() ? 4 : 0;
  s.dtype = DType::bf16;
  return s;
}

PoolConfig config_of(ModelShape shape, std::uint64_t page_size, std::uint64_t pages) {
  PoolConfig c;
  c.shape = std::move(shape);
  c.page_size = page_size;
  c.seed = 5;
  c.total_bytes = 1 << 20;
  const PoolDerived d = derive_pool(c).value();
  c.total_bytes = d.geometry.sub_pools[0].page_bytes * pages;
  return c;
}

struct Scenario {
  PoolConfig config;
  std::vector<Op> ops;  // after the build
  std::int64_t m = 1;   // the first usable page
  std::int64_t ps = 1;
  std::int64_t num_pages = 0;

  explicit Scenario(PoolConfig c) : config(std::move(c)) {
    const PoolDerived d = derive_pool(config).value();
    m = static_cast<std::int64_t>(d.geometry.sub_pools[0].min_page_index);
    ps = static_cast<std::int64_t>(config.page_size);
    num_pages = static_cast<std::int64_t>(d.geometry.sub_pools[0].num_pages);
  }
  std::vector<std::int64_t> tokens(std::int64_t first_page, std::int64_t pages) const {
    std::vector<std::int64_t> out;
    for (std::int64_t p = first_page; p < first_page + pages; ++p)
      for (std::int64_t s = 0; s < ps; ++s) out.push_back(p * ps + s);
    return out;
  }
  // Two allocations, the first freed: the second's virtual pages m+2, m+3 now sit on physical
  // m, m+1 (virtual and physical ids differ).
  void shifted() {
    ops.push_back(Alloc{static_cast<std::uint64_t>(2 * ps)});
    ops.push_back(Alloc{static_cast<std::uint64_t>(2 * ps)});
    ops.push_back(Free{IdUnit::pages, {m, m + 1}});
  }
};

// Plays `ops` (the first a build) on the model and the GPU with `faults` through the one runner,
// with the gate's observers from the first successful build on; the first failure, described.
std::optional<std::string> play_side_by_side(const std::vector<Op>& ops, const std::string& faults) {
  Result<traces::BackendSet> set = traces::make_backend_set(traces::BackendChoice::both, faults);
  if (!set.ok()) return "the backends cannot be made: " + set.error().message;
  traces::Runner runner(set->players);
  std::vector<std::unique_ptr<traces::RunObserver>> observers;
  for (const Op& op : ops) {
    if (!runner.play(op)) return runner.failure()->describe();
    if (observers.empty() && std::holds_alternative<BuildPool>(op) && runner.config()) {
      observers = props::property_observer_factory()(*runner.config());
      for (const auto& o : observers) runner.add_observer(o.get());
    }
  }
  if (!runner.finish()) return runner.failure()->describe();
  return std::nullopt;
}

// With `fault` off, model and GPU agree on the whole scenario; with it on, the gate's checks
// report a divergence. Prints the divergence (the reproducer's evidence).
void expect_caught(const std::string& fault, const Scenario& s, const std::vector<Op>& before_build = {}) {
  std::vector<Op> all = before_build;
  if (before_build.empty()) all.push_back(BuildPool{s.config});
  all.insert(all.end(), s.ops.begin(), s.ops.end());
  all.push_back(Checkpoint{});
  if (const auto d = play_side_by_side(all, "")) FAIL() << "without " << fault << ", the reproducer itself diverges: " << *d;
  if (const auto d = play_side_by_side(all, fault)) {
    std::printf("[ caught   ] %s: %s\n", fault.c_str(), d->c_str());
    return;
  }
  ADD_FAILURE() << "fault " << fault << " was not caught by the gate's checks";
}

Scenario small(std::vector<LayerKind> layers = {LayerKind::full, LayerKind::full}, std::uint64_t ps = 2,
               std::uint64_t pages = 20) {
  return Scenario(config_of(tiny_shape(std::move(layers)), ps, pages));
}

TEST(FaultSwitch, SkipRebindIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.shifted();
  s.ops.push_back(MakeBatch{1, s.tokens(s.m + 2, 2), {}});
  s.ops.push_back(Rebind{1, 0});
  s.ops.push_back(Write{0, 1, 1u, {}, false, {}, false});
  expect_caught("skip_rebind", s);
}

TEST(FaultSwitch, NoMarkCheckIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(MakeBatch{1, s.tokens(s.m, 2), {}});
  s.ops.push_back(Write{0, 1, 1u, {}, false, {}, false});  // never rebound: unmarked
  expect_caught("no_mark_check", s);
}

TEST(FaultSwitch, SplitDropsMarkIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(MakeBatch{1, s.tokens(s.m, 2), {}});
  s.ops.push_back(Rebind{1, 0});
  s.ops.push_back(Split{1, 1, 2, 3});
  s.ops.push_back(Write{0, 1, 3u, {}, false, {}, false});
  expect_caught("split_drops_mark", s);
}

TEST(FaultSwitch, CrossGetsBatchLocIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small({LayerKind::full, LayerKind::cross});
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(MakeBatch{1, s.tokens(s.m, 2), s.tokens(s.m, 2)});
  s.ops.push_back(Rebind{1, 0});
  s.ops.push_back(Write{1, 1, 1u, {}, false, {}, false});  // the cross-attention layer
  expect_caught("cross_gets_batch_loc", s);
}

// Three requests of two pages each; history written; a graph at max_batch 4, two pages wide.
Scenario decode_scenario() {
  Scenario s = small();
  for (int r = 0; r < 3; ++r) s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(Capture{1, 4, 2, 0, 2});
  return s;
}

std::vector<std::int64_t> prefix(const Scenario& s, int request, std::int64_t len) {
  std::vector<std::int64_t> t = s.tokens(s.m + 2 * request, 2);
  t.resize(static_cast<std::size_t>(len));
  return t;
}

TEST(FaultSwitch, StaleLocTailIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = decode_scenario();
  s.ops.push_back(Replay{1, {prefix(s, 0, 3), prefix(s, 1, 3), prefix(s, 2, 3)}, 5, 9});
  s.ops.push_back(Replay{1, {prefix(s, 0, 4)}, 6, 9});  // smaller batch: the tail must be the sink
  expect_caught("stale_loc_tail", s);
}

TEST(FaultSwitch, StaleTableLengthsIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = decode_scenario();
  s.ops.push_back(Replay{1, {prefix(s, 0, s.ps)}, 5, 9});          // one page
  s.ops.push_back(Replay{1, {prefix(s, 0, 2 * s.ps)}, 6, 9});      // two pages: the second column is new
  expect_caught("stale_table_lengths", s);
}

TEST(FaultSwitch, RemapFreshBufferIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.shifted();
  const std::vector<std::int64_t> indices = s.tokens(s.m + 2, 2);
  s.ops.push_back(RemapIndices{{0, static_cast<std::int64_t>(indices.size())}, indices, 1});
  expect_caught("remap_fresh_buffer", s);
}

TEST(FaultSwitch, StrideFromShapeIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  const std::vector<std::int64_t> history = s.tokens(s.m, 2);
  // A fresh pool binds virtual page v to physical page v: the tokens are their own physical ids.
  s.ops.push_back(Write{0, 3, std::nullopt, history, true, history, false});
  s.ops.push_back(Capture{1, 1, 2, 0, 2});
  s.ops.push_back(Replay{1, {history}, 4, 11});
  expect_caught("stride_from_shape", s);
}

TEST(FaultSwitch, NegativeWrapsIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  // v2p has num_pages + 1 rows; a page index of m - (num_pages + 1) wraps to page m.
  Translate t;
  t.ids = {(s.m - (s.num_pages + 1)) * s.ps};
  t.shape = {1};
  s.ops.push_back(t);
  expect_caught("negative_wraps", s);
}

TEST(FaultSwitch, TombstoneLiveIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  Translate t;
  t.ids = {s.m * s.ps + 1};  // page m is not bound: v2p[m] = -1
  t.shape = {1};
  s.ops.push_back(t);
  expect_caught("tombstone_live", s);
}

TEST(FaultSwitch, PairingOutOfOrderIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(4 * s.ps)});
  s.ops.push_back(Free{IdUnit::pages, {s.m, s.m + 1}});  // two survivors, two holes
  expect_caught("pairing_out_of_order", s);
}

TEST(FaultSwitch, MoveUnderReaderIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(3 * s.ps)});
  s.ops.push_back(BeginRead{1, "full", {s.m + 2}});
  s.ops.push_back(Free{IdUnit::pages, {s.m}});  // would move page m+2 under the reader
  expect_caught("move_under_reader", s);
}

TEST(FaultSwitch, AllocManyPartialIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  const std::uint64_t usable = static_cast<std::uint64_t>(s.num_pages - s.m);
  s.ops.push_back(AllocMany{{(usable - 1) * static_cast<std::uint64_t>(s.ps), 2 * static_cast<std::uint64_t>(s.ps)}});
  expect_caught("alloc_many_partial", s);
}

TEST(FaultSwitch, RowMisalignedAcceptedIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  // One KV head of dim 4 in bf16: 8-byte rows, which the byte law refuses.
  PoolConfig c;
  c.shape = tiny_shape({LayerKind::full, LayerKind::full}, 1, 4);
  c.page_size = 2;
  c.total_bytes = 64 * 1024;
  Scenario s(config_of(tiny_shape({LayerKind::full}), 2, 20));
  s.ops = {Alloc{4}};
  expect_caught("row_misaligned_accepted", s, {BuildPool{c}});
}

// A pool of 2.5 GiB whose pages of 128 KiB (8 KiB entries) pass byte 2^31 from page 16384 on.
Scenario past_2gib(DType dtype = DType::bf16) {
  PoolConfig c;
  c.shape = tiny_shape({LayerKind::full, LayerKind::full}, 8, 128);
  c.shape.dtype = dtype;
  c.page_size = 16;
  c.seed = 9;
  c.total_bytes = std::uint64_t{5} << 29;
  return Scenario(c);
}

TEST(FaultSwitch, Int32OffsetsIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  // 8 heads of dim 128 (2 KiB rows), two layers: 8 KiB entries; page size 16: 128 KiB pages.
  // A 2.5 GiB pool; pages past 16384 start beyond byte 2^31.
  Scenario s = past_2gib();
  const std::int64_t pages = (std::int64_t{1} << 31) / (16 * 8192) + 8;  // reaches past 2^31
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(pages * s.ps)});
  const std::vector<std::int64_t> top = s.tokens(s.m + pages - 2, 1);  // virtual = physical on a fresh pool
  s.ops.push_back(Write{1, 2, std::nullopt, top, true, top, false});
  s.ops.push_back(Read{1, "v", top});
  expect_caught("int32_offsets", s);
}

TEST(FaultSwitch, RemapStaleBoundIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.shifted();
  // One live request of 4 indices, then a stale tail of 2 from an earlier, larger batch whose end
  // kv_indptr still holds (entry bs + 1). The tail's ids are virtual ids that translate elsewhere.
  std::vector<std::int64_t> indices = s.tokens(s.m + 2, 2);
  const std::vector<std::int64_t> tail = s.tokens(s.m + 3, 1);
  indices.insert(indices.end(), tail.begin(), tail.end());
  s.ops.push_back(RemapIndices{{0, 4, 6}, indices, 1});
  expect_caught("remap_stale_bound", s);
}

TEST(FaultSwitch, MoveStrideFromShapeIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();  // two layers: a 128-byte entry, 32-byte rows
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(4 * s.ps)});  // virtual = physical m .. m+3
  const std::vector<std::int64_t> top = s.tokens(s.m + 3, 1);
  s.ops.push_back(Write{0, 3, std::nullopt, top, true, top, false});
  s.ops.push_back(Write{1, 3, std::nullopt, top, true, top, false});
  s.ops.push_back(Free{IdUnit::pages, {s.m}});  // the survivor m+3 moves into m
  s.ops.push_back(Read{1, "v", s.tokens(s.m, 1)});  // virtual m+3's rows, now on page m
  expect_caught("move_stride_from_shape", s);
}

TEST(FaultSwitch, PageTableTombstoneLiveIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  // A request slot whose second page (m+5) is not allocated: v2p[m+5] = -1, the sink in the table.
  std::vector<std::int64_t> row = s.tokens(s.m, 1);
  const std::vector<std::int64_t> unbound = s.tokens(s.m + 5, 1);
  row.insert(row.end(), unbound.begin(), unbound.end());
  s.ops.push_back(PageTable{{row}, {0}, {2 * s.ps}, {{7, 7, 7}}});
  expect_caught("page_table_tombstone_live", s);
}

TEST(FaultSwitch, GraphSwaTombstoneLiveIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small({LayerKind::full, LayerKind::swa});
  // Virtual m and m+1 on SWA pages top-1 and top; m leaves the window (an SWA tombstone), and the
  // top SWA page stays live with m+1.
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(FreeSwa{IdUnit::pages, {s.m}});
  s.ops.push_back(Capture{1, 1, 2, 0, 2});
  // The new token (the last of page m) has no SWA page: its SWA rows go to the sink. With the
  // fault they land on the top SWA page, live for m+1; the checkpoint's pool comparison sees them.
  s.ops.push_back(Replay{1, {s.tokens(s.m, 1)}, 5, 9});
  expect_caught("graph_swa_tombstone_live", s);
}

TEST(FaultSwitch, SinkCountsAsAllocatedIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = small();
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(2 * s.ps)});
  s.ops.push_back(Capture{1, 1, 2, 0, 2});
  // Token 1 lies on the sink page (virtual page 0, whose v2p row is 0): not allocated, refused.
  s.ops.push_back(Replay{1, {{s.m * s.ps, 1}}, 5, 9});
  expect_caught("sink_counts_as_allocated", s);
}

TEST(FaultSwitch, Int32OffsetsMoveIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  Scenario s = past_2gib();
  const std::int64_t pages = (std::int64_t{1} << 31) / (16 * 8192) + 8;  // the last one starts past 2^31
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(pages * s.ps)});
  const std::vector<std::int64_t> top = s.tokens(s.m + pages - 1, 1);  // virtual = physical on a fresh pool
  s.ops.push_back(Write{1, 2, std::nullopt, top, true, top, false});
  s.ops.push_back(Free{IdUnit::pages, {s.m}});  // compaction moves the top page (past 2^31) into page m
  s.ops.push_back(Read{1, "v", s.tokens(s.m, 1)});
  expect_caught("int32_offsets_move", s);
}

TEST(FaultSwitch, Int32OffsetsAttentionIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  // fp8: one element per byte, so element offsets pass 2^31 where byte offsets do. 4 KiB entries,
  // 64 KiB pages; pages from 32768 on start past element 2^31.
  Scenario s = past_2gib(DType::fp8_e4m3);
  const std::int64_t pages = (std::int64_t{1} << 31) / (16 * 4096) + 8;
  s.ops.push_back(Alloc{static_cast<std::uint64_t>(pages * s.ps)});
  const std::vector<std::int64_t> top = s.tokens(s.m + pages - 1, 1);  // virtual = physical on a fresh pool
  s.ops.push_back(Write{0, 3, std::nullopt, top, true, top, false});
  s.ops.push_back(Capture{1, 1, 1, 0, 8});
  s.ops.push_back(Replay{1, {top}, 4, 11});  // attends over the top page's 16 tokens
  expect_caught("int32_offsets_attention", s);
}

// ---------------------------------------------------------------- hybrid chains (SPEC 11)

// [state up | full down]: one full layer, a state of one layer with a conv (8, 3) bf16 block and
// a (1, 4, 4) fp32 temporal block: E_state = 48 + 64 = 112 bytes, not a multiple of 32. Room for
// `states` states and `pages` token pages above the floor.
Scenario hybrid(CompactionMode mode, std::uint64_t ps = 2, std::uint64_t states = 6, std::uint64_t pages = 12) {
  PoolConfig c;
  c.shape = tiny_shape({LayerKind::full});
  c.shape.name = "tiny-hybrid";
  StateShape st;
  st.layers = 1;
  st.conv.push_back(StateTensor{{8, 3}, DType::bf16});
  st.temporal = StateTensor{{1, 4, 4}, DType::fp32};
  c.shape.state = st;
  c.page_size = ps;
  c.mode = mode;
  c.seed = 5;
  c.total_bytes = 1 << 20;
  const PoolDerived probe = derive_pool(c).value();
  c.total_bytes = probe.geometry.reserved_floor_bytes + states * probe.state_layout->entry_bytes +
                  pages * probe.geometry.sub_pools[0].page_bytes;
  return Scenario(c);
}

TEST(HybridChain, StateAndOwnerPlaySideBySide) {
  KVTWIN_REQUIRE_CUDA();
  for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy}) {
    Scenario s = hybrid(mode);
    const auto ps = static_cast<std::uint64_t>(s.ps);
    // Slots and pages from both ends until they meet, a state written, moved, read back.
    for (std::uint64_t r = 1; r <= 4; ++r) s.ops.push_back(StateAlloc{r});
    s.ops.push_back(Alloc{3 * ps});
    s.ops.push_back(AllocMany{{2 * ps, 0, ps}});
    for (std::uint64_t r = 1; r <= 4; ++r) s.ops.push_back(StateWrite{r, 10 + r});
    s.ops.push_back(StateSlots{{1, 2, 3, 4, 99}});
    s.ops.push_back(StateFree{2});  // eager: slot 4 moves into slot 2
    s.ops.push_back(StateRead{{0, 1, 2, 3}, "temporal", 0});
    s.ops.push_back(StateRead{{2, 3}, "conv_0", 0});
    const auto m = static_cast<std::int64_t>(derive_pool(s.config).value().geometry.state->min_page_index);
    s.ops.push_back(BeginRead{7, "state", {m + 2}});
    s.ops.push_back(StateFree{1});  // eager: the band's last slot moves into slot m; slot m + 2 is held
    s.ops.push_back(StateAlloc{5});
    s.ops.push_back(StateWrite{5, 3});
    s.ops.push_back(Flush{});
    s.ops.push_back(EndRead{7});
    s.ops.push_back(StateAlloc{6});
    s.ops.push_back(StateAlloc{7});
    s.ops.push_back(StateAlloc{8});
    s.ops.push_back(Alloc{20 * ps});  // no room: the state's frontier stops the owner
    s.ops.push_back(StateFree{99});   // a double free
    s.ops.push_back(MovePages{"state", {1}, {2}});
    s.ops.push_back(StateRead{{1, 2, 3}, "temporal", 0});
    std::vector<Op> all = {BuildPool{s.config}};
    all.insert(all.end(), s.ops.begin(), s.ops.end());
    all.push_back(Checkpoint{});
    const auto d = play_side_by_side(all, "");
    EXPECT_FALSE(d.has_value()) << (mode == CompactionMode::eager ? "eager: " : "lazy: ") << d.value_or("");
  }
}

// SPEC 11's tri-pool [state up | swa float | full down]: a full and a sliding-window layer (window
// 4) and the state above, room for `states` states and `pages` pages of both token sub-pools.
Scenario tri_pool(CompactionMode mode, std::uint64_t ps = 2, std::uint64_t states = 4, std::uint64_t pages = 10) {
  Scenario base = hybrid(mode, ps, states, pages);
  PoolConfig c = base.config;
  c.shape = tiny_shape({LayerKind::full, LayerKind::swa});
  c.shape.name = "tiny-tripool";
  c.shape.state = base.config.shape.state;
  c.total_bytes = 1 << 20;
  const PoolDerived probe = derive_pool(c).value();
  c.total_bytes = probe.geometry.reserved_floor_bytes + states * probe.state_layout->entry_bytes +
                  pages * (probe.geometry.sub_pools[0].page_bytes + probe.geometry.sub_pools[1].page_bytes);
  return Scenario(c);
}

TEST(HybridChain, TriPoolPlaysSideBySide) {
  KVTWIN_REQUIRE_CUDA();
  for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy}) {
    Scenario s = tri_pool(mode);
    const auto ps = static_cast<std::uint64_t>(s.ps);
    // The float starts in the middle; pages from the owner's end and slots from the state's end
    // squeeze it until make_room relocates it, both ways; frees leave holes in it (absorbed at
    // once in eager mode, at the flush in lazy mode); the window's free_swa leaves tombstones.
    s.ops.push_back(Alloc{2 * ps});
    s.ops.push_back(StateAlloc{1});
    s.ops.push_back(AllocMany{{ps, 2 * ps}});
    s.ops.push_back(Write{1, 3, std::nullopt, s.tokens(s.m, 5), true, s.tokens(s.m, 5), false});
    s.ops.push_back(StateAlloc{2});
    s.ops.push_back(StateWrite{2, 7});
    s.ops.push_back(FreeSwa{IdUnit::pages, {s.m + 1}});
    s.ops.push_back(Free{IdUnit::pages, {s.m + 2}});
    s.ops.push_back(StateAlloc{3});
    s.ops.push_back(Alloc{3 * ps});
    s.ops.push_back(StateAlloc{4});
    s.ops.push_back(Read{1, "v", s.tokens(s.m, 2)});
    s.ops.push_back(BeginRead{5, "swa", {s.m}});
    s.ops.push_back(Alloc{2 * ps});  // make_room would move a page reader 5 holds: refused, or room
    s.ops.push_back(EndRead{5});
    s.ops.push_back(Flush{});
    s.ops.push_back(StateFree{1});
    s.ops.push_back(Alloc{4 * ps});
    s.ops.push_back(StateAlloc{5});
    s.ops.push_back(StateRead{{1, 2, 3}, "temporal", 0});
    s.ops.push_back(Free{IdUnit::pages, {s.m, s.m + 3, s.m + 4}});
    s.ops.push_back(Flush{});
    s.ops.push_back(Alloc{20 * ps});  // no room
    s.ops.push_back(MovePages{"swa", {s.m}, {s.m + 1}});
    std::vector<Op> all = {BuildPool{s.config}};
    all.insert(all.end(), s.ops.begin(), s.ops.end());
    all.push_back(Checkpoint{});
    const auto d = play_side_by_side(all, "");
    EXPECT_FALSE(d.has_value()) << (mode == CompactionMode::eager ? "eager: " : "lazy: ") << d.value_or("");
  }
}

TEST(FaultSwitch, StateReusedUnderReaderIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  // SPEC 10.22: slot m+1 moves to slot m (flush) while reader 2 holds it; the next alloc would
  // take it (m: the first usable slot; the sink's bytes may cover several).
  Scenario s = hybrid(CompactionMode::lazy);
  const auto m = static_cast<std::int64_t>(derive_pool(s.config).value().geometry.state->min_page_index);
  s.ops.push_back(StateAlloc{15});
  s.ops.push_back(StateAlloc{10});
  s.ops.push_back(BeginRead{2, "state", {m + 1}});
  s.ops.push_back(StateFree{15});
  s.ops.push_back(Flush{});
  s.ops.push_back(StateAlloc{12});
  expect_caught("state_reused_under_reader", s);
}

TEST(FaultSwitch, StateEntryPaddedIsCaught) {
  KVTWIN_REQUIRE_CUDA();
  // SPEC 10.23: E_state is 112 bytes; padded to 128, slot 2's state lands 32 bytes late.
  Scenario s = hybrid(CompactionMode::eager);
  s.ops.push_back(StateAlloc{1});
  s.ops.push_back(StateAlloc{2});
  s.ops.push_back(StateWrite{2, 4});
  expect_caught("state_entry_padded", s);
}

TEST(FaultSwitch, EverySwitchHasAReproducer) {
  // The reproducers above cover every GPU switch by name (keep them in step with gpu/faults.h).
  // The host transfer switches (13, 19, 20, 21) have theirs in host_transfer_test.cpp
  // (HostTransferFault.*), worked out from SPEC 8 on the GPU alone until the model plays host
  // operations side by side; float_relocation_source_order its regression trace
  // (host_regress_test.cpp, TriPoolRegressTraces).
  const std::vector<std::string_view> covered = {
      "skip_rebind",          "no_mark_check",       "split_drops_mark",
      "cross_gets_batch_loc", "stale_loc_tail",      "stale_table_lengths",
      "remap_stale_bound",    "remap_fresh_buffer",  "stride_from_shape",
      "move_stride_from_shape", "negative_wraps",    "tombstone_live",
      "page_table_tombstone_live", "graph_swa_tombstone_live", "sink_counts_as_allocated",
      "pairing_out_of_order", "move_under_reader",   "transfer_before_producer_event",
      "alloc_many_partial",   "row_misaligned_accepted", "int32_offsets",
      "int32_offsets_move",   "int32_offsets_attention", "transfer_logical_as_physical",
      "compaction_ignores_transfers", "swa_offload_token_filter", "state_reused_under_reader",
      "state_entry_padded",   "float_relocation_source_order"};
  EXPECT_EQ(covered, fault_names());
}

}  // namespace
}  // namespace kvtwin::gpu::testing
