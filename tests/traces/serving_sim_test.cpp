// The serving simulator on the committed request-trace samples: determinism (same inputs, the
// same trace byte for byte), the recorded trace replaying clean, token accounting against sums
// the test computes from the trace itself, prefix reuse, retraction under pressure, sliding-window
// frees, lazy flushes, MLA, rejections, parameter errors, and the host and storage tiers.
#include "traces/serving_sim.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "core/checked.h"
#include "tests/traces/test_support.h"
#include "traces/replay.h"

namespace kvtwin::traces {
namespace {

using ::testing::HasSubstr;

RequestTrace sample(const char* file, TraceFormat format, std::uint64_t limit) {
  Result<RequestTrace> t = read_request_trace(testing::source_dir() + "/traces/samples/" + file, format, {limit});
  KVTWIN_CHECK(t.ok(), t.ok() ? "" : t.error().message);
  return *t;
}
RequestTrace mooncake(std::uint64_t limit) {
  return sample("mooncake_conversation_head.jsonl", TraceFormat::mooncake, limit);
}
RequestTrace azure(std::uint64_t limit) { return sample("azure_code_head.csv", TraceFormat::azure, limit); }

ServingParams params(const char* model, std::uint32_t tp, std::uint64_t pool_bytes, std::uint64_t scale) {
  ServingParams p;
  p.model = model;
  p.tp = tp;
  p.page_size = 16;
  p.pool_bytes = pool_bytes;
  p.token_scale = scale;
  p.max_running = 16;
  p.checkpoint_every = 32;
  return p;
}

struct SimRun {
  ReplayReport report;
  PoolTables final_tables;
};

SimRun simulate(const RequestTrace& trace, const ServingParams& p, PoolTraceWriter* writer = nullptr,
               const BackendOptions& options = {}) {
  Result<BackendSet> b = make_backend_set(BackendChoice::model, "", options);
  KVTWIN_CHECK(b.ok(), "model");
  Result<ReplayReport> r = simulate_request_trace(trace, p, *b, CheckCadence{}, writer);
  KVTWIN_CHECK(r.ok(), r.ok() ? "" : r.error().message);
  Result<PoolTables> tables = b->players.front().backend->tables();
  KVTWIN_CHECK(tables.ok(), "tables after a run");
  return SimRun{*r, *tables};
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string record(const RequestTrace& trace, const ServingParams& p, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  TraceHeader h;
  h.config = *serving_pool_config(p);
  h.seed = p.seed;
  h.origin = serving_params_json(p, trace);
  Result<PoolTraceWriter> w = PoolTraceWriter::open(path, h);
  KVTWIN_CHECK(w.ok(), "writer");
  const SimRun run = simulate(trace, p, &*w);
  KVTWIN_CHECK(run.report.passed(), run.report.failure ? run.report.failure->describe() : "");
  KVTWIN_CHECK(w->close().ok(), "close");
  return path;
}

void expect_empty_at_the_end(const SimRun& run) {
  for (const SideTables& s : run.final_tables.sides)
    EXPECT_EQ(s.allocated_pages, 0u) << "side " << s.name << ": the drained pool must be empty";
}

TEST(ServingSim, SameInputsRecordTheSameTraceByteForByte) {
  const RequestTrace t = mooncake(30);
  const ServingParams p = params("llama-3.1-8b", 8, 16ull << 20, 32);
  const std::string a = read_all(record(t, p, "kvtwin_sim_a.jsonl"));
  const std::string b = read_all(record(t, p, "kvtwin_sim_b.jsonl"));
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a, b);
  ServingParams other = p;
  other.seed = 2;
  EXPECT_NE(read_all(record(t, other, "kvtwin_sim_c.jsonl")), a) << "the oracle seed is part of the trace";
}

TEST(ServingSim, TheRecordedTraceReplaysCleanAndCarriesItsParameters) {
  const RequestTrace t = mooncake(30);
  ServingParams p = params("llama-3.1-8b", 8, 32ull << 20, 16);
  const std::string path = record(t, p, "kvtwin_sim_replay.jsonl");
  Result<PoolTrace> trace = read_pool_trace_file(path);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->header.origin["token_scale"], 16);
  EXPECT_EQ(trace->header.origin["host_tier"], "none");
  for (const TraceLine& l : trace->lines) ASSERT_TRUE(l.expect.has_value()) << "line " << l.line;
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  Result<ReplayReport> r = replay_pool_trace_file(path, *b, CheckCadence{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->passed()) << r->failure->describe();
  EXPECT_EQ(r->stats.expects_checked, trace->lines.size());
  // A 32 MiB pool with bytes: verify() at every checkpoint the simulator put in, and at the end.
  std::uint64_t checkpoints = 0;
  for (const TraceLine& l : trace->lines) checkpoints += std::holds_alternative<Checkpoint>(l.op) ? 1 : 0;
  EXPECT_GE(checkpoints, 2u);
  EXPECT_EQ(r->stats.verifies, checkpoints + 1);
}

TEST(ServingSim, TokensAddUpToWhatTheTraceSays) {
  const RequestTrace t = mooncake(60);
  // A roomy pool: nothing is rejected, evicted or retracted.
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 30, 16);
  p.tables_only = true;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  std::uint64_t prompt = 0, output = 0;
  for (const Request& r : t.requests) {
    prompt += ceil_div(r.input_tokens, 16);
    output += ceil_div(r.output_tokens, 16);
  }
  EXPECT_EQ(s.requests_in_trace, 60u);
  EXPECT_EQ(s.requests_served, 60u);
  EXPECT_EQ(s.requests_rejected, 0u);
  EXPECT_EQ(s.retractions, 0u);
  EXPECT_EQ(s.admissions, 60u);
  EXPECT_EQ(s.prompt_tokens, prompt);
  EXPECT_EQ(s.decode_tokens, output);
  EXPECT_EQ(s.prefill_tokens + s.cached_tokens, prompt);
  EXPECT_EQ(s.cache_evicted_pages, 0u);
  EXPECT_GE(s.simulated_us, t.requests.back().arrival_us) << "the clock passes every arrival";
  expect_empty_at_the_end(run);
}

TEST(ServingSim, SharedPrefixesAreReusedUpToWhatAnEndlessCacheWouldReuse) {
  const RequestTrace t = mooncake(120);
  ServingParams p = params("llama-3.1-8b", 8, 512ull << 20, 16);
  p.tables_only = true;  // prefix reuse is decided on tables alone
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  // The most an endless cache could reuse: each request's longest run of leading full blocks that
  // an earlier request's prompt already had.
  std::set<std::vector<std::int64_t>> seen;
  std::uint64_t bound = 0;
  for (const Request& r : t.requests) {
    const std::uint64_t full = r.input_tokens / 512;
    std::vector<std::int64_t> prefix;
    bool hit = true;
    for (std::uint64_t b = 0; b < full; ++b) {
      prefix.push_back(r.block_hashes[b]);
      if (hit && seen.count(prefix))
        bound += 512 / 16;
      else
        hit = false;
      seen.insert(prefix);
    }
  }
  EXPECT_GT(bound, 0u) << "the sample shares prefixes";
  EXPECT_GT(s.cached_tokens, 0u);
  EXPECT_LE(s.cached_tokens, bound);
  EXPECT_GT(s.prefix_hit_rate(), 0.0);
  expect_empty_at_the_end(run);
}

TEST(ServingSim, APoolUnderPressureRetractsAndStillServesEveryone) {
  const RequestTrace t = mooncake(60);
  ServingParams p = params("llama-3.1-8b", 8, 24ull << 20, 16);  // 96 pages of 16 tokens
  p.reserve_permille = 0;                                        // admit greedily
  p.max_running = 32;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_GT(s.retractions, 0u);
  EXPECT_EQ(s.admissions, s.requests_served + s.retractions);
  EXPECT_EQ(s.requests_served + s.requests_rejected, 60u);
  EXPECT_GT(s.cache_evicted_pages, 0u);
  EXPECT_EQ(s.sides[0].peak_pages, s.sides[0].usable_pages) << "the pool was full at some point";
  std::uint64_t output = 0;
  for (const Request& r : t.requests) output += ceil_div(r.output_tokens, 16);
  EXPECT_LE(s.decode_tokens, output) << "a retraction keeps the tokens generated so far";
  expect_empty_at_the_end(run);
}

// The simulator tells an observer each decision; the events add up to its summary,
// the pages it names are the ones the pool allocated, and the clock never runs back.
TEST(ServingSim, AnObserverIsToldEveryDecisionAndTheyAddUpToTheSummary) {
  struct Told : ServingObserver {
    std::map<ServingEvent::Kind, std::uint64_t> count;
    std::uint64_t pages = 0, last_now = 0, last_step = 0;
    bool clock_ok = true, steps_ok = true;
    std::set<std::uint64_t> requests;
    void on_serving_event(const ServingEvent& e) override {
      ++count[e.kind];
      pages += e.pages.size();
      clock_ok = clock_ok && e.now_us >= last_now;
      last_now = e.now_us;
      if (e.kind == ServingEvent::Kind::step_done) {
        steps_ok = steps_ok && e.step == count[e.kind] - 1 && e.totals != nullptr;
        last_step = e.step;
      } else {
        requests.insert(e.request);
      }
    }
  } told;
  const RequestTrace t = mooncake(60);
  ServingParams p = params("llama-3.1-8b", 8, 24ull << 20, 16);
  p.reserve_permille = 0;
  p.max_running = 32;
  p.tables_only = true;
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  ASSERT_TRUE(b.ok());
  struct Allocations : RunObserver {
    std::uint64_t pages = 0;
    void after_apply(const Runner&, const OpEvent& e) override {
      if (!e.results.front().ok()) return;
      if (const auto* a = std::get_if<Allocated>(&e.results.front().value())) pages += a->pages.size();
      if (const auto* m = std::get_if<AllocatedMany>(&e.results.front().value()))
        for (const auto& one : m->pages) pages += one.size();
    }
  } allocations;
  Result<ReplayReport> r =
      simulate_request_trace(t, p, *b, CheckCadence{}, nullptr, {}, ReplayWatchers{&allocations, &told});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->passed()) << r->failure->describe();
  const ServingSummary& s = *r->serving;
  using Kind = ServingEvent::Kind;
  EXPECT_EQ(told.count[Kind::admitted], s.admissions);
  EXPECT_EQ(told.count[Kind::retracted], s.retractions);
  EXPECT_GT(s.retractions, 0u);
  EXPECT_EQ(told.count[Kind::finished], s.requests_served);
  EXPECT_EQ(told.count[Kind::step_done], s.steps);
  EXPECT_TRUE(told.clock_ok);
  EXPECT_TRUE(told.steps_ok);
  EXPECT_EQ(told.requests.size(), s.requests_served) << "every served request was named";
  // Every page the pool allocated was named once: at admission or at decode growth.
  EXPECT_GT(told.count[Kind::grew], 0u);
  EXPECT_EQ(told.pages, allocations.pages);
}

