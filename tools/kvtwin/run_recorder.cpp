// The data of an HTML report, collected while a run goes (run_recorder.h).
#include "tools/kvtwin/run_recorder.h"

#include <algorithm>
#include <set>

#include "core/check.h"
#include "traces/pool_trace.h"

namespace kvtwin::cli {
namespace {

constexpr std::size_t kOpTextMaxChars = 400;
constexpr std::size_t kAnswerTextMaxChars = 300;
constexpr std::size_t kMarksMax = 96;

std::string clip(std::string text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, max_chars) + "... (" + std::to_string(text.size()) + " characters)";
}

// A result without its byte payloads (sizes and digests, which is what results compare by, stay).
OpResult light(const OpResult& r) {
  if (!r.ok()) return r;
  Outcome o = r.value();
  if (auto* b = std::get_if<Bytes>(&o)) {
    b->bytes.clear();
    b->bytes.shrink_to_fit();
  } else if (auto* d = std::get_if<Decode>(&o)) {
    d->attention.bytes.clear();
    d->attention.bytes.shrink_to_fit();
  }
  return OpResult(std::move(o));
}

std::int64_t physical_of(const PoolTables& t, std::size_t side, std::int64_t v) {
  if (side >= t.sides.size() || v < 0) return -1;
  const std::vector<std::int64_t>& v2p = t.sides[side].v2p;
  if (static_cast<std::uint64_t>(v) >= v2p.size()) return -1;
  return v2p[static_cast<std::size_t>(v)];
}

void add_mark(std::vector<PageMark>& marks, std::size_t side, std::int64_t page, std::string why) {
  if (page <= 0 || marks.size() >= kMarksMax) return;  // page 0 is the sink
  for (PageMark& m : marks) {
    if (m.side == side && m.page == page) {
      if (m.why.find(why) == std::string::npos) m.why += "; " + why;
      return;
    }
  }
  marks.push_back(PageMark{side, page, std::move(why)});
}

}  // namespace

DecimatingSeries<Strip> RunRecorder::strip_series() {
  return DecimatingSeries<Strip>(kMaxStrips, [](Strip& dropped, Strip& kept_after) {
    // The moves made before a dropped strip now lie before the strip kept after it.
    std::vector<PageMove> moves = std::move(dropped.moves_before);
    for (PageMove& m : kept_after.moves_before) {
      if (moves.size() >= kMovesDrawnMax) break;
      moves.push_back(std::move(m));
    }
    kept_after.moves_before = std::move(moves);
    kept_after.moves_before_total += dropped.moves_before_total;
  });
}

RunRecorder::RunRecorder(bool serving) : serving_(serving), samples_(kMaxChartPoints), strips_(strip_series()) {}

void RunRecorder::start_pool(const PoolConfig& config) {
  Result<PoolDerived> derived = derive_pool(config);
  KVTWIN_CHECK(derived.ok(), "a pool a backend built derives");
  ++pools_built_;
  config_ = config;
  total_bytes_ = derived->geometry.total_bytes;
  reserved_floor_bytes_ = derived->geometry.reserved_floor_bytes;
  sides_.clear();
  for (const SubPoolGeometry& g : derived->geometry.sub_pools)
    sides_.push_back(SideInfo{g.name, g.direction, g.page_bytes, g.num_pages, g.min_page_index});
  std::uint64_t pages = 0;
  for (const SideInfo& s : sides_) pages += s.num_pages;
  keep_tables_ = !serving_ && pages <= kBeforeTablesMaxPages;
  owner_of_virtual_.clear();
  if (pools_built_ > 1) {
    // A trace that builds a second pool: the charts start over with it.
    samples_ = DecimatingSeries<RunSample>(kMaxChartPoints);
    strips_ = strip_series();
    candidates_ = 0;
    totals_ = RunSample{};
    moves_since_strip_.clear();
    moves_since_strip_total_ = 0;
  }
}

