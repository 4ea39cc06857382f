// What an HTML report of a run draws (html_report.h), collected while the run goes: the
// RunRecorder watches the runner (every op and each backend's answer) and, on a request trace,
// the serving simulator's decisions, through the observer hooks of traces/runner.h and
// traces/serving_sim.h. It never changes the run; a run with a recorder plays the same ops.
//
// What it keeps, bounded whatever the run's length (downsample.h):
//   samples  occupancy per sub-pool (bound pages, holes, the gap between the frontiers, read from
//            the first backend's tables) and running totals (compaction moves and bytes, allocs,
//            frees, no_room and error answers; on a request trace also admissions, retractions,
//            cache evictions, prompt and cached tokens, queueing delay, waiting and running
//            requests), taken every `stride` ops (pool traces) or simulator steps (request
//            traces), at most kMaxChartPoints of them, plus the state at the end;
//   strips   the pool's pages at up to kMaxStrips evenly spaced points (which sub-pool, bound or
//            hole, which request or allocation holds each page), at most kStripCellsMax cells a
//            side (a cell groups neighbouring pages on larger pools), and the compaction moves
//            made between two strips (at most kMovesDrawnMax of them kept, all counted);
//   failure  the last kOpsBeforeFailure ops with every backend's answer, and at the failure the
//            pool of each backend (and before the failing op, on pools of at most
//            kBeforeTablesMaxPages pages in pool traces) with the pages the failure involves.
//
// Not collected: the host tier. SPEC 8's host arena does not exist in any backend yet; the
// HOOK(host tier) fields stay empty, and the report says "not modelled" instead of drawing them.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "tools/kvtwin/downsample.h"
#include "traces/replay.h"
#include "traces/runner.h"
#include "traces/serving_sim.h"

namespace kvtwin::cli {

inline constexpr std::size_t kMaxChartPoints = 2048;  // per chart: between half and all of this many
inline constexpr std::size_t kMaxStrips = 12;         // strips in the strip map (between 6 and 12, and the end)
inline constexpr std::size_t kStripCellsMax = 1024;   // cells a side of one strip
inline constexpr std::size_t kMovesDrawnMax = 96;     // compaction moves drawn between two strips
inline constexpr std::size_t kOpsBeforeFailure = 24;  // ops shown before a failure (the failing one last)
inline constexpr std::uint64_t kBeforeTablesMaxPages = 4096;

// One sub-pool's geometry, as the report draws it.
struct SideInfo {
  std::string name;
  GrowDirection direction = GrowDirection::up;
  std::uint64_t page_bytes = 0;
  std::uint64_t num_pages = 0;
  std::uint64_t min_page_index = 0;
  std::uint64_t usable_pages() const { return num_pages - min_page_index; }
};

struct SideSample {
  std::uint64_t bound_pages = 0;
  std::uint64_t hole_pages = 0;
  std::uint64_t gap_pages = 0;  // the bytes between the two frontiers, in this side's pages
};

// HOOK(host tier): the host arena's occupancy and the hits served from it, once a backend has one.
struct HostSample {
  std::uint64_t used_pages = 0;
  std::uint64_t total_pages = 0;
  std::uint64_t load_back_hits = 0;  // running total
};

// The state at one sample point. Counters are running totals since the start of the run.
struct RunSample {
  std::uint64_t ops = 0;      // ops played so far
  std::uint64_t time_us = 0;  // the simulated clock (request traces); 0 for pool traces
  std::vector<SideSample> sides;
  std::uint64_t compaction_moves = 0;
  std::uint64_t compaction_bytes = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t no_rooms = 0;
  std::uint64_t errors = 0;
  // Request traces only.
  std::uint64_t waiting = 0;
  std::uint64_t running = 0;
  std::uint64_t admissions = 0;
  std::uint64_t retractions = 0;
  std::uint64_t evicted_pages = 0;
  std::uint64_t served = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_tokens = 0;         // device tier: the prefix cache
  std::uint64_t queue_delay_us_total = 0;  // over admissions: admitted at - arrived (or retracted) at
  std::optional<HostSample> host;          // HOOK(host tier): empty until a backend has a host arena
};

// A cell of a strip: `pages` neighbouring physical pages of one side from `first_page`.
struct StripCell {
  std::uint64_t first_page = 0;
  std::uint32_t pages = 0;
  std::uint32_t bound = 0;
  std::uint32_t holes = 0;
  std::int64_t owner = -1;  // of the first bound page: a request (request traces) or an allocation number
  bool cached = false;      // the owner has left; the page is held by the prefix cache
};

struct StripSide {
  std::vector<StripCell> cells;  // only cells with a bound page or a hole, ascending
  std::int64_t watermark = 0;
  std::uint64_t bound_pages = 0;
  std::uint64_t hole_pages = 0;
};

struct Strip {
  std::uint64_t ops = 0;
  std::uint64_t time_us = 0;
  std::string label;
  std::vector<StripSide> sides;
  std::vector<PageMove> moves_before;    // compaction moves since the strip before (the first kMovesDrawnMax)
  std::uint64_t moves_before_total = 0;  // all of them
};

// A page a failure involves, to highlight on a strip.
struct PageMark {
  std::size_t side = 0;
  std::int64_t page = 0;  // physical
  std::string why;
};

struct OpRecord {
  std::uint64_t step = 0;
  std::uint64_t line = 0;
  std::string op;                    // trace syntax, clipped
  std::vector<std::string> answers;  // one per backend, clipped
};

struct FailureView {
  traces::Failure failure;
  std::vector<std::string> backend_names;
  std::vector<OpRecord> ops_before;          // oldest first; the failing op last when the failure is at an op
  std::vector<Strip> strips;                 // "before the op (model)", "after the op (model)", "after the op (gpu)"
  std::vector<std::vector<PageMark>> marks;  // per strip
  std::string note;                          // what could not be shown, and why
};

struct RunRecording {
  std::string source;
  std::string format;    // "pool", "mooncake", "azure", "ops"
  std::string backends;  // "model", "model+gpu"
  bool serving = false;  // a request trace through the serving simulator (x axis: simulated time)
  bool passed = true;
  std::optional<PoolConfig> config;
  std::uint64_t total_bytes = 0;
  std::uint64_t reserved_floor_bytes = 0;
  std::vector<SideInfo> sides;
  std::uint64_t pools_built = 0;  // the charts show the last pool a trace built