TEST(ServingSim, SlidingWindowPagesAreFreedOnTheSwaSideOnly) {
  // gpt-oss-20b: alternating sliding-window (128 tokens) and full layers: a composite pool.
  const RequestTrace t = azure(80);
  ServingParams p = params("gpt-oss-20b", 8, 16ull << 20, 4);
  p.mode = CompactionMode::lazy;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  ASSERT_EQ(s.sides.size(), 2u);
  EXPECT_EQ(s.sides[1].name, "swa");
  EXPECT_GT(s.swa_freed_pages, 0u);
  EXPECT_LT(s.sides[1].peak_pages, s.sides[0].peak_pages) << "window pages leave the SWA side early";
  EXPECT_EQ(s.cached_tokens, 0u) << "Azure traces carry no prefix hashes";
  EXPECT_GT(s.compaction_moves, 0u) << "lazy flushes compact";
  expect_empty_at_the_end(run);
}

// The held pages at the end of every step, from the simulator's own events.
struct HeldPerStep : ServingObserver {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> full_and_swa;  // index: the step
  std::map<std::uint64_t, std::vector<std::uint64_t>> admitted_pages;  // request -> pages allocated at admission
  std::map<std::uint64_t, std::uint64_t> admitted_step;                // request -> step of its admission
  void on_serving_event(const ServingEvent& e) override {
    if (e.kind == ServingEvent::Kind::step_done) full_and_swa.emplace_back(e.full_pages_held, e.swa_pages_held);
    if (e.kind == ServingEvent::Kind::admitted) {
      admitted_pages[e.request].push_back(e.pages.size());
      admitted_step[e.request] = e.step;
    }
  }
};

ReplayReport simulate_watched(const RequestTrace& t, const ServingParams& p, ServingObserver& watcher) {
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  KVTWIN_CHECK(b.ok(), "model");
  Result<ReplayReport> r = simulate_request_trace(t, p, *b, CheckCadence{}, nullptr, {}, ReplayWatchers{nullptr, &watcher});
  KVTWIN_CHECK(r.ok(), r.ok() ? "" : r.error().message);
  KVTWIN_CHECK(r->passed(), r->failure ? r->failure->describe() : "");
  return *r;
}

// One request of a known length, alone in a roomy pool.
RequestTrace one_request(std::uint64_t input_tokens, std::uint64_t output_tokens) {
  RequestTrace t;
  t.format = TraceFormat::azure;
  t.name = "one request";
  Request r;
  r.input_tokens = input_tokens;
  r.output_tokens = output_tokens;
  t.requests.push_back(r);
  return t;
}