void RunRecorder::count_result(const Op& op, const OpResult& first) {
  if (!first.ok()) {
    ++totals_.errors;
    return;
  }
  const Outcome& o = first.value();
  if (std::holds_alternative<NoRoom>(o)) {
    ++totals_.no_rooms;
    return;
  }
  const auto own = [&](const std::vector<std::int64_t>& pages, std::int64_t owner) {
    for (std::int64_t v : pages) {
      if (v < 0) continue;
      if (owner_of_virtual_.size() <= static_cast<std::size_t>(v))
        owner_of_virtual_.resize(static_cast<std::size_t>(v) + 1, -1);
      owner_of_virtual_[static_cast<std::size_t>(v)] = owner;
    }
  };
  if (const auto* a = std::get_if<Allocated>(&o)) {
    ++totals_.allocs;
    // Request traces name the owner (the request) through the simulator's events instead.
    if (!serving_) own(a->pages, static_cast<std::int64_t>(allocation_number_++));
  } else if (const auto* m = std::get_if<AllocatedMany>(&o)) {
    ++totals_.allocs;
    if (!serving_)
      for (const std::vector<std::int64_t>& pages : m->pages)
        own(pages, static_cast<std::int64_t>(allocation_number_++));
  } else if (const auto* t = std::get_if<TransferStarted>(&o)) {
    // A load-back allocates its device pages as alloc does (SPEC 8).
    if (std::holds_alternative<LoadBack>(op) && !t->pages.empty()) {
      ++totals_.allocs;
      if (!serving_) own(t->pages, static_cast<std::int64_t>(allocation_number_++));
    }
  } else if (const auto* c = std::get_if<Compaction>(&o)) {
    if (std::holds_alternative<Free>(op)) ++totals_.frees;
    totals_.compaction_moves += c->moves.size();
    for (const PageMove& move : c->moves) {
      for (const SideInfo& s : sides_)
        if (s.name == move.sub_pool) totals_.compaction_bytes += s.page_bytes;
      if (moves_since_strip_.size() < kMovesDrawnMax) moves_since_strip_.push_back(move);
    }
    moves_since_strip_total_ += c->moves.size();
  }
}

RunSample RunRecorder::take_sample() const {
  RunSample s = totals_;
  if (backends_.empty() || sides_.empty()) return s;
  Result<PoolTables> tables = backends_.front()->tables();
  if (!tables.ok() || tables->sides.size() != sides_.size()) return s;
  // The gap: the bytes between the up side's frontier and the down side's (or the end).
  const SideInfo& up = sides_[0];
  const std::uint64_t up_frontier =
      static_cast<std::uint64_t>(std::max<std::int64_t>(tables->sides[0].watermark, 0)) * up.page_bytes;
  std::uint64_t down_frontier = up.num_pages * up.page_bytes;
  if (sides_.size() > 1)
    down_frontier =
        static_cast<std::uint64_t>(std::max<std::int64_t>(tables->sides[1].watermark + 1, 0)) * sides_[1].page_bytes;
  const std::uint64_t gap_bytes = down_frontier > up_frontier ? down_frontier - up_frontier : 0;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    SideSample side;
    side.bound_pages = tables->sides[i].allocated_pages;
    side.hole_pages = tables->sides[i].holes.size();
    side.gap_pages = gap_bytes / sides_[i].page_bytes;
    s.sides.push_back(side);
  }
  return s;
}

Strip RunRecorder::take_strip(const Backend& backend, std::string label) const {
  Result<PoolTables> tables = backend.tables();
  return strip_of(tables.ok() ? &*tables : nullptr, std::move(label));
}

Strip RunRecorder::strip_of(const PoolTables* tables, std::string label) const {
  Strip strip;
  strip.ops = totals_.ops;
  strip.time_us = totals_.time_us;
  strip.label = std::move(label);
  if (tables == nullptr || tables->sides.size() != sides_.size()) return strip;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    const SideTables& t = tables->sides[i];
    const SideInfo& info = sides_[i];
    StripSide side;
    side.watermark = t.watermark;
    side.bound_pages = t.allocated_pages;
    side.hole_pages = t.holes.size();
    const std::uint64_t group = std::max<std::uint64_t>(1, (info.num_pages + kStripCellsMax - 1) / kStripCellsMax);
    std::set<std::int64_t> holes(t.holes.begin(), t.holes.end());
    for (std::uint64_t first = 0; first < info.num_pages; first += group) {
      StripCell cell;
      cell.first_page = first;
      cell.pages = static_cast<std::uint32_t>(std::min(group, info.num_pages - first));
      for (std::uint64_t p = first; p < first + cell.pages; ++p) {
        const std::int64_t v = p < t.p2v.size() ? t.p2v[p] : -1;
        if (p >= info.min_page_index && v >= 0) {
          if (cell.bound == 0) {
            cell.owner = static_cast<std::size_t>(v) < owner_of_virtual_.size()
                             ? owner_of_virtual_[static_cast<std::size_t>(v)]
                             : -1;
            cell.cached = serving_ && cell.owner >= 0 &&
                          (static_cast<std::size_t>(cell.owner) >= live_request_.size() ||
                           !live_request_[static_cast<std::size_t>(cell.owner)]);
          }
          ++cell.bound;
        } else if (holes.count(static_cast<std::int64_t>(p)) != 0) {
          ++cell.holes;
        }
      }
      if (cell.bound != 0 || cell.holes != 0) side.cells.push_back(cell);
    }
    strip.sides.push_back(std::move(side));
  }
  return strip;
}

