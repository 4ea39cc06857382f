// Replays of pool traces, op sequences and request traces (replay.h).
#include "traces/replay.h"

#include <cstdio>
#include <fstream>

#include "core/files.h"

namespace kvtwin::traces {
namespace {

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "0.0%";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

// The watcher (when there is one) joins first, so that it sees the build too.
Runner make_runner(BackendSet& backends, const CheckCadence& cadence, const ReplayWatchers& watchers) {
  Runner runner(backends.players, cadence);
  if (watchers.run != nullptr) runner.add_observer(watchers.run);
  return runner;
}

// Builds the header's pool on every backend. A refusal is bad input: the trace cannot be checked.
// Then the observers join the runner (they start from the built pool).
Status build_for_replay(Runner& runner, const PoolConfig& config, const std::string& where,
                        const ObserverFactory& observers, std::vector<std::unique_ptr<RunObserver>>& owned) {
  std::optional<OpResult> built = runner.play(Op(BuildPool{config}), std::nullopt, 1);
  if (built && !built->ok())
    return make_error(ErrorKind::invalid_argument, where + ": the trace's pool cannot be built, so nothing could be "
                                                   "checked: " + built->error().message);
  if (built && observers) {
    owned = observers(config);
    for (const auto& o : owned) runner.add_observer(o.get());
  }
  return ok_status();
}

void finish_report(ReplayReport& report, Runner& runner) {
  if (!runner.failure()) runner.finish();
  report.stats = runner.stats();
  report.failure = runner.failure();
  report.config = runner.config();
}

}  // namespace

nlohmann::json report_json(const ReplayReport& r) {
  nlohmann::json j;
  j["source"] = r.source;
  j["format"] = r.format;
  j["backends"] = r.backends;
  j["seed"] = r.seed;
  j["passed"] = r.passed();
  if (r.config) j["config"] = pool_config_to_json(*r.config);
  j["parameters"] = r.parameters;
  const RunStats& s = r.stats;
  j["ops"] = s.ops;
  j["checks"] = {{"passed", s.checks_passed()},       {"expect", s.expects_checked}, {"results", s.results_compared},
                 {"tables", s.tables_compared},       {"tables_by_digest", s.tables_digests_compared},       {"verify", s.verifies},        {"verify_changed", s.changed_verifies},
                 {"pools", s.pools_compared},
                 {"pages_compared", s.pages_compared}};
  j["compaction_moves"] = s.compaction_moves;
  j["error_results"] = s.errors;
  j["no_room_results"] = s.no_rooms;
  if (r.failure) {
    j["failure"] = {{"step", r.failure->step},
                    {"line", r.failure->line},
                    {"check", r.failure->check},
                    {"op", r.failure->op},
                    {"message", r.failure->message}};
  }
  if (r.serving) j["serving"] = summary_json(*r.serving);
  return j;
}

std::string report_text(const ReplayReport& r) {
  const RunStats& s = r.stats;
  std::string t = "replayed " + r.source + " (" + r.format + ", seed " + std::to_string(r.seed) + ") on " + r.backends +
                  ": " + (r.passed() ? "PASS" : "FAIL");
  t += "\n  ops " + std::to_string(s.ops) + " (" + std::to_string(s.errors) + " answered with an error, " +
       std::to_string(s.no_rooms) + " no_room); checks passed " + std::to_string(s.checks_passed()) + " (expect " +
       std::to_string(s.expects_checked) + ", results " + std::to_string(s.results_compared) + ", tables " +
       std::to_string(s.tables_compared) +
       (s.tables_digests_compared > 0 ? " (" + std::to_string(s.tables_digests_compared) + " by digest)" : "") + ", verify " + std::to_string(s.verifies) + " in full and " +
       std::to_string(s.changed_verifies) + " of what an op changed, pools " +
       std::to_string(s.pools_compared) + " over " + std::to_string(s.pages_compared) + " pages" +
       (s.touched_compared > 0 ? ", written bytes " + std::to_string(s.touched_compared) + " (" +
                                     std::to_string(s.touched_by_digest) + " by digest)"
                               : std::string()) +
       ")";
  t += "\n  pages moved by compaction " + std::to_string(s.compaction_moves);
  if (r.serving) {
    const ServingSummary& v = *r.serving;
    t += "\n  requests served " + std::to_string(v.requests_served) + " of " + std::to_string(v.requests_in_trace) +
         " (rejected as larger than the pool: " + std::to_string(v.requests_rejected) +
         "; dropped at re-admission, grown past the pool: " + std::to_string(v.requests_dropped) + "), admissions " +
         std::to_string(v.admissions) + ", retractions " + std::to_string(v.retractions);
    t += "\n  tokens: prompt " + std::to_string(v.prompt_tokens) + " (from the prefix cache " +
         std::to_string(v.cached_tokens) + ", prefix hit rate " + percent(v.cached_tokens, v.prompt_tokens) +
         "), prefilled " + std::to_string(v.prefill_tokens) + ", decoded " + std::to_string(v.decode_tokens);
    t += "\n  peak occupancy:";
    if (v.shared_bytes == 0) {
      for (const SideOccupancy& o : v.sides)
        t += " " + o.name + " " + std::to_string(o.peak_pages) + " of " + std::to_string(o.usable_pages) + " pages (" +
             percent(o.peak_pages, o.usable_pages) + ")";
    } else {
      // The sides of a composite share one span of bytes: each side's pages are not additive.
      for (const SideOccupancy& o : v.sides)
        t += " " + o.name + " " + std::to_string(o.peak_pages) + " pages (at most " + std::to_string(o.usable_pages) +
             " alone),";
      t += " sharing " + std::to_string(v.shared_bytes) + " bytes: at the peak " +
           percent(v.peak_shared_bytes, v.shared_bytes) + " of them in use";
    }
    t += "\n  cache evictions " + std::to_string(v.cache_evicted_pages) + " pages, sliding-window frees " +
         std::to_string(v.swa_freed_pages) + " pages";
    if (v.state_allocs != 0)
      t += "\n  state slots (SPEC 11): " + std::to_string(v.state_allocs) + " allocated, at most " +
           std::to_string(v.peak_state_slots) + " at once, " + std::to_string(v.state_writes) + " state writes, " +
           std::to_string(v.state_no_room) + " allocations answered no_room first; " +
           std::to_string(v.state_checkpoints) + " prefix checkpoints (at most " +
           std::to_string(v.peak_state_checkpoints) + " at once)";
    if (v.host_pages == 0) {
      t += "\n  host tier: none (--host-bytes 0)";
    } else {
      t += "\n  hits: device " + std::to_string(v.device_hit_pages) + " pages (" + std::to_string(v.device_hit_tokens) +
           " tokens), host " + std::to_string(v.host_hit_pages) + " pages (" + std::to_string(v.host_hit_tokens) +
           " tokens), storage " + std::to_string(v.storage_hit_pages) + " pages (" +
           std::to_string(v.storage_hit_tokens) + " tokens)";
      t += "\n  host tier: " + std::to_string(v.host_pages) + " pages (every side), peak " + std::to_string(v.peak_host_pages) +
           " (" + std::to_string(v.peak_host_bytes) + " bytes); offloaded " + std::to_string(v.pages_offloaded) +
           " pages (" + std::to_string(v.bytes_offloaded) + " bytes, " + std::to_string(v.offloads) +
           " transfers), loaded back " + std::to_string(v.pages_loaded_back) + " pages (" +
           std::to_string(v.bytes_loaded_back) + " bytes, " + std::to_string(v.load_backs) + " transfers), " +
           std::to_string(v.host_evicted_blocks) + " blocks evicted; retractions backed up " +
           std::to_string(v.retractions_backed_up) + " (" + std::to_string(v.retraction_restored_tokens) +
           " tokens restored, not recomputed)";
      if (r.parameters.contains("write_policy")) t += "; write policy " + r.parameters["write_policy"].get<std::string>();
      if (r.parameters.contains("storage_bytes") && r.parameters["storage_bytes"] != 0) {
        t += "\n  storage tier: " + r.parameters["storage_bytes"].dump() + " bytes of page files; stored " +
             std::to_string(v.pages_stored) + " pages (" + std::to_string(v.bytes_stored) + " bytes, " +
             std::to_string(v.stores) + " writes), read " + std::to_string(v.pages_read_from_storage) + " pages (" +
             std::to_string(v.bytes_read_from_storage) + " bytes, " + std::to_string(v.storage_reads) + " reads), " +
             std::to_string(v.storage_missed_pages) + " pages asked for and no longer stored";
        if (!v.storage_error.empty()) t += "\n  storage tier OFF since " + v.storage_error + "; the run went on without it";
      } else {
        t += "\n  storage tier: none (--storage-bytes 0)";
      }
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(v.simulated_us) / 1e6);
    t += "\n  simulated " + std::string(seconds) + " s in " + std::to_string(v.steps) + " steps";
    if (r.parameters.contains("token_scale")) t += ", token scale " + r.parameters["token_scale"].dump();
    if (r.parameters.contains("shrink_entries") && r.parameters["shrink_entries"] == true)
      t += ", entries shrunk (pages and tables of the full model, bytes of " +
           (r.parameters.contains("pool_model") ? r.parameters["pool_model"].get<std::string>() : std::string("a smaller entry")) +
           "; --entries full for real entries)";
    if (r.parameters.contains("block_tokens") && r.parameters["block_tokens"] != 0) {
      t += ", " + r.parameters["block_tokens"].dump() + "-token prefix blocks";
      if (r.parameters.contains("share_within_step"))
        t += std::string(", shared within a step: ") + (r.parameters["share_within_step"] == true ? "on" : "off");
    }
  }
  if (r.failure) t += "\n" + r.failure->describe();
  return t;
}

Result<ReplayReport> replay_pool_trace_file(const std::string& path, BackendSet& backends, const CheckCadence& cadence,
                                            const Progress& progress, const ObserverFactory& observers,
                                            const ReplayWatchers& watchers) {
  KVTWIN_TRY(std::unique_ptr<std::ifstream> file, open_input(path, "pool trace"));
  std::ifstream& in = *file;
  // The size, for progress only: a pipe or a device has none.
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (!in || size < 0) {
    in.clear();
    size = 0;
  } else {
    in.seekg(0, std::ios::beg);
  }
  const auto total = static_cast<std::uint64_t>(size);
  PoolTraceReader reader(in, path);
  KVTWIN_TRY(TraceHeader header, reader.header());
  ReplayReport report;
  report.source = path;
  report.format = "pool";
  report.backends = backends.names();
  report.seed = header.seed;
  report.parameters = header.origin;
  Runner runner = make_runner(backends, cadence, watchers);
  std::vector<std::unique_ptr<RunObserver>> owned;
  KVTWIN_TRY_STATUS(build_for_replay(runner, header.config, path + ":1", observers, owned));
  if (!runner.failure()) {
    std::uint64_t lines = 0;
    while (true) {
      KVTWIN_TRY(std::optional<TraceLine> line, reader.next());
      if (!line) break;
      if (!runner.play(line->op, line->expect, line->line)) break;
      if (progress && ++lines % 1024 == 0)
        progress(static_cast<std::uint64_t>(std::max<std::streamoff>(in.tellg(), 0)), total);
    }
  }
  finish_report(report, runner);
  if (progress) progress(total, total);
  return report;
}

Result<ReplayReport> replay_lines(const TraceHeader& header, const std::vector<TraceLine>& lines, BackendSet& backends,
                                  const CheckCadence& cadence, const std::string& source,
                                  const ObserverFactory& observers, const ReplayWatchers& watchers) {
  ReplayReport report;
  report.source = source;
  report.format = "ops";
  report.backends = backends.names();
  report.seed = header.seed;
  report.parameters = header.origin;
  Runner runner = make_runner(backends, cadence, watchers);
  std::vector<std::unique_ptr<RunObserver>> owned;
  KVTWIN_TRY_STATUS(build_for_replay(runner, header.config, source, observers, owned));
  if (!runner.failure()) {
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (!runner.play(lines[i].op, lines[i].expect, lines[i].line)) break;
  }
  finish_report(report, runner);
  return report;
}

Result<ReplayReport> simulate_request_trace(const RequestTrace& trace, const ServingParams& params,
                                            BackendSet& backends, const CheckCadence& cadence, PoolTraceWriter* record,
                                            const Progress& progress, const ReplayWatchers& watchers) {
  KVTWIN_TRY(ServingSimulator sim, ServingSimulator::create(params, trace));
  sim.set_observer(watchers.serving);
  ReplayReport report;
  report.source = trace.name;
  report.format = std::string(format_name(trace.format));
  report.backends = backends.names();
  report.seed = params.seed;
  report.parameters = serving_params_json(params, trace);
  Runner runner = make_runner(backends, cadence, watchers);
  Status write_status = ok_status();
  bool build_seen = false;
  const OpSink sink = [&](const Op& op) -> std::optional<OpResult> {
    std::optional<OpResult> r = runner.play(op);
    if (r && record != nullptr && write_status.ok()) {
      // The header carries the configuration and the replayer builds it: the build is not a line.
      if (!build_seen && std::holds_alternative<BuildPool>(op)) {
        build_seen = true;
      } else {
        write_status = record->append(op, r);
      }
    }
    if (!write_status.ok()) return std::nullopt;
    return r;
  };
  Status run = sim.run(sink, progress);
  if (!write_status.ok()) return write_status.error();
  finish_report(report, runner);
  if (!run.ok() && !sim.stopped() && !report.failure) {
    // The pool refused what a correct scheduler sends, or the simulator stalled: a failure of the run.
    Failure f;
    f.step = report.stats.ops;
    f.check = "simulator";
    f.message = run.error().message;
    report.failure = f;
  }
  report.serving = sim.summary();
  return report;
}

}  // namespace kvtwin::traces
