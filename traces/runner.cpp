// The runner (runner.h): plays operations and checks after every step.
#include "traces/runner.h"

#include <cstdio>
#include <ctime>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "core/check.h"
#include "core/oracle.h"
#include "core/profile_switch.h"
#include "core/table_check.h"
#include "traces/player_thread.h"
#include "traces/pool_trace.h"

namespace kvtwin::traces {
namespace {

std::string hex_u64(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::string hex_byte(std::uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// Text of a long op or result, cut to a readable length.
std::string clip(std::string text, std::size_t max_chars = 600) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, max_chars) + "... (" + std::to_string(text.size()) + " characters)";
}

std::optional<std::string> diff_list(const std::string& side, const char* field, const std::vector<std::int64_t>& a,
                                     const std::vector<std::int64_t>& b, std::string_view na, std::string_view nb) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] != b[i])
      return "side '" + side + "' " + field + "[" + std::to_string(i) + "]: " + std::string(na) + " has " +
             std::to_string(a[i]) + ", " + std::string(nb) + " has " + std::to_string(b[i]);
  }
  if (a.size() != b.size())
    return "side '" + side + "' " + field + " has " + std::to_string(a.size()) + " entries in " + std::string(na) +
           " but " + std::to_string(b.size()) + " in " + std::string(nb) + " (first " + std::to_string(n) + " agree)";
  return std::nullopt;
}

}  // namespace

// Where a run's time goes (KVTWIN_PROFILE=1): wall time and calls per phase, printed to stderr,
// largest first, when the last runner holding it goes. A developer's diagnostic for the GPU,
// which has no perf: nothing a run decides or reports depends on it.
struct RunProfile {
  struct Phase {
    std::uint64_t calls = 0;
    double seconds = 0;
    double cpu_seconds = 0;  // of the calling thread: wall less this is time spent waiting
  };
  std::map<std::string, Phase> phases;
  std::mutex mutex;  // the second player's thread times its phases too
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  ~RunProfile() {
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::vector<std::pair<std::string, Phase>> rows(phases.begin(), phases.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "kvtwin profile: %.3f s in the runner's life\n", total);
    for (const auto& [name, p] : rows)
      std::fprintf(stderr, "  %-36s %10llu calls %10.3f s %9.2f us/call %5.1f%% %10.3f s cpu\n", name.c_str(),
                   static_cast<unsigned long long>(p.calls), p.seconds, p.calls ? 1e6 * p.seconds / p.calls : 0.0,
                   total > 0 ? 100.0 * p.seconds / total : 0.0, p.cpu_seconds);
  }
};

namespace {

// The calling thread's CPU time so far, in seconds.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Adds the time (wall and the thread's CPU) from its construction to its end to one phase of a
// profile (nothing without one).
class PhaseTimer {
 public:
  PhaseTimer(RunProfile* profile, std::string_view phase) : profile_(profile) {
    if (profile_ == nullptr) return;
    phase_ = phase;
    start_ = std::chrono::steady_clock::now();
    start_cpu_ = thread_cpu_seconds();
  }
  // Inline and a test when the run is not profiled (every op passes a few timers); the
  // bookkeeping is out of line.
  ~PhaseTimer() {
    if (profile_ != nullptr) record();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  [[gnu::noinline]] void record() {
    const std::lock_guard<std::mutex> lock(profile_->mutex);
    RunProfile::Phase& p = profile_->phases[phase_];
    ++p.calls;
    p.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    p.cpu_seconds += thread_cpu_seconds() - start_cpu_;
  }

  RunProfile* profile_;
  std::string phase_;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_ = 0;
};

}  // namespace

// The second player ahead (CheckCadence::second_ahead): its thread, and one answer for every task
// posted with an answer index, appended by the thread in posting order. The runner reads them only
// after the thread has drained.
struct Runner::Ahead {
  struct Answer {
    std::optional<OpResult> result;  // an apply's answer
    Status status = ok_status();    // a queued digest's
    std::optional<std::pair<std::string, std::string>> failure;  // the check and message of what it threw
    bool skipped = false;  // not played: an earlier answer already fails the run
  };
  std::vector<Answer> answers;
  std::size_t posted = 0;  // answers posted since the last window closed (the next one's index)
  bool broken = false;     // (the thread's) an answer that fails the run was given: play no more
  std::uint64_t stopped_at = 0;  // (the thread's) the step of that answer
  // The windows closed and not compared yet, oldest first: each is compared once windows_ahead
  // more have closed after it (close_window); their close tasks, and the second's answers to
  // them, may still be queued on the thread.
  std::deque<std::unique_ptr<DeferredWindow>> closed;
  PlayerThread thread;     // last: it ends, running what is posted, before the answers and windows go

  ~Ahead();

  // Runs `play` for one answer of step `step` on the thread, catching what a broken backend
  // throws as the runner does in step; once an answer fails the run, the backend is not used again.
  template <class F>
  void answer(const Backend& backend, std::uint64_t step, F play) {
    Answer a;
    if (broken) {
      a.skipped = true;
    } else {
      try {
        broken = !play(a);
      } catch (const InvariantFailure& e) {
        a.failure.emplace("invariant", e.what());
      } catch (const std::exception& e) {
        // A logic error as in step; anything else (which in step would leave play()) ends the run
        // the same way rather than the thread's process.
        a.failure.emplace("exception", std::string(backend.name()) + " threw: " + e.what());
      }
      if (a.failure) broken = true;
      if (broken) stopped_at = step;
    }
    answers.push_back(std::move(a));
  }
};

// One window of deferred comparisons taken out of the runner to be compared: the comparisons, their
// ops, and (played ahead) what the second answered, how it stopped, and the digests it collected
// when the window closed.
struct Runner::DeferredWindow {
  std::vector<DeferredComparison> pending;
  std::vector<DeferredOp> ops;
  std::vector<Ahead::Answer> second;
  bool broken = false;
  std::uint64_t stopped_at = 0;
  // Collected on the second's thread by the window's close task (nullopt: collected when compared).
  std::optional<Result<std::vector<std::uint64_t>>> digests;
  std::uint64_t ticket = 0;  // the close task's (PlayerThread::post)