// The sliding window is a token count like the prompt: at token scale s it is ceil(window / s)
// scaled tokens. gpt-oss-20b's 128-token window, one 4096-token prompt, 16-token pages: after the
// first decode step the request holds 4097 tokens; the SWA side keeps only the pages that reach
// into the window. Unscaled, 257 pages of which 9 keep their SWA page (257 - (4097 - 128) / 16);
// at scale 16, 257 scaled tokens in 17 pages with an 8-token window: 2 keep theirs (the same
// share as unscaled, where an unscaled 128-token window would have kept 9 of 17).
TEST(ServingSim, TheSlidingWindowIsScaledLikeEveryOtherTokenCount) {
  struct Case {
    std::uint64_t scale, full_pages, swa_pages, window;
  };
  for (const Case c : {Case{1, 257, 9, 128}, Case{16, 17, 2, 8}, Case{4, 65, 3, 32}, Case{256, 2, 1, 1}}) {
    SCOPED_TRACE("token scale " + std::to_string(c.scale));
    ServingParams p = params("gpt-oss-20b", 8, 64ull << 20, c.scale);
    p.tables_only = true;
    const std::uint64_t window = std::max<std::uint64_t>(1, ceil_div(128, c.scale));
    ASSERT_EQ(window, c.window);
    HeldPerStep held;
    const ReplayReport r = simulate_watched(one_request(4096, 64 * c.scale), p, held);
    ASSERT_GE(held.full_and_swa.size(), 2u);
    // Step 0 admits and prefills (both sides hold every page); step 1 decodes one token and frees
    // the SWA pages wholly behind the window.
    const std::uint64_t seq = ceil_div(4096, c.scale) + 1;
    EXPECT_EQ(held.full_and_swa[0].first, ceil_div(4096, c.scale * 16));
    EXPECT_EQ(held.full_and_swa[0].second, held.full_and_swa[0].first);
    EXPECT_EQ(held.full_and_swa[1].first, c.full_pages);
    EXPECT_EQ(held.full_and_swa[1].first, ceil_div(seq, 16));
    EXPECT_EQ(held.full_and_swa[1].second, c.swa_pages);
    EXPECT_EQ(held.full_and_swa[1].second, c.full_pages - (seq - window) / 16);
    // The last window step is the one before the request finishes (64 scaled output tokens).
    const std::uint64_t last_seq = ceil_div(4096, c.scale) + 63;
    EXPECT_EQ(r.serving->swa_freed_pages, (last_seq - window) / 16);
  }
}

// A hand-made Mooncake trace: two requests arrive together with the same 5 hash_ids (4 full
// 512-token blocks and a partial one), admitted in the same step.
RequestTrace twins() {
  RequestTrace t;
  t.format = TraceFormat::mooncake;
  t.name = "twins";
  t.block_tokens = kMooncakeBlockTokens;
  for (std::uint64_t i = 0; i < 2; ++i) {
    Request r;
    r.index = i;
    r.input_tokens = 2100;
    r.output_tokens = 64;
    r.block_hashes = {7, 8, 9, 10, 11};
    t.requests.push_back(r);
  }
  return t;
}

// Requests admitted in the same step share the blocks being prefilled (share_within_step, the
// default), or only blocks of earlier steps (off). At scale 16 a block is 32 tokens (2 pages); the
// prompt is 132 scaled tokens (9 pages).
TEST(ServingSim, RequestsOfOneStepShareTheirPrefixWhenAsked) {
  const RequestTrace t = twins();
  for (const bool share : {true, false}) {
    SCOPED_TRACE(share ? "share within step on" : "off");
    ServingParams p = params("llama-3.1-8b", 8, 64ull << 20, 16);
    p.share_within_step = share;
    HeldPerStep held;
    const ReplayReport r = simulate_watched(t, p, held);
    const ServingSummary& s = *r.serving;
    EXPECT_EQ(s.requests_served, 2u);
    ASSERT_EQ(held.admitted_step.size(), 2u);
    EXPECT_EQ(held.admitted_step[0], 0u);
    EXPECT_EQ(held.admitted_step[1], 0u) << "both are admitted in the first step";
    EXPECT_EQ(held.admitted_pages[0], std::vector<std::uint64_t>{9});
    if (share) {
      EXPECT_EQ(held.admitted_pages[1], std::vector<std::uint64_t>{1}) << "8 of its 9 pages are the first's";
      EXPECT_EQ(s.cached_tokens, 128u);
      EXPECT_EQ(s.prefill_tokens, 132u + 4u);
      EXPECT_EQ(held.full_and_swa[0].first, 10u);
    } else {
      EXPECT_EQ(held.admitted_pages[1], std::vector<std::uint64_t>{9});
      EXPECT_EQ(s.cached_tokens, 0u);
      EXPECT_EQ(s.prefill_tokens, 2u * 132u);
      EXPECT_EQ(held.full_and_swa[0].first, 18u);
    }
    EXPECT_EQ(r.parameters["share_within_step"], share);
  }
  // A request arriving a step later shares either way.
  RequestTrace later = t;
  later.requests[1].arrival_us = 1;
  ServingParams p = params("llama-3.1-8b", 8, 64ull << 20, 16);
  p.share_within_step = false;
  HeldPerStep held;
  const ReplayReport r = simulate_watched(later, p, held);
  EXPECT_EQ(held.admitted_step[1], 1u);
  EXPECT_EQ(r.serving->cached_tokens, 128u);
}

// A trace of 64-token blocks (--block-tokens 64): the cache's blocks are 64 / scale tokens, and a
// second request sharing two leading blocks reuses exactly those.
TEST(ServingSim, TheTracesBlockSizeSetsThePrefixCachesBlocks) {
  std::istringstream text(
      "{\"timestamp\": 0, \"input_length\": 130, \"output_length\": 8, \"hash_ids\": [1, 2, 3]}\n"
      "{\"timestamp\": 5000, \"input_length\": 190, \"output_length\": 8, \"hash_ids\": [1, 2, 4]}\n");
  RequestReadOptions options;
  options.block_tokens = 64;
  Result<RequestTrace> t = parse_request_trace(text, "blocks64.jsonl", TraceFormat::mooncake, options);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ServingParams p = params("llama-3.1-8b", 8, 16ull << 20, 4);  // 16-token blocks: one page each
  HeldPerStep held;
  const ReplayReport r = simulate_watched(*t, p, held);
  ASSERT_GE(held.admitted_step[1], 1u) << "the second request arrives after the first was prefilled";
  EXPECT_EQ(r.serving->cached_tokens, 2u * 16u) << "two 64-token blocks, 16 scaled tokens each";
  EXPECT_EQ(r.serving->prompt_tokens, ceil_div(130, 4) + ceil_div(190, 4));
  EXPECT_EQ(r.parameters["block_tokens"], 64);
  EXPECT_THAT(report_text(r), HasSubstr("64-token prefix blocks"));
}

// The simulator checks its own accounting after every step: a planted simulator bug (the window
// never frees the first request's dead pages) fails the run with the step and the request named,
// where without the check the replay would pass with those pages quietly kept.
TEST(ServingSim, ASimulatorBugFailsTheRunInsteadOfPassingQuietly) {
  const RequestTrace t = azure(80);
  ServingParams p = params("gpt-oss-20b", 8, 16ull << 20, 4);
  p.mode = CompactionMode::lazy;
  p.planted_fault = "keep_dead_window_page";
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  ASSERT_TRUE(b.ok());
  Result<ReplayReport> r = simulate_request_trace(t, p, *b, CheckCadence{});
  const std::string failure = !r.ok() ? r.error().message : r->passed() ? "" : r->failure->describe();
  EXPECT_THAT(failure, HasSubstr("serving simulator accounting broken at step "));
  EXPECT_THAT(failure, HasSubstr("private pages behind the window but freed 0 of their SWA pages"));
}

