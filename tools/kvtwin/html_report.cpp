// The HTML reports (html_report.h).
#include "tools/kvtwin/html_report.h"

#include "core/files.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "tools/kvtwin/strip_map.h"
#include "tools/kvtwin/svg_chart.h"

namespace kvtwin::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* kCss = R"(
body { font: 14px/1.45 sans-serif; color: #222; max-width: 1000px; margin: 16px auto; padding: 0 12px; }
h1 { font-size: 20px; margin: 8px 0; } h2 { font-size: 17px; margin: 26px 0 6px; border-bottom: 1px solid #ddd; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.verdict { display: inline-block; padding: 1px 10px; border-radius: 4px; color: #fff; font-weight: bold; }
.pass { background: #2a8a3e; } .fail { background: #c62828; } .skip { background: #888; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
table.small { width: 100%; } td code { overflow-wrap: anywhere; } table.ops td:nth-child(3) { width: 46%; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fdecea; } tr.failing td { background: #fdecea; font-weight: bold; }
pre, code { font: 12px/1.4 monospace; } pre { background: #f7f7f7; padding: 6px 8px; white-space: pre-wrap; word-break: break-all; }
.note { color: #555; font-style: italic; } .small { font-size: 12px; }
svg.chart { display: block; margin: 4px 0 10px; max-width: 100%; height: auto; }
#kvtwin-selfcheck { color: #777; font-size: 12px; margin-top: 24px; }
)";

// Runs before anything else: every error the page raises is kept for the self-check.
const char* kHeadScript = R"(
window.kvtwinErrors = [];
window.addEventListener('error', function (e) {
  var what = e.message || (e.target && (e.target.src || e.target.href)) || 'an error';
  window.kvtwinErrors.push('error: ' + what);
}, true);
document.addEventListener('securitypolicyviolation', function (e) {
  window.kvtwinErrors.push('blocked by the page policy: ' + e.blockedURI + ' (' + e.violatedDirective + ')');
});
(function () {
  var original = console.error;
  console.error = function () {
    window.kvtwinErrors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})();
)";

// After the page has loaded: every chart must have drawn something, and nothing may have failed.
const char* kSelfCheckScript = R"(
window.addEventListener('load', function () {
  var charts = document.querySelectorAll('svg.chart');
  var empty = [];
  for (var i = 0; i < charts.length; i++) {
    var marks = charts[i].querySelectorAll('.marks > *');
    var drawn = 0;
    for (var j = 0; j < marks.length; j++) {
      var box = marks[j].getBBox();
      if (box.width > 0 || box.height > 0) drawn++;
    }
    charts[i].setAttribute('data-drawn', String(drawn));
    if (drawn === 0) empty.push(charts[i].id || ('chart ' + i));
  }
  var ok = charts.length > 0 && empty.length === 0 && window.kvtwinErrors.length === 0;
  var out = document.getElementById('kvtwin-selfcheck');
  out.setAttribute('data-status', ok ? 'ok' : 'fail');
  out.setAttribute('data-charts', String(charts.length));
  out.setAttribute('data-empty', empty.join(' '));
  out.setAttribute('data-errors', window.kvtwinErrors.join(' | '));
  out.textContent = ok ? 'self-check: ' + charts.length + ' charts drawn, no errors'
                       : 'self-check FAILED: ' + charts.length + ' charts, empty: [' + empty.join(', ') +
                         '], errors: [' + window.kvtwinErrors.join(' | ') + ']';
});
)";

std::string html_page(const std::string& title, const std::string& body) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  // Nothing may load from anywhere: the page is whole as it is.
  s += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "script-src 'unsafe-inline'; img-src data:\"/>\n";
  s += "<meta name=\"generator\" content=\"kvtwin\"/>\n<title>" + escape_xml(title) + "</title>\n";
  s += "<style>" + std::string(kCss) + "</style>\n";
  s += "<script>//<![CDATA[" + std::string(kHeadScript) + "//]]></script>\n</head>\n<body>\n";
  s += body;
  s += "<div id=\"kvtwin-selfcheck\" data-status=\"pending\">self-check: did not run (is JavaScript off?)</div>\n";
  s += "<script>//<![CDATA[" + std::string(kSelfCheckScript) + "//]]></script>\n</body>\n</html>\n";
  return s;
}

std::string verdict(bool passed) {
  return passed ? "<span class=\"verdict pass\">PASS</span>" : "<span class=\"verdict fail\">FAIL</span>";
}

std::string row(const std::vector<std::string>& cells, const std::string& cls = "") {
  std::string s = cls.empty() ? "<tr>" : "<tr class=\"" + cls + "\">";
  for (const std::string& c : cells) s += "<td>" + c + "</td>";
  return s + "</tr>\n";
}

// Differences between consecutive running totals: what happened between two samples.
std::vector<double> deltas(const std::vector<RunSample>& samples, std::uint64_t RunSample::*field) {
  std::vector<double> out(samples.size(), 0);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::uint64_t now = samples[i].*field;
    const std::uint64_t before = i == 0 ? 0 : samples[i - 1].*field;
    out[i] = now >= before ? static_cast<double>(now - before) : 0;
  }
  return out;
}

std::vector<double> values(const std::vector<RunSample>& samples, std::uint64_t RunSample::*field) {
  std::vector<double> out;
  out.reserve(samples.size());
  for (const RunSample& s : samples) out.push_back(static_cast<double>(s.*field));
  return out;
}

// The x axis of a run: simulated seconds (request traces) or ops.
std::vector<double> x_of(const RunRecording& run) {
  std::vector<double> x;
  x.reserve(run.samples.size());
  for (const RunSample& s : run.samples)
    x.push_back(run.serving ? static_cast<double>(s.time_us) / 1e6 : static_cast<double>(s.ops));
  return x;
}

TimeChart base_chart(const RunRecording& run, const std::string& id, const std::string& y_label, ValueFormat y_format) {
  TimeChart c;
  c.id = id;
  c.x = x_of(run);
  c.x_label = run.serving ? "simulated time" : "ops played";
  c.x_format = run.serving ? ValueFormat::seconds : ValueFormat::count;
  c.y_label = y_label;
  c.y_format = y_format;
  return c;
}

std::vector<ChartLane> event_lanes(const RunRecording& run) {
  const auto& s = run.samples;
  if (run.serving)
    return {{"admissions", "#2a7ab8", deltas(s, &RunSample::admissions)},
            {"retractions", "#c62828", deltas(s, &RunSample::retractions)},
            {"evictions", "#8e44ad", deltas(s, &RunSample::evicted_pages)},
            {"no_room", "#e0701a", deltas(s, &RunSample::no_rooms)}};
  return {{"allocs", "#2a7ab8", deltas(s, &RunSample::allocs)},
          {"frees", "#2a8a3e", deltas(s, &RunSample::frees)},
          {"no_room", "#e0701a", deltas(s, &RunSample::no_rooms)},
          {"errors", "#c62828", deltas(s, &RunSample::errors)}};
}

std::string config_table(const RunRecording& run) {
  std::string s = "<table>\n";
  s += row({"source", "<code>" + escape_xml(run.source) + "</code>"});
  s += row({"format", escape_xml(run.format)});
  s += row({"backends", escape_xml(run.backends)});
  if (run.config) {
    const PoolConfig& c = *run.config;
    s += row({"pool",
              escape_xml(c.shape.name + ", tp " + std::to_string(c.tp) + ", page size " + std::to_string(c.page_size) +
                         " tokens, " + format_bytes(static_cast<double>(c.total_bytes)) + ", " +
                         (c.mode == CompactionMode::lazy ? "lazy" : "eager") + " compaction" +
                         (c.tables_only ? ", tables only (no bytes)" : ", with bytes"))});
  }
  for (const SideInfo& side : run.sides)
    s += row({"sub-pool " + escape_xml(side.name),
              escape_xml(std::string(side.direction == GrowDirection::up ? "grows up" : "grows down") + ", " +
                         std::to_string(side.usable_pages()) + " usable pages of " +
                         format_bytes(static_cast<double>(side.page_bytes)) + " (pages " +
                         std::to_string(side.min_page_index) + " to " + std::to_string(side.num_pages - 1) + ")")});
  s += row({"host tier", escape_xml(run.host_tier == "not modelled"
                                        ? "not modelled: the serving simulator does not offload to SPEC 8's host arena "
                                          "yet, so nothing of it is drawn"
                                        : run.host_tier)});
  s += "</table>\n";
  return s;
}

std::string downsampling_note(const RunRecording& run) {
  const std::string unit = run.serving ? "simulator steps" : "ops";
  const std::size_t points = run.samples.size();
  std::string s = "<p class=\"note\">Downsampled: the run took " + std::to_string(run.candidates) + " " + unit + "; ";
  if (run.sample_stride > 1)
    s += "the charts show " + std::to_string(points) + " samples, one every " + std::to_string(run.sample_stride) +
         " " + unit + " (at most " + std::to_string(kMaxChartPoints) +
         " a chart), and the state at the end. Occupancy is the value at each sample; the lanes and rates count "
         "everything between two samples, so no event is lost, only grouped.";
  else
    s += "the charts show every one of them (" + std::to_string(points) + " samples with the end), nothing dropped.";
  s += " The strip map shows " + std::to_string(run.strips.size()) + " strips" +
       (run.strip_stride > 1 ? ", one every " + std::to_string(run.strip_stride) + " " + unit : std::string()) +
       ", and the last one at the end.</p>\n";
  return s;
}

std::string failure_section(const RunRecording& run, const std::string& id_prefix) {
  const FailureView& f = *run.failure;
  std::string s = "<h2 id=\"" + id_prefix + "failure\">The failure</h2>\n";
  s += "<p><b>" + escape_xml(f.failure.check) + "</b> check failed " +
       (f.failure.op.empty()
            ? "at the end of the run (after " + std::to_string(f.failure.step) + " ops)"
            : "at step " + std::to_string(f.failure.step) +
                  (f.failure.line != 0 ? ", trace line " + std::to_string(f.failure.line) : std::string())) +
       ".</p>\n<pre>" + escape_xml(f.failure.message) + "</pre>\n";
  s += "<h3>The ops before it, with every backend's answer</h3>\n<table class=\"small ops\">\n"
       "<tr><th>step</th><th>line</th><th>op</th>";
  for (const std::string& name : f.backend_names) s += "<th>" + escape_xml(name) + " answered</th>";
  s += "</tr>\n";
  for (std::size_t i = 0; i < f.ops_before.size(); ++i) {
    const OpRecord& r = f.ops_before[i];
    const bool failing = !f.failure.op.empty() && i + 1 == f.ops_before.size();
    std::vector<std::string> cells = {std::to_string(r.step), r.line == 0 ? "" : std::to_string(r.line),
                                      "<code>" + escape_xml(r.op) + "</code>"};
    for (const std::string& a : r.answers) cells.push_back("<code>" + escape_xml(a) + "</code>");
    s += row(cells, failing ? "failing" : "");
  }
  s += "</table>\n";
  if (!f.note.empty()) s += "<p class=\"note\">" + escape_xml(f.note) + "</p>\n";
  if (!f.strips.empty()) {
    s += "<h3>The pages involved</h3>\n<p class=\"small\">Each backend's pool where the run stopped, the pages the "
         "failing op and the answers name, and those where the backends' tables disagree, outlined in red (hover "
         "for why).</p>\n";
    StripMapInput in;
    in.id = id_prefix + "failure-strips";
    in.sides = run.sides;
    in.total_bytes = run.total_bytes;
    in.reserved_floor_bytes = run.reserved_floor_bytes;
    in.serving = run.serving;
    in.strips = f.strips;
    in.marks = f.marks;
    in.draw_moves = false;
    s += render_strip_map(in);
    std::string list;
    for (std::size_t k = 0; k < f.strips.size() && k < f.marks.size(); ++k)
      for (const PageMark& m : f.marks[k])
        list +=
            row({escape_xml(f.strips[k].label), escape_xml(m.side < run.sides.size() ? run.sides[m.side].name : "?"),
                 std::to_string(m.page), escape_xml(m.why)});
    if (list.empty())
      s += "<p class=\"note\">The failing op and the answers name no page, and the backends' tables agree: "
           "nothing to highlight.</p>\n";
    if (!list.empty())
      s += "<table class=\"small\">\n<tr><th>strip</th><th>sub-pool</th><th>physical page</th><th>why</th></tr>\n" +
           list + "</table>\n";
  }
  return s;
}

// Every section of a run: the numbers, occupancy, strips, serving, compaction, the failure.
std::string run_sections(const RunRecording& run, const std::string& id_prefix) {
  std::string s;
  s += config_table(run);
  s += "<pre>" + escape_xml(run.summary_text) + "</pre>\n";
  if (run.samples.empty() || run.sides.empty()) {
    s += "<p class=\"note\">No pool was built, so there is nothing to draw.</p>\n";
    if (run.failure) s += failure_section(run, id_prefix);
    return s;
  }
  s += downsampling_note(run);
  if (run.pools_built > 1)
    s += "<p class=\"note\">The trace built " + std::to_string(run.pools_built) +
         " pools; the charts show the last one.</p>\n";

  s += "<h2>Occupancy over " + std::string(run.serving ? "simulated time" : "the run") + "</h2>\n";
  s += "<p class=\"small\">Per sub-pool: pages bound and holes (lazy mode), stacked, and the gap between the two "
       "frontiers in that sub-pool's pages (a line); under each chart, " +
       std::string(run.serving ? "admissions, retractions, prefix-cache evictions (in pages) and no_room answers"
                               : "allocations, frees, no_room answers and errors") +
       " between two samples.</p>\n";
  for (std::size_t i = 0; i < run.sides.size(); ++i) {
    const SideInfo& side = run.sides[i];
    TimeChart c = base_chart(run, id_prefix + "occupancy-" + side.name, "pages", ValueFormat::count);
    ChartSeries bound{"bound", i == 0 ? "#2a7ab8" : "#2a9d8f", ChartSeries::Style::stacked_area, {}};
    ChartSeries holes{"holes", "#d33", ChartSeries::Style::stacked_area, {}};
    ChartSeries gap{"gap (free between the frontiers)", "#78909c", ChartSeries::Style::line, {}};
    for (const RunSample& sample : run.samples) {
      const SideSample v = i < sample.sides.size() ? sample.sides[i] : SideSample{};
      bound.y.push_back(static_cast<double>(v.bound_pages));
      holes.y.push_back(static_cast<double>(v.hole_pages));
      gap.y.push_back(static_cast<double>(v.gap_pages));
    }
    c.series = {bound, holes, gap};
    c.y_max = static_cast<double>(side.usable_pages());
    c.lanes = event_lanes(run);
    s += "<h3>" + escape_xml(side.name) + " (" + std::to_string(side.usable_pages()) + " usable pages)</h3>\n";
    s += render_time_chart(c);
  }
  // HOOK(host tier): drawn once the samples carry the host arena.
  bool host = false;
  for (const RunSample& sample : run.samples) host = host || sample.host.has_value();
  if (host) {
    TimeChart c = base_chart(run, id_prefix + "occupancy-host", "host pages", ValueFormat::count);
    ChartSeries used{"host pages used", "#6d4c41", ChartSeries::Style::area, {}};
    for (const RunSample& sample : run.samples)
      used.y.push_back(sample.host ? static_cast<double>(sample.host->used_pages) : 0);
    c.series = {used};
    s += "<h3>host tier</h3>\n" + render_time_chart(c);
  } else {
    s += "<p class=\"note\">Host tier: not modelled yet (the serving simulator does not offload to SPEC 8's host "
         "arena yet), so there is no host "
         "occupancy to draw.</p>\n";
  }

  s += "<h2>Strip map</h2>\n<p class=\"small\">The pool's bytes left to right, one row per sub-pool, at evenly "
       "spaced points of the run, top to bottom; orange lines join a page's old and new place for the compaction "
       "moves made between two strips. Hover a box for its pages and holder.</p>\n";
  {
    StripMapInput in;
    in.id = id_prefix + "strips";
    in.sides = run.sides;
    in.total_bytes = run.total_bytes;
    in.reserved_floor_bytes = run.reserved_floor_bytes;
    in.serving = run.serving;
    in.strips = run.strips;
    s += render_strip_map(in);
  }

  if (run.serving) {
    s += "<h2>Prefix cache, tiers and queueing</h2>\n";
    {
      TimeChart c =
          base_chart(run, id_prefix + "prefix-hit-rate", "prompt tokens from the cache", ValueFormat::percent);
      ChartSeries interval{"between two samples", "#2a7ab8", ChartSeries::Style::line, {}};
      ChartSeries overall{"since the start", "#333", ChartSeries::Style::line, {}};
      const std::vector<double> prompt = deltas(run.samples, &RunSample::prompt_tokens);
      const std::vector<double> cached = deltas(run.samples, &RunSample::cached_tokens);
      for (std::size_t i = 0; i < run.samples.size(); ++i) {
        interval.y.push_back(prompt[i] > 0 ? 100.0 * cached[i] / prompt[i] : kNaN);
        const RunSample& sample = run.samples[i];
        overall.y.push_back(sample.prompt_tokens > 0 ? 100.0 * static_cast<double>(sample.cached_tokens) /
                                                           static_cast<double>(sample.prompt_tokens)
                                                     : kNaN);
      }
      c.series = {interval, overall};
      c.y_max = 1;
      s += "<h3>Prefix-hit rate</h3>\n" + render_time_chart(c);
      if (run.samples.back().cached_tokens == 0)
        s += "<p class=\"note\">No prompt token came from the prefix cache in this run (a trace without prefix "
             "hashes, such as Azure's, never hits).</p>\n";
    }
    {
      TimeChart c = base_chart(run, id_prefix + "tier-hits", "tokens", ValueFormat::count);
      c.series = {{"prompt tokens admitted", "#cfd8dc", ChartSeries::Style::area,
                   deltas(run.samples, &RunSample::prompt_tokens)},
                  {"device tier (prefix cache) hits", "#1b7f73", ChartSeries::Style::bars,
                   deltas(run.samples, &RunSample::cached_tokens)}};
      s += "<h3>Hits per tier (tokens between two samples)</h3>\n" + render_time_chart(c);
      if (!host)
        s += "<p class=\"note\">Host tier hits (load-backs): not modelled yet; this chart will show them beside the "
             "device tier's once the serving simulator offloads.</p>\n";
    }
    {
      TimeChart c = base_chart(run, id_prefix + "queue", "requests", ValueFormat::count);
      c.series = {{"waiting", "#e0701a", ChartSeries::Style::line, values(run.samples, &RunSample::waiting)},
                  {"running", "#2a7ab8", ChartSeries::Style::line, values(run.samples, &RunSample::running)}};
      c.lanes = {{"served", "#2a8a3e", deltas(run.samples, &RunSample::served)},
                 {"admissions", "#2a7ab8", deltas(run.samples, &RunSample::admissions)}};
      s += "<h3>Queue (at each sample)</h3>\n" + render_time_chart(c);
    }
    {
      TimeChart c = base_chart(run, id_prefix + "queueing-delay", "mean wait", ValueFormat::seconds);
      ChartSeries delay{
          "mean queueing delay of the admissions between two samples", "#8e44ad", ChartSeries::Style::line, {}};
      const std::vector<double> waited = deltas(run.samples, &RunSample::queue_delay_us_total);
      const std::vector<double> admitted = deltas(run.samples, &RunSample::admissions);
      for (std::size_t i = 0; i < run.samples.size(); ++i)
        delay.y.push_back(admitted[i] > 0 ? waited[i] / admitted[i] / 1e6 : kNaN);
      c.series = {delay};
      s += "<h3>Queueing delay (from arrival, or from a retraction, to admission)</h3>\n" + render_time_chart(c);
    }
  }

  s += "<h2>Compaction</h2>\n";
  {
    TimeChart c = base_chart(run, id_prefix + "compaction-bytes", "bytes moved", ValueFormat::bytes);
    c.series = {{"bytes moved by compaction, since the start", "#e0701a", ChartSeries::Style::area,
                 values(run.samples, &RunSample::compaction_bytes)}};
    c.lanes = {{"page moves", "#e0701a", deltas(run.samples, &RunSample::compaction_moves)}};
    const RunSample& last = run.samples.back();
    s += "<p class=\"small\">" + std::to_string(last.compaction_moves) + " page moves, " +
         escape_xml(format_bytes(static_cast<double>(last.compaction_bytes))) +
         " in all (whole page envelopes; on a tables-only pool, what the moves would have copied).</p>\n";
    s += render_time_chart(c);
  }
  if (run.failure) s += failure_section(run, id_prefix);
  return s;
}

std::string footer(const std::string& command) {
  return "<h2>How this report was made</h2>\n<pre>" + escape_xml(command) +
         "</pre>\n<p class=\"note\">A self-contained page from kvtwin: inline SVG drawn by the C++ code, no script "
         "or style from anywhere else (its security policy forbids loading anything).</p>\n";
}

std::string state_badge(const std::string& state) {
  if (state == "passed") return "<span class=\"verdict pass\">passed</span>";
  if (state == "failed") return "<span class=\"verdict fail\">failed</span>";
  return "<span class=\"verdict skip\">" + escape_xml(state) + "</span>";
}

}  // namespace

std::string render_run_html(const RunRecording& run, const std::string& command) {
  std::string body = "<h1>kvtwin replay: " + escape_xml(run.source) + " " + verdict(run.passed) + "</h1>\n";
  if (run.failure) body += "<p><a href=\"#failure\">Go to the failure</a></p>\n";
  body += run_sections(run, "");
  body += footer(command);
  return html_page("kvtwin replay: " + run.source, body);
}

std::string render_gate_html(const GateReport& gate, const std::string& command) {
  struct Tally {
    std::uint64_t items = 0, passed = 0, failed = 0, skipped = 0, ops = 0, checks = 0;
    double seconds = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Tally> tallies;
  for (const GateItem& item : gate.items) {
    const std::string key = item.part + " (" + item.backend + ")";
    if (!tallies.count(key)) order.push_back(key);
    Tally& t = tallies[key];
    ++t.items;
    t.ops += item.ops;
    t.checks += item.checks;
    t.seconds += item.seconds;
    if (item.state == "passed")
      ++t.passed;
    else if (item.state == "failed")
      ++t.failed;
    else
      ++t.skipped;
  }
  std::string b = "<h1>kvtwin check: the gate " + verdict(gate.passed) + "</h1>\n";
  b += "<p>Seed " + std::to_string(gate.seed) + " on " + escape_xml(gate.backend) + ", shard " +
       std::to_string(gate.shard_index) + " of " + std::to_string(gate.shard_count) + ", " +
       std::to_string(gate.items.size()) + " work items.</p>\n";
  b += "<h2>Parts</h2>\n<table>\n<tr><th>part</th><th>items</th><th>passed</th><th>failed</th><th>skipped</th>"
       "<th>ops</th><th>checks</th><th>seconds</th></tr>\n";
  for (const std::string& key : order) {
    const Tally& t = tallies[key];
    b += "<tr" + std::string(t.failed ? " class=\"failed\"" : "") + "><td>" + escape_xml(key) +
         "</td><td class=\"num\">" + std::to_string(t.items) + "</td><td class=\"num\">" + std::to_string(t.passed) +
         "</td><td class=\"num\">" + std::to_string(t.failed) + "</td><td class=\"num\">" + std::to_string(t.skipped) +
         "</td><td class=\"num\">" + std::to_string(t.ops) + "</td><td class=\"num\">" + std::to_string(t.checks) +
         "</td><td class=\"num\">" + format_number(t.seconds, 1) + "</td></tr>\n";
  }
  b += "</table>\n";
  BarChart items;
  items.id = "gate-items";
  items.segment_names = {"passed", "failed", "skipped"};
  items.segment_colors = {"#2a8a3e", "#c62828", "#9e9e9e"};
  BarChart seconds;
  seconds.id = "gate-seconds";
  seconds.segment_names = {"seconds (wall time)"};
  seconds.segment_colors = {"#2a7ab8"};
  seconds.format = ValueFormat::seconds;
  for (const std::string& key : order) {
    const Tally& t = tallies[key];
    items.rows.push_back(
        {key, {static_cast<double>(t.passed), static_cast<double>(t.failed), static_cast<double>(t.skipped)}});
    seconds.rows.push_back({key, {t.seconds}});
  }
  b += "<h3>Items per part</h3>\n" + render_bar_chart(items);
  b += "<h3>Time per part</h3>\n" + render_bar_chart(seconds);

  std::string failures;
  for (const GateItem& item : gate.items) {
    if (item.state != "failed") continue;
    failures += "<h3>" + escape_xml(item.part + ": " + item.name + " (" + item.backend + ")") + "</h3>\n<pre>" +
                escape_xml(item.failure) + "</pre>\n";
    if (!item.reproduce.empty()) failures += "<p>Reproduce:</p>\n<pre>" + escape_xml(item.reproduce) + "</pre>\n";
  }
  b += "<h2>Failures</h2>\n" + (failures.empty() ? "<p>None.</p>\n" : failures);

  b += "<h2>Every item</h2>\n<table class=\"small\">\n<tr><th>part</th><th>item</th><th>backend</th><th>state</th>"
       "<th>what ran (or why skipped)</th><th>ops</th><th>checks</th><th>seconds</th></tr>\n";
  for (const GateItem& item : gate.items)
    b += "<tr" + std::string(item.state == "failed" ? " class=\"failed\"" : "") + "><td>" + escape_xml(item.part) +
         "</td><td>" + escape_xml(item.name) + "</td><td>" + escape_xml(item.backend) + "</td><td>" +
         state_badge(item.state) + "</td><td>" + escape_xml(item.detail) + "</td><td class=\"num\">" +
         std::to_string(item.ops) + "</td><td class=\"num\">" + std::to_string(item.checks) +
         "</td><td class=\"num\">" + format_number(item.seconds, 1) + "</td></tr>\n";
  b += "</table>\n";
  b += footer(command);
  return html_page("kvtwin check", b);
}

std::string render_fuzz_html(const FuzzHtml& fuzz, const std::string& command) {
  std::string b = "<h1>kvtwin fuzz: seed " + std::to_string(fuzz.seed) + " " + verdict(!fuzz.failure) + "</h1>\n";
  b += "<table>\n";
  b += row({"backend", escape_xml(fuzz.backend)});
  b += row({"configuration", escape_xml(fuzz.configuration)});
  if (!fuzz.fault.empty()) b += row({"planted fault", escape_xml(fuzz.fault) + " (a self-test: the run must fail)"});
  b += row({"cases", std::to_string(fuzz.cases) + " of " + std::to_string(fuzz.ops_per_case) + " ops (shard " +
                         std::to_string(fuzz.shard_index) + " of " + std::to_string(fuzz.shard_count) + ")"});
  b += row({"ops played", std::to_string(fuzz.ops)});
  b += row({"checks passed", std::to_string(fuzz.checks)});
  b += "</table>\n";
  BarChart models;
  models.id = "fuzz-cases";
  models.segment_names = {"cases"};
  models.segment_colors = {"#2a7ab8"};
  for (const auto& [name, count] : fuzz.cases_by_model) models.rows.push_back({name, {static_cast<double>(count)}});
  if (models.rows.empty()) models.rows.push_back({"(no case ran)", {0}});
  b += "<h2>Cases per model</h2>\n" + render_bar_chart(models);
  if (fuzz.failure) {
    const FuzzHtmlFailure& f = *fuzz.failure;
    b += "<h2>The failing case</h2>\n<table>\n";
    b += row({"case", std::to_string(f.case_index) + " (case seed " + std::to_string(f.case_seed) + ")"});
    b += row({"configuration", escape_xml(f.configuration)});
    b += row({"swarm", "<code>" + escape_xml(f.swarm) + "</code>"});
    b += row({"check", escape_xml(f.check)});
    b += row({"shrunk", std::to_string(f.ops_before_shrinking) + " ops to " + std::to_string(f.ops_after_shrinking)});
    b += row({"trace", "<code>" + escape_xml(f.trace_path) + "</code>"});
    b += "</table>\n<pre>" + escape_xml(f.message) + "</pre>\n";
    b += "<p>Reproduce the shrunk failure:</p>\n<pre>" + escape_xml(f.reproduce_replay) +
         "</pre>\n<p>Reproduce the whole case:</p>\n<pre>" + escape_xml(f.reproduce_case) + "</pre>\n";
    if (fuzz.failure_replay) {
      b += "<h2>The shrunk trace, replayed</h2>\n";
      if (fuzz.failure_replay->passed)
        b += "<p class=\"note\">The replay of the shrunk trace passed the runner's checks: the case failed a check "
             "only the fuzzer makes (the shadow model or the policy), which its trace's expectations do not "
             "capture.</p>\n";
      b += run_sections(*fuzz.failure_replay, "replay-");
    }
  }
  b += footer(command);
  return html_page("kvtwin fuzz", b);
}

// Whole or not at all, like every output (core/files.h).
Status write_html_file(const std::string& path, const std::string& html) { return write_file_atomically(path, html); }

Status check_html_file_writable(const std::string& path) { return check_output_path(path, "--html"); }

}  // namespace kvtwin::cli