  // The second's answers so far, and how it stopped (where the thread is not running: on it, or
  // after a drain).
  void take_answers(Ahead& ahead) {
    second.swap(ahead.answers);
    broken = ahead.broken;
    stopped_at = ahead.stopped_at;
  }
};

Runner::Ahead::~Ahead() = default;

template <class F>
auto Runner::on_second(F&& f) const {
  Backend& second = *players_[1].backend;
  if (ahead_) return ahead_->thread.call([&] { return f(second); });
  return f(second);
}

namespace {

std::string results_differ(std::string_view na, const OpResult& a, std::string_view nb, const OpResult& b) {
  return std::string(na) + " answered " + clip(to_string(a)) + "\n  " + std::string(nb) + " answered " +
         clip(to_string(b));
}

std::string expectation_missed(const OpResult& expect, std::string_view name, const OpResult& got) {
  return "expected " + clip(to_string(expect)) + " but " + std::string(name) + " answered " + clip(to_string(got));
}

bool is_environment_failure(const OpResult& r) { return !r.ok() && r.error().kind == ErrorKind::environment; }

}  // namespace

Runner::~Runner() {
  // First: what is still posted runs while the profile and the players are here.
  const PhaseTimer timer(ahead_ ? profile_.get() : nullptr, "end: the second's thread drained");
  ahead_.reset();
}
Runner::Runner(Runner&&) noexcept = default;
Runner& Runner::operator=(Runner&&) noexcept = default;

bool Runner::second_may_play_ahead() const {
  const char* off = std::getenv("KVTWIN_SECOND_AHEAD");
  if (!cadence_.second_ahead || (off != nullptr && std::string_view(off) == "0") || !defers()) return false;
  // What the runner would call of the second on this thread, between checkpoints: nothing.
  const Player& second = players_[1];
  return !(second.verify_changed || second.touched || second.touched_digest || second.state_digest ||
           second.describe_byte || (second.verify && !second.verify_at_checkpoints_only));
}

bool Runner::decide_ahead(const Op& op) {
  if (ahead_decided_) return true;
  if (!ahead_ && !second_may_play_ahead()) {
    ahead_decided_ = true;
    return true;
  }
  const bool an_observer_reads_second = std::any_of(
      observers_.begin(), observers_.end(), [this](const RunObserver* o) { return o->reads_second(*this); });
  if (std::holds_alternative<BuildPool>(op)) {
    // The build plays ahead too, where nothing read the second so far: the device's build (its
    // first on a thread is the driver's start-up, tenths of a second under contention) overlaps
    // the first's build and ops instead of holding them. Decided only at the first op after the
    // builds: a replay's observers join once its pool is built (below).
    if (!ahead_ && !an_observer_reads_second) start_ahead();
    return true;
  }
  ahead_decided_ = true;
  if (!ahead_) {
    if (!an_observer_reads_second) start_ahead();
    return true;
  }
  if (!an_observer_reads_second && plays_ahead_) return true;
  // An observer that reads the second joined after the builds played ahead: what they answered is
  // compared now, and the run plays in step from here, on this thread.
  plays_ahead_ = false;
  const bool settled = settle_deferred();
  ahead_.reset();
  return settled;
}

void Runner::start_ahead() {
  ahead_ = std::make_unique<Ahead>();
  plays_ahead_ = true;
  windows_ahead_ = std::max<std::uint64_t>(1, cadence_.windows_ahead);
  // KVTWIN_WINDOWS_AHEAD=N measures another depth without a rebuild.
  if (const char* n = std::getenv("KVTWIN_WINDOWS_AHEAD"); n != nullptr && std::atoi(n) > 0)
    windows_ahead_ = static_cast<std::uint64_t>(std::atoi(n));
}

bool Runner::post_second_apply(const OpResult& first, const std::optional<OpResult>& expect) {
  DeferredComparison d;
  d.kind = DeferredComparison::Kind::result;
  d.first = first;
  d.expect = expect;
  d.answer = ahead_->posted++;
  Ahead* ahead = ahead_.get();
  Backend* backend = players_[1].backend;
  RunProfile* prof = profile_.get();
  ahead->thread.post([ahead, backend, prof, op = deferred_op(), first, step = step_] {
    ahead->answer(*backend, step, [&](Ahead::Answer& a) {
      const PhaseTimer timer(prof, prof ? "apply " + std::string(backend->name()) + " " + std::string(op_name(*op))
                                        : std::string());
      a.result = backend->apply(*op);
      // A different answer fails the run at this op: the second plays no further, as in step.
      return same_result(first, *a.result) && !is_environment_failure(*a.result);
    });
  });
  return defer(std::move(d));
}

std::size_t Runner::post_second_queue(std::function<Status(Backend&)> queue) {
  Ahead* ahead = ahead_.get();
  Backend* backend = players_[1].backend;
  ahead->thread.post([ahead, backend, queue = std::move(queue), step = step_] {
    ahead->answer(*backend, step, [&](Ahead::Answer& a) {
      a.status = queue(*backend);
      return a.status.ok();
    });
  });
  return ahead->posted++;
}

std::string Failure::describe() const {
  std::string where;
  if (line != 0)
    where = "line " + std::to_string(line) + " (step " + std::to_string(step) + ")";
  else if (op.empty())
    where = "end of run (after " + std::to_string(step) + " ops)";
  else
    where = "step " + std::to_string(step);
  std::string s = where + ": " + check + " check failed";
  if (!op.empty()) s += "\n  op: " + clip(op);
  s += "\n  " + message;
  return s;
}

// SPEC 11: the state sub-pool's tables, its request table and its quarantine.
static std::optional<std::string> diff_state_tables(const PoolTables& a, const PoolTables& b, std::string_view na,
                                             std::string_view nb) {
  if (a.state.has_value() != b.state.has_value())
    return std::string(na) + (a.state ? " has" : " has no") + " state sub-pool, " + std::string(nb) +
           (b.state ? " has one" : " none");
  if (!a.state) return std::nullopt;
  const SideTables& x = *a.state;
  const SideTables& y = *b.state;
  if (auto d = diff_list(x.name, "v2p", x.v2p, y.v2p, na, nb)) return d;
  if (auto d = diff_list(x.name, "p2v", x.p2v, y.p2v, na, nb)) return d;
  if (auto d = diff_list(x.name, "free_queue", x.free_queue, y.free_queue, na, nb)) return d;
  if (auto d = diff_list(x.name, "holes", x.holes, y.holes, na, nb)) return d;
  if (auto d = diff_list(x.name, "quarantine", a.state_quarantine, b.state_quarantine, na, nb)) return d;
  if (x.watermark != y.watermark || x.allocated_pages != y.allocated_pages)
    return "the state sub-pool's watermark / allocated slots: " + std::string(na) + " has " + std::to_string(x.watermark) +
           " / " + std::to_string(x.allocated_pages) + ", " + std::string(nb) + " has " + std::to_string(y.watermark) +
           " / " + std::to_string(y.allocated_pages);
  if (a.state_requests != b.state_requests) {
    std::string ta, tb;
    for (const auto& [r, v] : a.state_requests) ta += (ta.empty() ? "" : ", ") + std::to_string(r) + "->" + std::to_string(v);
    for (const auto& [r, v] : b.state_requests) tb += (tb.empty() ? "" : ", ") + std::to_string(r) + "->" + std::to_string(v);
    return "the state request tables differ: " + std::string(na) + " [" + ta + "], " + std::string(nb) + " [" + tb + "]";
  }
  return std::nullopt;
}

std::optional<std::string> diff_tables(const PoolTables& a, const PoolTables& b, std::string_view na,
                                       std::string_view nb) {
  if (a.sides.size() != b.sides.size())
    return std::string(na) + " has " + std::to_string(a.sides.size()) + " sides but " + std::string(nb) + " has " +
           std::to_string(b.sides.size());
  for (std::size_t s = 0; s < a.sides.size(); ++s) {
    const SideTables& x = a.sides[s];
    const SideTables& y = b.sides[s];
    if (x.name != y.name)
      return "side " + std::to_string(s) + " is '" + x.name + "' in " + std::string(na) + " but '" + y.name + "' in " +
             std::string(nb);
    if (auto d = diff_list(x.name, "v2p", x.v2p, y.v2p, na, nb)) return d;
    if (auto d = diff_list(x.name, "p2v", x.p2v, y.p2v, na, nb)) return d;
    if (auto d = diff_list(x.name, "free_queue", x.free_queue, y.free_queue, na, nb)) return d;
    if (auto d = diff_list(x.name, "holes", x.holes, y.holes, na, nb)) return d;
    if (x.watermark != y.watermark)
      return "side '" + x.name + "' watermark: " + std::string(na) + " has " + std::to_string(x.watermark) + ", " +
             std::string(nb) + " has " + std::to_string(y.watermark);
    if (x.allocated_pages != y.allocated_pages)
      return "side '" + x.name + "' allocated_pages: " + std::string(na) + " has " + std::to_string(x.allocated_pages) +
             ", " + std::string(nb) + " has " + std::to_string(y.allocated_pages);
    if (x.span_low != y.span_low)
      return "side '" + x.name + "' span_low (the float's first page): " + std::string(na) + " has " +
             std::to_string(x.span_low) + ", " + std::string(nb) + " has " + std::to_string(y.span_low);
  }
  return diff_state_tables(a, b, na, nb);
}

std::uint64_t resolve_verify_every(const CheckCadence& cadence, const PoolConfig& config) {
  if (cadence.verify_every != kVerifyAuto) return cadence.verify_every;
  return config.total_bytes <= kVerifyEveryOpMaxBytes ? 1 : 0;
}

Runner::Runner(std::vector<Player> players, CheckCadence cadence) : players_(std::move(players)), cadence_(cadence) {
  KVTWIN_CHECK(!players_.empty() && players_.size() <= 2, "the runner plays one or two backends");
  for (const Player& p : players_) KVTWIN_CHECK(p.backend != nullptr, "a player without a backend");
  if (profile_requested()) profile_ = std::make_shared<RunProfile>();
}

void Runner::add_observer(RunObserver* observer) {
  KVTWIN_CHECK(observer != nullptr, "a null observer");
  observers_.push_back(observer);
  // One that reads the second's answers has them in step from now on.
  if (observer->reads_second(*this)) plays_ahead_ = false;
}

bool Runner::fail(std::string check, std::string message) {
  Failure f;
  f.step = step_;
  f.line = line_;
  f.op = op_text_;
  f.check = std::move(check);
  f.message = std::move(message);
  failure_ = std::move(f);
  return false;
}

bool Runner::check_expect(const std::vector<OpResult>& results, const OpResult& expect) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!meets_expectation(results[i], expect))
      return fail("expect", expectation_missed(expect, players_[i].backend->name(), results[i]));
  }
  ++stats_.expects_checked;
  return true;
}

