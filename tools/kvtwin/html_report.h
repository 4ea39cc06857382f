// The HTML reports of `kvtwin replay --html`, `kvtwin fuzz --html` and `kvtwin check --html`:
// one self-contained file each (inline CSS, SVG and a few lines of script; a Content Security
// Policy that forbids loading anything, so the page never touches the network), drawn from what
// a RunRecorder collected (run_recorder.h) or from the gate's and the campaign's results.
//
// The charts are hand-written SVG (svg_chart.h, strip_map.h) rather than a charting library:
// the report needs a handful of chart kinds whose data is already downsampled in C++, and SVG
// text from C++ needs no build-time download, no JavaScript bundle and no licence to carry.
//
// A replay's page: the run's numbers; occupancy over time per sub-pool (bound pages, holes, the
// gap) with lanes of admissions, retractions and evictions (allocs, frees, no_room and errors on
// pool traces); the strip map; on request traces the prefix-hit rate, hits per tier, the queue
// and the queueing delay; the bytes compaction moved; and for a failure the ops before it, every
// backend's answers and the pages involved, highlighted on strips of each backend's pool. Every
// page says how it was downsampled.
//
// Each page checks itself when it loads: a script counts the charts (<svg class="chart">) whose
// marks drew nothing and the errors the page raised (script errors, console.error, anything the
// security policy blocked), and writes the verdict into #kvtwin-selfcheck (data-status "ok" or
// "fail"), which the browser test reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "tools/kvtwin/run_recorder.h"

namespace kvtwin::cli {

// `command`: the command line that made the report (shown at the bottom).
std::string render_run_html(const RunRecording& run, const std::string& command);

struct GateItem {
  std::string part;  // properties, regress, requests
  std::string name;
  std::string backend;  // model, model+gpu
  std::string state;    // passed, failed, skipped
  std::string detail;
  std::string failure;
  std::string reproduce;
  std::uint64_t ops = 0;
  std::uint64_t checks = 0;
  double seconds = 0;
};

struct GateReport {
  std::uint64_t seed = 0;
  std::string backend;
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
  bool passed = true;
  std::vector<GateItem> items;  // in the gate's order
};

std::string render_gate_html(const GateReport& gate, const std::string& command);

struct FuzzHtmlFailure {
  std::uint64_t case_index = 0;
  std::uint64_t case_seed = 0;
  std::string configuration;
  std::string swarm;
  std::string check;
  std::string message;
  std::uint64_t ops_before_shrinking = 0;
  std::uint64_t ops_after_shrinking = 0;
  std::string trace_path;
  std::string reproduce_replay;
  std::string reproduce_case;
};

struct FuzzHtml {
  std::uint64_t seed = 0;
  std::string backend;
  std::string configuration;
  std::string fault;
  std::uint64_t ops_per_case = 0;
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
  std::uint64_t cases = 0;
  std::uint64_t ops = 0;
  std::uint64_t checks = 0;
  std::vector<std::pair<std::string, std::uint64_t>> cases_by_model;  // sorted by name
  std::optional<FuzzHtmlFailure> failure;
  std::optional<RunRecording> failure_replay;  // the shrunk trace replayed with a recorder
};

std::string render_fuzz_html(const FuzzHtml& fuzz, const std::string& command);

// Writes a report; an io Error naming the file when it cannot.
Status write_html_file(const std::string& path, const std::string& html);
// Whether a report can be written there (checked before a long run, so it does not fail at the
// end); creates the file empty when it does not exist, leaves it as it is otherwise.
Status check_html_file_writable(const std::string& path);

}  // namespace kvtwin::cli
