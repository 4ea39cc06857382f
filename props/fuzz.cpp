// Seeded swarm fuzzing (fuzz.h).
#include "props/fuzz.h"

#include <algorithm>

#include "core/catalogue.h"
#include "core/check.h"
#include "core/printable.h"
#include "props/choices.h"
#include "props/config_gen.h"
#include "props/observers.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"

namespace kvtwin::props {
namespace {

Error bad_config(std::string_view name, const std::string& why) {
  return make_error(ErrorKind::invalid_argument,
                    "configuration '" + printable(name) + "': " + why +
                        "; use 'random' or MODEL[/tpN][/psN][/eager|lazy][/tables], e.g. gpt-oss-20b/tp8/ps4/lazy");
}

Result<std::uint64_t> number_after(std::string_view part, std::string_view prefix, std::string_view name) {
  std::uint64_t v = 0;
  const std::string_view digits = part.substr(prefix.size());
  if (digits.empty() || digits.size() > 9) return bad_config(name, "'" + printable(part) + "' needs a number");
  for (char c : digits) {
    if (c < '0' || c > '9') return bad_config(name, "'" + printable(part) + "' needs a number");
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

Result<PoolConfig> case_config(const CaseSpec& spec, Choices& choices) {
  // Now and then a tables-only pool past 4 GiB, so that every run derives and compares row
  // addresses past 2^32 (props/observers.h SizingObserver); and a pool of thousands of pages,
  // where operations at real sizes (props/op_gen.h) reach thousands of lanes.
  if (spec.config == "random") {
    // SPEC 11: one random case in four is a hybrid chain (drawn from a stream of its own, so that
    // the other cases draw exactly what they drew before hybrids existed), half of them tri-pools.
    {
      RngChoices hybrid(mix_seed(spec.seed, fnv1a64("hybrid")));
      if (hybrid.chance(1, 4)) return generate_hybrid_config(hybrid);
    }
    return generate_config(choices, ConfigLimits{.past_4gib_one_in = 16, .large_one_in = 8});
  }
  return named_config(spec.config, spec.seed);
}

}  // namespace

Result<PoolConfig> named_config(std::string_view name, std::uint64_t seed, std::uint64_t usable_pages) {
  if (name == "random") {
    RngChoices choices(seed);
    return generate_config(choices);
  }
  std::vector<std::string_view> parts;
  std::string_view rest = name;
  while (true) {
    const std::size_t slash = rest.find('/');
    parts.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  PoolConfig c;
  Result<ModelShape> shape = find_model(parts[0]);
  if (!shape.ok()) return bad_config(name, shape.error().message);
  c.shape = *shape;
  c.tp = c.shape.attention == AttentionKind::mla ? 1 : c.shape.num_kv_heads;
  c.page_size = 16;
  c.seed = seed;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    if (p.substr(0, 2) == "tp") {
      KVTWIN_TRY(std::uint64_t tp, number_after(p, "tp", name));
      if (tp == 0 || tp > 1024) return bad_config(name, "tp must be 1..1024");
      c.tp = static_cast<std::uint32_t>(tp);
    } else if (p.substr(0, 2) == "ps") {
      KVTWIN_TRY(c.page_size, number_after(p, "ps", name));
      if (c.page_size == 0) return bad_config(name, "the page size must be at least 1");
    } else if (p == "eager" || p == "lazy") {
      c.mode = p == "lazy" ? CompactionMode::lazy : CompactionMode::eager;
    } else if (p == "tables") {
      c.tables_only = true;
    } else if (p == "tokens") {
      // A hybrid model's token chain alone, without its state sub-pool (SPEC 11).
      Result<PoolPlan> plan = plan_sub_pools(c.shape, c.tp);
      if (!plan.ok()) return bad_config(name, plan.error().message);
      c.chain = token_chain(*plan);
    } else {
      return bad_config(name, "unknown part '" + printable(p) + "'");
    }
  }
  // Size the pool for `usable_pages` pages on the owner side: the reserved floor, then that many
  // pages of every side (a composite takes a page of each side per allocated page).
  PoolConfig probe = c;
  probe.total_bytes = std::uint64_t{1} << 50;
  Result<PoolDerived> d = derive_pool(probe);
  if (!d.ok()) return bad_config(name, d.error().message);
  std::uint64_t floor_bytes = 0, per_page = 0;
  for (const SubPoolGeometry& g : d->geometry.sub_pools) {
    floor_bytes = std::max(floor_bytes, g.min_page_index * g.page_bytes);
    per_page += g.page_bytes;
  }
  c.total_bytes = floor_bytes + usable_pages * per_page;
  // SPEC 11: a hybrid chain also holds a few states above its floor (the boot floor is three).
  if (d->state_layout) c.total_bytes += 6 * d->state_layout->entry_bytes;
  Result<PoolDerived> sized = derive_pool(c);
  if (!sized.ok()) return bad_config(name, sized.error().message);
  return c;
}

std::vector<std::string> catalogue_config_names() {
  const std::uint64_t page_sizes[] = {1, 4, 16, 64};
  std::vector<std::string> names;
  std::size_t i = 0;
  for (const ModelShape& s : model_catalogue()) {
    // Large entries get small pages so that a pool of tens of pages stays small. A hybrid model's
    // states are tens of MiB: its chain plays tables-only (the random hybrid pools carry bytes).
    // A state of tens of MiB is thousands of small pages: hybrid models get pages of 16 and 64.
    const std::string suffix = s.state ? "/tables" : "";
    const std::uint64_t eager_ps = s.state ? 16 : page_sizes[i % 4], lazy_ps = s.state ? 64 : page_sizes[(i + 1) % 4];
    names.push_back(s.name + "/ps" + std::to_string(eager_ps) + "/eager" + suffix);
    names.push_back(s.name + "/ps" + std::to_string(lazy_ps) + "/lazy" + suffix);
    ++i;
  }
  return names;
}

std::uint64_t case_seed(std::uint64_t run_seed, std::uint64_t index, std::string_view config) {
  return mix_seed(mix_seed(run_seed, fnv1a64(config)), index);
}

// One case's runner with the property observers attached after the build: the checks every
// case, replay and shrink attempt runs.
struct CaseRun {
  BackendSet backends;
  std::unique_ptr<traces::Runner> runner;
  std::unique_ptr<PropertyObservers> observers;
  std::optional<Failure> failure;

  CaseRun(BackendSet set, const PoolConfig& config) : backends(std::move(set)) {
    runner = std::make_unique<traces::Runner>(backends.players);
    if (!runner->play(Op(BuildPool{config}))) {
      failure = runner->failure();
      return;
    }
    observers = std::make_unique<PropertyObservers>(config);
    observers->attach(*runner);
  }
  // Plays one op; false once a check failed.
  bool play(const Op& op) {
    if (failure) return false;
    if (!runner->play(op)) {
      failure = case_failure();
      return false;
    }
    return true;
  }
  bool finish() {
    if (failure) return false;
    if (!runner->finish()) {
      failure = case_failure();
      return false;
    }
    return true;
  }
  // The runner's failure, its step counted among the case's ops (the build is the runner's step
  // 0). A failure found later than its op (a deferred comparison, the second played ahead) names
  // that op.
  Failure case_failure() const {
    Failure f = *runner->failure();
    if (!f.op.empty() && f.step > 0) --f.step;
    return f;
  }
};

Result<CaseResult> run_case(const CaseSpec& spec, const BackendFactory& make_backends) {
  RngChoices choices(spec.seed);
  CaseResult result;
  result.spec = spec;
  KVTWIN_TRY(BackendSet backends, make_backends());
  KVTWIN_TRY(result.config, case_config(spec, choices));
  // SPEC 8's host operations only where every backend has a host arena; its size drawn apart
  // (the case's seed, derived), so that a run without them draws what it always drew. A hybrid
  // chain (SPEC 11) has no host arena in a generated case: its state is staged apart.
  const bool host_ops = backends.host_ops;
  if (host_ops && result.config.host_bytes == 0) {
    RngChoices host_choices(Rng(spec.seed).derive("host_bytes"));
    result.config.host_bytes = generate_host_bytes(host_choices, result.config);
  }
  if (!host_ops) result.config.host_bytes = 0;
  if (const Result<PoolDerived> d = derive_pool(result.config); d.ok() && d->has_state()) result.config.host_bytes = 0;
  // The storage tier in about half the cases with a host arena: room for 2 to 32 small pages'
  // files, so that eviction runs too. Drawn apart, as the host arena is.
  if (result.config.host_bytes != 0) {
    RngChoices storage_choices(Rng(spec.seed).derive("storage_bytes"));
    if (storage_choices.chance(1, 2))
      result.config.storage_bytes = static_cast<std::uint64_t>(storage_choices.between(2, 32)) * 4096;
  }
  const SwarmWeights weights = draw_swarm(choices, host_ops);
  result.swarm = weights.describe();
  OpGenOptions options;
  options.host_ops = host_ops;
  CaseRun run(std::move(backends), result.config);
  std::vector<Op> ops;
  for (std::uint64_t i = 0; !run.failure && i < spec.ops; ++i) {
    ops.push_back(generate_op(choices, run.observers->shadow.shadow(), weights, options));
    run.play(ops.back());
  }
  run.finish();
  result.stats = run.runner->stats();
  result.shadow_checks = result.stats.observer_checks;
  if (run.failure) {
    CaseFailure f;
    f.failure = *run.failure;
    f.ops = std::move(ops);
    f.shrunk = f.ops;
    result.failure = std::move(f);
  }
  return result;
}

std::optional<Failure> replay_case_ops(const PoolConfig& config, const std::vector<Op>& ops,
                                       const BackendFactory& make_backends) {
  Result<BackendSet> backends = make_backends();
  KVTWIN_CHECK(backends.ok(), "backends that made a case can be made again");
  CaseRun run(std::move(backends).value(), config);
  for (std::size_t i = 0; i < ops.size() && run.play(ops[i]); ++i) {
  }
  run.finish();
  return run.failure;
}

void shrink_case(CaseResult& result, const BackendFactory& make_backends, const ShrinkOptions& options) {
  KVTWIN_CHECK(result.failure.has_value(), "shrinking a case that passed");
  const std::string check = result.failure->failure.check;
  const PoolConfig config = result.config;
  const StillFails still_fails = [&](const std::vector<Op>& ops) {
    std::optional<Failure> f = replay_case_ops(config, ops, make_backends);
    return f.has_value() && f->check == check;
  };
  result.failure->shrunk = shrink_ops(result.failure->ops, still_fails, options, &result.failure->shrink_stats);
  // The failure as the shrunk sequence shows it.
  if (std::optional<Failure> f = replay_case_ops(config, result.failure->shrunk, make_backends))
    result.failure->failure = *f;
}

PoolTrace failure_trace(const CaseResult& result, const BackendFactory& make_backends, nlohmann::json origin) {
  KVTWIN_CHECK(result.failure.has_value(), "a failure trace of a case that passed");
  (void)make_backends;
  PoolTrace trace;
  trace.header.config = result.config;
  trace.header.seed = result.spec.seed;
  trace.header.origin = std::move(origin);
  // Each line expects what the shadow predicts (the reference every backend is held to), or, for
  // answers the shadow predicts by size only, what the plain reference model answers: the trace
  // then fails on the faulty backend alone, and passes on a correct one.
  PoolShadow shadow(result.config);
  sim::Model model;
  (void)model.apply(Op(BuildPool{result.config}));
  for (std::size_t i = 0; i < result.failure->shrunk.size(); ++i) {
    const Op& op = result.failure->shrunk[i];
    const Expectation e = shadow.apply(op);
    OpResult r = model.apply(op);
    traces::TraceLine line;
    line.op = op;
    line.line = i + 2;
    // An operation the shadow does not predict (on a hybrid chain): the plain model's answer stands.
    line.expect = e.bytes_by_size || !e.predicted ? std::move(r) : e.result;
    trace.lines.push_back(std::move(line));
  }
  return trace;
}

}  // namespace kvtwin::props
