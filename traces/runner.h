// The runner: THE interpreter. It plays a sequence of operations against one backend or two side
// by side, and checks after every step, so that the RapidCheck properties, the GPU differential
// tests, kvtwin replay, record, fuzz, check and selftest all judge a run the same way.
//
// After each operation it checks, in this order:
//   results    with two backends, both answered the same (same_result: outcomes equal, errors of
//              the same kind);
//   expect     the result the trace line expects, when it has one;
//   invariant  a backend broke one of its own always-on checks (KVTWIN_CHECK) while playing the
//              op: reported as a failure of this run, not an abort of the process (check.h);
//   tables     every player's tables hold the table invariants of core/table_check.h (so a run
//              of one backend alone is checked too) and, with two backends, are equal (v2p, p2v,
//              free queue, watermark, holes, counts), naming the first differing entry;
//   verify     a backend's own invariant check (the model's verify(); the GPU's counters against
//              its device tables), when it has one;
//   touched    with two backends holding bytes: the bytes the operation wrote (as the first
//              backend reports them: written entries, moved page envelopes) are equal on both;
//   pool       at `checkpoint` operations and at finish(), with two backends holding bytes: the
//              raw pools page by page (a digest per page), naming the first differing byte as
//              sub-pool, physical and virtual page, slot, layer, part and byte, both values, and
//              what the content oracle expects there when a backend can say;
//   observers  then every observer's own checks (props/: the shadow's prediction, the policy's
//              postconditions, refusals that changed state), in the order they were added.
// A backend that answers ErrorKind::environment (its machine failed: out of memory, a CUDA error)
// stops the run with the check "environment", never as a divergence.
// A backend that throws a logic error (a bug of its own: a missed map lookup, an index out of
// range) stops the run with the check "exception" and its reproducer, not the process.
// The first failed check stops the run: play() returns nullopt and failure() says which step,
// which trace line, which check, and what differed. Tables and verify may be run every N
// operations instead (CheckCadence) for real-scale replays; checkpoints and finish() always run
// every check.
//
// With two backends whose second is far away (the GPU beside the model), the second plays ahead
// on a thread of its own (CheckCadence::second_ahead): its answers and digests are compared with
// the first's in op order when the deferred window closes, so the failure named is the same one.
//
// The runner only sees what core/backend.h exposes, plus what a Player adds; it never reaches
// into a backend's internals.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"

namespace kvtwin::traces {

// A backend under the runner, with what only it can tell.
struct Player {
  Backend* backend = nullptr;
  // The backend's own invariant check (the model's verify()); empty when it has none.
  std::function<Status()> verify;
  // The same check, which also leaves in its argument the tables it read (as backend->tables()
  // shows them), or nullopt when it read none; empty when the backend has none. The runner calls
  // it instead of `verify` at checkpoints and at the end, where it compares whole tables next,
  // so a backend that must download its tables to check them (the GPU) downloads them once.
  std::function<Status(std::optional<PoolTables>&)> verify_with_tables;
  // The same over what the last operation changed (the model's verify_changed()); empty when the
  // backend has none. With verify_checks_tables it stands for the table check too.
  std::function<Status()> verify_changed;
  // The player's full verify runs only at checkpoints and at the end: set for a player whose
  // tables are compared with a verified peer's after every op (the GPU beside the model), so its
  // own check, which downloads every table, adds nothing between checkpoints.
  bool verify_at_checkpoints_only = false;
  // verify() runs check_table_invariants itself (the model's does): on a step where verify runs,
  // the runner does not run that check a second time for this player.
  bool verify_checks_tables = false;
  // Where a byte of the pool belongs and what the content oracle expects there, for pool
  // mismatch reports; empty when the backend cannot say.
  std::function<std::string(std::uint64_t)> describe_byte;
  // The bytes the last operation wrote; empty when the backend cannot say.
  std::function<std::vector<ByteRange>()> touched;
  // The digest of those bytes (core/bytes_digest.h, each range on its own, every one whole 8-byte
  // words) as the backend made it while writing, when it can vouch for it
  // (sim::Model::touched_digest); empty, or nullopt: the runner digests the ranges itself.
  std::function<std::optional<std::uint64_t>()> touched_digest;
  // A digest of the backend's observable state except the pool's bytes (for "a refusal changes
  // nothing"; with `touched`, a refusal that wrote a byte shows too); empty when the backend
  // has none (observers then digest its tables, and whole pools are compared at checkpoints).
  std::function<std::uint64_t()> state_digest;
};

class Runner;
struct RunProfile;  // runner.cpp: where a run's time goes, when KVTWIN_PROFILE=1 asks

// One operation as every backend answered it, before any check (what a watcher sees).
struct OpEvent {
  std::uint64_t step = 0;  // 0-based index of the op in the run
  std::uint64_t line = 0;  // its trace line; 0 when it came from no file
  const Op& op;
  const std::vector<OpResult>& results;  // one per backend, in player order
};

// A check or a watcher the runner does not own, called around every operation. props/ adds the
// shadow, the policy and the refusal checks this way (`after`); the HTML reports (tools/kvtwin/
// run_recorder.h) watch a run this way (`after_apply`), seeing a failing op too.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // Before the operation reaches any backend.
  virtual void before(const Runner& runner, const Op& op) {
    (void)runner;
    (void)op;
  }
  // Right after every backend applied it, before any check. Watchers only read.
  virtual void after_apply(const Runner& runner, const OpEvent& event) {
    (void)runner;
    (void)event;
  }
  struct Finding {
    std::string check;    // "shadow", "policy", "refusal", ...
    std::string message;  // what differed, with both values
  };
  // After the runner's own checks passed, with every backend's answer; a finding stops the run.
  virtual std::optional<Finding> after(const Runner& runner, const Op& op, const std::vector<OpResult>& results) {
    (void)runner;
    (void)op;
    (void)results;
    return std::nullopt;
  }
  // Whether this observer reads the second player (its answers, tables or bytes) while the run
  // plays. One that does has the second played in step; where none does, the runner may play
  // the second ahead (CheckCadence::second_ahead), and `results` then holds the first's answer
  // alone. Asked when the observer joins and at the run's first op after its build.
  virtual bool reads_second(const Runner& runner) const {
    (void)runner;
    return true;
  }
};

