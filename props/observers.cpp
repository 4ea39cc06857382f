// The stateful properties' observers (observers.h).
#include "props/observers.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/oracle.h"
#include "props/shadow_sizing.h"

namespace kvtwin::props {
namespace {

std::string join(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size() && i < 40; ++i) out += (i ? "," : "") + std::to_string(v[i]);
  if (v.size() > 40) out += ",... (" + std::to_string(v.size()) + ")";
  return out + "]";
}

// The physical pages an allocation of `k` pages must take on a side (SPEC 4, 4.2): the lowest
// holes first, then band pages at the watermark, ascending.
std::vector<std::int64_t> expected_pages(const SideTables& before, bool grows_up, std::size_t k) {
  std::vector<std::int64_t> pages;
  for (std::int64_t h : before.holes)
    if (pages.size() < k) pages.push_back(h);
  const auto rest = static_cast<std::int64_t>(k - pages.size());
  const std::int64_t first = grows_up ? before.watermark : before.watermark - rest + 1;
  for (std::int64_t i = 0; i < rest; ++i) pages.push_back(first + i);
  return pages;
}

}  // namespace

std::string policy_violation(const Op& op, const PoolTables& before, const PoolTables& after, const OpResult& result,
                             CompactionMode mode) {
  if (!result.ok()) return {};
  // Allocation: the queue-front virtual pages, bound on every side to the pages the policy
  // names; alloc_many binds its requests one after another.
  std::vector<std::vector<std::int64_t>> requests;
  if (const auto* a = std::get_if<Allocated>(&result.value())) requests.push_back(a->pages);
  if (const auto* a = std::get_if<AllocatedMany>(&result.value())) requests = a->pages;
  std::vector<std::int64_t> vpages;
  for (const auto& r : requests) vpages.insert(vpages.end(), r.begin(), r.end());
  if (!vpages.empty()) {
    const std::vector<std::int64_t>& queue = before.sides[0].free_queue;
    if (vpages.size() > queue.size() || !std::equal(vpages.begin(), vpages.end(), queue.begin()))
      return "alloc bound virtual pages " + join(vpages) + ", not the queue front of " + join(queue);
    for (std::size_t i = 0; i < after.sides.size(); ++i) {
      SideTables side = before.sides[i];  // walked forward request by request
      for (const auto& request : requests) {
        const std::vector<std::int64_t> want = expected_pages(side, i == 0, request.size());
        std::vector<std::int64_t> got;
        for (std::int64_t v : request) got.push_back(after.sides[i].v2p[static_cast<std::size_t>(v)]);
        if (got != want)
          return "alloc bound side '" + after.sides[i].name + "' pages " + join(got) + " for virtual pages " +
                 join(request) + "; the policy takes " + join(want);
        const auto from_holes = std::min(side.holes.size(), request.size());
        side.holes.erase(side.holes.begin(), side.holes.begin() + static_cast<std::ptrdiff_t>(from_holes));
        const auto band = static_cast<std::int64_t>(request.size() - from_holes);
        side.watermark += i == 0 ? band : -band;
      }
    }
  }
  // Compaction: per side, ascending distinct sources beyond the new watermark, ascending
  // distinct destinations inside it, no page moved twice, each page carrying its virtual id.
  if (const auto* c = std::get_if<Compaction>(&result.value())) {
    if (mode == CompactionMode::lazy && !std::holds_alternative<Flush>(op) && !c->moves.empty())
      return "a lazy free moved pages; lazy mode leaves holes until flush";
    std::map<std::string, std::vector<PageMove>> by_side;
    for (const PageMove& m : c->moves) by_side[m.sub_pool].push_back(m);
    for (const auto& [name, moves] : by_side) {
      std::size_t i = 0;
      while (i < after.sides.size() && after.sides[i].name != name) ++i;
      if (i == after.sides.size()) return "a move names an unknown sub-pool '" + name + "'";
      const bool up = i == 0;
      const std::int64_t wm = after.sides[i].watermark;
      std::set<std::int64_t> touched;
      for (std::size_t k = 0; k < moves.size(); ++k) {
        const PageMove& m = moves[k];
        if (k > 0 && (m.src <= moves[k - 1].src || m.dst <= moves[k - 1].dst))
          return "side '" + name + "' moves are not ascending in source and destination";
        if (!touched.insert(m.src).second || !touched.insert(m.dst).second)
          return "side '" + name + "' moves page " + std::to_string(m.src) + " or " + std::to_string(m.dst) + " twice";
        if (up ? !(m.src >= wm && m.dst < wm) : !(m.src <= wm && m.dst > wm))
          return "side '" + name + "' move " + std::to_string(m.src) + "->" + std::to_string(m.dst) +
                 " does not cross the new watermark " + std::to_string(wm);
        const std::int64_t v = before.sides[i].p2v[static_cast<std::size_t>(m.src)];
        if (v < 1 || after.sides[i].p2v[static_cast<std::size_t>(m.dst)] != v)
          return "side '" + name + "' page " + std::to_string(m.src) + " did not carry its virtual page to " +
                 std::to_string(m.dst);
      }
    }
  }
  return {};
}

void ShadowObserver::before(const traces::Runner& runner, const Op& op) {
  (void)runner;
  expected_ = shadow_.apply(op);
}