void RunRecorder::sample_if_due(std::uint64_t candidate) {
  candidates_ = candidate + 1;
  if (samples_.due(candidate)) samples_.push(candidate, take_sample());
  if (strips_.due(candidate)) {
    Strip strip = take_strip(*backends_.front(), "");
    strip.moves_before = std::move(moves_since_strip_);
    strip.moves_before_total = moves_since_strip_total_;
    moves_since_strip_.clear();
    moves_since_strip_total_ = 0;
    strips_.push(candidate, std::move(strip));
  }
}

void RunRecorder::after_apply(const traces::Runner& runner, const traces::OpEvent& event) {
  if (backends_.empty()) {
    for (std::size_t i = 0; i < runner.backend_count(); ++i) {
      backends_.push_back(runner.player(i).backend);
      backend_names_.emplace_back(runner.player(i).backend->name());
    }
  }
  const OpResult& first = event.results.front();
  if (const auto* build = std::get_if<BuildPool>(&event.op); build != nullptr && first.ok()) start_pool(build->config);
  ++totals_.ops;
  count_result(event.op, first);

  KeptOp kept;
  kept.step = event.step;
  kept.line = event.line;
  kept.op = event.op;
  for (const OpResult& r : event.results) kept.results.push_back(light(r));
  last_ops_.push_back(std::move(kept));
  if (last_ops_.size() > kOpsBeforeFailure) last_ops_.pop_front();

  if (keep_tables_) {
    tables_before_ = std::move(tables_after_);
    Result<PoolTables> t = backends_.front()->tables();
    tables_after_.reset();
    if (t.ok()) tables_after_ = std::move(t).value();
  }
  if (!serving_) sample_if_due(totals_.ops - 1);
}

