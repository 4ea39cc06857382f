// The runner: a clean replay passes with every check counted; each kind of divergence (results,
// expectation, tables, raw pool bytes) stops the run at the right line with both values, and the
// pool report names the page, slot, layer, part and byte the test computes itself.
#include "traces/runner.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "core/oracle.h"
#include "tests/traces/far_backend.h"
#include "tests/traces/test_support.h"
#include "traces/backends.h"
#include "sim/model.h"
#include "traces/replay.h"

namespace kvtwin::traces {
namespace {

using testing::CountingApplies;
using testing::FarAway;
using testing::Forwarding;

using ::testing::HasSubstr;

// The example trace of docs/traces.md, cut out of the page (so the page cannot rot).
std::string docs_example() {
  std::ifstream in(testing::source_dir() + "/docs/traces.md");
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "```jsonl") {
      inside = true;
    } else if (inside && line == "```") {
      break;
    } else if (inside) {
      out += line + "\n";
    }
  }
  return out;
}

PoolTrace parse(const std::string& text) {
  std::istringstream in(text);
  Result<PoolTrace> t = parse_pool_trace(in, "t.jsonl");
  KVTWIN_CHECK(t.ok(), t.ok() ? "" : t.error().message);
  return *t;
}

ReplayReport replay_on(const PoolTrace& t, BackendSet& b, CheckCadence cadence) {
  Result<ReplayReport> r = replay_lines(t.header, t.lines, b, cadence, "t.jsonl");
  KVTWIN_CHECK(r.ok(), r.ok() ? "" : r.error().message);
  return *r;
}

ReplayReport replay(const PoolTrace& t, BackendChoice choice, const std::string& fault, CheckCadence cadence = {}) {
  Result<BackendSet> b = make_backend_set(choice, fault);
  KVTWIN_CHECK(b.ok(), b.ok() ? "" : b.error().message);
  return replay_on(t, *b, cadence);
}

// The plain model beside a copy with `fault` planted: the runner's two-backend checks, no GPU.
ReplayReport replay_pair(const PoolTrace& t, const std::string& fault, CheckCadence cadence = {}) {
  BackendSet b;
  auto plain = std::make_unique<sim::Model>();
  Result<std::unique_ptr<sim::Model>> planted = make_planted_model(fault);
  KVTWIN_CHECK(planted.ok(), "a model fault");
  b.players = {model_player(*plain), model_player(**planted)};
  b.owned.push_back(std::move(plain));
  b.owned.push_back(std::move(*planted));
  return replay_on(t, b, cadence);
}

// Llama-3.1-8B at TP 8: 256-byte rows, a 16,384-byte entry, 4-token pages of 65,536 bytes;
// 1 MiB holds 16 pages, page 0 below the floor.
PoolConfig tp8_config() {
  PoolConfig c = testing::small_config();
  c.tp = 8;
  c.page_size = 4;
  c.total_bytes = 1 << 20;
  c.tables_only = false;
  c.seed = 3;
  return c;
}

// A version-1 header: the tests append op lines after it without an end line.
std::string header(const PoolConfig& c) { return header_to_line(TraceHeader{c, 9, {}}, 1) + "\n"; }

TEST(Runner, TheDocsExampleReplaysCleanWithEveryCheckCounted) {
  const std::string text = docs_example();
  ASSERT_FALSE(text.empty()) << "docs/traces.md lost its ```jsonl example";
  const PoolTrace t = parse(text);
  const ReplayReport r = replay(t, BackendChoice::model, "");
  ASSERT_TRUE(r.passed()) << r.failure->describe();
  EXPECT_EQ(r.stats.ops, t.lines.size() + 1) << "the header's build, then every line";
  EXPECT_EQ(r.stats.expects_checked, t.lines.size());
  EXPECT_EQ(r.stats.verifies, r.stats.ops + 1) << "after every op, and at the end";
  EXPECT_EQ(r.stats.compaction_moves, 1u);
  EXPECT_EQ(r.stats.errors, 1u) << "the double free";
}