TEST(ServingSim, MlaAndTablesOnlyPoolsRunToo) {
  const RequestTrace t = mooncake(50);
  ServingParams p = params("deepseek-v2-lite", 1, 64ull << 20, 16);
  const SimRun mla = simulate(t, p);
  ASSERT_TRUE(mla.report.passed()) << mla.report.failure->describe();
  EXPECT_EQ(mla.report.serving->sides[0].name, "mla");
  p.tables_only = true;
  p.pool_bytes = 4ull << 30;  // real-scale, tables only
  const SimRun big = simulate(t, p);
  ASSERT_TRUE(big.report.passed()) << big.report.failure->describe();
  EXPECT_EQ(big.report.stats.changed_verifies, big.report.stats.ops)
      << "a large pool is verified incrementally after every op";
  EXPECT_EQ(big.report.stats.verifies, 1u) << "and in full at the end";
  EXPECT_EQ(big.report.serving->requests_served, 50u);
  expect_empty_at_the_end(big);
}

// --entries shrunk (ServingParams::shrink_entries): every sub-pool keeps its slots and pages, each
// entry keeps 2 layers of each kind (in proportion) and one KV head per rank, so the simulator
// makes exactly the decisions it makes on real entries; only the bytes per entry shrink.
TEST(ServingSim, ShrunkEntriesKeepThePagesAndEveryDecisionOfTheFullPool) {
  struct Case {
    const char* model;
    std::uint64_t pool_bytes;
    std::size_t layers;  // kept
    std::uint64_t entry_bytes;  // the shrunk owner entry, by hand
  };
  // llama-3.1-8b: 2 of 32 full layers, one head of 128 bf16: 2 * (256 + 256) = 1 KiB (of 128 KiB).
  // gpt-oss-20b: 12 SWA + 12 full in proportion 1:1, 2 of each; one head of 64 bf16: 2 * 256 = 512.
  // deepseek-v2-lite (MLA, 27 layers): 2 latent rows of (512 + 64) * 2 = 2304 bytes.
  for (const Case& c : {Case{"llama-3.1-8b", 64ull << 20, 2, 1024}, Case{"gpt-oss-20b", 96ull << 20, 4, 512},
                        Case{"deepseek-v2-lite", 64ull << 20, 2, 2304}}) {
    SCOPED_TRACE(c.model);
    ServingParams full = params(c.model, 1, c.pool_bytes, 16);
    ServingParams shrunk = full;
    shrunk.shrink_entries = true;
    const Result<PoolConfig> a = serving_pool_config(full);
    const Result<PoolConfig> b = serving_pool_config(shrunk);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(b->shape.layers.size(), c.layers);
    EXPECT_THAT(b->shape.name, HasSubstr("entries shrunk"));
    const PoolDerived da = derive_pool(*a).value(), db = derive_pool(*b).value();
    EXPECT_EQ(db.layouts[0].entry_bytes, c.entry_bytes);
    ASSERT_EQ(da.geometry.sub_pools.size(), db.geometry.sub_pools.size());
    for (std::size_t s = 0; s < da.geometry.sub_pools.size(); ++s) {
      EXPECT_EQ(da.geometry.sub_pools[s].num_pages, db.geometry.sub_pools[s].num_pages) << "side " << s;
      EXPECT_EQ(da.geometry.sub_pools[s].min_page_index, db.geometry.sub_pools[s].min_page_index) << "side " << s;
    }
    // The same decisions as real entries (which need no bytes to decide: tables only here):
    // admissions, evictions, moves, prefix hits, the final tables.
    const RequestTrace t = mooncake(16);
    ServingParams full_tables = full;
    full_tables.tables_only = true;
    const SimRun ra = simulate(t, full_tables), rb = simulate(t, shrunk);
    ASSERT_TRUE(ra.report.passed() && rb.report.passed());
    const ServingSummary &sa = *ra.report.serving, &sb = *rb.report.serving;
    EXPECT_EQ(sa.admissions, sb.admissions);
    EXPECT_EQ(sa.retractions, sb.retractions);
    EXPECT_EQ(sa.cached_tokens, sb.cached_tokens);
    EXPECT_EQ(sa.compaction_moves, sb.compaction_moves);
    EXPECT_EQ(sa.cache_evicted_pages, sb.cache_evicted_pages);
    EXPECT_EQ(sa.steps, sb.steps);
    EXPECT_EQ(ra.final_tables, rb.final_tables);
  }
  // Tables only has no bytes to shrink: the configuration is the full one.
  ServingParams tables = params("llama-3.1-8b", 1, 64ull << 20, 16);
  tables.tables_only = tables.shrink_entries = true;
  EXPECT_EQ(serving_pool_config(tables)->shape.layers.size(), 32u);
}

TEST(ServingSim, APromptLargerThanThePoolIsRejectedNotStuck) {
  RequestTrace t = azure(10);
  t.requests[3].input_tokens = 1000000;  // far beyond 32 MiB of pool
  const SimRun run = simulate(t, params("gpt-oss-20b", 8, 32ull << 20, 4));
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  EXPECT_EQ(run.report.serving->requests_rejected, 1u);
  EXPECT_EQ(run.report.serving->requests_served, 9u);
}

TEST(ServingSim, ARequestThatOutgrowsThePoolIsDroppedNotCountedAsRejected) {
  // One request whose output alone would fill the pool many times over: it decodes until the pool
  // is full, is retracted, and at re-admission its prompt plus its output so far no longer fits an
  // empty pool. Its prompt fitted: it was not "rejected as larger than the pool".
  RequestTrace t = azure(1);
  t.requests[0].input_tokens = 64;
  t.requests[0].output_tokens = 10000000;
  ServingParams p = params("llama-3.1-8b", 8, 24ull << 20, 16);  // 96 pages of 16 tokens
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_EQ(s.requests_rejected, 0u);
  EXPECT_EQ(s.requests_dropped, 1u);
  EXPECT_EQ(s.requests_served, 0u);
  EXPECT_EQ(s.retractions, 1u);
  EXPECT_THAT(report_text(run.report), HasSubstr("rejected as larger than the pool: 0; dropped at re-admission"));
  expect_empty_at_the_end(run);
}

TEST(ServingSim, ACompositeReportsItsSharedBytesAsShared) {
  // gpt-oss-20b: the full and swa sides take their pages from the same bytes. Each side's pages
  // are at most what the shared bytes hold of it alone, and a full pool shows as full. 60 requests:
  // with the window scaled (32 tokens at scale 4), the first 30 no longer fill 2 MiB.
  const RequestTrace t = azure(60);
  ServingParams p = params("gpt-oss-20b", 8, 2ull << 20, 4);
  p.reserve_permille = 0;  // admit greedily: the pool fills
  p.max_running = 32;
  p.tables_only = true;  // the accounting is the same; no bytes to re-read after every op
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  const PoolDerived d = derive_pool(*serving_pool_config(p)).value();
  const SubPoolGeometry& up = d.geometry.sub_pools[0];
  const SubPoolGeometry& down = d.geometry.sub_pools[1];
  EXPECT_EQ(s.shared_bytes, down.num_pages * down.page_bytes - up.min_page_index * up.page_bytes);
  for (const SideOccupancy& side : s.sides) {
    EXPECT_LE(side.usable_pages * side.page_bytes, s.shared_bytes) << side.name;
    EXPECT_LE(side.peak_pages, side.usable_pages) << side.name;
  }
  ASSERT_GT(s.retractions, 0u) << "the pool filled";
  EXPECT_GT(s.peak_shared_bytes + up.page_bytes + down.page_bytes, s.shared_bytes)
      << "at the peak not one more page of each side fitted: the shared bytes were full";
  EXPECT_LE(s.peak_shared_bytes, s.shared_bytes);
  EXPECT_THAT(report_text(run.report), HasSubstr("sharing " + std::to_string(s.shared_bytes) + " bytes"));
}