bool Runner::check_results(const std::vector<OpResult>& results) {
  if (results.size() < 2) return true;
  if (!same_result(results[0], results[1]))
    return fail("results", results_differ(players_[0].backend->name(), results[0], players_[1].backend->name(),
                                          results[1]));
  ++stats_.results_compared;
  return true;
}

bool Runner::check_tables(bool whole) {
  tables_matched_ = false;
  if (players_.size() < 2 || !config_) return true;
  const Backend& x = *players_[0].backend;
  const Backend& y = *players_[1].backend;
  std::uint64_t digest_x = 0, digest_y = 0;
  // A checkpoint compares whole tables: every deferred comparison before it first.
  if (whole && !settle_deferred()) return false;
  if (!whole && defers()) {
    // Deferred (CheckCadence::compare_window): the first backend's digest now, the second's
    // queued, both compared when the window closes; a difference then fails the run at this op.
    Result<std::uint64_t> dx = x.tables_digest();
    if (!dx.ok()) return fail("tables", "a backend cannot digest its tables: " + dx.error().message);
    DeferredComparison d;
    d.kind = DeferredComparison::Kind::tables;
    d.expected = *dx;
    if (plays_ahead_) {
      d.answer = post_second_queue([](Backend& b) { return b.queue_tables_digest(); });
    } else if (Status queued = on_second([](Backend& b) { return b.queue_tables_digest(); }); !queued.ok()) {
      return fail("tables", std::string(y.name()) + " cannot queue a digest of its tables: " + queued.error().message);
    }
    tables_matched_ = true;
    return defer(std::move(d));
  }
  if (!whole) {
    // Between checkpoints: the two backends' table digests, each computed where its tables live
    // (core/tables_digest.h); the tables come back only when the digests differ, to name the
    // first difference.
    Result<std::uint64_t> dx = x.tables_digest();
    Result<std::uint64_t> dy = on_second([](const Backend& b) { return b.tables_digest(); });
    if (!dx.ok() || !dy.ok())
      return fail("tables", "a backend cannot digest its tables: " + (dx.ok() ? dy.error().message : dx.error().message));
    digest_x = *dx;
    digest_y = *dy;
    if (digest_x == digest_y) {
      ++stats_.tables_compared;
      ++stats_.tables_digests_compared;
      tables_matched_ = true;
      return true;
    }
  }
  Result<PoolTables> a = x.tables();
  // At a checkpoint the second's verify may have read its tables already (Player::verify_with_tables).
  Result<PoolTables> b = whole && second_verified_tables_
                             ? Result<PoolTables>(*std::exchange(second_verified_tables_, std::nullopt))
                             : on_second([](const Backend& second) { return second.tables(); });
  if (!a.ok() || !b.ok())
    return fail("tables", "a backend cannot show its tables: " + (a.ok() ? b.error().message : a.error().message));
  if (auto d = diff_tables(*a, *b, x.name(), y.name())) return fail("tables", "allocator tables differ: " + *d);
  if (!whole)
    return fail("tables", "the allocator tables' digests differ (" + std::string(x.name()) + " " +
                              hex_u64(digest_x) + ", " + std::string(y.name()) + " " +
                              hex_u64(digest_y) +
                              ") but the tables they show are equal: a backend digests state its tables do not show (a "
                              "host counter that disagrees with its device tables: its verify names it), or digests "
                              "its tables differently from core's digest_tables");
  ++stats_.tables_compared;
  tables_matched_ = true;
  return true;
}

