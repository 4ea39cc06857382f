// The HTML reports' parts, without a browser (html_browser_test.cpp opens them in one):
//   - the downsampler keeps a bounded, evenly spaced set of points whatever the run's length, and
//     what a dropped point carried is folded into a kept one, never lost;
//   - the recorder's numbers agree with the run's own (the serving summary, the runner's stats),
//     a run of a million ops keeps at most kMaxChartPoints samples, and a planted failure comes
//     with the ops before it, both backends' answers and the pages it involves;
//   - the page is well-formed (parsed as XML with expat), self-contained (a policy that loads
//     nothing, no src attribute, no link out of the page), every chart has an id of its own and
//     marks to draw, and the page says how it was downsampled.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <expat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "tools/kvtwin/downsample.h"
#include "tools/kvtwin/html_report.h"
#include "tools/kvtwin/run_recorder.h"
#include "tools/kvtwin/svg_chart.h"
#include "sim/model.h"
#include "traces/backends.h"
#include "traces/replay.h"
#include "traces/request_trace.h"

namespace kvtwin::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string source(const std::string& relative) {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/" + relative;
}

// ---------------------------------------------------------------- the downsampler

struct Point {
  std::uint64_t candidate = 0;
  std::uint64_t carried = 0;  // candidates since the point before (folded in when points drop)
};

TEST(Downsample, KeepsBetweenHalfAndAllOfItsPointsEvenlySpacedAndLosesNothing) {
  for (const std::uint64_t n : {1ull, 7ull, 8ull, 9ull, 100ull, 1000ull, 123457ull}) {
    DecimatingSeries<Point> series(8, [](Point& dropped, Point& kept) { kept.carried += dropped.carried; });
    std::uint64_t pending = 0, pushes = 0;
    for (std::uint64_t c = 0; c < n; ++c) {
      ++pending;
      if (!series.due(c)) continue;
      series.push(c, Point{c, pending});
      pending = 0;
      ++pushes;
    }
    const auto& points = series.points();
    ASSERT_LE(points.size(), 8u) << n;
    if (n >= 8) {
      EXPECT_GE(points.size(), 4u) << n;
    }
    std::uint64_t carried = pending;
    for (std::size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(points[i].candidate, series.candidate_of(i)) << "point " << i << " of " << n;
      carried += points[i].carried;
    }
    EXPECT_EQ(carried, n) << "every candidate is counted in exactly one kept point (or after the last)";
    // The stride is a power of two, and the last point lies within one stride of the end.
    EXPECT_EQ(series.stride() & (series.stride() - 1), 0u);
    EXPECT_LT(n - 1 - points.back().candidate, series.stride()) << n;
    // The caller is asked for a point rarely: about max_points for every doubling.
    EXPECT_LE(pushes, 8 + 4 * 64) << n;
  }
}

TEST(Downsample, AMillionCandidatesMakeAtMostTheChartsPointsFromFewSamples) {
  DecimatingSeries<std::uint64_t> series(kMaxChartPoints);
  std::uint64_t pushes = 0;
  for (std::uint64_t c = 0; c < 1'000'000; ++c)
    if (series.due(c)) {
      series.push(c, c);
      ++pushes;
    }
  EXPECT_LE(series.points().size(), kMaxChartPoints);
  EXPECT_GE(series.points().size(), kMaxChartPoints / 2);
  EXPECT_EQ(series.stride(), 512u) << "1e6 / 2048 rounded up to a power of two";
  EXPECT_LT(pushes, 6 * kMaxChartPoints) << "each sample reads the tables: they must stay few";
}

TEST(Downsample, RefusesACandidateItDidNotAskFor) {
  DecimatingSeries<int> series(4);
  series.push(0, 0);
  EXPECT_FALSE(series.due(2));
  EXPECT_DEATH(series.push(2, 2), "only the candidates it asked for");
}

// ---------------------------------------------------------------- chart helpers