TEST(ServingSim, ParametersThatCannotWorkAreClearErrors) {
  const RequestTrace t = mooncake(5);
  ServingParams p = params("llama-3.1-8b", 8, 32ull << 20, 3);
  Result<ServingSimulator> s = ServingSimulator::create(p, t);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message, HasSubstr("token scale 3 does not divide the trace's 512-token prefix blocks"));
  p.token_scale = 64;  // 8-token blocks
  s = ServingSimulator::create(p, t);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message,
              HasSubstr("a prefix block of 512 / 64 = 8 tokens is not a whole number of 16-token pages"));
  // With a block size given to the reader, the errors name it.
  RequestTrace small_blocks = t;
  small_blocks.block_tokens = 64;
  small_blocks.block_tokens_given = true;
  p.token_scale = 128;
  s = ServingSimulator::create(p, small_blocks);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message,
              HasSubstr("token scale 128 does not divide the trace's 64-token prefix blocks (--block-tokens 64)"));
  p.token_scale = 8;
  s = ServingSimulator::create(p, small_blocks);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message, HasSubstr("a prefix block of 64 / 8 = 8 tokens is not a whole number of 16-token "
                                           "pages (the trace's 64-token prefix blocks (--block-tokens 64))"));
  p.token_scale = 16;
  p.pool_bytes = 4096;
  s = ServingSimulator::create(p, t);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message, HasSubstr("the pool cannot be built"));
  p.pool_bytes = 32ull << 20;
  ModelShape cross = find_model("llama-3.1-8b").value();
  cross.layers[3] = LayerKind::cross;
  p.shape = cross;
  s = ServingSimulator::create(p, t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::unsupported);
}


// ---------------------------------------------------------------- the host tier (SPEC 8, issue 9)

// The most prefix tokens an endless cache could reuse over the first admissions: each request's
// longest run of leading full blocks that an earlier request's prompt already had.
std::uint64_t endless_cache_tokens(const RequestTrace& t, std::uint64_t scale) {
  std::set<std::vector<std::int64_t>> seen;
  std::uint64_t bound = 0;
  for (const Request& r : t.requests) {
    const std::uint64_t full = r.input_tokens / t.block_tokens;
    std::vector<std::int64_t> prefix;
    bool hit = true;
    for (std::uint64_t b = 0; b < full; ++b) {
      prefix.push_back(r.block_hashes[b]);
      if (hit && seen.count(prefix))
        bound += t.block_tokens / scale;
      else
        hit = false;
      seen.insert(prefix);
    }
  }
  return bound;
}

void expect_host_empty_at_the_end(const SimRun& run) {
  for (const SideTables& s : run.final_tables.sides)
    EXPECT_EQ(s.allocated_pages, 0u) << "side " << s.name << ": the drained pool must be empty";
  EXPECT_EQ(run.report.serving->peak_host_pages > 0, run.report.serving->host_pages > 0);
}

// A Mooncake trace whose requests cycle through `prefixes` prompts of three shared 512-token blocks
// and one of their own, one at a time: a device cache smaller than the cycle evicts each prefix
// before it comes round again.
RequestTrace cycling_prefixes(std::uint64_t requests, std::uint64_t prefixes) {
  const std::string path = ::testing::TempDir() + "kvtwin_cycling_prefixes.jsonl";
  {
    std::ofstream out(path);
    for (std::uint64_t i = 0; i < requests; ++i) {
      const std::uint64_t p = i % prefixes;
      out << "{\"timestamp\": " << i * 2000 << ", \"input_length\": " << 4 * 512 - 100
          << ", \"output_length\": 64, \"hash_ids\": [" << 100 * p + 1 << ", " << 100 * p + 2 << ", " << 100 * p + 3
          << ", " << 100000 + i << "]}\n";
    }
  }
  Result<RequestTrace> t = read_request_trace(path, TraceFormat::mooncake, {});
  KVTWIN_CHECK(t.ok(), t.ok() ? "" : t.error().message);
  return *t;
}

TEST(ServingSimHost, EveryWritePolicyReplaysCleanWithBytesAndLoadsBlocksBack) {
  // A device pool too small for the cycle of prefixes, a host tier that holds them: with bytes, so
  // the content oracle checks every page that went to host and came back.
  const RequestTrace t = cycling_prefixes(40, 8);
  for (WritePolicy policy :
       {WritePolicy::write_through, WritePolicy::write_through_selective, WritePolicy::write_back}) {
    SCOPED_TRACE(std::string(write_policy_name(policy)));
    ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);  // 32 pages; the cycle needs 48
    p.host_bytes = 32ull << 20;                                  // 128 pages
    p.write_policy = policy;
    const SimRun run = simulate(t, p);
    ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
    const ServingSummary& s = *run.report.serving;
    EXPECT_GT(s.cache_evicted_pages, 0u) << "the device is too small for the working set";
    EXPECT_GT(s.offloads, 0u);
    EXPECT_GT(s.host_hit_pages, 0u) << "blocks evicted from the device hit on host";
    EXPECT_EQ(s.load_backs > 0, s.host_hit_pages > 0 || s.retractions_backed_up > 0);
    EXPECT_EQ(s.cached_tokens, s.device_hit_tokens + s.host_hit_tokens);
    EXPECT_EQ(s.host_hit_tokens, s.host_hit_pages * 16);
    EXPECT_EQ(s.bytes_offloaded, s.pages_offloaded * s.sides[0].page_bytes);
    EXPECT_LE(s.peak_host_pages, s.host_pages);
    EXPECT_GT(s.peak_host_pages, 0u);
    expect_host_empty_at_the_end(run);
  }
}

TEST(ServingSimHost, TheRecordedTraceCarriesEveryTransferAndReplaysClean) {
  const RequestTrace t = cycling_prefixes(24, 8);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);
  p.host_bytes = 32ull << 20;
  const std::string path = record(t, p, "kvtwin_sim_host.jsonl");
  Result<PoolTrace> trace = read_pool_trace_file(path);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->header.config.host_bytes, 32ull << 20);
  EXPECT_EQ(trace->header.origin["write_policy"], "write_through");
  std::map<std::string, std::uint64_t> count;
  for (const TraceLine& l : trace->lines) ++count[std::string(op_name(l.op))];
  EXPECT_GT(count["host_alloc"], 0u);
  EXPECT_GT(count["offload"], 0u);
  EXPECT_GT(count["load_back"], 0u);
  EXPECT_EQ(count["transfer_wait"], count["offload"] + count["load_back"]);
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  Result<ReplayReport> r = replay_pool_trace_file(path, *b, CheckCadence{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->passed()) << r->failure->describe();
}