  std::vector<RunSample> samples;   // evenly spaced; the last one is the state at the end
  std::uint64_t sample_stride = 1;  // ops (pool traces) or steps (request traces) between two samples
  std::uint64_t candidates = 0;     // ops or steps seen
  std::vector<Strip> strips;        // evenly spaced; the last one is the end (or the failure)
  std::uint64_t strip_stride = 1;

  std::optional<FailureView> failure;
  std::string host_tier = "not modelled";             // HOOK(host tier): "modelled" once samples carry HostSample
  nlohmann::json summary = nlohmann::json::object();  // traces::report_json of the run
  std::string summary_text;                           // traces::report_text of the run
};

class RunRecorder : public traces::RunObserver, public traces::ServingObserver {
 public:
  // `serving`: the run is a request trace through the serving simulator (samples at its steps).
  explicit RunRecorder(bool serving);

  void after_apply(const traces::Runner& runner, const traces::OpEvent& event) override;
  void on_serving_event(const traces::ServingEvent& event) override;

  // After the run, while its backends are still alive: the state at the end, the failure view,
  // the summary. Call once.
  RunRecording finish(const traces::ReplayReport& report);

  // The observers to hand to the replay functions.
  traces::ReplayWatchers watchers() { return {this, serving_ ? this : nullptr}; }

 private:
  struct KeptOp {
    std::uint64_t step = 0;
    std::uint64_t line = 0;
    Op op;
    std::vector<OpResult> results;  // byte payloads dropped (sizes and digests kept)
  };

  void start_pool(const PoolConfig& config);
  void count_result(const Op& op, const OpResult& first);
  RunSample take_sample() const;
  Strip take_strip(const Backend& backend, std::string label) const;
  Strip strip_of(const PoolTables* tables, std::string label) const;  // null: no pool to show
  static DecimatingSeries<Strip> strip_series();
  void sample_if_due(std::uint64_t candidate);
  FailureView failure_view(const traces::Failure& failure) const;

  bool serving_;
  std::vector<const Backend*> backends_;
  std::vector<std::string> backend_names_;
  std::uint64_t pools_built_ = 0;
  std::optional<PoolConfig> config_;
  std::uint64_t total_bytes_ = 0;
  std::uint64_t reserved_floor_bytes_ = 0;
  std::vector<SideInfo> sides_;

  DecimatingSeries<RunSample> samples_;
  DecimatingSeries<Strip> strips_;
  std::uint64_t candidates_ = 0;

  // Running totals and the state the samples read.
  RunSample totals_;
  std::vector<PageMove> moves_since_strip_;
  std::uint64_t moves_since_strip_total_ = 0;
  std::vector<std::int64_t> owner_of_virtual_;  // virtual page -> request or allocation number; -1 none
  std::vector<bool> live_request_;              // request traces: admitted and not yet left
  std::vector<std::uint64_t> retracted_at_us_;  // request traces: when a request was last retracted (0: never)
  std::uint64_t allocation_number_ = 0;

  std::deque<KeptOp> last_ops_;
  std::optional<PoolTables> tables_before_;  // pool traces on small pools: before the latest op
  std::optional<PoolTables> tables_after_;
  bool keep_tables_ = false;
};

}  // namespace kvtwin::cli