TEST(Runner, ModelAgainstItselfComparesResultsTablesAndPools) {
  const PoolTrace t = parse(docs_example());
  // A planted fault that the example never triggers (it has no alloc_many): a clean side-by-side run.
  const ReplayReport r = replay_pair(t, "model_alloc_many_partial");
  ASSERT_TRUE(r.passed()) << r.failure->describe();
  EXPECT_EQ(r.stats.results_compared, r.stats.ops);
  EXPECT_EQ(r.stats.tables_compared, r.stats.ops + 1);
  // Between checkpoints by digest; at the checkpoint and at the end whole.
  EXPECT_EQ(r.stats.tables_digests_compared, r.stats.tables_compared - 2);
  EXPECT_EQ(r.stats.pools_compared, 2u) << "at the checkpoint and at the end";
  // Pages above the floor: 16 pages of 64 KiB, page 0 below it.
  EXPECT_EQ(r.stats.pages_compared, 2u * 15u);
}

TEST(Runner, DivergentResultsStopAtTheirLineWithBothAnswers) {
  const ReplayReport r = replay_pair(parse(docs_example()), "model_negative_not_sink");
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "results");
  EXPECT_EQ(r.failure->line, 8u);
  EXPECT_EQ(r.failure->op, R"({"op":"translate","ids":[12,-1,1000],"shape":[3]})");
  EXPECT_THAT(r.failure->message, HasSubstr(R"(model answered {"ids":[4,0,0]})"));
  EXPECT_THAT(r.failure->message, HasSubstr(R"(model_negative_not_sink answered {"ids":[4,-1,0]})"));
  EXPECT_THAT(r.failure->describe(), HasSubstr("line 8 (step 7): results check failed"));
}

// A backend with a bug that throws (a map lookup that misses) ends the run as a failure at that
// line, naming the backend, not the process.
TEST(Runner, ABackendThatThrowsIsAFailureNotACrash) {
  struct Throwing : sim::Model {
    OpResult apply(const Op& op) override {
      if (std::holds_alternative<Translate>(op)) return std::map<int, OpResult>{}.at(1);
      return sim::Model::apply(op);
    }
    std::string_view name() const override { return "throwing"; }
  };
  BackendSet b;
  auto plain = std::make_unique<sim::Model>();
  auto throwing = std::make_unique<Throwing>();
  b.players = {model_player(*plain), model_player(*throwing)};
  b.owned.push_back(std::move(plain));
  b.owned.push_back(std::move(throwing));
  const ReplayReport r = replay_on(parse(docs_example()), b, {});
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "exception");
  EXPECT_EQ(r.failure->line, 8u);
  EXPECT_THAT(r.failure->message, HasSubstr("throwing threw"));
}

// A watcher (after_apply) sees every op after every backend played it, the failing one too, with
// each backend's answer, before the checks stop the run. The planted model plays alone; the
// trace's expectation catches it.
TEST(Runner, AnObserverSeesEveryOpAndEachBackendsAnswerTheFailingOneToo) {
  struct Seen : RunObserver {
    std::vector<std::uint64_t> steps, lines;
    std::vector<std::string> ops;
    std::vector<std::vector<std::string>> answers;
    void after_apply(const Runner& runner, const OpEvent& e) override {
      EXPECT_FALSE(runner.failure().has_value()) << "called before the checks";
      steps.push_back(e.step);
      lines.push_back(e.line);
      ops.push_back(to_string(e.op));
      std::vector<std::string> a;
      for (const OpResult& r : e.results) a.push_back(to_string(r));
      answers.push_back(a);
    }
  } seen;
  const PoolTrace t = parse(docs_example());
  Result<BackendSet> b = make_backend_set(BackendChoice::model, "model_negative_not_sink");
  ASSERT_TRUE(b.ok());
  const Result<ReplayReport> played =
      replay_lines(t.header, t.lines, *b, {}, "t.jsonl", {}, ReplayWatchers{&seen, nullptr});
  ASSERT_TRUE(played.ok()) << played.error().message;
  const ReplayReport& r = *played;
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "expect");
  ASSERT_EQ(seen.ops.size(), r.stats.ops) << "the build and every line up to the failing one";
  EXPECT_EQ(seen.lines.back(), 8u);
  EXPECT_EQ(seen.steps.back(), r.failure->step);
  EXPECT_EQ(seen.ops.back(), R"({"ids":[12,-1,1000],"op":"translate","shape":[3]})");
  EXPECT_EQ(seen.answers.back(), (std::vector<std::string>{R"({"ids":[4,-1,0]})"}));
}