TEST(ServingSimHost, WriteThroughBacksUpAsFilledWriteBackOnlyAtEviction) {
  const RequestTrace t = mooncake(60);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 30, 16);  // roomy: nothing leaves the device
  p.tables_only = true;
  p.host_bytes = 8ull << 30;
  p.write_policy = WritePolicy::write_back;
  const SimRun back = simulate(t, p);
  ASSERT_TRUE(back.report.passed()) << back.report.failure->describe();
  EXPECT_EQ(back.report.serving->offloads, 0u) << "write-back offloads only what is evicted";
  p.write_policy = WritePolicy::write_through;
  const SimRun through = simulate(t, p);
  ASSERT_TRUE(through.report.passed()) << through.report.failure->describe();
  EXPECT_GT(through.report.serving->pages_offloaded, 0u);
  p.write_policy = WritePolicy::write_through_selective;
  const SimRun selective = simulate(t, p);
  ASSERT_TRUE(selective.report.passed()) << selective.report.failure->describe();
  EXPECT_LT(selective.report.serving->pages_offloaded, through.report.serving->pages_offloaded)
      << "only blocks that were hit";
  // The hits themselves do not depend on the policy when nothing is evicted.
  EXPECT_EQ(selective.report.serving->cached_tokens, back.report.serving->cached_tokens);
  EXPECT_EQ(through.report.serving->cached_tokens, back.report.serving->cached_tokens);
}

TEST(ServingSimHost, ARetractedRequestIsBackedUpAndRestoredNotRecomputed) {
  const RequestTrace t = mooncake(60);
  ServingParams p = params("llama-3.1-8b", 8, 24ull << 20, 16);  // 96 pages of 16 tokens
  p.reserve_permille = 0;                                        // admit greedily
  p.max_running = 32;
  p.host_bytes = 64ull << 20;
  const SimRun run = simulate(t, p);  // with bytes: the restored rows are checked by the oracle
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_GT(s.retractions, 0u);
  EXPECT_GT(s.retractions_backed_up, 0u);
  EXPECT_GT(s.retraction_restored_tokens, 0u);
  EXPECT_EQ(s.requests_served + s.requests_rejected + s.requests_dropped, 60u);
  // Restored tokens are neither prefix hits nor prefilled again.
  EXPECT_EQ(s.prefill_tokens + s.cached_tokens + s.retraction_restored_tokens, s.prompt_tokens);
  expect_host_empty_at_the_end(run);
}

TEST(ServingSimHost, ACompositeOffloadsAndLoadsBackBothSides) {
  // gpt-oss-20b (full + sliding window) with bytes: every host hit loads both sides back.
  const RequestTrace t = cycling_prefixes(24, 6);
  ServingParams p = params("gpt-oss-20b", 1, 24ull << 20, 16);
  p.host_bytes = 64ull << 20;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_GT(s.offloads, 0u);
  EXPECT_EQ(s.offloads % 2, 0u) << "one transfer a side";
  EXPECT_GT(s.host_hit_pages, 0u);
  EXPECT_EQ(s.pages_loaded_back, 2 * s.host_hit_pages) << "both sides of every page";
  EXPECT_EQ(s.retractions_backed_up, 0u) << "a composite's retractions recompute";
  expect_host_empty_at_the_end(run);
}

// The hit-rate properties of issue 9 on the shared Mooncake conversation trace (beside the
// repository; skipped without it), tables only: a device pool too small for the working set.
std::optional<RequestTrace> shared_mooncake(std::uint64_t limit) {
  const std::string path = testing::source_dir() + "/../shared/traces-external/mooncake/conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) return std::nullopt;
  Result<RequestTrace> t = read_request_trace(path, TraceFormat::mooncake, {limit});
  KVTWIN_CHECK(t.ok(), t.ok() ? "" : t.error().message);
  return *t;
}

TEST(ServingSimHost, WithALargeHostTheHitRateIsTheEndlessCachesAndNeverFallsAsTheHostGrows) {
  const std::optional<RequestTrace> t = shared_mooncake(800);
  if (!t) GTEST_SKIP() << "the shared traces are not beside the repository";
  const std::uint64_t bound = endless_cache_tokens(*t, 32);
  ASSERT_GT(bound, 0u);
  std::uint64_t previous = 0;
  for (std::uint64_t host_mib : {0, 256, 1024, 4096}) {
    SCOPED_TRACE("host " + std::to_string(host_mib) + " MiB");
    ServingParams p = params("llama-3.1-8b", 8, 64ull << 20, 32);  // 256 pages of 16 tokens
    p.tables_only = true;
    p.checkpoint_every = 0;
    p.reserve_permille = 1000;  // no retraction: the bound counts first admissions
    p.host_bytes = host_mib << 20;
    p.write_policy = WritePolicy::write_back;
    const SimRun run = simulate(*t, p);
    ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
    const ServingSummary& s = *run.report.serving;
    ASSERT_EQ(s.retractions, 0u) << "the bound counts first admissions only";
    EXPECT_GT(s.cache_evicted_pages, 0u) << "the device is too small for the working set";
    EXPECT_LE(s.cached_tokens, bound) << "never above an endless cache";
    EXPECT_GE(s.cached_tokens, previous) << "a larger host never hits less";
    previous = s.cached_tokens;
    if (host_mib == 0) {
      EXPECT_LT(s.cached_tokens, bound) << "the device alone is too small";
    }
    if (host_mib == 4096) {
      EXPECT_EQ(s.cached_tokens, bound) << "device and host together act as an endless cache";
    }
  }
}


// ---------------------------------------------------------------- the storage tier (issue 9)

TEST(ServingSimStorage, HostEvictionsAreWrittenDownAndReadBackWithBytes) {
  // A device and a host both too small for the cycle of prefixes, a storage tier that holds it:
  // with bytes, so every page written down and read back is checked by the content oracle.
  const RequestTrace t = cycling_prefixes(48, 8);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);  // 32 pages; the cycle needs 48
  p.host_bytes = 4ull << 20;                                   // 16 pages
  p.storage_bytes = 64ull << 20;
  p.write_policy = WritePolicy::write_back;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_GT(s.host_evicted_blocks, 0u) << "the host is too small for the working set";
  EXPECT_GT(s.pages_stored, 0u);
  EXPECT_EQ(s.stores * 2, s.pages_stored) << "one write of a block's 2 pages";
  EXPECT_EQ(s.bytes_stored, s.pages_stored * s.sides[0].page_bytes);
  EXPECT_GT(s.storage_hit_pages, 0u) << "blocks written down hit in storage";
  EXPECT_EQ(s.storage_hit_tokens, s.storage_hit_pages * 16);
  EXPECT_GE(s.pages_read_from_storage, s.storage_hit_pages);
  EXPECT_EQ(s.storage_missed_pages, 0u) << "the store is large enough to keep everything";
  EXPECT_EQ(s.cached_tokens, s.device_hit_tokens + s.host_hit_tokens + s.storage_hit_tokens);
  EXPECT_TRUE(s.storage_error.empty()) << s.storage_error;
  expect_host_empty_at_the_end(run);

  // Without the storage tier the same run hits less.
  p.storage_bytes = 0;
  const SimRun host_only = simulate(t, p);
  ASSERT_TRUE(host_only.report.passed()) << host_only.report.failure->describe();
  EXPECT_LT(host_only.report.serving->cached_tokens, s.cached_tokens);
}

TEST(ServingSimStorage, ASmallStoreEvictsAndItsMissesStopTheMatch) {
  const RequestTrace t = cycling_prefixes(48, 8);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);
  p.host_bytes = 4ull << 20;
  p.write_policy = WritePolicy::write_back;
  p.storage_bytes = 64ull << 20;
  const SimRun big = simulate(t, p);
  ASSERT_TRUE(big.report.passed()) << big.report.failure->describe();
  p.storage_bytes = 5ull << 20;  // about 18 page files of 264 KiB: some blocks are gone when asked for
  const SimRun small = simulate(t, p);
  ASSERT_TRUE(small.report.passed()) << small.report.failure->describe();
  EXPECT_GT(small.report.serving->storage_missed_pages, 0u);
  EXPECT_LT(small.report.serving->storage_hit_pages, big.report.serving->storage_hit_pages);
  expect_host_empty_at_the_end(small);
}