void RunRecorder::on_serving_event(const traces::ServingEvent& e) {
  using Kind = traces::ServingEvent::Kind;
  totals_.time_us = e.now_us;
  const auto set_live = [&](std::uint64_t request, bool live) {
    if (live_request_.size() <= request) live_request_.resize(request + 1, false);
    live_request_[request] = live;
  };
  switch (e.kind) {
    case Kind::admitted: {
      std::uint64_t since = e.arrival_us;
      if (e.request < retracted_at_us_.size() && retracted_at_us_[e.request] != 0) since = retracted_at_us_[e.request];
      totals_.queue_delay_us_total += e.now_us > since ? e.now_us - since : 0;
      set_live(e.request, true);
      [[fallthrough]];
    }
    case Kind::grew:
      for (std::int64_t v : e.pages) {
        if (v < 0) continue;
        if (owner_of_virtual_.size() <= static_cast<std::size_t>(v))
          owner_of_virtual_.resize(static_cast<std::size_t>(v) + 1, -1);
        owner_of_virtual_[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(e.request);
      }
      break;
    case Kind::retracted:
      set_live(e.request, false);
      if (retracted_at_us_.size() <= e.request) retracted_at_us_.resize(e.request + 1, 0);
      retracted_at_us_[e.request] = std::max<std::uint64_t>(e.now_us, 1);
      break;
    case Kind::finished:
      set_live(e.request, false);
      break;
    case Kind::step_done:
      totals_.waiting = e.waiting;
      totals_.running = e.running;
      if (e.totals != nullptr) {
        totals_.admissions = e.totals->admissions;
        totals_.retractions = e.totals->retractions;
        totals_.evicted_pages = e.totals->cache_evicted_pages;
        totals_.served = e.totals->requests_served;
        totals_.prompt_tokens = e.totals->prompt_tokens;
        totals_.cached_tokens = e.totals->cached_tokens;
      }
      sample_if_due(e.step);
      break;
  }
}

FailureView RunRecorder::failure_view(const traces::Failure& failure) const {
  FailureView view;
  view.failure = failure;
  view.backend_names = backend_names_;
  const bool at_op = !failure.op.empty() && !last_ops_.empty();
  for (const KeptOp& k : last_ops_) {
    OpRecord r;
    r.step = k.step;
    r.line = k.line;
    r.op = clip(traces::op_to_line(k.op, std::nullopt), kOpTextMaxChars);
    for (const OpResult& a : k.results) r.answers.push_back(clip(to_string(a), kAnswerTextMaxChars));
    view.ops_before.push_back(std::move(r));
  }
  if (backends_.empty() || sides_.empty()) {
    view.note = "no pool was built, so there is no strip map";
    return view;
  }
  const std::uint64_t page_size = config_ ? config_->page_size : 1;
  const auto side_index = [&](const std::string& name) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < sides_.size(); ++i)
      if (sides_[i].name == name) return i;
    return std::nullopt;
  };

  // The tables of every backend after the failing op (the state the run stopped in).
  std::vector<std::optional<PoolTables>> after;
  for (const Backend* b : backends_) {
    Result<PoolTables> t = b->tables();
    after.push_back(t.ok() ? std::optional<PoolTables>(std::move(t).value()) : std::nullopt);
  }
  const KeptOp* failing = at_op ? &last_ops_.back() : nullptr;

  // Marks from the op itself, in virtual ids (through `tables`) or physical ones.
  const auto op_marks = [&](std::vector<PageMark>& marks, const PoolTables* tables) {
    if (failing == nullptr) return;
    const Op& op = failing->op;
    const auto virtual_ids = [&](IdUnit unit, const std::vector<std::int64_t>& ids) {
      std::set<std::int64_t> pages;
      for (std::int64_t id : ids)
        if (id >= 0) pages.insert(unit == IdUnit::tokens ? id / static_cast<std::int64_t>(page_size) : id);
      return pages;
    };
    if (const auto* f = std::get_if<Free>(&op)) {
      if (tables != nullptr)
        for (std::int64_t v : virtual_ids(f->unit, f->ids))
          for (std::size_t s = 0; s < sides_.size(); ++s)
            add_mark(marks, s, physical_of(*tables, s, v), "freed by the op (virtual page " + std::to_string(v) + ")");
    } else if (const auto* f = std::get_if<FreeSwa>(&op)) {
      if (tables != nullptr && sides_.size() > 1)
        for (std::int64_t v : virtual_ids(f->unit, f->ids))
          add_mark(marks, 1, physical_of(*tables, 1, v), "left the window (virtual page " + std::to_string(v) + ")");
    } else if (const auto* m = std::get_if<MovePages>(&op)) {
      if (std::optional<std::size_t> s = side_index(m->sub_pool)) {
        for (std::int64_t p : m->src) add_mark(marks, *s, p, "a move's source");
        for (std::int64_t p : m->dst) add_mark(marks, *s, p, "a move's destination");
      }
    } else if (const auto* r = std::get_if<BeginRead>(&op)) {
      if (std::optional<std::size_t> s = side_index(r->sub_pool))
        for (std::int64_t p : r->pages) add_mark(marks, *s, p, "held by reader " + std::to_string(r->reader));
    } else if (const auto* w = std::get_if<Write>(&op)) {
      if (!w->batch && w->physical)
        for (std::int64_t t : w->loc)
          if (t > 0) add_mark(marks, 0, t / static_cast<std::int64_t>(page_size), "written by the op");
    }
  };
  // Marks from a backend's answer.
  const auto answer_marks = [&](std::vector<PageMark>& marks, const OpResult& answer, const PoolTables* tables) {
    if (!answer.ok()) return;
    const auto allocated = [&](const std::vector<std::int64_t>& pages) {
      if (tables == nullptr) return;
      for (std::int64_t v : pages)
        for (std::size_t s = 0; s < sides_.size(); ++s)
          add_mark(marks, s, physical_of(*tables, s, v),
                   "allocated by the op (virtual page " + std::to_string(v) + ")");
    };
    if (const auto* a = std::get_if<Allocated>(&answer.value())) {
      allocated(a->pages);
    } else if (const auto* m = std::get_if<AllocatedMany>(&answer.value())) {
      for (const auto& pages : m->pages) allocated(pages);
    } else if (const auto* c = std::get_if<Compaction>(&answer.value())) {
      for (const PageMove& move : c->moves) {
        if (std::optional<std::size_t> s = side_index(move.sub_pool)) {
          add_mark(marks, *s, move.src, "compaction moved it away (to " + std::to_string(move.dst) + ")");
          add_mark(marks, *s, move.dst, "compaction moved page " + std::to_string(move.src) + " here");
        }
      }
    }
  };
  // Where two backends' tables disagree.
  const auto diff_marks = [&](std::vector<PageMark>& marks, std::size_t self) {
    if (after.size() < 2 || !after[0] || !after[1]) return;
    const PoolTables& a = *after[0];
    const PoolTables& b = *after[1];
    for (std::size_t s = 0; s < sides_.size() && s < a.sides.size() && s < b.sides.size(); ++s) {
      const SideTables& x = a.sides[s];
      const SideTables& y = b.sides[s];
      for (std::size_t p = 0; p < std::min(x.p2v.size(), y.p2v.size()); ++p)
        if (x.p2v[p] != y.p2v[p])
          add_mark(marks, s, static_cast<std::int64_t>(p),
                   "p2v differs: " + backend_names_[0] + " has " + std::to_string(x.p2v[p]) + ", " + backend_names_[1] +
                       " has " + std::to_string(y.p2v[p]));
      for (std::size_t v = 0; v < std::min(x.v2p.size(), y.v2p.size()); ++v)
        if (x.v2p[v] != y.v2p[v])
          add_mark(marks, s, self == 0 ? x.v2p[v] : y.v2p[v],
                   "virtual page " + std::to_string(v) + " differs: " + backend_names_[0] + " binds it to " +
                       std::to_string(x.v2p[v]) + ", " + backend_names_[1] + " to " + std::to_string(y.v2p[v]));
    }
  };

  if (failing != nullptr && tables_before_) {
    // The first backend before the failing op: tables_before_ (kept on small pools of pool traces).
    Strip before = strip_of(&*tables_before_, "before the failing op (" + backend_names_[0] + ")");
    before.ops = totals_.ops - 1;
    std::vector<PageMark> marks;
    op_marks(marks, &*tables_before_);
    view.strips.push_back(std::move(before));
    view.marks.push_back(std::move(marks));
  } else if (failing != nullptr) {
    view.note = serving_ ? "request traces keep no tables before each op (it would cost a copy of the tables per op); "
                           "the strips show the pool after the failing op"
                         : "the pool has more than " + std::to_string(kBeforeTablesMaxPages) +
                               " pages, so no tables are kept before each op; the strips show the pool after it";
  }
  for (std::size_t i = 0; i < backends_.size(); ++i) {
    Strip strip =
        take_strip(*backends_[i], (failing != nullptr ? "after the failing op (" : "at the end of the run (") +
                                      backend_names_[i] + ")");
    std::vector<PageMark> marks;
    if (failing != nullptr) {
      op_marks(marks, after[i] ? &*after[i] : nullptr);
      if (i < failing->results.size()) answer_marks(marks, failing->results[i], after[i] ? &*after[i] : nullptr);
    }
    diff_marks(marks, i);
    view.strips.push_back(std::move(strip));
    view.marks.push_back(std::move(marks));
  }
  return view;
}