TEST(Runner, AnExpectationMismatchNamesExpectedAndActual) {
  std::string text = docs_example();
  const std::string right = R"("pages":[1,2])";
  text.replace(text.find(right), right.size(), R"("pages":[1,3])");
  const ReplayReport r = replay(parse(text), BackendChoice::model, "");
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "expect");
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_THAT(r.failure->message, HasSubstr(R"(expected {"pages":[1,3]} but model answered {"pages":[1,2]})"));
}

TEST(Runner, TablesThatDivergeAreReportedEntryByEntry) {
  // 15 usable pages of 4 tokens: alloc_many of 12 + 12 pages cannot fit, so the model answers
  // no_room and changes nothing; the planted copy keeps the first request (queue front: virtual
  // page 1 bound at the watermark, physical page 1).
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc_many","tokens":[48,48]})" + "\n");
  const ReplayReport r = replay_pair(t, "model_alloc_many_partial");
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "tables");
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_THAT(r.failure->message, HasSubstr("side 'full' v2p[1]: model has -1, model_alloc_many_partial has 1"));
}

// A backend whose digest disagrees with tables it shows equal (a host counter the tables do
// not show, or a digest computed unlike core's) fails the tables check and says so.
TEST(Runner, ADigestThatDisagreesWithEqualTablesIsAFailure) {
  struct Lying : sim::Model {
    Result<std::uint64_t> tables_digest() const override {
      Result<std::uint64_t> d = sim::Model::tables_digest();
      if (!d.ok()) return d;
      return *d + (tables()->sides.front().allocated_pages > 0 ? 1 : 0);
    }
    std::string_view name() const override { return "lying"; }
  };
  BackendSet b;
  auto plain = std::make_unique<sim::Model>();
  auto lying = std::make_unique<Lying>();
  b.players = {model_player(*plain), model_player(*lying)};
  b.owned.push_back(std::move(plain));
  b.owned.push_back(std::move(lying));
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc_many","tokens":[8]})" + "\n");
  const ReplayReport r = replay_on(t, b, {});
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "tables");
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_THAT(r.failure->message, HasSubstr("digests differ"));
  EXPECT_THAT(r.failure->message, HasSubstr("but the tables they show are equal"));
}

// A second player whose verify reads its tables (the GPU's downloads them) hands them to the
// checkpoint's whole-tables comparison: its tables() is not asked again at checkpoints or at the
// end, and what the comparison holds against the first's is what that verify read.
TEST(Runner, ACheckpointComparesTheTablesTheSecondsVerifyRead) {
  struct CountingTables : sim::Model {
    mutable std::uint64_t tables_calls = 0;
    Result<PoolTables> tables() const override {
      ++tables_calls;
      return sim::Model::tables();
    }
    std::string_view name() const override { return "counted"; }
  };
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc_many","tokens":[8]})" + "\n" +
                            R"({"op":"checkpoint"})" + "\n" + R"({"op":"alloc_many","tokens":[8]})" + "\n");
  // `misread`: the tables the verify hands over show one v2p entry changed.
  const auto run = [&](bool with_tables, bool misread, std::uint64_t& tables_calls) {
    BackendSet b;
    auto plain = std::make_unique<sim::Model>();
    auto counted = std::make_unique<CountingTables>();
    Player second = model_player(*counted);
    if (with_tables)
      second.verify_with_tables = [m = counted.get(), misread](std::optional<PoolTables>& read) {
        Status s = m->verify();
        read = *m->sim::Model::tables();
        if (misread) read->sides.front().v2p.back() = 7;
        return s;
      };
    b.players = {model_player(*plain), second};
    CountingTables* const counted_raw = counted.get();
    b.owned.push_back(std::move(plain));
    b.owned.push_back(std::move(counted));
    ReplayReport r = replay_on(t, b, {});
    tables_calls = counted_raw->tables_calls;
    return r;
  };
  std::uint64_t calls_without = 0, calls_with = 0, calls_misread = 0;
  EXPECT_TRUE(run(false, false, calls_without).passed());
  const ReplayReport clean = run(true, false, calls_with);
  EXPECT_TRUE(clean.passed());
  // The checkpoint and the end no longer ask (the model's digest reads its tables() between them).
  EXPECT_EQ(calls_without - calls_with, 2u);
  EXPECT_EQ(clean.stats.tables_compared, 5u);  // after the build, each op and the end
  EXPECT_EQ(clean.stats.tables_compared - clean.stats.tables_digests_compared, 2u);  // two whole
  const ReplayReport misread = run(true, true, calls_misread);
  ASSERT_FALSE(misread.passed());
  EXPECT_EQ(misread.failure->check, "tables");
  EXPECT_EQ(misread.failure->line, 3u);
  EXPECT_THAT(misread.failure->message, HasSubstr("allocator tables differ"));
  EXPECT_THAT(misread.failure->message, HasSubstr("counted has 7"));
}