TEST(ServingSimStorage, ACompositeWritesDownAndReadsBackBothSides) {
  const RequestTrace t = cycling_prefixes(36, 6);
  ServingParams p = params("gpt-oss-20b", 1, 24ull << 20, 16);
  p.host_bytes = 8ull << 20;
  p.storage_bytes = 256ull << 20;
  p.write_policy = WritePolicy::write_back;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  const ServingSummary& s = *run.report.serving;
  EXPECT_GT(s.storage_hit_pages, 0u);
  EXPECT_EQ(s.stores % 2, 0u) << "one write a side";
  EXPECT_EQ(s.storage_reads % 2, 0u) << "one read a side";
  EXPECT_EQ(s.pages_read_from_storage % 2, 0u);
  expect_host_empty_at_the_end(run);
}

TEST(ServingSimStorage, TheRecordedTraceCarriesEveryStoreAndReadAndReplaysClean) {
  const RequestTrace t = cycling_prefixes(32, 8);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);
  p.host_bytes = 4ull << 20;
  p.storage_bytes = 64ull << 20;
  p.write_policy = WritePolicy::write_back;
  const std::string path = record(t, p, "kvtwin_sim_storage.jsonl");
  Result<PoolTrace> trace = read_pool_trace_file(path);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->header.config.storage_bytes, 64ull << 20);
  EXPECT_EQ(trace->header.origin["storage_tier"], "modelled");
  std::map<std::string, std::uint64_t> count;
  for (const TraceLine& l : trace->lines) ++count[std::string(op_name(l.op))];
  EXPECT_GT(count["store_pages"], 0u);
  EXPECT_GT(count["load_stored"], 0u);
  Result<BackendSet> b = make_backend_set(BackendChoice::model);
  Result<ReplayReport> r = replay_pool_trace_file(path, *b, CheckCadence{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->passed()) << r->failure->describe();
}

TEST(ServingSimStorage, AStoreThatCannotWriteTurnsTheTierOffAndTheRunGoesOn) {
  // The storage parent is a regular file: the store's folder cannot be made under it (also as root).
  const std::string file = ::testing::TempDir() + "kvtwin_not_a_folder";
  { std::ofstream(file) << "a file\n"; }
  const RequestTrace t = cycling_prefixes(40, 8);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);
  p.host_bytes = 4ull << 20;
  p.storage_bytes = 64ull << 20;
  p.write_policy = WritePolicy::write_back;
  BackendOptions o;
  o.storage_parent = file;
  const SimRun broken = simulate(t, p, nullptr, o);
  ASSERT_TRUE(broken.report.passed()) << broken.report.failure->describe();
  const ServingSummary& s = *broken.report.serving;
  EXPECT_THAT(s.storage_error, HasSubstr("cannot make a folder for the storage tier"));
  EXPECT_THAT(s.storage_error, HasSubstr(file));
  EXPECT_EQ(s.pages_stored, 0u);
  EXPECT_EQ(s.storage_hit_pages, 0u);
  expect_host_empty_at_the_end(broken);
  // It serves as the same run without a storage tier does.
  p.storage_bytes = 0;
  const SimRun host_only = simulate(t, p);
  EXPECT_EQ(s.cached_tokens, host_only.report.serving->cached_tokens);
  EXPECT_EQ(s.requests_served, host_only.report.serving->requests_served);
  // A folder that works: the store lives under it while the pool does, and is gone after.
  const std::string parent = ::testing::TempDir() + "kvtwin_storage_parent";
  std::filesystem::remove_all(parent);
  std::filesystem::create_directories(parent);
  o.storage_parent = parent;
  p.storage_bytes = 64ull << 20;
  const SimRun fine = simulate(t, p, nullptr, o);
  ASSERT_TRUE(fine.report.passed()) << fine.report.failure->describe();
  EXPECT_TRUE(fine.report.serving->storage_error.empty()) << fine.report.serving->storage_error;
  EXPECT_GT(fine.report.serving->pages_stored, 0u);
}

TEST(ServingSimStorage, ParametersThatCannotWorkAreClearErrors) {
  const RequestTrace t = cycling_prefixes(4, 2);
  ServingParams p = params("llama-3.1-8b", 8, 8ull << 20, 16);
  p.storage_bytes = 64ull << 20;
  Result<PoolConfig> no_host = serving_pool_config(p);
  ASSERT_FALSE(no_host.ok());
  EXPECT_THAT(no_host.error().message, HasSubstr("needs a host tier above it"));
  p.host_bytes = 4ull << 20;
  p.storage_bytes = 4096;
  Result<ServingSimulator> tiny = ServingSimulator::create(p, t);
  ASSERT_FALSE(tiny.ok());
  EXPECT_THAT(tiny.error().message, HasSubstr("cannot hold one 2-page prefix block"));
}

TEST(ServingSimStorage, WithASmallHostAndALargeStoreTheHitRateIsTheEndlessCaches) {
  const std::optional<RequestTrace> t = shared_mooncake(800);
  if (!t) GTEST_SKIP() << "the shared traces are not beside the repository";
  const std::uint64_t bound = endless_cache_tokens(*t, 32);
  ServingParams p = params("llama-3.1-8b", 8, 64ull << 20, 32);  // 256 pages of 16 tokens
  p.tables_only = true;
  p.checkpoint_every = 0;
  p.reserve_permille = 1000;
  p.host_bytes = 256ull << 20;  // 1,024 pages: too few for the working set
  p.write_policy = WritePolicy::write_back;
  const SimRun host_only = simulate(*t, p);
  ASSERT_TRUE(host_only.report.passed()) << host_only.report.failure->describe();
  EXPECT_LT(host_only.report.serving->cached_tokens, bound) << "device and host alone are too small";
  std::uint64_t previous = host_only.report.serving->cached_tokens;
  for (std::uint64_t storage_mib : {1, 4, 64}) {
    SCOPED_TRACE("storage " + std::to_string(storage_mib) + " MiB");
    p.storage_bytes = storage_mib << 20;
    const SimRun run = simulate(*t, p);
    ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
    const ServingSummary& s = *run.report.serving;
    ASSERT_EQ(s.retractions, 0u);
    EXPECT_GT(s.host_evicted_blocks, 0u);
    EXPECT_LE(s.cached_tokens, bound) << "never above an endless cache";
    EXPECT_GE(s.cached_tokens, previous) << "a larger store never hits less";
    EXPECT_EQ(s.cached_tokens, s.device_hit_tokens + s.host_hit_tokens + s.storage_hit_tokens);
    previous = s.cached_tokens;
    if (storage_mib == 64) {
      EXPECT_EQ(s.cached_tokens, bound) << "the three tiers act as an endless cache";
      EXPECT_GT(s.storage_hit_pages, 0u);
    }
  }
}


// ---------------------------------------------------------------- hybrid models (SPEC 11, issue 10)