RunRecording RunRecorder::finish(const traces::ReplayReport& report) {
  RunRecording r;
  r.source = report.source;
  r.format = report.format;
  r.backends = report.backends;
  r.serving = serving_;
  r.passed = report.passed();
  r.config = config_;
  r.total_bytes = total_bytes_;
  r.reserved_floor_bytes = reserved_floor_bytes_;
  r.sides = sides_;
  r.pools_built = pools_built_;
  r.summary = traces::report_json(report);
  r.summary_text = traces::report_text(report);
  if (report.serving) {
    // The end of the run: the simulator drained its cache after the last step.
    const traces::ServingSummary& s = *report.serving;
    totals_.time_us = std::max(totals_.time_us, s.simulated_us);  // a run that stopped early never set the latter
    totals_.admissions = s.admissions;
    totals_.retractions = s.retractions;
    totals_.evicted_pages = s.cache_evicted_pages;
    totals_.served = s.requests_served;
    totals_.prompt_tokens = s.prompt_tokens;
    totals_.cached_tokens = s.cached_tokens;
    totals_.waiting = 0;
    totals_.running = 0;
  }
  r.samples = samples_.points();
  r.samples.push_back(take_sample());
  r.sample_stride = samples_.stride();
  r.candidates = candidates_;
  r.strips = strips_.points();
  r.strip_stride = strips_.stride();
  if (!backends_.empty() && !sides_.empty()) {
    Strip end = take_strip(*backends_.front(), report.passed() ? "end of the run" : "where the run stopped");
    end.moves_before = std::move(moves_since_strip_);
    end.moves_before_total = moves_since_strip_total_;
    r.strips.push_back(std::move(end));
  }
  if (report.failure) r.failure = failure_view(*report.failure);
  return r;
}

}  // namespace kvtwin::cli