bool Runner::check_invariants(bool verify_runs, bool changed_runs) {
  if (!config_) return true;
  bool a_peer_was_checked = false;
  for (std::size_t i = 0; i < players_.size(); ++i) {
    const Player& p = players_[i];
    // A player whose own verify (full or incremental) ran this step checked its tables already.
    if (p.verify_checks_tables && ((verify_runs && p.verify) || (changed_runs && p.verify_changed))) {
      a_peer_was_checked = true;
      continue;
    }
    // Tables equal to a peer's whose invariants hold (checked above) hold them too.
    if (tables_matched_ && a_peer_was_checked) continue;
    Result<PoolTables> t = i == 1 ? on_second([](const Backend& b) { return b.tables(); }) : p.backend->tables();
    if (!t.ok()) return fail("tables", std::string(p.backend->name()) + " cannot show its tables: " + t.error().message);
    Status s = check_table_invariants(*t, *derived_, config_->mode);
    if (!s.ok()) return fail("tables", std::string(p.backend->name()) + "'s tables break an invariant: " + s.error().message);
    ++stats_.invariants_checked;
    a_peer_was_checked = true;
  }
  return true;
}

bool Runner::bytes_digests_agree(std::span<const ByteRange> ranges) const {
  // Each computed where its backend's bytes live (core/bytes_digest.h): eight bytes a backend.
  // A backend that cannot digest agrees with nothing (the caller compares the bytes).
  const Result<std::uint64_t> a = players_[0].backend->bytes_digest(ranges);
  const Result<std::uint64_t> b = on_second([&](const Backend& second) { return second.bytes_digest(ranges); });
  return a.ok() && b.ok() && *a == *b;
}

bool Runner::check_touched() {
  if (players_.size() < 2 || !derived_ || config_->tables_only || !players_[0].touched || !cadence_.compare_touched)
    return true;
  std::vector<ByteRange> ranges = players_[0].touched();
  if (ranges.empty()) return true;
  // The sink's bytes (below the reserved floor) are never data (SPEC 3): clip them away.
  const std::uint64_t floor = derived_->geometry.reserved_floor_bytes;
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (ByteRange r : ranges) {
    if (r.offset + r.length <= floor) continue;
    if (r.offset < floor) {
      r.length -= floor - r.offset;
      r.offset = floor;
    }
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().length) {
      ByteRange& m = merged.back();
      m.length = std::max(m.offset + m.length, r.offset + r.length) - m.offset;
    } else {
      merged.push_back(r);
    }
  }
  if (defers()) {
    // Deferred, as the tables' digests are (check_tables); when either backend cannot digest or
    // queue, compared at once below.
    Result<std::uint64_t> a = [&]() -> Result<std::uint64_t> {
      // The first backend's digest as it made it while writing (whole words, it vouches), when it
      // is the digest of the merged ranges: none clipped at the floor, none overlapping another
      // (the sum would count a byte twice).
      if (players_[0].touched_digest)
        if (const std::optional<std::uint64_t> made = players_[0].touched_digest()) {
          bool as_merged = ranges.front().offset >= floor;
          for (std::size_t i = 1; as_merged && i < ranges.size(); ++i)
            as_merged = ranges[i].offset >= ranges[i - 1].offset + ranges[i - 1].length;
          if (as_merged) return *made;
        }
      const PhaseTimer timer(profile_.get(), "check touched: digest of the first");
      return players_[0].backend->bytes_digest(merged);
    }();
    DeferredComparison d;
    d.kind = DeferredComparison::Kind::touched;
    const bool queued = [&] {
      if (!a.ok()) return false;
      if (plays_ahead_) {
        RunProfile* prof = profile_.get();
        d.answer = post_second_queue([merged, prof](Backend& b) {
          const PhaseTimer timer(prof, "check touched: queue of the second (ahead)");
          return b.queue_bytes_digest(merged);
        });
        return true;
      }
      const PhaseTimer timer(profile_.get(), "check touched: queue of the second");
      return on_second([&](Backend& b) { return b.queue_bytes_digest(merged).ok(); });
    }();
    if (queued) {
      d.expected = *a;
      d.ranges = std::move(merged);
      return defer(std::move(d));
    }
  }
  // Digests first; the bytes themselves only to name the first one that differs.
  if (bytes_digests_agree(merged)) {
    ++stats_.touched_compared;
    ++stats_.touched_by_digest;
    return true;
  }
  Result<std::optional<std::string>> difference = first_byte_difference(merged);
  if (!difference.ok()) return fail("touched", "a backend cannot show the bytes it wrote " + difference.error().message);
  if (*difference) return fail("touched", "the bytes this operation wrote differ first at " + **difference);
  ++stats_.touched_compared;
  return true;
}