TEST(Runner, WithTablesOnlyAtTheEndTheDivergenceShowsAtTheEnd) {
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc_many","tokens":[48,48]})" + "\n");
  CheckCadence cadence;
  cadence.tables_every = 0;
  const ReplayReport r = replay_pair(t, "model_alloc_many_partial", cadence);
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "tables");
  EXPECT_EQ(r.failure->line, 0u);
  EXPECT_TRUE(r.failure->op.empty());
  EXPECT_THAT(r.failure->describe(), HasSubstr("end of run (after 2 ops)"));
}

TEST(Runner, PoolBytesThatDifferNameTheirPageSlotLayerPartAndByte) {
  const PoolConfig c = tp8_config();
  const PoolTrace t =
      parse(header(c) + R"({"op":"alloc","tokens":4})" + "\n" + R"({"op":"batch","batch":0,"tokens":[4,5,6,7]})" +
            "\n" + R"({"op":"rebind","batch":0})" + "\n" + R"({"op":"write","layer":5,"write_number":1,"batch":0})" +
            "\n" + R"({"op":"checkpoint"})" + "\n");
  // Independently: virtual page 1 sits at physical page 1 (65,536 bytes in); token 4 is slot 0;
  // layer 5's K row starts at 5 * (256 + 256) in the entry. The planted door put down write 0's
  // row instead of write 1's: the first differing byte is where those two oracle rows differ.
  std::vector<std::uint8_t> right(256), stale(256);
  fill_oracle_row(c.seed, RowIdentity{4, 0, 5, 0, 1}, DType::bf16, right);
  fill_oracle_row(c.seed, RowIdentity{4, 0, 5, 0, 0}, DType::bf16, stale);
  std::size_t first = 0;
  while (right[first] == stale[first]) ++first;
  const std::uint64_t byte = 65536 + 5 * 512 + first;
  char values[64];
  std::snprintf(values, sizeof values, "model has 0x%02x, model_stale_write has 0x%02x", right[first], stale[first]);
  const std::string where = "as sub-pool 'full': physical page 1 (virtual page 1), slot 0 (physical token 4), layer 5 "
                            "(sub-pool layer 5) part 'k' byte " + std::to_string(first) + " of its row";

  // Right after the write: the bytes it wrote are compared.
  const ReplayReport touched = replay_pair(t, "model_stale_write");
  ASSERT_FALSE(touched.passed());
  EXPECT_EQ(touched.failure->check, "touched");
  EXPECT_EQ(touched.failure->line, 5u);
  EXPECT_THAT(touched.failure->message,
              HasSubstr("the bytes this operation wrote differ first at byte " + std::to_string(byte) + ": " + values));
  EXPECT_THAT(touched.failure->message, HasSubstr(where));

  // Without that, the checkpoint's whole-pool comparison finds the same byte.
  CheckCadence no_touched;
  no_touched.compare_touched = false;
  const ReplayReport r = replay_pair(t, "model_stale_write", no_touched);
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "pool");
  EXPECT_EQ(r.failure->line, 6u);
  EXPECT_THAT(r.failure->message, HasSubstr("raw pools differ first at byte " + std::to_string(byte) + ": " + values));
  EXPECT_THAT(r.failure->message, HasSubstr(where));
  EXPECT_THAT(r.failure->message, HasSubstr("model says:")) << "the model names what the oracle expects there";
}

// A model with `fault` planted ("" for none).
std::unique_ptr<sim::Model> model_with(const std::string& fault) {
  if (fault.empty()) return std::make_unique<sim::Model>();
  Result<std::unique_ptr<sim::Model>> planted = make_planted_model(fault);
  KVTWIN_CHECK(planted.ok(), "a model fault");
  return std::move(*planted);
}