// verify_every = kVerifyAuto: the full verify() after every op on pools of at most
// kVerifyEveryOpMaxBytes, where it reads quickly; on larger ones, where it costs what the pool
// holds, at checkpoints and at the end, and the incremental verify_changed() (what the op
// changed, with the same rules) after every other op. `--paranoid` asks for the full one always.
inline constexpr std::uint64_t kVerifyAuto = UINT64_MAX;
inline constexpr std::uint64_t kVerifyEveryOpMaxBytes = std::uint64_t{4} << 20;

inline constexpr std::uint64_t kDefaultCompareWindow = 256;

struct CheckCadence {
  std::uint64_t tables_every = 1;            // compare tables after every Nth op (two backends); 0 = only at the end
  std::uint64_t verify_every = kVerifyAuto;  // run verify() after every Nth op; 0 = only at checkpoints and the end
  bool compare_pools = true;                 // at checkpoints and at the end (two backends with bytes)
  bool compare_touched = true;               // the bytes each op wrote, right after it (two backends with bytes)
  bool verify_changed = true;                // after every op the full verify skips, the incremental one
  // With two backends: the second one's digests (of its tables, and of the bytes an op wrote) are
  // queued after each op and compared in windows of this many ops (Backend::queue_tables_digest):
  // a device answers a window with one transfer instead of a synchronization an op. A window is
  // also compared at every checkpoint, at the end, and before any other failure is reported, so a
  // failure still names the first op whose digest differed. Played ahead (below), a full window is
  // compared when the next one fills, so the runner need not wait for the second to catch up at
  // every window's end. 1: compared right after every op.
  // Only a second backend whose digests are far away (Backend::digests_are_far: the GPU) defers.
  std::uint64_t compare_window = kDefaultCompareWindow;
  // With a deferred second backend (above) and no observer that reads it: the second's calls are
  // posted to a thread of its own (traces/player_thread.h; the runner runs what is left itself
  // when it waits for them), its work overlapping the first's and the checks, instead of in step.
  // Its answers (results, expect, environment, a broken invariant) are then compared when the
  // window closes, in op order, as its digests are: the first failure named, its step and its
  // message are the same. A run with an observer that reads the second
  // (RunObserver::reads_second) plays in step. KVTWIN_SECOND_AHEAD=0 in the environment turns it
  // off, to measure what it saves.
  bool second_ahead = true;
  // Played ahead: how many closed windows the second may be behind before the runner waits for
  // it (each closed window is compared once this many more have closed after it). With one, the
  // gate's request slices waited 0.3-0.6 s each for a GPU whose calls come in bursts under the
  // driver's contention; with four about half that (docs/gpu.md). A failure is named the same at
  // any depth; a deeper one only plays further past it before it is found.
  std::uint64_t windows_ahead = 4;
};

// The verify cadence auto means for a pool of this configuration.
std::uint64_t resolve_verify_every(const CheckCadence& cadence, const PoolConfig& config);