Result<std::optional<std::string>> Runner::first_byte_difference(std::span<const ByteRange> ranges) const {
  const Backend& x = *players_[0].backend;
  const Backend& y = *players_[1].backend;  // its calls run where it plays (on_second)
  for (const ByteRange& r : ranges) {
    Result<std::vector<std::uint8_t>> a = x.raw_bytes(r.offset, r.length);
    Result<std::vector<std::uint8_t>> b = on_second([&](const Backend& second) { return second.raw_bytes(r.offset, r.length); });
    if (!a.ok() || !b.ok())
      return make_error(ErrorKind::internal, "at " + std::to_string(r.offset) + ": " +
                                                 (a.ok() ? b.error().message : a.error().message));
    if (*a == *b) continue;
    std::size_t i = 0;
    while (i < a->size() && i < b->size() && (*a)[i] == (*b)[i]) ++i;
    const std::uint64_t byte = r.offset + i;
    return std::optional<std::string>("byte " + std::to_string(byte) + ": " + std::string(x.name()) + " has " +
                                      hex_byte((*a)[i]) + ", " + std::string(y.name()) + " has " + hex_byte((*b)[i]) +
                                      describe_byte(byte));
  }
  return std::optional<std::string>();
}

const std::shared_ptr<const Op>& Runner::deferred_op() {
  if (deferred_ops_.empty() || deferred_ops_.back().step != step_)
    deferred_ops_.push_back(DeferredOp{step_, line_, std::make_shared<const Op>(*current_op_)});
  return deferred_ops_.back().op;
}

bool Runner::defer(DeferredComparison d) {
  deferred_op();
  d.op = deferred_ops_.size() - 1;
  if (d.kind != DeferredComparison::Kind::result) ++deferred_digests_;
  deferred_.push_back(std::move(d));
  // The window closes after compare_window digests (answers played ahead wait at most as long).
  const bool full = deferred_digests_ >= cadence_.compare_window || deferred_.size() >= 4 * cadence_.compare_window;
  return !full || close_window();
}

bool Runner::defers() const {
  return players_.size() == 2 && cadence_.compare_window > 1 && players_[1].backend->digests_are_far();
}

bool Runner::has_deferred() const { return !deferred_.empty() || (ahead_ && !ahead_->closed.empty()); }

Runner::DeferredWindow Runner::take_window() {
  DeferredWindow w;
  w.pending.swap(deferred_);
  w.ops.swap(deferred_ops_);
  deferred_digests_ = 0;
  return w;
}

void Runner::drop_deferred() {
  if (ahead_ && !ahead_->closed.empty()) {
    ahead_->thread.wait_for(ahead_->closed.back()->ticket);  // their close tasks write into them
    ahead_->closed.clear();
  }
  deferred_.clear();
  deferred_ops_.clear();
  deferred_digests_ = 0;
}

bool Runner::compare_oldest_closed() {
  const std::unique_ptr<DeferredWindow> oldest = std::move(ahead_->closed.front());
  ahead_->closed.pop_front();
  {
    const PhaseTimer timer(profile_.get(), "settle deferred: wait for the second (ahead)");
    ahead_->thread.wait_for(oldest->ticket);
  }
  if (compare_window(*oldest)) return true;
  drop_deferred();  // the run's first failure is found: what was deferred after it is not compared
  return false;
}

bool Runner::settle_deferred() {
  // The windows closed first, oldest first (their comparisons are older), then the one still open.
  while (ahead_ && !ahead_->closed.empty())
    if (!compare_oldest_closed()) return false;
  if (deferred_.empty()) return true;
  DeferredWindow w = take_window();
  // Played ahead: everything posted has run, and its answers are this window's.
  if (ahead_) {
    ahead_->thread.drain();
    w.take_answers(*ahead_);
    ahead_->posted = 0;
  }
  return compare_window(w);
}

bool Runner::close_window() {
  if (!ahead_) return settle_deferred();
  // Played ahead: the window's last answers need not have been played yet. A task posted behind
  // them takes the answers and collects the second's digests on its thread, and the window is
  // compared once windows_ahead more have closed (or at a checkpoint, the end, or a failure:
  // settle_deferred), so the runner does not wait at every window's end for the second to catch
  // up, nor, with more than one, at the end of a window in which the second fell behind for a
  // while (a burst of the driver's waits under contention); the oldest window closed is compared
  // now. Comparisons stay in op order, and a failure names the same op, step and check as in step.
  const bool any_digest = deferred_digests_ != 0;
  auto window = std::make_unique<DeferredWindow>(take_window());
  Ahead* ahead = ahead_.get();
  DeferredWindow* closing = window.get();
  Backend* backend = players_[1].backend;
  RunProfile* prof = profile_.get();
  closing->ticket = ahead->thread.post([ahead, closing, backend, any_digest, prof] {
    closing->take_answers(*ahead);
    // A second that stopped queues nothing more: what it queued before is collected when the
    // window is compared (its answers name the failure first).
    if (!any_digest || ahead->broken) return;
    const PhaseTimer timer(prof, "settle deferred: collect (ahead)");
    try {
      closing->digests = backend->collect_digests();
    } catch (const std::exception& e) {
      closing->digests = Result<std::vector<std::uint64_t>>(
          make_error(ErrorKind::internal, std::string(backend->name()) + " threw: " + e.what()));
    }
  });
  ahead->posted = 0;
  ahead->closed.push_back(std::move(window));
  return ahead->closed.size() <= windows_ahead_ || compare_oldest_closed();
}