// The plain model beside a far-away copy with `fault` planted ("" for none).
ReplayReport replay_far_pair(const PoolTrace& t, const std::string& fault, CheckCadence cadence,
                             std::uint64_t* queued = nullptr) {
  BackendSet b;
  auto plain = std::make_unique<sim::Model>();
  std::unique_ptr<sim::Model> other = model_with(fault);
  auto far = std::make_unique<FarAway>(*other);
  Player second = model_player(*other);
  second.backend = far.get();
  b.players = {model_player(*plain), second};
  FarAway* far_raw = far.get();
  b.owned.push_back(std::move(plain));
  b.owned.push_back(std::move(other));
  b.owned.push_back(std::move(far));
  ReplayReport r = replay_on(t, b, cadence);
  if (queued != nullptr) *queued = far_raw->queued;
  return r;
}

TEST(Runner, DeferredDigestsAreAllComparedOnACleanRun) {
  const PoolTrace t = parse(docs_example());
  CheckCadence cadence;
  cadence.compare_window = 3;
  std::uint64_t queued = 0;
  const ReplayReport r = replay_far_pair(t, "", cadence, &queued);
  ASSERT_TRUE(r.passed()) << r.failure->describe();
  // Every op's tables as without a window: by digest between checkpoints, whole at the checkpoint
  // and at the end; each digest between them queued on the far side.
  EXPECT_EQ(r.stats.tables_compared, r.stats.ops + 1);
  EXPECT_EQ(r.stats.tables_digests_compared, r.stats.tables_compared - 2);
  EXPECT_EQ(queued, r.stats.tables_digests_compared + r.stats.touched_by_digest);
  EXPECT_GT(r.stats.touched_by_digest, 0u) << "the example writes rows";
}

TEST(Runner, ADeferredTablesDifferenceNamesTheOpWhereItBegan) {
  // As TablesThatDivergeAreReportedEntryByEntry: the planted copy keeps the first request of a
  // refused alloc_many (line 2). With a window of 8 the tables are not compared then; the next
  // alloc answers differently (line 3), and the deferred comparison, made before that failure is
  // reported, names line 2.
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc_many","tokens":[48,48]})" + "\n" +
                            R"({"op":"alloc","tokens":4})" + "\n");
  CheckCadence cadence;
  cadence.compare_window = 8;
  const ReplayReport r = replay_far_pair(t, "model_alloc_many_partial", cadence);
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "tables");
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_THAT(r.failure->op, HasSubstr("alloc_many"));
  EXPECT_THAT(r.failure->message, HasSubstr("digests differ after this operation"));
  EXPECT_THAT(r.failure->message, HasSubstr("compare window 8"));
  EXPECT_THAT(r.failure->message, HasSubstr("at step 2 they differ: side 'full' v2p["));
  EXPECT_THAT(r.failure->message, HasSubstr("--compare-window 1"));
  // With a window of 1 the same divergence is found right after line 2, entry by entry.
  cadence.compare_window = 1;
  const ReplayReport now = replay_far_pair(t, "model_alloc_many_partial", cadence);
  ASSERT_FALSE(now.passed());
  EXPECT_EQ(now.failure->line, 2u);
  EXPECT_THAT(now.failure->message, HasSubstr("side 'full' v2p[1]: model has -1, model_alloc_many_partial has 1"));
}

TEST(Runner, ADeferredBytesDifferenceIsFoundByTheNextCheckpoint) {
  // As PoolBytesThatDifferNameTheirPageSlotLayerPartAndByte: the planted door writes write 0's row
  // at line 5; the window (100) stays open until the checkpoint (line 7), which compares it first.
  const PoolConfig c = tp8_config();
  const PoolTrace t =
      parse(header(c) + R"({"op":"alloc","tokens":4})" + "\n" + R"({"op":"batch","batch":0,"tokens":[4,5,6,7]})" +
            "\n" + R"({"op":"rebind","batch":0})" + "\n" + R"({"op":"write","layer":5,"write_number":1,"batch":0})" +
            "\n" + R"({"op":"drop_batch","batch":0})" + "\n" + R"({"op":"checkpoint"})" + "\n");
  CheckCadence cadence;
  cadence.compare_window = 100;
  const ReplayReport r = replay_far_pair(t, "model_stale_write", cadence);
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "touched");
  EXPECT_EQ(r.failure->line, 5u);
  EXPECT_THAT(r.failure->op, HasSubstr(R"("op":"write")"));
  EXPECT_THAT(r.failure->message, HasSubstr("the digests of the bytes this operation wrote differ"));
  // The bytes are still there at the checkpoint: the first that differs is named, as it is now.
  EXPECT_THAT(r.failure->message, HasSubstr("at step 6 they differ first at byte "));
  EXPECT_THAT(r.failure->message, HasSubstr("layer 5 (sub-pool layer 5) part 'k'"));
}