TEST(ServingSimHybrid, EveryRunningRequestHoldsOneStateSlotWrittenAtPrefillAndEachDecodeStep) {
  const RequestTrace t = mooncake(80);
  for (const char* model : {"qwen3.5-9b", "kvtwin-tripool-8l", "falcon-h1-7b"}) {
    SCOPED_TRACE(model);
    ServingParams p = params(model, 1, 1ull << 30, 16);  // a pool the cache fills: checkpoints evict
    p.tables_only = true;
    p.checkpoint_every = 0;
    const SimRun run = simulate(t, p);
    ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
    const ServingSummary& s = *run.report.serving;
    EXPECT_EQ(s.requests_served + s.requests_rejected + s.requests_dropped, 80u);
    EXPECT_EQ(s.state_allocs, s.admissions) << "a state slot per admission";
    EXPECT_EQ(s.state_writes, s.admissions + s.decode_tokens + s.state_checkpoints)
        << "the state after the prefill, then one a decode token, and each checkpoint's";
    EXPECT_GT(s.peak_state_slots, 0u);
    EXPECT_LE(s.peak_state_slots, p.max_running);
    EXPECT_LE(s.peak_state_checkpoints, s.state_checkpoints);
    expect_empty_at_the_end(run);
  }
}

TEST(ServingSimHybrid, APrefixIsReusedOnlyUpToAStateCheckpoint) {
  // Prompts cycling over 4 prefixes of 3 shared blocks: each prompt checkpoints its deepest cached
  // block, so a later prompt of the same prefix reuses all 3 blocks (the endless cache's reuse),
  // as the same run on a model without a state does.
  const RequestTrace t = cycling_prefixes(24, 4);
  ServingParams p = params("qwen3.5-9b", 1, 4ull << 30, 16);
  p.tables_only = true;
  p.checkpoint_every = 0;
  p.max_running = 1;
  const SimRun hybrid = simulate(t, p);
  ASSERT_TRUE(hybrid.report.passed()) << hybrid.report.failure->describe();
  const ServingSummary& s = *hybrid.report.serving;
  EXPECT_GT(s.state_checkpoints, 0u);
  EXPECT_GT(s.cached_tokens, 0u);
  EXPECT_EQ(s.cached_tokens, endless_cache_tokens(t, 16)) << "every repeated prefix is reused from its checkpoint";
  EXPECT_EQ(s.state_writes, s.admissions + s.decode_tokens + s.state_checkpoints);
  expect_empty_at_the_end(hybrid);
}

TEST(ServingSimHybrid, AStateTooLargeForManyAtOnceLimitsTheRunningRequests) {
  // Falcon-H1-7B's state is 139 MB: a 1 GiB pool holds a handful beside their pages.
  const RequestTrace t = mooncake(40);
  ServingParams p = params("falcon-h1-7b", 1, 1ull << 30, 16);
  p.tables_only = true;
  p.checkpoint_every = 0;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  EXPECT_LE(run.report.serving->peak_state_slots, 7u);
  EXPECT_EQ(run.report.serving->requests_served, 40u);
}

TEST(ServingSimHybrid, WithBytesTheStatesAreWrittenAndCheckedByTheOracle) {
  // The tri-pool [state up | swa float | full down] with real entries: every state write's bytes
  // are the content oracle's, checked by the model at checkpoints and at the end.
  const RequestTrace t = mooncake(10);
  ServingParams p = params("kvtwin-tripool-8l", 1, 1ull << 30, 16);
  p.checkpoint_every = 16;
  const SimRun run = simulate(t, p);
  ASSERT_TRUE(run.report.passed()) << run.report.failure->describe();
  EXPECT_GT(run.report.serving->state_writes, 10u);
  EXPECT_GT(run.report.serving->swa_freed_pages, 0u) << "the float's SWA pages leave the window";
  expect_empty_at_the_end(run);
}

TEST(ServingSimHybrid, ShrunkEntriesShrinkTheStateSoTheSlotsAndPagesStayTheFullModels) {
  // Qwen3.5-9B in 1 GiB: the token entry shrinks 32,768 -> 2,048 bytes (2 of 8 layers, 1 KV head),
  // so the state shrinks by 16 as well (51,511,296 -> 3,219,456 bytes) and every count stays.
  PoolConfig full;
  full.shape = find_model("qwen3.5-9b").value();
  full.page_size = 16;
  full.total_bytes = 1ull << 30;
  full.seed = 1;
  const PoolConfig small = shrunk_pool_config(full);
  const PoolDerived big = derive_pool(full).value();
  const Result<PoolDerived> shrunk = derive_pool(small);
  ASSERT_TRUE(shrunk.ok()) << shrunk.error().message;
  EXPECT_EQ(big.state_layout->entry_bytes, 51511296u);
  EXPECT_EQ(shrunk->state_layout->entry_bytes, 51511296u / 16);
  EXPECT_EQ(shrunk->geometry.state->num_pages, big.geometry.state->num_pages);
  EXPECT_EQ(shrunk->geometry.state->min_page_index, big.geometry.state->min_page_index);
  EXPECT_EQ(shrunk->geometry.sub_pools[0].num_pages, big.geometry.sub_pools[0].num_pages);
  EXPECT_EQ(shrunk->geometry.sub_pools[0].min_page_index, big.geometry.sub_pools[0].min_page_index);
  EXPECT_EQ(shrunk->geometry.state_token_cost, big.geometry.state_token_cost);
  // The same replay with bytes (shrunk) and tables-only: the same decisions, the states checked
  // (fewer requests under the sanitizers: each state write is 3 MB of oracle bytes, checked).
#if defined(KVTWIN_SANITIZED)
  constexpr std::size_t kRequests = 12;
#else
  constexpr std::size_t kRequests = 40;
#endif
  const RequestTrace t = mooncake(kRequests);
  ServingParams p = params("qwen3.5-9b", 1, 1ull << 30, 16);
  p.checkpoint_every = 64;
  p.shrink_entries = true;
  const SimRun with_bytes = simulate(t, p);
  ASSERT_TRUE(with_bytes.report.passed()) << with_bytes.report.failure->describe();
  p.tables_only = true;
  const SimRun tables = simulate(t, p);
  ASSERT_TRUE(tables.report.passed()) << tables.report.failure->describe();
  const ServingSummary &a = *with_bytes.report.serving, &b = *tables.report.serving;
  EXPECT_EQ(a.state_allocs, b.state_allocs);
  EXPECT_EQ(a.peak_state_slots, b.peak_state_slots);
  EXPECT_EQ(a.cached_tokens, b.cached_tokens);
  EXPECT_EQ(a.admissions, b.admissions);
  EXPECT_GT(a.state_writes, kRequests);
}

TEST(ServingSimHybrid, AHostTierIsRefusedForAHybridModel) {
  const RequestTrace t = mooncake(4);
  ServingParams p = params("qwen3.5-9b", 1, 1ull << 30, 16);
  p.tables_only = true;
  p.host_bytes = 1ull << 30;
  Result<ServingSimulator> sim = ServingSimulator::create(p, t);
  ASSERT_FALSE(sim.ok());
  EXPECT_THAT(sim.error().message, HasSubstr("is a hybrid"));
  EXPECT_THAT(sim.error().message, HasSubstr("--host-bytes 0"));
}

}  // namespace
}  // namespace kvtwin::traces