std::optional<traces::RunObserver::Finding> ShadowObserver::after(const traces::Runner& runner, const Op& op,
                                                                  const std::vector<OpResult>& results) {
  // SPEC 11's chains: the generators' bookkeeping learnt from the answer (shadow.h).
  if (shadow_.hybrid()) shadow_.learn(op, results.front());
  const Backend& reference = *runner.player(0).backend;
  if (std::optional<std::string> m = mismatch(expected_, results.front()))
    return Finding{"shadow", std::string(reference.name()) + " and the shadow disagree: " + *m};
  if (!runner.config()) return std::nullopt;
  Result<PoolTables> tables = reference.tables();
  if (!tables.ok()) return Finding{"shadow", std::string(reference.name()) + " cannot show its tables: " + tables.error().message};
  if (auto d = traces::diff_tables(*tables, shadow_.tables(), reference.name(), "the shadow"))
    return Finding{"shadow", "tables differ from the shadow's: " + *d};
  return std::nullopt;
}

std::optional<traces::RunObserver::Finding> SizingObserver::after(const traces::Runner& runner, const Op& op,
                                                                  const std::vector<OpResult>& results) {
  (void)op;
  (void)results;
  if (!runner.config() || !runner.derived() || (checked_ && *checked_ == *runner.config())) return std::nullopt;
  checked_ = *runner.config();
  if (std::optional<std::string> d = compare_sizing(*runner.config(), *runner.derived()))
    return Finding{"sizing", "the pool as core derives it differs from SPEC 2/3: " + *d};
  return std::nullopt;
}

void PolicyObserver::before(const traces::Runner& runner, const Op& op) {
  (void)op;
  before_.reset();
  if (!runner.config()) return;
  Result<PoolTables> t = runner.player(0).backend->tables();
  if (t.ok()) before_ = std::move(t).value();
}

std::optional<traces::RunObserver::Finding> PolicyObserver::after(const traces::Runner& runner, const Op& op,
                                                                  const std::vector<OpResult>& results) {
  if (!before_ || !runner.config() || std::holds_alternative<BuildPool>(op)) return std::nullopt;
  Result<PoolTables> after = runner.player(0).backend->tables();
  if (!after.ok()) return std::nullopt;
  if (after->state) return std::nullopt;  // SPEC 11's chains: their policies are the model's checks' (sim/chain_alloc.h)
  const std::string v = policy_violation(op, *before_, *after, results.front(), runner.config()->mode);
  if (!v.empty()) return Finding{"policy", v};
  return std::nullopt;
}

traces::ObserverFactory property_observer_factory() {
  return [](const PoolConfig& config) {
    std::vector<std::unique_ptr<traces::RunObserver>> out;
    out.push_back(std::make_unique<SizingObserver>());
    auto shadow = std::make_unique<ShadowObserver>(config);
    auto refusal = std::make_unique<RefusalObserver>(*shadow);
    out.push_back(std::move(shadow));
    out.push_back(std::make_unique<PolicyObserver>());
    out.push_back(std::move(refusal));
    return out;
  };
}

std::optional<std::uint64_t> observable_digest(const traces::Player& player, const PoolConfig& config) {
  (void)config;
  if (player.state_digest) return player.state_digest();
  // The backend's table digest, computed where its tables live (core/tables_digest.h).
  Result<std::uint64_t> d = player.backend->tables_digest();
  if (!d.ok()) return std::nullopt;
  return *d;
}

bool RefusalObserver::digests_second(const traces::Runner& runner) {
  // The second player's tables are compared with the first's after every op anyway: if the first
  // shows no change, one of the second's shows as a difference there (a GPU digest here would
  // cost two synchronizations a refusal).
  return runner.backend_count() >= 2 && (!runner.compares_second_tables_each_op() || runner.player(1).state_digest);
}

void RefusalObserver::before(const traces::Runner& runner, const Op& op) {
  digests_.assign(runner.backend_count(), std::nullopt);
  // Only a refusal the shadow foresees is digested (a digest reads the whole state); a refused
  // build too, as a configuration that does not build leaves the pool built before as it was.
  (void)op;
  if (shadow_.expected().result.ok() || !runner.config()) return;
  for (std::size_t i = 0; i < runner.backend_count(); ++i) {
    if (i == 1 && !digests_second(runner)) continue;
    digests_[i] = observable_digest(runner.player(i), *runner.config());
  }
}

std::optional<traces::RunObserver::Finding> RefusalObserver::after(const traces::Runner& runner, const Op& op,
                                                                   const std::vector<OpResult>& results) {
  (void)op;
  for (std::size_t i = 0; i < results.size() && i < digests_.size(); ++i) {
    if (!digests_[i] || results[i].ok()) continue;
    if (observable_digest(runner.player(i), *runner.config()) != digests_[i])
      return Finding{"refusal", std::string(runner.player(i).backend->name()) + " refused the operation (" +
                                    results[i].error().message + ") but its state changed"};
    if (runner.player(i).touched && !runner.player(i).touched().empty())
      return Finding{"refusal", std::string(runner.player(i).backend->name()) + " refused the operation (" +
                                    results[i].error().message + ") but wrote " +
                                    std::to_string(runner.player(i).touched().size()) + " byte ranges of the pool"};
  }
  return std::nullopt;
}

}  // namespace kvtwin::props