// As the GPU is played beside the model: the far copy is a bare backend whose own verify runs at
// checkpoints only, so the runner plays it ahead of the checks (second_ahead) unless told not to.
// `late`: how many of its ops it applied after the model had applied a later one.
// `far_setup` sets the far copy's switches before the run, `far_seen` reads it after.
ReplayReport replay_gpu_like_pair(const PoolTrace& t, const std::string& fault, CheckCadence cadence,
                                  std::uint64_t* late = nullptr, bool fail_checkpoints = false,
                                  const std::function<void(FarAway&)>& far_setup = {},
                                  const std::function<void(const FarAway&)>& far_seen = {},
                                  const ObserverFactory& observers = {}) {
  BackendSet b;
  auto plain = std::make_unique<sim::Model>();
  std::unique_ptr<sim::Model> other = model_with(fault);
  auto counting = std::make_unique<CountingApplies>(*plain);
  auto far = std::make_unique<FarAway>(*other);
  far->first_applied = &counting->applied;
  far->fail_checkpoints = fail_checkpoints;
  Player first = model_player(*plain);
  first.backend = counting.get();
  Player second;
  second.backend = far.get();
  second.verify = [m = other.get()] { return m->verify(); };
  second.verify_at_checkpoints_only = true;
  b.players = {first, second};
  FarAway* far_raw = far.get();
  b.owned.push_back(std::move(plain));
  b.owned.push_back(std::move(other));
  b.owned.push_back(std::move(counting));
  b.owned.push_back(std::move(far));
  if (far_setup) far_setup(*far_raw);
  Result<ReplayReport> played = replay_lines(t.header, t.lines, b, cadence, "t.jsonl", observers);
  KVTWIN_CHECK(played.ok(), played.ok() ? "" : played.error().message);
  if (late != nullptr) *late = far_raw->applied_late;
  if (far_seen) far_seen(*far_raw);
  return *played;
}

// What a failure report says, less the lead a deferred comparison adds about the state when the
// window was compared (played ahead, the first player has gone on further by then).
std::string failure_without_lead(const ReplayReport& r) {
  if (r.passed()) return "passed";
  const Failure& f = *r.failure;
  const std::string message = f.message.substr(0, f.message.find(", found when the window"));
  return "line " + std::to_string(f.line) + " step " + std::to_string(f.step) + " " + f.check + " " + f.op + ": " +
         message;
}