bool Runner::compare_window(DeferredWindow& w) {
  const std::vector<DeferredComparison>& pending = w.pending;
  const std::vector<DeferredOp>& ops = w.ops;
  const std::vector<Ahead::Answer>& second = w.second;
  const std::uint64_t now = step_;
  const Backend& x = *players_[0].backend;
  const Backend& y = *players_[1].backend;
  // The failure belongs to the op whose comparison failed, not to the op being checked now.
  const auto fail_at = [&](const DeferredComparison& d, std::string check, std::string message) {
    const DeferredOp& at = ops[d.op];
    step_ = at.step;
    line_ = at.line;
    fail(std::move(check), std::move(message));
    failure_->op = op_to_line(*at.op, std::nullopt);
    return false;
  };
  const auto kind_name = [](const DeferredComparison& d) {
    return d.kind == DeferredComparison::Kind::tables ? "tables" : "touched";
  };
  // The second's digests: collected when the window closed, played ahead, or here once the first
  // comparison of one is reached (an answer played ahead that fails the run before it names that
  // op, as in step).
  std::optional<Result<std::vector<std::uint64_t>>>& answers = w.digests;
  std::size_t next_answer = 0;
  std::size_t digests_queued = 0;
  for (const DeferredComparison& d : pending) {
    // Those the second queued: not skipped after an answer of its own that fails the run.
    const bool queued = d.answer == SIZE_MAX || (!second.at(d.answer).skipped && !second.at(d.answer).failure &&
                                                 second.at(d.answer).status.ok());
    if (d.kind != DeferredComparison::Kind::result && queued) ++digests_queued;
  }
  const std::string window = "found when the window of deferred comparisons (compare window " +
                             std::to_string(cadence_.compare_window) + ") was compared, at step " + std::to_string(now);
  const std::string rerun = "; replay with --compare-window 1 to compare right after this operation and name the first "
                            "difference as it was then";
  // Played ahead, the second may have stopped before now (an answer of its own fails the run later).
  const std::string stopped = w.broken && w.stopped_at < now
                                  ? " (" + std::string(y.name()) + " played no further than step " +
                                        std::to_string(w.stopped_at) + ", where its answer fails the run too)"
                                  : std::string();
  for (const DeferredComparison& d : pending) {
    const Ahead::Answer* played = d.answer != SIZE_MAX ? &second.at(d.answer) : nullptr;
    KVTWIN_CHECK(played == nullptr || !played->skipped, "a deferred answer skipped though no earlier one failed");
    if (played != nullptr && played->failure) return fail_at(d, played->failure->first, played->failure->second);
    if (d.kind == DeferredComparison::Kind::result) {
      // As check_results and check_expect, for the second's answer played ahead.
      KVTWIN_CHECK(played != nullptr && played->result && d.first, "a deferred result without its answers");
      const OpResult& got = *played->result;
      if (is_environment_failure(got)) return fail_at(d, "environment", std::string(y.name()) + " failed: " + got.error().message);
      if (!same_result(*d.first, got)) return fail_at(d, "results", results_differ(x.name(), *d.first, y.name(), got));
      // (A first that missed it failed the run at this op already, as it is checked first in step.)
      if (d.expect && meets_expectation(*d.first, *d.expect) && !meets_expectation(got, *d.expect))
        return fail_at(d, "expect", expectation_missed(*d.expect, y.name(), got));
      ++stats_.results_compared;
      continue;
    }
    if (played != nullptr && !played->status.ok())
      return fail_at(d, kind_name(d),
                     std::string(y.name()) + " cannot queue a digest of " +
                         (d.kind == DeferredComparison::Kind::tables ? "its tables" : "the bytes this operation wrote") +
                         ": " + played->status.error().message);
    if (!answers) {
      const PhaseTimer timer(profile_.get(), "settle deferred: collect");
      answers = on_second([](Backend& b) { return b.collect_digests(); });
      if (answers->ok())
        KVTWIN_CHECK((*answers)->size() == digests_queued,
                     "a backend answered " + std::to_string((*answers)->size()) + " deferred digests for " +
                         std::to_string(digests_queued) + " queued");
    }
    if (!answers->ok())
      return fail_at(d, kind_name(d), std::string(y.name()) + " cannot answer its deferred digests: " + answers->error().message);
    const std::uint64_t got = (**answers)[next_answer++];
    if (got == d.expected) {
      if (d.kind == DeferredComparison::Kind::tables) {
        ++stats_.tables_compared;
        ++stats_.tables_digests_compared;
      } else {
        ++stats_.touched_compared;
        ++stats_.touched_by_digest;
      }
      continue;
    }
    const std::string digests = std::string(x.name()) + " " + hex_u64(d.expected) + ", " + std::string(y.name()) + " " +
                                hex_u64(got);
    if (d.kind == DeferredComparison::Kind::tables) {
      // What the tables show now, as a lead: the op above is where they first differed.
      std::string later = "their tables could not be read at step " + std::to_string(now);
      Result<PoolTables> a = x.tables();
      Result<PoolTables> b = on_second([](const Backend& second_backend) { return second_backend.tables(); });
      if (a.ok() && b.ok()) {
        const std::optional<std::string> diff = diff_tables(*a, *b, x.name(), y.name());
        later = diff ? "at step " + std::to_string(now) + " they differ: " + *diff
                     : "at step " + std::to_string(now) + " the tables they show are equal";
        later += stopped;
      }
      return fail_at(d, "tables", "the allocator tables' digests differ after this operation (" + digests + "), " +
                                      window + "; " + later + rerun);
    }
    // What the bytes show now, as a lead (they may have been written again since).
    std::string later;
    if (Result<std::optional<std::string>> now_differ = first_byte_difference(d.ranges); now_differ.ok() && *now_differ)
      later = "; at step " + std::to_string(now) + " they differ first at " + **now_differ + stopped;
    return fail_at(d, "touched", "the digests of the bytes this operation wrote differ (" + digests + "), " + window +
                                     later + rerun);
  }
  return true;
}

bool Runner::check_verify(bool incremental, bool checkpoint) {
  second_verified_tables_.reset();
  if (!config_) return true;
  for (const Player& p : players_) {
    const std::function<Status()>& verify = incremental ? p.verify_changed : p.verify;
    if (!verify) continue;
    if (p.verify_at_checkpoints_only && !checkpoint) continue;
    const bool second = &p == &players_[1];
    Status s = ok_status();
    if (second && checkpoint && !incremental && p.verify_with_tables)
      // The tables this check downloads serve check_tables(whole) next (one download, not two).
      s = on_second([&](const Backend&) { return p.verify_with_tables(second_verified_tables_); });
    else
      s = second ? on_second([&](const Backend&) { return verify(); }) : verify();
    if (!s.ok()) return fail("verify", std::string(p.backend->name()) + " broke an invariant: " + s.error().message);
    ++(incremental ? stats_.changed_verifies : stats_.verifies);
  }
  return true;
}