TEST(SvgChart, TicksAreNiceAscendingAndCoverTheData) {
  for (const auto& [low, high, format] :
       std::vector<std::tuple<double, double, ValueFormat>>{{0, 11, ValueFormat::count},
                                                            {0, 511, ValueFormat::count},
                                                            {0, 1.5e9, ValueFormat::bytes},
                                                            {0, 11169.6, ValueFormat::seconds},
                                                            {0, 37, ValueFormat::percent},
                                                            {3, 3, ValueFormat::count}}) {
    const std::vector<double> t = nice_ticks(low, high, 5, format);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.front(), low);
    EXPECT_GE(t.back(), high);
    for (std::size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], t[1] - t[0], 1e-9);
    if (format == ValueFormat::count) {
      EXPECT_EQ(std::fmod(t[1] - t[0], 1.0), 0.0) << "whole counts";
    }
  }
  EXPECT_EQ(nice_ticks(0, 11169.6, 8, ValueFormat::seconds)[1], 1800) << "half an hour, a step a clock has";
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3221225472.0), "3 GiB");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_seconds(5400), "90 min");
  EXPECT_EQ(escape_xml("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

// ---------------------------------------------------------------- the page as XML

struct PageShape {
  bool well_formed = false;
  std::string parse_error;
  std::vector<std::string> chart_ids;
  std::map<std::string, int> marks_children;  // chart id -> elements directly in its .marks group
  std::set<std::string> ids;
  std::vector<std::string> duplicate_ids;
  std::vector<std::string> outside_references;  // src attributes, links out of the page
  std::string csp;
  std::string selfcheck_status;
  std::string text;  // all character data
};

struct Parser {
  PageShape shape;
  std::vector<std::string> stack;  // element names, with ".marks" for a marks group
  std::string current_chart;

  static void start(void* self, const XML_Char* name, const XML_Char** attrs) {
    auto* p = static_cast<Parser*>(self);
    std::map<std::string, std::string> a;
    for (int i = 0; attrs[i] != nullptr; i += 2) a[attrs[i]] = attrs[i + 1];
    std::string element = name;
    if (a.count("id")) {
      if (!p->shape.ids.insert(a["id"]).second) p->shape.duplicate_ids.push_back(a["id"]);
    }
    if (a.count("src")) p->shape.outside_references.push_back("src=" + a["src"]);
    if (a.count("href") && a["href"].rfind("#", 0) != 0) p->shape.outside_references.push_back("href=" + a["href"]);
    if (element == "meta" && a["http-equiv"] == "Content-Security-Policy") p->shape.csp = a["content"];
    if (a["id"] == "kvtwin-selfcheck") p->shape.selfcheck_status = a["data-status"];
    if (element == "svg" && a["class"] == "chart") {
      p->current_chart = a["id"];
      p->shape.chart_ids.push_back(a["id"]);
    }
    if (!p->stack.empty() && p->stack.back() == ".marks") ++p->shape.marks_children[p->current_chart];
    p->stack.push_back(element == "g" && a["class"] == "marks" ? ".marks" : element);
  }
  static void end(void* self, const XML_Char*) { static_cast<Parser*>(self)->stack.pop_back(); }
  static void text(void* self, const XML_Char* s, int len) { static_cast<Parser*>(self)->shape.text.append(s, len); }
};

PageShape parse_page(const std::string& html) {
  Parser p;
  XML_Parser x = XML_ParserCreate("UTF-8");
  XML_SetUserData(x, &p);
  XML_SetElementHandler(x, &Parser::start, &Parser::end);
  XML_SetCharacterDataHandler(x, &Parser::text);
  p.shape.well_formed = XML_Parse(x, html.data(), static_cast<int>(html.size()), 1) == XML_STATUS_OK;
  if (!p.shape.well_formed)
    p.shape.parse_error =
        std::string(XML_ErrorString(XML_GetErrorCode(x))) + " at line " + std::to_string(XML_GetCurrentLineNumber(x));
  XML_ParserFree(x);
  return p.shape;
}

void expect_self_contained_page(const std::string& html, std::size_t min_charts) {
  const PageShape page = parse_page(html);
  ASSERT_TRUE(page.well_formed) << page.parse_error;
  EXPECT_THAT(page.csp, HasSubstr("default-src 'none'")) << "the page may load nothing";
  EXPECT_THAT(page.outside_references, ::testing::IsEmpty());
  EXPECT_THAT(page.duplicate_ids, ::testing::IsEmpty());
  EXPECT_EQ(page.selfcheck_status, "pending") << "the self-check's result element, for the script to fill";
  EXPECT_GE(page.chart_ids.size(), min_charts);
  for (const std::string& id : page.chart_ids) {
    EXPECT_FALSE(id.empty());
    EXPECT_GT(page.marks_children.count(id) ? page.marks_children.at(id) : 0, 0) << "chart " << id << " draws nothing";
  }
  // Nothing points outside the page but the SVG namespace (a name, never fetched).
  std::string rest = html;
  for (std::size_t at = rest.find("http://www.w3.org/2000/svg"); at != std::string::npos;
       at = rest.find("http://www.w3.org/2000/svg"))
    rest.erase(at, 26);
  EXPECT_THAT(rest, Not(HasSubstr("http://")));
  EXPECT_THAT(rest, Not(HasSubstr("https://")));
}

// ---------------------------------------------------------------- runs through the recorder

traces::BackendSet backends(const std::string& fault = "") {
  Result<traces::BackendSet> b = traces::make_backend_set(traces::BackendChoice::model, fault);
  KVTWIN_CHECK(b.ok(), "the model's backends can be made");
  return std::move(b).value();
}

// The plain model and a copy with `fault` planted, side by side: two answers for every op, as
// the model and the GPU give where a device exists (kvtwin itself plays a planted model alone).
traces::BackendSet model_and_planted(const std::string& fault) {
  traces::BackendSet set;
  set.owned.push_back(std::make_unique<sim::Model>());
  Result<std::unique_ptr<sim::Model>> planted = traces::make_planted_model(fault);
  KVTWIN_CHECK(planted.ok(), "a model fault");
  set.owned.push_back(std::move(*planted));
  for (const auto& backend : set.owned) set.players.push_back(traces::model_player(static_cast<sim::Model&>(*backend)));
  return set;
}

TEST(RunRecorder, AServingRunAgreesWithTheSimulatorsSummaryAndDrawsEveryChart) {
  // Azure's code trace on gpt-oss-20b (full + sliding window: two sub-pools), lazy, tables only.
  Result<traces::RequestTrace> trace =
      traces::read_request_trace(source("traces/samples/azure_code_head.csv"), traces::TraceFormat::azure, {150, 0});
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  traces::ServingParams params;
  params.model = "gpt-oss-20b";
  params.tp = 8;
  params.page_size = 16;
  params.pool_bytes = 32ull << 20;
  params.token_scale = 4;
  params.mode = CompactionMode::lazy;
  params.tables_only = true;
  traces::BackendSet b = backends();
  RunRecorder recorder(/*serving=*/true);
  Result<traces::ReplayReport> report =
      traces::simulate_request_trace(*trace, params, b, {}, nullptr, {}, recorder.watchers());
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_TRUE(report->passed()) << report->failure->describe();
  const RunRecording run = recorder.finish(*report);
  const traces::ServingSummary& s = *report->serving;

  ASSERT_EQ(run.sides.size(), 2u);
  EXPECT_EQ(run.sides[0].name, "full");
  EXPECT_EQ(run.sides[1].name, "swa");
  EXPECT_EQ(run.candidates, s.steps) << "one sample candidate a simulator step";
  ASSERT_FALSE(run.samples.empty());
  const RunSample& end = run.samples.back();
  EXPECT_EQ(end.time_us, s.simulated_us);
  EXPECT_EQ(end.admissions, s.admissions);
  EXPECT_EQ(end.retractions, s.retractions);
  EXPECT_EQ(end.prompt_tokens, s.prompt_tokens);
  EXPECT_EQ(end.cached_tokens, s.cached_tokens);
  EXPECT_EQ(end.served, s.requests_served);
  EXPECT_EQ(end.compaction_moves, report->stats.compaction_moves);
  EXPECT_EQ(end.no_rooms, report->stats.no_rooms);
  EXPECT_EQ(end.ops, report->stats.ops);
  ASSERT_EQ(end.sides.size(), 2u);
  EXPECT_EQ(end.sides[0].bound_pages, 0u) << "the simulator drains: the pool ends empty";
  EXPECT_EQ(end.sides[1].bound_pages, 0u);
  // Some sample saw both sides hold pages, and the sliding window leave holes... or free them.
  std::uint64_t peak_full = 0, peak_swa = 0;
  for (const RunSample& sample : run.samples) {
    peak_full = std::max(peak_full, sample.sides[0].bound_pages);
    peak_swa = std::max(peak_swa, sample.sides[1].bound_pages);
    EXPECT_LE(sample.sides[0].bound_pages + sample.sides[0].hole_pages, run.sides[0].usable_pages());
  }
  EXPECT_GT(peak_full, 0u);
  EXPECT_GT(peak_swa, 0u);
  EXPECT_LE(peak_full, s.sides[0].peak_pages) << "samples never exceed the simulator's own peak";
  // Strips: a few, and the end; a bound page is held by a request the trace has.
  ASSERT_GE(run.strips.size(), 2u);
  EXPECT_LE(run.strips.size(), kMaxStrips + 1);
  bool some_owner = false;
  for (const Strip& strip : run.strips)
    for (const StripSide& side : strip.sides)
      for (const StripCell& cell : side.cells) {
        if (cell.bound == 0) continue;
        EXPECT_GE(cell.owner, 0);
        EXPECT_LT(cell.owner, static_cast<std::int64_t>(trace->requests.size()));
        some_owner = true;
      }
  EXPECT_TRUE(some_owner);

  const std::string html = render_run_html(run, "kvtwin replay test");
  expect_self_contained_page(html, 2 + 1 + 4 + 1);  // occupancy a side, strips, four serving charts, compaction
  const PageShape page = parse_page(html);
  for (const char* id : {"occupancy-full", "occupancy-swa", "strips", "prefix-hit-rate", "tier-hits", "queue",
                         "queueing-delay", "compaction-bytes"})
    EXPECT_TRUE(page.ids.count(id)) << id;
  EXPECT_THAT(page.text, HasSubstr("Host tier: not modelled yet")) << "the host tier is named, never drawn as zeros";
  EXPECT_THAT(page.text, HasSubstr("Downsampled: the run took " + std::to_string(s.steps) + " simulator steps"));
}

TEST(RunRecorder, AServingRunThatStopsAtAFailureKeepsItsClockAndShowsTheFailure) {
  Result<traces::RequestTrace> trace =
      traces::read_request_trace(source("traces/samples/azure_code_head.csv"), traces::TraceFormat::azure, {100, 0});
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  traces::ServingParams params;
  params.model = "gpt-oss-20b";
  params.tp = 8;
  params.page_size = 16;
  params.pool_bytes = 32ull << 20;
  params.token_scale = 4;
  params.mode = CompactionMode::lazy;
  params.tables_only = true;
  traces::BackendSet b = model_and_planted("model_pairing_out_of_order");
  RunRecorder recorder(/*serving=*/true);
  Result<traces::ReplayReport> report =
      traces::simulate_request_trace(*trace, params, b, {}, nullptr, {}, recorder.watchers());
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_FALSE(report->passed());
  const RunRecording run = recorder.finish(*report);
  ASSERT_GE(run.samples.size(), 2u);
  for (std::size_t i = 1; i < run.samples.size(); ++i)
    EXPECT_GE(run.samples[i].time_us, run.samples[i - 1].time_us) << "sample " << i << ": the clock never runs back";
  ASSERT_TRUE(run.failure.has_value());
  EXPECT_EQ(run.failure->failure.check, "results");
  EXPECT_THAT(run.failure->ops_before.back().op, HasSubstr("\"flush\""));
  EXPECT_EQ(run.failure->strips.size(), 2u) << "no tables are kept before each op of a request trace";
  EXPECT_THAT(run.failure->note, HasSubstr("request traces keep no tables before each op"));
  EXPECT_FALSE(run.failure->marks[1].empty()) << "the moves of both answers are marked";
  expect_self_contained_page(render_run_html(run, "test"), 9);
}

TEST(RunRecorder, AMillionOpsMakeAFewThousandPointsAndASmallPage) {
  // Alloc and free a page a million times over (tables only, verify only at the end).
  PoolConfig config;
  config.shape = find_model("llama-3.1-8b").value();
  config.page_size = 16;
  config.total_bytes = 64ull << 20;
  config.tables_only = true;
  traces::BackendSet b = backends();
  traces::CheckCadence cadence;
  cadence.verify_every = 0;
  traces::Runner runner(b.players, cadence);
  RunRecorder recorder(/*serving=*/false);
  runner.add_observer(&recorder);
  ASSERT_TRUE(runner.play(Op(BuildPool{config})));
  std::vector<std::int64_t> held;
  for (std::uint64_t i = 1; i < 1'000'000; ++i) {
    if (held.size() < 20 && (i % 7 != 0 || held.empty())) {
      std::optional<OpResult> r = runner.play(Op(Alloc{16}));
      ASSERT_TRUE(r && r->ok());
      held.push_back(std::get<Allocated>(r->value()).pages.at(0));
    } else {
      std::optional<OpResult> r = runner.play(Op(Free{IdUnit::pages, {held.front()}}));
      ASSERT_TRUE(r && r->ok());
      held.erase(held.begin());
    }
  }
  ASSERT_TRUE(runner.finish());
  traces::ReplayReport report;
  report.source = "a million ops";
  report.format = "ops";
  report.backends = b.names();
  report.stats = runner.stats();
  report.config = runner.config();
  const RunRecording run = recorder.finish(report);
  EXPECT_EQ(run.candidates, 1'000'000u);
  EXPECT_LE(run.samples.size(), kMaxChartPoints + 1);
  EXPECT_GE(run.samples.size(), kMaxChartPoints / 2);
  EXPECT_EQ(run.samples.back().compaction_moves, report.stats.compaction_moves)
      << "the last sample's running total is the run's";
  EXPECT_GT(report.stats.compaction_moves, 0u) << "freeing the oldest page compacts the others";
  std::uint64_t moves_between_strips = 0;
  for (const Strip& strip : run.strips) moves_between_strips += strip.moves_before_total;
  EXPECT_EQ(moves_between_strips, report.stats.compaction_moves) << "every move lies between two strips";
  const std::string html = render_run_html(run, "test");
  EXPECT_LT(html.size(), 1u << 20) << "a million ops make a page of less than 1 MiB";
  expect_self_contained_page(html, 3);
  EXPECT_THAT(html, HasSubstr("one every " + std::to_string(run.sample_stride) + " ops"));
}

TEST(RunRecorder, APlantedFailureShowsTheOpsBeforeItBothAnswersAndThePagesInvolved) {
  // The compaction-pairing regression trace with its bug planted: the free at line 4 compacts
  // two survivors (physical pages 8 and 9) into two holes (4 and 5), paired the wrong way round.
  traces::BackendSet b = model_and_planted("model_pairing_out_of_order");
  RunRecorder recorder(/*serving=*/false);
  Result<traces::ReplayReport> report = traces::replay_pool_trace_file(
      source("traces/regress/compaction_pairs_survivors_and_holes_in_order.jsonl"), b, {}, {}, {}, recorder.watchers());
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_FALSE(report->passed());
  const RunRecording run = recorder.finish(*report);
  ASSERT_TRUE(run.failure.has_value());
  const FailureView& f = *run.failure;
  EXPECT_EQ(f.failure.check, "results");
  ASSERT_EQ(f.backend_names.size(), 2u);
  ASSERT_FALSE(f.ops_before.empty());
  const OpRecord& failing = f.ops_before.back();
  EXPECT_EQ(failing.line, f.failure.line);
  EXPECT_THAT(failing.op, HasSubstr("\"free\""));
  ASSERT_EQ(failing.answers.size(), 2u);
  EXPECT_EQ(failing.answers[0], "{\"moves\":[[\"mla\",8,4],[\"mla\",9,5]]}");
  EXPECT_EQ(failing.answers[1], "{\"moves\":[[\"mla\",9,4],[\"mla\",8,5]]}");
  // Strips: before the op (a small pool keeps the tables), then after it in each backend.
  ASSERT_EQ(f.strips.size(), 3u);
  ASSERT_EQ(f.marks.size(), 3u);
  const auto pages = [](const std::vector<PageMark>& marks) {
    std::set<std::int64_t> out;
    for (const PageMark& m : marks) out.insert(m.page);
    return out;
  };
  EXPECT_EQ(pages(f.marks[0]), (std::set<std::int64_t>{4, 5})) << "the freed pages, before the op";
  EXPECT_EQ(pages(f.marks[1]), (std::set<std::int64_t>{4, 5, 8, 9})) << "the moves' sources and destinations";
  EXPECT_EQ(pages(f.marks[2]), (std::set<std::int64_t>{4, 5, 8, 9}));
  bool names_the_difference = false;
  for (const PageMark& m : f.marks[1]) names_the_difference |= m.why.find("p2v differs") != std::string::npos;
  EXPECT_TRUE(names_the_difference) << "where the backends' tables disagree is said";

  const std::string html = render_run_html(run, "kvtwin replay test --fault model_pairing_out_of_order");
  expect_self_contained_page(html, 4);
  const PageShape page = parse_page(html);
  EXPECT_TRUE(page.ids.count("failure-strips"));
  EXPECT_THAT(html, HasSubstr("class=\"highlight\""));
  EXPECT_THAT(html, HasSubstr("<tr class=\"failing\">"));
}

TEST(HtmlReport, TheGatePageListsEveryPartAndEachFailureWithItsReproduceCommand) {
  GateReport gate;
  gate.seed = 7;
  gate.backend = "model";
  gate.passed = false;
  gate.items = {
      {"properties", "random", "model", "passed", "200 cases", "", "", 4000, 9000, 1.5},
      {"properties", "llama-3.1-8b/ps16/eager", "model", "failed", "", "case 3 failed <here>",
       "kvtwin replay check-failures/x.jsonl --backend model", 300, 600, 0.2},
      {"regress", "gpu side by side with the model", "model+gpu", "skipped", "no CUDA device", "", "", 0, 0, 0}};
  const std::string html = render_gate_html(gate, "kvtwin check --html x.html");
  expect_self_contained_page(html, 2);
  const PageShape page = parse_page(html);
  EXPECT_THAT(page.text, HasSubstr("properties (model)"));
  EXPECT_THAT(page.text, HasSubstr("regress (model+gpu)"));
  EXPECT_THAT(page.text, HasSubstr("case 3 failed <here>")) << "escaped in the page, read back as text";
  EXPECT_THAT(page.text, HasSubstr("kvtwin replay check-failures/x.jsonl --backend model"));
  EXPECT_THAT(page.text, HasSubstr("no CUDA device"));
}

TEST(HtmlReport, TheFuzzPageWithoutAFailureStillDrawsItsCampaign) {
  FuzzHtml fuzz;
  fuzz.seed = 3;
  fuzz.backend = "model";
  fuzz.configuration = "random";
  fuzz.cases = 5;
  fuzz.cases_by_model = {{"llama-3.1-8b-scaled", 3}, {"prop-mla", 2}};
  const std::string html = render_fuzz_html(fuzz, "kvtwin fuzz --html x.html");
  expect_self_contained_page(html, 1);
  EXPECT_THAT(html, HasSubstr("prop-mla"));
  EXPECT_THAT(html, HasSubstr("verdict pass"));
}

}  // namespace
}  // namespace kvtwin::cli