TEST(Runner, ASecondPlayerAheadFailsWhereAndAsOneInStepDoes) {
  // Every regression trace with every planted model fault in the second player, at several
  // windows and table cadences: ahead and in step, the same verdict, the same first failure (its
  // line, step, check, op and message) and, on a pass, the same checks counted.
  std::vector<std::pair<std::string, PoolTrace>> traces = {{"docs example", parse(docs_example())}};
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_dir() + "/traces/regress")) {
    if (entry.path().extension() != ".jsonl") continue;
    Result<PoolTrace> t = read_pool_trace_file(entry.path().string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    traces.emplace_back(entry.path().filename().string(), *t);
  }
  std::sort(traces.begin(), traces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> faults = {""};
  for (const FaultInfo& f : fault_catalogue())
    if (f.site == FaultSite::model) faults.push_back(f.name);
  std::uint64_t runs_ahead = 0, failures = 0;
  for (const auto& [name, trace] : traces) {
    for (const std::string& fault : faults) {
      for (const std::uint64_t window : {2u, 7u, 256u}) {
        for (const std::uint64_t tables_every : {1u, 0u}) {
          CheckCadence cadence;
          cadence.compare_window = window;
          cadence.tables_every = tables_every;
          // Several windows behind where the windows are short, so that more than one is pending.
          cadence.windows_ahead = window == 2u ? 3u : 1u;
          std::uint64_t late = 0;
          const ReplayReport ahead = replay_gpu_like_pair(trace, fault, cadence, &late);
          cadence.second_ahead = false;
          std::uint64_t in_step_late = 0;
          const ReplayReport in_step = replay_gpu_like_pair(trace, fault, cadence, &in_step_late);
          const std::string what = name + " with " + (fault.empty() ? "no fault" : fault) + ", window " +
                                   std::to_string(window) + " (" + std::to_string(cadence.windows_ahead) +
                                   " behind), tables every " + std::to_string(tables_every);
          EXPECT_EQ(in_step_late, 0u) << what;
          if (late > 0) ++runs_ahead;
          ASSERT_EQ(failure_without_lead(ahead), failure_without_lead(in_step)) << what;
          if (in_step.passed()) {
            EXPECT_EQ(ahead.stats.checks_passed(), in_step.stats.checks_passed()) << what;
            EXPECT_EQ(ahead.stats.results_compared, in_step.stats.results_compared) << what;
            EXPECT_EQ(ahead.stats.ops, in_step.stats.ops) << what;
          } else {
            ++failures;
          }
        }
      }
    }
  }
  EXPECT_GT(runs_ahead, traces.size()) << "the second player played behind the first, ahead of the checks";
  EXPECT_GT(failures, 20u) << "planted faults fail runs ahead as in step";
}

TEST(Runner, ASecondPlayerAheadIsComparedInOpOrderAtTheWindow) {
  // The planted copy keeps the first request of the refused alloc_many (line 3) and answers the
  // alloc at line 4 differently; played ahead, with no tables compared, that answer is seen when
  // the window closes (at the end here), and the failure names line 4 as in step.
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc","tokens":4})" + "\n" +
                            R"({"op":"alloc_many","tokens":[48,48]})" + "\n" + R"({"op":"alloc","tokens":4})" + "\n" +
                            R"({"op":"alloc","tokens":4})" + "\n");
  CheckCadence cadence;
  cadence.compare_window = 64;
  cadence.tables_every = 0;  // only the answers tell
  std::uint64_t late = 0;
  const ReplayReport r = replay_gpu_like_pair(t, "model_alloc_many_partial", cadence, &late);
  EXPECT_GT(late, 0u);
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.failure->check, "results");
  EXPECT_EQ(r.failure->line, 4u);
  EXPECT_THAT(r.failure->op, HasSubstr(R"("op":"alloc")"));
  EXPECT_THAT(r.failure->message, HasSubstr("model answered"));
  EXPECT_THAT(r.failure->message, HasSubstr("model_alloc_many_partial answered"));
}

TEST(Runner, AnAnswerPlayedAheadFailsTheRunBeforeTheEndsOwnChecks) {
  // The planted copy answers line 4 differently, and its machine fails when the end lands its
  // transfers: the run's first failure is line 4's answer, ahead and in step alike.
  const PoolTrace t = parse(header(tp8_config()) + R"({"op":"alloc","tokens":4})" + "\n" +
                            R"({"op":"alloc_many","tokens":[48,48]})" + "\n" + R"({"op":"alloc","tokens":4})" + "\n");
  for (const bool ahead : {true, false}) {
    CheckCadence cadence;
    cadence.compare_window = 64;
    cadence.tables_every = 0;
    cadence.second_ahead = ahead;
    const ReplayReport r = replay_gpu_like_pair(t, "model_alloc_many_partial", cadence, nullptr, true);
    ASSERT_FALSE(r.passed());
    EXPECT_EQ(r.failure->check, "results") << (ahead ? "ahead" : "in step");
    EXPECT_EQ(r.failure->line, 4u) << (ahead ? "ahead" : "in step");
  }
}

