// Seeded swarm fuzzing (fuzz.h).
#include "traces/fuzz.h"

#include <algorithm>

#include "core/catalogue.h"
#include "core/check.h"
#include "core/printable.h"
#include "props/choices.h"
#include "props/config_gen.h"
#include "props/model_property.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "sim/model.h"

namespace kvtwin::traces {
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

// The per-op checks a case adds to the runner's: the shadow's prediction and the policy.
struct CaseChecks {
  props::PoolShadow shadow;
  std::uint64_t shadow_checks = 0;

  explicit CaseChecks(const PoolConfig& config) : shadow(config) {}

  // Plays `op` through the runner and checks it; the failure, if any.
  std::optional<Failure> play(Runner& runner, const Op& op, std::uint64_t index, props::Expectation* expected) {
    Backend& reference = *runner.player(0).backend;
    Result<PoolTables> before = reference.tables();
    const props::Expectation e = shadow.apply(op);
    if (expected != nullptr) *expected = e;
    std::optional<OpResult> r = runner.play(op);
    if (!r) return runner.failure();
    const auto fail = [&](std::string check, std::string message) {
      Failure f;
      f.step = index;
      f.op = op_to_line(op, std::nullopt);
      f.check = std::move(check);
      f.message = std::move(message);
      return f;
    };
    if (std::optional<std::string> m = props::mismatch(e, *r))
      return fail("shadow", std::string(reference.name()) + " and the shadow disagree: " + *m);
    Result<PoolTables> after = reference.tables();
    if (before.ok() && after.ok()) {
      if (auto d = diff_tables(*after, shadow.tables(), reference.name(), "the shadow"))
        return fail("shadow", "tables differ from the shadow's: " + *d);
      const std::string policy = props::policy_violation(
          op, *before, *after, *r, runner.config() ? runner.config()->mode : CompactionMode::eager);
      if (!policy.empty()) return fail("policy", policy);
    }
    ++shadow_checks;
    return std::nullopt;
  }
};

Result<PoolConfig> case_config(const CaseSpec& spec, props::Choices& choices) {
  if (spec.config == "random") return props::generate_config(choices);
  return named_config(spec.config, spec.seed);
}

}  // namespace

Result<PoolConfig> named_config(std::string_view name, std::uint64_t seed, std::uint64_t usable_pages) {
  if (name == "random") {
    props::RngChoices choices(seed);
    return props::generate_config(choices);
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
  Result<PoolDerived> sized = derive_pool(c);
  if (!sized.ok()) return bad_config(name, sized.error().message);
  return c;
}

std::vector<std::string> catalogue_config_names() {
  const std::uint64_t page_sizes[] = {1, 4, 16, 64};
  std::vector<std::string> names;
  std::size_t i = 0;
  for (const ModelShape& s : model_catalogue()) {
    // Large entries get small pages so that a pool of tens of pages stays small.
    names.push_back(s.name + "/ps" + std::to_string(page_sizes[i % 4]) + "/eager");
    names.push_back(s.name + "/ps" + std::to_string(page_sizes[(i + 1) % 4]) + "/lazy");
    ++i;
  }
  return names;
}

std::uint64_t case_seed(std::uint64_t run_seed, std::uint64_t index, std::string_view config) {
  return mix_seed(mix_seed(run_seed, fnv1a64(config)), index);
}

Result<CaseResult> run_case(const CaseSpec& spec, const BackendFactory& make_backends) {
  props::RngChoices choices(spec.seed);
  CaseResult result;
  result.spec = spec;
  KVTWIN_TRY(result.config, case_config(spec, choices));
  const props::SwarmWeights weights = props::draw_swarm(choices);
  result.swarm = weights.describe();
  KVTWIN_TRY(BackendSet backends, make_backends());
  Runner runner(backends.players);
  CaseChecks checks(result.config);
  std::vector<Op> ops;
  std::optional<Failure> failure;
  if (!runner.play(Op(BuildPool{result.config}))) failure = runner.failure();
  for (std::uint64_t i = 0; !failure && i < spec.ops; ++i) {
    ops.push_back(props::generate_op(choices, checks.shadow, weights));
    failure = checks.play(runner, ops.back(), i, nullptr);
  }
  if (!failure && !runner.finish()) failure = runner.failure();
  result.stats = runner.stats();
  result.shadow_checks = checks.shadow_checks;
  if (failure) {
    CaseFailure f;
    f.failure = *failure;
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
  Runner runner(backends->players);
  CaseChecks checks(config);
  if (!runner.play(Op(BuildPool{config}))) return runner.failure();
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (std::optional<Failure> f = checks.play(runner, ops[i], i, nullptr)) return f;
  if (!runner.finish()) return runner.failure();
  return std::nullopt;
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
  PoolTrace trace;
  trace.header.config = result.config;
  trace.header.seed = result.spec.seed;
  trace.header.origin = std::move(origin);
  // Each line expects what the shadow predicts (the reference the model is held to), or, for
  // bytes the shadow predicts by size only, what the first backend answered.
  Result<BackendSet> backends = make_backends();
  KVTWIN_CHECK(backends.ok(), "backends that made a case can be made again");
  Runner runner(backends->players);
  CaseChecks checks(result.config);
  bool playing = runner.play(Op(BuildPool{result.config})).has_value();
  for (std::size_t i = 0; i < result.failure->shrunk.size(); ++i) {
    const Op& op = result.failure->shrunk[i];
    props::Expectation e;
    std::optional<Failure> f;
    if (playing) {
      f = checks.play(runner, op, i, &e);
    } else {
      e = checks.shadow.apply(op);
    }
    TraceLine line;
    line.op = op;
    line.line = i + 2;
    if (!e.bytes_by_size) line.expect = e.result;
    trace.lines.push_back(std::move(line));
    if (f) playing = false;
  }
  // Byte answers the shadow predicts by size: the reference model's, from a replay on it alone.
  if (std::any_of(trace.lines.begin(), trace.lines.end(), [](const TraceLine& l) { return !l.expect; })) {
    sim::Model model;
    (void)model.apply(Op(BuildPool{result.config}));
    for (TraceLine& line : trace.lines) {
      OpResult r = model.apply(line.op);
      if (!line.expect) line.expect = std::move(r);
    }
  }
  return trace;
}

}  // namespace kvtwin::traces