struct RunStats {
  std::uint64_t ops = 0;
  std::uint64_t expects_checked = 0;
  std::uint64_t results_compared = 0;
  std::uint64_t tables_compared = 0;
  std::uint64_t tables_digests_compared = 0;  // of tables_compared: by digest (between checkpoints)
  std::uint64_t verifies = 0;
  std::uint64_t changed_verifies = 0;  // incremental verifies (Player::verify_changed)
  std::uint64_t pools_compared = 0;
  std::uint64_t pages_compared = 0;
  std::uint64_t invariants_checked = 0;  // table-invariant checks (one per player)
  std::uint64_t touched_compared = 0;    // operations whose written bytes were compared
  std::uint64_t touched_by_digest = 0;   // of those, by digest (core/bytes_digest.h)
  std::uint64_t observer_checks = 0;     // observer calls that passed
  std::uint64_t compaction_moves = 0;  // page moves reported by compactions (first backend)
  std::uint64_t errors = 0;            // ops answered with an error (expected or not)
  std::uint64_t no_rooms = 0;

  std::uint64_t checks_passed() const {
    return expects_checked + results_compared + tables_compared + verifies + changed_verifies + pools_compared + invariants_checked +
           touched_compared + observer_checks;
  }
};

struct Failure {
  std::uint64_t step = 0;  // 0-based index of the op in the run
  std::uint64_t line = 0;  // its trace line; 0 when it came from no file
  std::string op;          // the op in trace syntax ("" for end-of-run checks)
  std::string check;       // "results", "expect", "invariant", "tables", "verify", "touched", "pool", "exception", or an observer's
  std::string message;     // what differed, with both values

  // "line 57 (step 55): {"op":...}: tables: ..." in one paragraph.
  std::string describe() const;
};

class Runner {
 public:
  Runner(std::vector<Player> players, CheckCadence cadence = {});
  ~Runner();  // the second player's thread (when it plays ahead) runs what is posted, then ends
  Runner(Runner&&) noexcept;
  Runner& operator=(Runner&&) noexcept;

  // Adds an observer (not owned; it must outlive the runner's use).
  void add_observer(RunObserver* observer);

  // Plays `op` on every backend, then checks. Returns the first backend's result, or nullopt
  // when a check failed (failure() says why; the run is over).
  std::optional<OpResult> play(const Op& op, const std::optional<OpResult>& expect = std::nullopt,
                               std::uint64_t line = 0);

  // End-of-run checks: verify, tables and whole pools. False when one failed.
  bool finish();

  // Whether the second player's tables are compared with the first's after every op (tables_every
  // 1), at once or in the deferred window: then a change of its tables that the first player did
  // not make fails the run without another check digesting them.
  bool compares_second_tables_each_op() const { return players_.size() >= 2 && cadence_.tables_every == 1; }
  const std::optional<Failure>& failure() const { return failure_; }
  const RunStats& stats() const { return stats_; }
  std::size_t backend_count() const { return players_.size(); }
  const Player& player(std::size_t i) const { return players_.at(i); }
  // The pool derived from the last successful build; nullopt before one.
  const std::optional<PoolDerived>& derived() const { return derived_; }
  // The configuration of the last successful build; nullopt before one.
  const std::optional<PoolConfig>& config() const { return config_; }

 private:
  bool fail(std::string check, std::string message);
  bool check_expect(const std::vector<OpResult>& results, const OpResult& expect);
  bool check_results(const std::vector<OpResult>& results);
  // Compares the two players' tables: by digest between checkpoints (the tables come back only
  // when the digests differ), whole when `whole`. Sets tables_matched_.
  bool check_tables(bool whole);
  bool check_invariants(bool verify_runs, bool changed_runs);
  // Every player's verify (or, incremental, its verify_changed).
  bool check_verify(bool incremental, bool checkpoint);
  bool check_touched();
  bool check_pools();
  // Compares every deferred digest (compare_window) with the second backend's answers, oldest
  // first; false, with the failure at the first op whose digests differ, when one does.
  bool settle_deferred();
  // A window of deferred comparisons (below), taken out of the runner to be compared.
  struct DeferredWindow;
  // Whether any comparison is deferred (in the open window, or in one closed and not compared).
  bool has_deferred() const;
  // The open window's comparisons, leaving it empty.
  DeferredWindow take_window();
  // The open window is full: closed, and (played ahead) compared when the next one closes, the one
  // closed before it compared now; in step, compared now. False when a comparison fails.
  bool close_window();
  // Compares one window's comparisons, oldest first (the failure at the first op whose digests differ).
  bool compare_window(DeferredWindow& w);
  // Drops every comparison still deferred (a failure was found before them).
  void drop_deferred();
  // Played ahead: takes the oldest closed window (there is one), waits for its close task and
  // compares it; a difference drops everything deferred after it.
  bool compare_oldest_closed();
  // Whether this run's digests of the second player are deferred (compare_window).
  bool defers() const;
  // The checks of one op (play() is this, then the deferred comparisons before a failure).
  std::optional<OpResult> play_and_check(const Op& op, const std::optional<OpResult>& expect, std::uint64_t line);
  // Whether the first two players' digests of `ranges` agree (false when either cannot digest).
  bool bytes_digests_agree(std::span<const ByteRange> ranges) const;
  std::string describe_byte(std::uint64_t byte) const;