TEST(Runner, ASecondPlayerAheadPlaysItsBuildAheadTooAndFailsThereAsInStep) {
  // The far copy's build is played ahead (on the GPU the driver's start-up, tenths of a second
  // under contention, which the first player need not wait for): it waits until the first has
  // played the trace's first line, which the first could not do were the build in step. A build
  // it fails is the run's first failure, at the same step and with the same check as in step.
  const PoolTrace t = parse(docs_example());
  for (const bool fail_builds : {false, true}) {
    std::string verdicts[2];
    for (const bool ahead : {true, false}) {
      CheckCadence cadence;
      cadence.second_ahead = ahead;
      std::thread::id built_on;
      bool first_went_on = false;
      const ReplayReport r = replay_gpu_like_pair(
          t, "", cadence, nullptr, false,
          [&](FarAway& far) {
            far.fail_builds = fail_builds;
            if (ahead) far.build_waits_for_first = 2;  // the first's build and its first line
          },
          [&](const FarAway& far) {
            built_on = far.build_thread;
            first_went_on = far.build_saw_first_go_on;
          });
      const std::string what = std::string(ahead ? "ahead" : "in step") + (fail_builds ? ", the build failing" : "");
      if (ahead)
        EXPECT_TRUE(first_went_on) << what << ": the first waited for the second's build";
      else
        EXPECT_EQ(built_on, std::this_thread::get_id()) << what;
      EXPECT_EQ(r.passed(), !fail_builds) << what;
      verdicts[ahead ? 0 : 1] = failure_without_lead(r);
    }
    EXPECT_EQ(verdicts[0], verdicts[1]);
    if (fail_builds) {
      EXPECT_THAT(verdicts[0], HasSubstr("step 0 environment"));
      EXPECT_THAT(verdicts[0], HasSubstr("the machine failed to build"));
    }
  }
}

// An observer that reads the second player, as one a replay adds once its pool is built.
struct ReadsTheSecond : RunObserver {
  bool reads_second(const Runner&) const override { return true; }
};

TEST(Runner, AnObserverThatReadsTheSecondJoiningAfterTheBuildHasItComparedThenPlayedInStep) {
  // The build was played ahead before the observer joined: its answer is compared at the next op,
  // and from there the second plays in step (none of its ops after the first's later ones).
  const PoolTrace t = parse(docs_example());
  const ObserverFactory reads_second = [](const PoolConfig&) {
    std::vector<std::unique_ptr<RunObserver>> v;
    v.push_back(std::make_unique<ReadsTheSecond>());
    return v;
  };
  for (const bool fail_builds : {false, true}) {
    std::uint64_t late = 0;
    const ReplayReport r = replay_gpu_like_pair(
        t, "", CheckCadence{}, &late, false, [&](FarAway& far) { far.fail_builds = fail_builds; }, {}, reads_second);
    EXPECT_EQ(late, 0u) << "played in step after the build";
    if (!fail_builds) {
      EXPECT_TRUE(r.passed()) << failure_without_lead(r);
      EXPECT_EQ(r.stats.ops, t.lines.size() + 1);
    } else {
      // The first's build stood, so the observer joined; the second's failed build is found when it
      // does, and the run ends there, at the build, as in step.
      ASSERT_FALSE(r.passed());
      EXPECT_EQ(r.failure->step, 0u);
      EXPECT_EQ(r.failure->check, "environment");
      EXPECT_THAT(r.failure->message, HasSubstr("the machine failed to build"));
      EXPECT_EQ(r.stats.ops, 1u) << "nothing played after the build";
    }
  }
}

TEST(Runner, DiffTablesNamesTheFirstDifference) {
  PoolTables a;
  a.sides.push_back(SideTables{"full", {0, 1, -1}, {0, 1, -1}, {2, 3}, 2, {}, 1});
  PoolTables b = a;
  EXPECT_FALSE(diff_tables(a, b, "x", "y").has_value());
  b.sides[0].free_queue = {2};
  EXPECT_EQ(*diff_tables(a, b, "x", "y"), "side 'full' free_queue has 2 entries in x but 1 in y (first 1 agree)");
  b = a;
  b.sides[0].watermark = 5;
  EXPECT_EQ(*diff_tables(a, b, "x", "y"), "side 'full' watermark: x has 2, y has 5");
  b = a;
  b.sides.push_back(a.sides[0]);
  EXPECT_EQ(*diff_tables(a, b, "x", "y"), "x has 1 sides but y has 2");
}

TEST(Runner, UnknownFaultsAndMissingGpuAreClearErrors) {
  Result<BackendSet> f = make_backend_set(BackendChoice::model, "no_such_fault");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error().message, HasSubstr("unknown fault 'no_such_fault'; known faults (kvtwin faults): model_alloc_many_partial"));
  if (!gpu_device_available()) {
    Result<BackendSet> g = make_backend_set(BackendChoice::gpu);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.error().kind, ErrorKind::unsupported);
  }
}

}  // namespace
}  // namespace kvtwin::traces