std::string Runner::describe_byte(std::uint64_t byte) const {
  std::string out;
  Result<PoolTables> tables = players_[0].backend->tables();
  for (std::size_t s = 0; s < derived_->layouts.size(); ++s) {
    const DenseEntryLayout& layout = derived_->layouts[s];
    const SubPoolGeometry& g = derived_->geometry.sub_pools[s];
    const std::uint64_t page = byte / g.page_bytes;
    if (page >= g.num_pages) continue;
    const std::uint64_t slot = (byte % g.page_bytes) / g.entry_bytes;
    const std::uint64_t in_entry = byte % g.entry_bytes;
    std::string what = "padding";
    for (const DensePart& part : layout.parts) {
      for (std::uint32_t l = 0; l < part.layer_num; ++l) {
        const std::uint64_t start = part.offset_bytes + l * part.layer_stride_bytes;
        if (in_entry >= start && in_entry < start + part.row_bytes()) {
          std::uint32_t model_layer = 0;
          for (std::size_t m = 0; m < derived_->plan.layer_map.size(); ++m) {
            const LayerPlacement& lp = derived_->plan.layer_map[m];
            if (lp.sub_pool == s && lp.local_layer == l) model_layer = static_cast<std::uint32_t>(m);
          }
          what = "layer " + std::to_string(model_layer) + " (sub-pool layer " + std::to_string(l) + ") part '" +
                 part.name + "' byte " + std::to_string(in_entry - start) + " of its row";
        }
      }
    }
    std::string binding = "unbound";
    if (tables.ok() && s < tables->sides.size() && page < tables->sides[s].p2v.size()) {
      const std::int64_t v = tables->sides[s].p2v[page];
      if (v >= 0) binding = "virtual page " + std::to_string(v);
    }
    const std::int64_t token = static_cast<std::int64_t>(page * g.page_size + slot);
    out += "\n    as sub-pool '" + g.name + "': physical page " + std::to_string(page) + " (" + binding + "), slot " +
           std::to_string(slot) + " (physical token " + std::to_string(token) + "), " + what;
  }
  for (const Player& p : players_)
    if (p.describe_byte) out += "\n    " + std::string(p.backend->name()) + " says: " + p.describe_byte(byte);
  return out;
}

bool Runner::check_pools() {
  if (players_.size() < 2 || !derived_ || config_->tables_only || !cadence_.compare_pools) return true;
  const std::uint64_t floor = derived_->geometry.reserved_floor_bytes;
  const std::uint64_t total = derived_->geometry.total_bytes;
  const std::uint64_t page = derived_->geometry.sub_pools[0].page_bytes;
  // Digests first: a backend far away (the GPU) then sends eight bytes, not its pool. The sink's
  // bytes below the reserved floor are never compared (SPEC 3).
  if (bytes_digests_agree(std::vector<ByteRange>{ByteRange{floor, total - floor}})) {
    stats_.pages_compared += (total - floor + page - 1) / page;
    ++stats_.pools_compared;
    return true;
  }
  // They differ (or a backend cannot digest): the bytes themselves, to name the first that
  // differs. Whole pages at a time, up to kComparedBytesPerRead: a backend far away answers each
  // read with one copy, so few large reads cost what the bytes do, not a round trip a page.
  constexpr std::uint64_t kComparedBytesPerRead = std::uint64_t{8} << 20;
  const std::uint64_t chunk = std::max<std::uint64_t>(page, kComparedBytesPerRead / page * page);
  // The bytes below the reserved floor belong to the sink (SPEC 3): never compared.
  for (std::uint64_t offset = floor; offset < total;) {
    const std::uint64_t length = std::min(chunk - offset % chunk, total - offset);
    Result<std::vector<std::uint8_t>> a = players_[0].backend->raw_bytes(offset, length);
    Result<std::vector<std::uint8_t>> b =
        on_second([&](const Backend& second) { return second.raw_bytes(offset, length); });
    if (!a.ok() || !b.ok())
      return fail("pool", "a backend cannot show its bytes at " + std::to_string(offset) + ": " +
                              (a.ok() ? b.error().message : a.error().message));
    stats_.pages_compared += (length + page - 1) / page;
    if (*a != *b) {
      std::size_t i = 0;
      while (i < a->size() && i < b->size() && (*a)[i] == (*b)[i]) ++i;
      const std::uint64_t byte = offset + i;
      return fail("pool", "raw pools differ first at byte " + std::to_string(byte) + ": " +
                              std::string(players_[0].backend->name()) + " has " + hex_byte((*a)[i]) + ", " +
                              std::string(players_[1].backend->name()) + " has " + hex_byte((*b)[i]) +
                              describe_byte(byte));
    }
    offset += length;
  }
  ++stats_.pools_compared;
  return true;
}

std::optional<OpResult> Runner::play(const Op& op, const std::optional<OpResult>& expect, std::uint64_t line) {
  current_op_ = &op;
  second_verified_tables_.reset();
  std::optional<OpResult> result = play_and_check(op, expect, line);
  current_op_ = nullptr;
  if (!result && has_deferred()) {
    // An earlier op's deferred comparison may have failed first: that is the run's first failure.
    std::optional<Failure> this_op = std::move(failure_);
    failure_.reset();
    InvariantScope scope;
    try {
      if (settle_deferred()) failure_ = std::move(this_op);
    } catch (const InvariantFailure&) {
      failure_ = std::move(this_op);
    }
  }
  return result;
}