  std::vector<Player> players_;
  std::vector<RunObserver*> observers_;
  CheckCadence cadence_;
  std::uint64_t verify_every_ = 1;  // cadence_.verify_every, resolved for the pool built last
  RunStats stats_;
  std::optional<Failure> failure_;
  std::vector<OpResult> results_;  // the op being played: each backend's answer (kept for its capacity)
  bool tables_matched_ = false;  // this step's check_tables found the two players' tables equal
  // The second player's tables as this checkpoint's verify_with_tables read them, for its
  // check_tables(whole); nothing plays between the two, and each step starts without them.
  std::optional<PoolTables> second_verified_tables_;
  // (or, deferred, will have: a difference found later fails the run at this step)
  // A digest comparison of the window not compared yet: which op, and the first player's digest.
  struct DeferredComparison {
    // result: the second's answer to the op (played ahead) against the first's and the expectation.
    enum class Kind { tables, touched, result } kind = Kind::tables;
    std::size_t op = 0;  // into deferred_ops_
    std::uint64_t expected = 0;
    std::vector<ByteRange> ranges;  // touched: what the op wrote (merged)
    std::optional<OpResult> first;   // result: the first's answer
    std::optional<OpResult> expect;  // result: the trace line's expectation
    std::size_t answer = SIZE_MAX;   // played ahead: what the second answered, into Ahead::answers
  };
  // The ops of the window's comparisons, each once (an op's tables and bytes share it).
  struct DeferredOp {
    std::uint64_t step = 0;
    std::uint64_t line = 0;
    std::shared_ptr<const Op> op;  // shared with the second player's thread, which plays it
  };
  std::vector<DeferredComparison> deferred_;
  std::vector<DeferredOp> deferred_ops_;
  std::size_t deferred_digests_ = 0;  // of deferred_, the tables and touched ones
  // Queues a comparison of the op being checked; false when the window it closes differs.
  bool defer(DeferredComparison d);
  // The op being checked, shared (the deferred comparisons' and the second player's thread's).
  const std::shared_ptr<const Op>& deferred_op();

  // The second player ahead (CheckCadence::second_ahead): its thread and what it answered.
  struct Ahead;
  std::unique_ptr<Ahead> ahead_;  // while it lives, every call of the second runs on its thread
  bool ahead_decided_ = false;    // at the run's first op other than a build
  bool plays_ahead_ = false;      // ops are posted, not played in step (off once an observer that reads the second joins)
  // Whether the second plays ahead: its builds at the run's start already, the rest decided at
  // the first op after them, when a replay's observers have joined. False when the builds played
  // ahead are compared there (an observer that reads the second joined) and differ.
  bool decide_ahead(const Op& op);
  // Whether nothing keeps the second in step but observers: the cadence, the environment, and what
  // the runner would call of it between checkpoints.
  bool second_may_play_ahead() const;
  void start_ahead();
  std::uint64_t windows_ahead_ = 1;  // CheckCadence::windows_ahead, for the run played ahead
  // Posts the op's apply on the second player's thread and defers the comparison of its answer
  // with the first's (false when the window that closes differs).
  bool post_second_apply(const OpResult& first, const std::optional<OpResult>& expect);
  // Posts one of the second's digest queueings; returns the index of its answer.
  std::size_t post_second_queue(std::function<Status(Backend&)> queue);
  // Runs f(the second backend) where the second plays: on its thread, after everything posted.
  template <class F>
  auto on_second(F&& f) const;
  // The first byte of `ranges` at which the two players' pools differ ("byte B: x has .., y has
  // .." and where it lies), nullopt when they agree; an Error when a backend cannot show them.
  Result<std::optional<std::string>> first_byte_difference(std::span<const ByteRange> ranges) const;
  const Op* current_op_ = nullptr;  // the op play() is checking (for deferred comparisons)
  std::optional<PoolConfig> config_;
  std::optional<PoolDerived> derived_;
  // The op being checked (for failure reports).
  std::uint64_t step_ = 0;
  std::uint64_t line_ = 0;
  std::string op_text_;
  // With KVTWIN_PROFILE=1 in the environment: wall time per backend and operation kind and per
  // check, printed to stderr when the runner goes (a developer's view of where a run's time goes;
  // no run's result depends on it). Null otherwise.
  std::shared_ptr<RunProfile> profile_;
};

// Comparison helpers, exposed for tests: nullopt when equal, else the first difference.
std::optional<std::string> diff_tables(const PoolTables& a, const PoolTables& b, std::string_view name_a,
                                       std::string_view name_b);

}  // namespace kvtwin::traces