std::optional<OpResult> Runner::play_and_check(const Op& op, const std::optional<OpResult>& expect, std::uint64_t line) {
  KVTWIN_CHECK(!failure_, "Runner::play after a failed check; the run is over");
  line_ = line;
  op_text_.clear();
  const auto failed = [&](bool ok) {
    if (ok) return false;
    if (failure_->op.empty()) failure_->op = op_to_line(op, std::nullopt);  // a deferred one names its own op
    return true;
  };
  if (!decide_ahead(op)) {
    failed(false);
    return std::nullopt;
  }
  std::vector<OpResult>& results = results_;
  results.clear();
  {
    // A backend's broken invariant ends this run as a failure, not the process (check.h).
    InvariantScope scope;
    try {
      for (RunObserver* o : observers_) o->before(*this, op);
      for (std::size_t i = 0; i < players_.size(); ++i) {
        if (i == 1 && plays_ahead_) break;  // posted below, with the first's answer to compare
        Player& p = players_[i];
        const PhaseTimer timer(profile_.get(), profile_ ? "apply " + std::string(p.backend->name()) + " " +
                                                              std::string(op_name(op))
                                                        : std::string());
        results.push_back(i == 1 ? on_second([&](Backend& b) { return b.apply(op); }) : p.backend->apply(op));
      }
    } catch (const InvariantFailure& e) {
      failed(fail("invariant", e.what()));
      return std::nullopt;
    } catch (const std::logic_error& e) {
      // A backend (or an observer) that throws a logic error (a map lookup that missed, an index
      // out of range) has a bug: the run ends as a failure with its reproducer, not a crash.
      const std::string who = results.size() < players_.size() ? std::string(players_[results.size()].backend->name())
                                                                : std::string("an observer");
      failed(fail("exception", who + " threw: " + e.what()));
      return std::nullopt;
    }
  }
  for (RunObserver* o : observers_) o->after_apply(*this, OpEvent{step_, line, op, results});
  const OpResult& first = results.front();
  ++stats_.ops;
  if (!first.ok())
    ++stats_.errors;
  else if (std::holds_alternative<NoRoom>(first.value()))
    ++stats_.no_rooms;
  else if (const auto* c = std::get_if<Compaction>(&first.value()))
    stats_.compaction_moves += c->moves.size();

  // A backend whose machine failed (out of memory, a CUDA error) has no answer: that is not a
  // divergence, and the run cannot go on.
  for (std::size_t i = 0; i < results.size(); ++i)
    if (!results[i].ok() && results[i].error().kind == ErrorKind::environment &&
        failed(fail("environment", std::string(players_[i].backend->name()) + " failed: " + results[i].error().message)))
      return std::nullopt;
  // Played ahead: the second's answer is compared with the first's when the window closes.
  if (plays_ahead_ && failed(post_second_apply(first, expect))) return std::nullopt;
  if (failed(check_results(results))) return std::nullopt;
  if (expect && failed(check_expect(results, *expect))) return std::nullopt;

  if (const auto* build = std::get_if<BuildPool>(&op); build != nullptr && first.ok()) {
    Result<PoolDerived> d = derive_pool(build->config);
    KVTWIN_CHECK(d.ok(), "a pool a backend built derives");
    config_ = build->config;
    derived_ = std::move(d).value();
    verify_every_ = resolve_verify_every(cadence_, *config_);
  }
  const bool checkpoint = std::holds_alternative<Checkpoint>(op);
  const std::uint64_t n = stats_.ops;
  InvariantScope scope;
  try {
    const bool verify_runs = checkpoint || (verify_every_ != 0 && n % verify_every_ == 0);
    const bool changed_runs = !verify_runs && cadence_.verify_changed;
    RunProfile* const prof = profile_.get();
    if (verify_runs) {
      const PhaseTimer timer(prof, "check verify");
      if (failed(check_verify(false, checkpoint))) return std::nullopt;
    }
    if (changed_runs) {
      const PhaseTimer timer(prof, "check verify_changed");
      if (failed(check_verify(true, checkpoint))) return std::nullopt;
    }
    if (checkpoint || (cadence_.tables_every != 0 && n % cadence_.tables_every == 0)) {
      {
        const PhaseTimer timer(prof, checkpoint ? "check tables whole" : "check tables digest");
        if (failed(check_tables(checkpoint))) return std::nullopt;
      }
      const PhaseTimer timer(prof, "check invariants");
      if (failed(check_invariants(verify_runs, changed_runs))) return std::nullopt;
    }
    {
      const PhaseTimer timer(prof, "check touched");
      if (failed(check_touched())) return std::nullopt;
    }
    if (checkpoint) {
      const PhaseTimer timer(prof, "check pools");
      if (failed(check_pools())) return std::nullopt;
    }
    const PhaseTimer observers_timer(prof, "observers");
    for (RunObserver* o : observers_) {
      if (std::optional<RunObserver::Finding> f = o->after(*this, op, results)) {
        failed(fail(f->check, f->message));
        return std::nullopt;
      }
      ++stats_.observer_checks;
    }
  } catch (const InvariantFailure& e) {
    failed(fail("invariant", e.what()));
    return std::nullopt;
  }
  ++step_;
  return std::move(results.front());  // the checks and observers are done with it
}

bool Runner::finish() {
  KVTWIN_CHECK(!failure_, "Runner::finish after a failed check");
  line_ = 0;
  op_text_.clear();
  InvariantScope scope;
  try {
    // The window first: a difference it holds is the run's first failure, before anything the
    // end's own checks find (played ahead, the second may have stopped at it).
    {
      const PhaseTimer timer(profile_.get(), "finish: settle deferred");
      if (!settle_deferred()) return false;
    }
    const PhaseTimer timer(profile_.get(), "finish: land transfers and check");
    // Compared side by side, the pools must show the same bytes: every copy still in flight lands
    // first, as at a checkpoint (a device synchronizes its copy streams; the model lands them in
    // submission order); the transfers themselves stay in flight.
    if (players_.size() >= 2 && derived_ && !config_->tables_only && cadence_.compare_pools)
      for (std::size_t i = 0; i < players_.size(); ++i)
        if (const OpResult r = i == 1 ? on_second([](Backend& b) { return b.apply(Checkpoint{}); })
                                      : players_[i].backend->apply(Checkpoint{});
            !r.ok())
          return fail("pool", std::string(players_[i].backend->name()) + " cannot land its transfers at the end of the run: " +
                                  r.error().message);
    return settle_deferred() && check_verify(false, true) && check_tables(true) && check_invariants(true, false) && check_pools();
  } catch (const InvariantFailure& e) {
    return fail("invariant", e.what());
  }
}

}  // namespace kvtwin::traces
