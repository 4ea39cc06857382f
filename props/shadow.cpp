// The shadow: an independent abstract model of a pool. See shadow.h. Rules come from SPEC.md
// and docs/decisions.md; the checks of each operation run in the order docs/decisions.md gives,
// so that the first refusal has the kind the model gives.
#include "props/shadow.h"

#include <algorithm>
#include <limits>

#include <cstring>

#include "core/check.h"
#include "core/checked.h"
#include "core/det_math.h"
#include "core/oracle.h"
#include "core/reasons.h"

namespace kvtwin::props {
namespace {

// Limits of the reference model (docs/decisions.md "The reference model's own decisions").
constexpr std::uint64_t kMaxPages = std::uint64_t{1} << 24;
constexpr std::uint64_t kMaxPoolBytes = std::uint64_t{4} << 30;
constexpr std::uint64_t kMaxLanes = std::uint64_t{1} << 20;
constexpr std::uint64_t kMaxTranslateElements = std::uint64_t{1} << 24;

Expectation expect(Outcome outcome, bool bytes_by_size = false) {
  return Expectation{OpResult(std::move(outcome)), bytes_by_size, std::nullopt};
}
Expectation refuse(ErrorKind kind, std::string_view reason = {}) {
  return Expectation{OpResult(Error{kind, "(predicted by the shadow)", std::string(reason)}), false, std::nullopt};
}
Expectation refuse(const Error& e) { return Expectation{OpResult(e), false, std::nullopt}; }

// A translate buffer laid out with `stride` (0: contiguous) fits the model's limits.
bool buffer_fits(bool two_dim, std::uint64_t lanes, std::uint64_t cols, std::int64_t stride) {
  if (stride < 0) return false;
  const std::uint64_t contiguous = two_dim ? cols : 1;
  const std::uint64_t effective = stride == 0 ? contiguous : static_cast<std::uint64_t>(stride);
  if (effective < contiguous || effective > kMaxTranslateElements) return false;
  const std::uint64_t storage = lanes == 0 || cols == 0 ? 0 : (lanes - 1) * effective + cols;
  return storage <= kMaxTranslateElements;
}

std::uint64_t effective_stride(bool two_dim, std::uint64_t cols, std::int64_t stride) {
  return stride == 0 ? (two_dim ? cols : 1) : static_cast<std::uint64_t>(stride);
}

}  // namespace

std::optional<std::string> mismatch(const Expectation& expected, const OpResult& actual) {
  if (!expected.predicted) return std::nullopt;
  const OpResult& want = expected.result;
  if (!want.ok()) {
    if (actual.ok()) return "expected error " + std::string(error_kind_name(want.error().kind)) + ", got " + to_string(actual);
    if (actual.error().kind != want.error().kind)
      return "expected error " + std::string(error_kind_name(want.error().kind)) + ", got error " +
             std::string(error_kind_name(actual.error().kind)) + ": " + actual.error().message;
    // The reason too (core/reasons.h): a refusal for another cause is not the refusal predicted.
    if (actual.error().reason != want.error().reason)
      return "expected error " + std::string(error_kind_name(want.error().kind)) + " for the reason '" +
             want.error().reason + "', got it for the reason '" + actual.error().reason + "': " + actual.error().message;
    return std::nullopt;
  }
  if (!actual.ok()) return "expected " + to_string(want) + ", got error " + std::string(error_kind_name(actual.error().kind)) +
                           ": " + actual.error().message;
  if (expected.bytes_by_size) {
    if (const auto* w = std::get_if<Bytes>(&want.value())) {
      const auto* a = std::get_if<Bytes>(&actual.value());
      if (!a || a->size != w->size || a->bytes.size() != w->size)
        return "expected " + std::to_string(w->size) + " bytes, got " + to_string(actual);
      if (expected.rows) {
        // Every row the shadow knows must hold exactly the oracle row of its last write.
        const PredictedRows& r = *expected.rows;
        for (std::size_t i = 0; i < r.known.size(); ++i) {
          if (!r.known[i]) continue;
          const std::uint64_t at = i * r.row_bytes;
          if (std::memcmp(a->bytes.data() + at, r.bytes.data() + at, r.row_bytes) == 0) continue;
          std::uint64_t k = 0;
          while (a->bytes[at + k] == r.bytes[at + k]) ++k;
          return "row " + std::to_string(i) + " of the read differs from the oracle row of its last write at byte " +
                 std::to_string(k) + " of the row (expected " + std::to_string(r.bytes[at + k]) + ", got " +
                 std::to_string(a->bytes[at + k]) + ")";
        }
      }
      return std::nullopt;
    }
    if (const auto* w = std::get_if<Decode>(&want.value())) {
      const auto* a = std::get_if<Decode>(&actual.value());
      if (a && a->loc == w->loc && a->table == w->table && a->attention.size == w->attention.size &&
          a->attention.bytes.size() == w->attention.size)
        return std::nullopt;
      Decode shown = *w;
      return "expected " + to_string(OpResult(Outcome(shown))) + " (attention by size), got " + to_string(actual);
    }
  }
  if (want.value() == actual.value()) return std::nullopt;
  return "expected " + to_string(want) + ", got " + to_string(actual);
}

// ---------------------------------------------------------------- state

PoolShadow::PoolShadow(const PoolConfig& config) : config_(config) {
  Result<PoolDerived> d = derive_pool(config);
  KVTWIN_CHECK(d.ok(), d.ok() ? std::string() : "the shadow needs a pool that builds: " + d.error().message);
  derived_ = *d;
  page_size_ = static_cast<std::int64_t>(config.page_size);
  lazy_ = config.mode == CompactionMode::lazy;
  hybrid_ = derived_.has_state();
  if (hybrid_) hybrid_shadow_.emplace(config_, derived_);
  for (std::size_t i = 0; i < derived_.geometry.sub_pools.size(); ++i) {
    const SubPoolGeometry& g = derived_.geometry.sub_pools[i];
    ShadowSide s;
    s.name = g.name;
    s.grows_up = i == 0;  // the chain: [up] or [up, down]
    s.min_page = static_cast<std::int64_t>(g.min_page_index);
    s.num_pages = static_cast<std::int64_t>(g.num_pages);
    s.page_bytes = g.page_bytes;
    sides_.push_back(std::move(s));
  }
  for (std::int64_t v = sides_[0].min_page; v < sides_[0].num_pages; ++v) free_queue_.push_back(v);
  rows_.assign(sides_.size(), {});
  // SPEC 8: one host side per sub-pool; page_num = host_bytes // the largest page.
  if (config.host_bytes != 0) {
    std::uint64_t largest = 0;
    for (const ShadowSide& side : sides_) largest = std::max(largest, side.page_bytes);
    host_page_num_ = static_cast<std::int64_t>(config.host_bytes / largest);
    KVTWIN_CHECK(host_page_num_ > 0, "the shadow needs a host arena that builds");
    for (std::size_t i = 0; i < sides_.size(); ++i)
      host_sides_.push_back(ShadowHostSide{sides_[i].name, i == 0, sides_[i].page_bytes, {}, {}, {}});
    host_rows_.assign(sides_.size(), {});
  }
  storage_ = config.storage_bytes != 0 && config.host_bytes != 0;
  maybe_stored_.assign(host_sides_.size(), {});
}

PoolTables PoolShadow::tables() const {
  if (hybrid_) return hybrid_shadow_->tables();
  PoolTables out;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    const ShadowSide& s = sides_[i];
    SideTables t;
    t.name = s.name;
    t.v2p.assign(static_cast<std::size_t>(num_virtual()) + 1, -1);
    t.p2v.assign(static_cast<std::size_t>(s.num_pages) + 1, -1);
    t.v2p[0] = 0;
    t.p2v[0] = 0;
    for (const auto& [v, p] : s.v2p) t.v2p[static_cast<std::size_t>(v)] = p;
    for (const auto& [p, v] : s.p2v) t.p2v[static_cast<std::size_t>(p)] = v;
    if (i == 0) t.free_queue.assign(free_queue_.begin(), free_queue_.end());
    // up: occupied [min, wm); down: occupied [wm + 1, num_pages).
    t.watermark = s.grows_up ? s.band_end() : s.band_begin() - 1;
    t.holes.assign(s.holes.begin(), s.holes.end());
    t.allocated_pages = s.v2p.size();
    out.sides.push_back(std::move(t));
  }
  return out;
}

std::int64_t PoolShadow::translate(std::int64_t token) const {
  if (token < 0) return 0;
  const std::int64_t page = token / page_size_;
  // The sink row maps to itself; an unbound page, the sentinel row and anything past it read -1.
  const std::int64_t physical = page == 0 ? 0 : sides_[0].physical(page);
  return std::max<std::int64_t>(physical * page_size_ + token % page_size_, 0);
}

std::int64_t PoolShadow::swa_of(std::int64_t full_token) const {
  if (full_token < 0) return 0;
  const std::int64_t page = full_token / page_size_;
  std::int64_t owner = -1;
  if (page == 0) {
    owner = 0;
  } else if (auto it = sides_[0].p2v.find(page); it != sides_[0].p2v.end()) {
    owner = it->second;
  }
  const std::int64_t vpage = std::max<std::int64_t>(owner, 0);
  const std::int64_t swa_page = vpage == 0 ? 0 : sides_[1].physical(vpage);
  return std::max<std::int64_t>(swa_page * page_size_ + full_token % page_size_, 0);
}

std::int64_t PoolShadow::slots(std::size_t side) const {
  return static_cast<std::int64_t>(derived_.geometry.sub_pools[side].max_slots);
}

Expectation PoolShadow::apply(const Op& op) {
  if (hybrid_ && !std::holds_alternative<BuildPool>(op)) {
    std::optional<OpResult> r = hybrid_shadow_->apply(op);
    if (!r) {
      Expectation none = expect(Done{});
      none.predicted = false;
      return none;
    }
    // A state read is predicted by its size, and exactly in the rows the hybrid shadow knows.
    const bool by_size = r->ok() && std::holds_alternative<Bytes>(r->value());
    std::optional<PredictedRows> rows;
    if (by_size && hybrid_shadow_->last_read_rows()) {
      const HybridShadow::KnownRows& k = *hybrid_shadow_->last_read_rows();
      rows = PredictedRows{k.row_bytes, k.bytes, k.known};
    }
    return Expectation{std::move(*r), by_size, std::move(rows)};
  }
  return std::visit([this](const auto& o) { return on(o); }, op);
}

// ---------------------------------------------------------------- pool and allocation

Expectation PoolShadow::on(const BuildPool& op) {
  Result<PoolDerived> d = derive_pool(op.config);
  if (!d.ok()) return refuse(d.error().kind);
  for (const SubPoolGeometry& g : d->geometry.sub_pools)
    if (g.num_pages > kMaxPages) return refuse(ErrorKind::unsupported);
  if (!op.config.tables_only && op.config.total_bytes > kMaxPoolBytes) return refuse(ErrorKind::unsupported);
  if (op.config.host_bytes != 0) {
    if (!op.config.tables_only && op.config.host_bytes > kMaxPoolBytes) return refuse(ErrorKind::unsupported);
    std::uint64_t largest = 0;
    for (const SubPoolGeometry& g : d->geometry.sub_pools) largest = std::max(largest, g.page_bytes);
    if (op.config.host_bytes / largest == 0) return refuse(ErrorKind::sizing);
    if (op.config.host_bytes / largest > kMaxPages) return refuse(ErrorKind::unsupported);
  }
  *this = PoolShadow(op.config);
  return expect(Done{});
}

bool PoolShadow::fits(std::int64_t pages) const {
  if (pages > static_cast<std::int64_t>(free_queue_.size())) return false;
  std::uint64_t from_gap = 0;
  for (const ShadowSide& s : sides_) {
    if (pages > s.num_pages - s.min_page - static_cast<std::int64_t>(s.v2p.size())) return false;
    const std::int64_t beyond_holes = std::max<std::int64_t>(0, pages - static_cast<std::int64_t>(s.holes.size()));
    from_gap += static_cast<std::uint64_t>(beyond_holes) * s.page_bytes;
  }
  const ShadowSide& up = sides_.front();
  const std::uint64_t up_end = static_cast<std::uint64_t>(up.band_end()) * up.page_bytes;
  const std::uint64_t down_begin = is_composite() ? static_cast<std::uint64_t>(sides_[1].band_begin()) * sides_[1].page_bytes
                                                  : static_cast<std::uint64_t>(up.num_pages) * up.page_bytes;
  return from_gap <= down_begin - up_end;
}

std::vector<std::int64_t> PoolShadow::take(std::int64_t pages) {
  std::vector<std::int64_t> vpages(free_queue_.begin(), free_queue_.begin() + pages);
  free_queue_.erase(free_queue_.begin(), free_queue_.begin() + pages);
  for (ShadowSide& s : sides_) {
    // Lowest holes first, then fresh pages at the band's growing end, ascending.
    std::vector<std::int64_t> physical;
    for (std::int64_t h : s.holes) {
      if (static_cast<std::int64_t>(physical.size()) == pages) break;
      physical.push_back(h);
    }
    const std::int64_t fresh = pages - static_cast<std::int64_t>(physical.size());
    const std::int64_t first = s.grows_up ? s.band_end() : s.band_begin() - fresh;
    for (std::int64_t i = 0; i < fresh; ++i) physical.push_back(first + i);
    for (std::size_t i = 0; i < vpages.size(); ++i) {
      s.holes.erase(physical[i]);
      s.v2p[vpages[i]] = physical[i];
      s.p2v[physical[i]] = vpages[i];
    }
  }
  return vpages;
}

Expectation PoolShadow::on(const Alloc& op) {
  const auto ps = static_cast<std::uint64_t>(page_size_);
  if (op.tokens % ps != 0) return refuse(ErrorKind::invalid_argument);
  if (op.tokens / ps > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return expect(NoRoom{});
  const auto k = static_cast<std::int64_t>(op.tokens / ps);
  if (k == 0) return expect(Allocated{});
  if (!fits(k)) return expect(NoRoom{});
  Allocated out{take(k)};
  allocations_.push_back(out.pages);
  return expect(std::move(out));
}

Expectation PoolShadow::on(const AllocMany& op) {
  const auto ps = static_cast<std::uint64_t>(page_size_);
  if (op.tokens.empty()) return refuse(ErrorKind::invalid_argument);
  std::uint64_t total = 0;
  for (std::uint64_t n : op.tokens) {
    if (n % ps != 0) return refuse(ErrorKind::invalid_argument);
    if (__builtin_add_overflow(total, n / ps, &total)) return refuse(ErrorKind::overflow);
  }
  if (total > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      !fits(static_cast<std::int64_t>(total)))
    return expect(NoRoom{});
  AllocatedMany out;
  for (std::uint64_t n : op.tokens) {
    out.pages.push_back(n == 0 ? std::vector<std::int64_t>{} : take(static_cast<std::int64_t>(n / ps)));
    if (n != 0) allocations_.push_back(out.pages.back());
  }
  return expect(std::move(out));
}

std::optional<Error> PoolShadow::virtual_pages(IdUnit unit, const std::vector<std::int64_t>& ids,
                                               std::set<std::int64_t>& out) const {
  const auto outside = [](std::string_view why) {
    return Error{ErrorKind::out_of_range, "(predicted by the shadow)", std::string(why)};
  };
  for (std::int64_t id : ids) {
    if (id < 0) return outside(reason::negative_id);
    out.insert(unit == IdUnit::tokens ? id / page_size_ : id);
  }
  // docs/decisions.md: the smallest page outside the usable range names the reason.
  for (std::int64_t v : out) {
    if (v < sides_[0].min_page) return outside(reason::reserved_page);
    if (v >= num_virtual()) return outside(reason::past_last_page);
  }
  return std::nullopt;
}

PoolShadow::SideMoves PoolShadow::plan(std::size_t side, std::set<std::int64_t> freed_virtual, bool flush) const {
  const ShadowSide& s = sides_[side];
  SideMoves m;
  m.side = side;
  m.freed_virtual = std::move(freed_virtual);
  if (flush) {
    m.freed_physical = s.holes;
    m.compact = true;
  } else {
    for (std::int64_t v : m.freed_virtual) m.freed_physical.insert(s.v2p.at(v));
    m.compact = !lazy_;  // lazy mode leaves holes
  }
  if (!m.compact) return m;
  // The band shrinks by K pages at its inner end. The still-bound pages beyond the new end move,
  // in ascending order, onto the freed pages that stay inside the band, in ascending order.
  const auto k = static_cast<std::int64_t>(m.freed_physical.size());
  std::vector<std::int64_t> movers, targets;
  if (s.grows_up) {
    const std::int64_t new_end = s.band_end() - k;
    for (const auto& [p, v] : s.p2v)
      if (p >= new_end && !m.freed_physical.count(p)) movers.push_back(p);
    for (std::int64_t p : m.freed_physical)
      if (p < new_end) targets.push_back(p);
  } else {
    const std::int64_t new_begin = s.band_begin() + k;
    for (const auto& [p, v] : s.p2v)
      if (p < new_begin && !m.freed_physical.count(p)) movers.push_back(p);
    for (std::int64_t p : m.freed_physical)
      if (p >= new_begin) targets.push_back(p);
  }
  KVTWIN_CHECK(movers.size() == targets.size(), "the shadow pairs as many movers as targets");
  for (std::size_t i = 0; i < movers.size(); ++i) m.moves.emplace_back(movers[i], targets[i]);
  return m;
}

bool PoolShadow::held(std::size_t side, std::int64_t page) const {
  for (const auto& [id, r] : readers_)
    if (r.side == side && r.pages.count(page)) return true;
  return false;
}

Expectation PoolShadow::free_steps(const std::vector<SideMoves>& steps, bool release_ids) {
  for (const SideMoves& step : steps)
    for (const auto& [src, dst] : step.moves) {
      if (held(step.side, src) || held(step.side, dst)) return refuse(ErrorKind::reader_conflict);
      // SPEC 8: nor a page an in-flight transfer resolved.
      if (transfer_holds(step.side, src, false) || transfer_holds(step.side, dst, false))
        return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
    }
  Compaction out;
  for (const SideMoves& step : steps) {
    ShadowSide& s = sides_[step.side];
    for (std::int64_t v : step.freed_virtual) {
      const std::int64_t p = s.v2p.at(v);
      s.v2p.erase(v);
      s.p2v.erase(p);
      rows_[step.side].erase(v);  // a freed page holds no data
      if (!step.compact) s.holes.insert(p);
    }
    for (std::int64_t p : step.freed_physical)
      if (step.compact) s.holes.erase(p);
    for (const auto& [src, dst] : step.moves) {
      const std::int64_t v = s.p2v.at(src);
      s.p2v.erase(src);
      s.p2v[dst] = v;
      s.v2p[v] = dst;
      out.moves.push_back(PageMove{s.name, src, dst});
    }
  }
  if (release_ids) {
    const SideMoves& owner = steps.back();
    for (std::int64_t v : owner.freed_virtual) free_queue_.push_back(v);
    for (auto& group : allocations_)
      group.erase(std::remove_if(group.begin(), group.end(), [&](std::int64_t v) { return owner.freed_virtual.count(v) > 0; }),
                  group.end());
    allocations_.erase(std::remove_if(allocations_.begin(), allocations_.end(), [](const auto& g) { return g.empty(); }),
                       allocations_.end());
  }
  return expect(std::move(out));
}

Expectation PoolShadow::on(const Free& op) {
  std::set<std::int64_t> pages;
  if (auto e = virtual_pages(op.unit, op.ids, pages)) return refuse(*e);
  for (std::int64_t v : pages)
    if (!sides_[0].v2p.count(v)) return refuse(ErrorKind::double_free, reason::not_allocated);
  // docs/host_arena.md: a page being loaded back, or whose page (either side) an offload copies.
  for (std::int64_t v : pages)
    if (loading(v) || transfer_holds(0, sides_[0].physical(v), false))
      return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  if (is_composite())
    for (std::int64_t v : pages)
      if (sides_[1].physical(v) > 0 && transfer_holds(1, sides_[1].physical(v), false))
        return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  std::vector<SideMoves> steps;
  if (is_composite()) {
    // SWA first, only where the SWA page is live (strict > 0: a tombstone is skipped).
    std::set<std::int64_t> swa;
    for (std::int64_t v : pages)
      if (sides_[1].physical(v) > 0) swa.insert(v);
    steps.push_back(plan(1, swa, false));
  }
  steps.push_back(plan(0, pages, false));
  return free_steps(steps, true);
}

Expectation PoolShadow::on(const FreeSwa& op) {
  if (!is_composite()) return refuse(ErrorKind::invalid_argument);
  std::set<std::int64_t> pages;
  if (auto e = virtual_pages(op.unit, op.ids, pages)) return refuse(*e);
  // docs/decisions.md: a page not allocated at all comes first; then an SWA tombstone.
  for (std::int64_t v : pages)
    if (!sides_[0].v2p.count(v)) return refuse(ErrorKind::double_free, reason::not_allocated);
  for (std::int64_t v : pages)
    if (!sides_[1].v2p.count(v)) return refuse(ErrorKind::double_free, reason::left_window);
  for (std::int64_t v : pages)
    if (loading(v) || transfer_holds(1, sides_[1].physical(v), false))
      return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  return free_steps({plan(1, pages, false)}, false);
}

Expectation PoolShadow::on(const Flush&) {
  std::vector<SideMoves> steps;
  for (std::size_t i = sides_.size(); i-- > 0;) steps.push_back(plan(i, {}, true));
  return free_steps(steps, false);
}

// ---------------------------------------------------------------- moves and readers

Expectation PoolShadow::on(const MovePages& op) {
  std::optional<std::size_t> side;
  for (std::size_t i = 0; i < sides_.size(); ++i)
    if (sides_[i].name == op.sub_pool) side = i;
  if (!side) return refuse(ErrorKind::invalid_argument);
  const ShadowSide& s = sides_[*side];
  if (op.src.size() != op.dst.size()) return refuse(ErrorKind::invalid_argument);
  for (const auto* list : {&op.src, &op.dst})
    for (std::int64_t p : *list)
      if (p < s.min_page || p >= s.num_pages) return refuse(ErrorKind::out_of_range);
  std::set<std::int64_t> seen;
  for (const auto* list : {&op.src, &op.dst})
    for (std::int64_t p : *list)
      if (!seen.insert(p).second) return refuse(ErrorKind::invalid_argument);
  for (std::int64_t p : op.dst) {
    if (s.p2v.count(p)) return refuse(ErrorKind::invalid_argument);
    if (is_composite()) {
      const ShadowSide& other = sides_[1 - *side];
      const std::uint64_t begin = static_cast<std::uint64_t>(p) * s.page_bytes, end = begin + s.page_bytes;
      const std::uint64_t other_begin = static_cast<std::uint64_t>(other.band_begin()) * other.page_bytes;
      const std::uint64_t other_end = static_cast<std::uint64_t>(other.band_end()) * other.page_bytes;
      if (begin < other_end && other_begin < end) return refuse(ErrorKind::invalid_argument);
    }
  }
  for (std::size_t i = 0; i < op.src.size(); ++i)
    if (held(*side, op.src[i]) || held(*side, op.dst[i])) return refuse(ErrorKind::reader_conflict);
  for (std::size_t i = 0; i < op.src.size(); ++i)
    if (transfer_holds(*side, op.src[i], false) || transfer_holds(*side, op.dst[i], false) ||
        transfer_touches(*side, op.src[i], true) || transfer_touches(*side, op.dst[i], false))
      return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  return expect(Done{});
}

Expectation PoolShadow::on(const BeginRead& op) {
  if (readers_.count(op.reader)) return refuse(ErrorKind::invalid_argument);
  std::optional<std::size_t> side;
  for (std::size_t i = 0; i < sides_.size(); ++i)
    if (sides_[i].name == op.sub_pool) side = i;
  if (!side) return refuse(ErrorKind::invalid_argument);
  for (std::int64_t p : op.pages)
    if (p < 0 || p >= sides_[*side].num_pages) return refuse(ErrorKind::out_of_range);
  readers_[op.reader] = ShadowReader{*side, std::set<std::int64_t>(op.pages.begin(), op.pages.end())};
  return expect(Done{});
}

Expectation PoolShadow::on(const EndRead& op) {
  if (readers_.erase(op.reader) == 0) return refuse(ErrorKind::invalid_argument);
  return expect(Done{});
}

// ---------------------------------------------------------------- batches and the write door

Expectation PoolShadow::on(const MakeBatch& op) {
  if (batches_.count(op.batch)) return refuse(ErrorKind::invalid_argument);
  if (op.tokens.size() > kMaxLanes) return refuse(ErrorKind::invalid_argument);
  if (!op.encoder_tokens.empty() && op.encoder_tokens.size() != op.tokens.size()) return refuse(ErrorKind::invalid_argument);
  batches_[op.batch] = ShadowBatch{op.tokens, op.tokens, false, op.encoder_tokens};
  return expect(Done{});
}

Expectation PoolShadow::on(const Rebind& op) {
  auto it = batches_.find(op.batch);
  if (it == batches_.end()) return refuse(ErrorKind::invalid_argument);
  ShadowBatch& b = it->second;
  const std::uint64_t n = b.tokens.size();
  const std::uint64_t width = op.out_width == 0 ? n : op.out_width;
  if (width < n || width > kMaxLanes) return refuse(ErrorKind::invalid_argument);
  std::vector<std::int64_t> loc(width, 0);  // lanes past the batch: the sink
  for (std::uint64_t i = 0; i < n; ++i) loc[i] = translate(b.tokens[i]);
  b.loc = loc;
  b.tokens.resize(width, -1);
  if (!b.encoder.empty()) b.encoder.resize(width, 0);
  b.physical = true;
  return expect(Ids{std::move(loc)});
}

Expectation PoolShadow::on(const Split& op) {
  auto it = batches_.find(op.batch);
  if (it == batches_.end()) return refuse(ErrorKind::invalid_argument);
  if (op.left == op.right || batches_.count(op.left) || batches_.count(op.right)) return refuse(ErrorKind::invalid_argument);
  const ShadowBatch parent = it->second;
  if (op.at > parent.loc.size()) return refuse(ErrorKind::out_of_range);
  auto part = [&](std::size_t begin, std::size_t end) {
    ShadowBatch c;
    c.tokens.assign(parent.tokens.begin() + static_cast<std::ptrdiff_t>(begin), parent.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    c.loc.assign(parent.loc.begin() + static_cast<std::ptrdiff_t>(begin), parent.loc.begin() + static_cast<std::ptrdiff_t>(end));
    if (!parent.encoder.empty())
      c.encoder.assign(parent.encoder.begin() + static_cast<std::ptrdiff_t>(begin), parent.encoder.begin() + static_cast<std::ptrdiff_t>(end));
    c.physical = parent.physical;  // both children keep the parent's mark
    return c;
  };
  batches_[op.left] = part(0, op.at);
  batches_[op.right] = part(op.at, parent.loc.size());
  return expect(Marks{parent.physical, parent.physical});
}

Expectation PoolShadow::on(const DropBatch& op) {
  if (batches_.erase(op.batch) == 0) return refuse(ErrorKind::invalid_argument);
  return expect(Done{});
}

std::optional<Error> PoolShadow::check_write(std::uint32_t model_layer, const std::vector<std::int64_t>& loc) const {
  const auto error = [](ErrorKind kind, std::string_view why = {}) {
    return Error{kind, "(predicted by the shadow)", std::string(why)};
  };
  const LayerPlacement& place = derived_.plan.layer_map[model_layer];
  const bool swa = place.kind == LayerKind::swa;
  const std::size_t loc_side = swa ? 0 : place.sub_pool;
  for (std::int64_t k : loc)
    if (k < 0 || k >= slots(loc_side)) return error(ErrorKind::out_of_range);
  const std::int64_t sink_end = sides_[place.sub_pool].min_page * page_size_;
  std::set<std::int64_t> seen;
  for (std::int64_t k : loc) {
    const std::int64_t final_loc = swa ? swa_of(k) : k;
    if (final_loc >= sink_end && !seen.insert(final_loc).second) return error(ErrorKind::duplicate_loc);
  }
  // docs/host_arena.md: no row goes into a page an in-flight transfer copies.
  for (std::int64_t k : loc) {
    const std::int64_t final_loc = swa ? swa_of(k) : k;
    if (final_loc >= sink_end && transfer_touches(place.sub_pool, final_loc / page_size_, false))
      return error(ErrorKind::reader_conflict, reason::transfer_in_flight);
  }
  return std::nullopt;
}

Expectation PoolShadow::on(const Write& op) {
  if (op.layer >= derived_.plan.layer_map.size()) return refuse(ErrorKind::out_of_range);
  std::vector<std::int64_t> loc;
  bool marked = false;
  if (op.batch) {
    if (!op.loc.empty() || !op.tokens.empty() || op.physical) return refuse(ErrorKind::invalid_argument);
    auto it = batches_.find(*op.batch);
    if (it == batches_.end()) return refuse(ErrorKind::invalid_argument);
    if (derived_.plan.layer_map[op.layer].kind == LayerKind::cross) {
      if (it->second.encoder.empty()) return refuse(ErrorKind::invalid_argument);
      loc = it->second.encoder;  // never marked
    } else {
      loc = it->second.loc;
      marked = it->second.physical;
    }
  } else {
    if (op.loc.size() != op.tokens.size() || op.loc.size() > kMaxLanes) return refuse(ErrorKind::invalid_argument);
    loc = op.loc;
    marked = op.physical;
  }
  if (!marked) return refuse(ErrorKind::unmarked_loc);
  if (auto e = check_write(op.layer, loc)) return refuse(*e);
  std::vector<std::int64_t> tokens = op.tokens;
  if (op.batch) {
    const ShadowBatch& b = batches_.at(*op.batch);
    tokens = b.tokens;
  }
  tokens.resize(loc.size(), -1);
  record_write(op.layer, loc, tokens, op.write_number);
  return expect(Done{});
}

// ---------------------------------------------------------------- content

std::uint64_t PoolShadow::row_offset(std::size_t side, std::int64_t pt, std::uint32_t layer, std::size_t part) const {
  // SPEC 2: byte(pt, part, l) = pt * E + part.offset + l * part.layer_stride.
  const DenseEntryLayout& layout = derived_.layouts[side];
  const DensePart& p = layout.parts[part];
  return static_cast<std::uint64_t>(pt) * layout.entry_bytes + p.offset_bytes + std::uint64_t{layer} * p.layer_stride_bytes;
}

void PoolShadow::forget_overlaps(std::size_t written_side, std::uint64_t begin, std::uint64_t end) {
  for (std::size_t o = 0; o < sides_.size(); ++o) {
    if (o == written_side) continue;
    const ShadowSide& other = sides_[o];
    const DenseEntryLayout& layout = derived_.layouts[o];
    for (std::int64_t p = static_cast<std::int64_t>(begin / other.page_bytes);
         p <= static_cast<std::int64_t>((end - 1) / other.page_bytes) && p < other.num_pages; ++p) {
      auto bound = other.p2v.find(p);
      if (bound == other.p2v.end()) continue;
      auto page = rows_[o].find(bound->second);
      if (page == rows_[o].end()) continue;
      for (auto it = page->second.begin(); it != page->second.end();) {
        const std::uint64_t at = row_offset(o, p * page_size_ + it->first.slot, it->first.layer, it->first.part);
        const std::uint64_t len = layout.parts[it->first.part].row_bytes();
        it = at < end && begin < at + len ? page->second.erase(it) : std::next(it);
      }
    }
  }
}

void PoolShadow::record_write(std::uint32_t model_layer, const std::vector<std::int64_t>& loc,
                              const std::vector<std::int64_t>& tokens, std::uint64_t write_number) {
  if (config_.tables_only) return;
  const LayerPlacement& place = derived_.plan.layer_map[model_layer];
  const bool swa = place.kind == LayerKind::swa;
  const std::size_t side = place.sub_pool;
  const ShadowSide& s = sides_[side];
  const std::int64_t sink_end = s.min_page * page_size_;
  const DenseEntryLayout& layout = derived_.layouts[side];
  for (std::size_t i = 0; i < loc.size(); ++i) {
    const std::int64_t pt = swa ? swa_of(loc[i]) : loc[i];
    if (pt < sink_end) continue;  // SPEC 6: a lane at the sink is discarded
    const std::int64_t page = pt / page_size_;
    auto bound = s.p2v.find(page);
    for (std::size_t part = 0; part < layout.parts.size(); ++part) {
      const std::uint64_t at = row_offset(side, pt, place.local_layer, part);
      forget_overlaps(side, at, at + layout.parts[part].row_bytes());
      // A row of an unbound page is not data (its bytes are written, nobody will read them).
      if (bound != s.p2v.end())
        rows_[side][bound->second][RowKey{pt % page_size_, place.local_layer, part}] = RowSource{tokens[i], write_number};
    }
  }
}

std::optional<std::vector<std::uint8_t>> PoolShadow::known_row(std::size_t side, std::int64_t pt, std::uint32_t layer,
                                                               std::size_t part) const {
  const ShadowSide& s = sides_[side];
  auto bound = s.p2v.find(pt / page_size_);
  if (pt < s.min_page * page_size_ || bound == s.p2v.end()) return std::nullopt;
  auto page = rows_[side].find(bound->second);
  if (page == rows_[side].end()) return std::nullopt;
  auto row = page->second.find(RowKey{pt % page_size_, layer, part});
  if (row == page->second.end()) return std::nullopt;
  const DensePart& p = derived_.layouts[side].parts[part];
  std::vector<std::uint8_t> bytes(p.row_bytes());
  const RowIdentity id{row->second.token, static_cast<std::uint32_t>(side), layer, static_cast<std::uint32_t>(part),
                       row->second.write_number};
  fill_oracle_row(config_.seed, id, p.dtype, bytes);
  return bytes;
}

Expectation PoolShadow::on(const Read& op) {
  if (config_.tables_only) return refuse(ErrorKind::unsupported);
  if (op.layer >= derived_.plan.layer_map.size()) return refuse(ErrorKind::out_of_range);
  const LayerPlacement& place = derived_.plan.layer_map[op.layer];
  const DenseEntryLayout& layout = derived_.layouts[place.sub_pool];
  const std::optional<std::size_t> part = layout.part_index(op.part);
  if (!part) return refuse(ErrorKind::invalid_argument);
  for (std::int64_t id : op.ids)
    if (id < 0 || id >= slots(place.sub_pool)) return refuse(ErrorKind::out_of_range);
  // A load-back's pages hold nothing readable until its wait.
  for (std::int64_t id : op.ids)
    if (id >= sides_[place.sub_pool].min_page * page_size_ && transfer_touches(place.sub_pool, id / page_size_, true))
      return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  Bytes b;
  const std::uint64_t row_bytes = layout.parts[*part].row_bytes();
  b.size = op.ids.size() * row_bytes;
  Expectation e = expect(b, true);
  PredictedRows rows;
  rows.row_bytes = row_bytes;
  rows.bytes.assign(b.size, 0);
  rows.known.assign(op.ids.size(), false);
  for (std::size_t i = 0; i < op.ids.size(); ++i) {
    if (std::optional<std::vector<std::uint8_t>> row = known_row(place.sub_pool, op.ids[i], place.local_layer, *part)) {
      std::copy(row->begin(), row->end(), rows.bytes.begin() + static_cast<std::ptrdiff_t>(i * row_bytes));
      rows.known[i] = true;
    }
  }
  e.rows = std::move(rows);
  return e;
}

// ---------------------------------------------------------------- translation

Expectation PoolShadow::on(const Translate& op) {
  const Expectation bad = refuse(ErrorKind::invalid_argument);
  if (op.shape.size() != 1 && op.shape.size() != 2) return bad;
  for (std::int64_t d : op.shape)
    if (d < 0) return bad;
  const bool two = op.shape.size() == 2;
  const auto lanes = static_cast<std::uint64_t>(op.shape[0]);
  const std::uint64_t cols = two ? static_cast<std::uint64_t>(op.shape[1]) : 1;
  std::uint64_t count = 0;
  if (__builtin_mul_overflow(lanes, cols, &count) || count != op.ids.size()) return bad;
  if (op.index_dtype == IndexDtype::int32)
    for (std::int64_t id : op.ids)
      if (id < std::numeric_limits<std::int32_t>::min() || id > std::numeric_limits<std::int32_t>::max()) return bad;
  if (op.out_dtype != IndexDtype::int64) return bad;
  if (op.out_width != 0 && (two || op.out_width < lanes || op.out_width > kMaxTranslateElements)) return bad;
  const std::uint64_t out_lanes = op.out_width != 0 ? op.out_width : lanes;
  const bool alias = op.out == OutPlacement::alias;
  if (alias && op.index_dtype != IndexDtype::int64) return bad;
  if (op.out == OutPlacement::fresh && op.out_stride != 0) return bad;
  if (!buffer_fits(two, alias ? out_lanes : lanes, cols, op.input_stride)) return bad;
  if (alias && op.out_stride != 0 &&
      static_cast<std::uint64_t>(op.out_stride) != effective_stride(two, cols, op.input_stride))
    return bad;
  if (!buffer_fits(two, out_lanes, cols, alias ? op.input_stride : op.out_stride)) return bad;
  Ids out;
  for (std::int64_t id : op.ids) out.values.push_back(translate(id));
  out.values.resize(out_lanes * cols, 0);  // lanes N .. W-1 hold the sink
  return expect(std::move(out));
}

Expectation PoolShadow::on(const SwaTranslate& op) {
  if (!is_composite()) return refuse(ErrorKind::invalid_argument);
  Ids out;
  for (std::int64_t k : op.ids) out.values.push_back(swa_of(k));
  return expect(std::move(out));
}

Expectation PoolShadow::on(const PageTable& op) {
  const std::size_t bs = op.req.size();
  if (op.seq_len.size() != bs || op.prior.size() != bs) return refuse(ErrorKind::invalid_argument);
  const auto ps = static_cast<std::uint64_t>(page_size_);
  for (std::size_t b = 0; b < bs; ++b) {
    if (op.req[b] < 0 || static_cast<std::uint64_t>(op.req[b]) >= op.req_to_token.size()) return refuse(ErrorKind::out_of_range);
    if (op.seq_len[b] < 0) return refuse(ErrorKind::invalid_argument);
    const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(op.seq_len[b]), ps);
    if (pages > op.prior[b].size()) return refuse(ErrorKind::out_of_range);
    if (pages > 0 && (pages - 1) * ps >= op.req_to_token[static_cast<std::size_t>(op.req[b])].size())
      return refuse(ErrorKind::out_of_range);
  }
  Table t{op.prior};
  for (std::size_t b = 0; b < bs; ++b) {
    const auto& row = op.req_to_token[static_cast<std::size_t>(op.req[b])];
    for (std::uint64_t c = 0; c < ceil_div(static_cast<std::uint64_t>(op.seq_len[b]), ps); ++c)
      t.rows[b][c] = translate(row[c * ps]) / page_size_;  // the page of the token's first slot
  }
  return expect(std::move(t));
}

Expectation PoolShadow::on(const RemapIndices& op) {
  if (op.bs >= op.kv_indptr.size()) return refuse(ErrorKind::invalid_argument);
  for (std::uint64_t b = 0; b <= op.bs; ++b)
    if (op.kv_indptr[b] < 0 || (b > 0 && op.kv_indptr[b] < op.kv_indptr[b - 1])) return refuse(ErrorKind::invalid_argument);
  const auto end = static_cast<std::uint64_t>(op.kv_indptr[op.bs]);
  if (end > op.kv_indices.size()) return refuse(ErrorKind::out_of_range);
  Ids out{op.kv_indices};
  for (std::uint64_t i = 0; i < end; ++i) out.values[i] = translate(out.values[i]);
  return expect(std::move(out));
}

// ---------------------------------------------------------------- the decode step

Expectation PoolShadow::on(const Capture& op) {
  if (graphs_.count(op.graph)) return refuse(ErrorKind::invalid_argument);
  if (op.max_batch == 0 || op.max_pages == 0 || std::uint64_t{op.max_batch} * op.max_pages > kMaxLanes)
    return refuse(ErrorKind::invalid_argument);
  if (op.layer >= derived_.plan.layer_map.size()) return refuse(ErrorKind::out_of_range);
  const LayerPlacement& place = derived_.plan.layer_map[op.layer];
  if (place.kind == LayerKind::swa || place.kind == LayerKind::cross) return refuse(ErrorKind::invalid_argument);
  const std::uint32_t kv_heads = derived_.plan.sub_pools[place.sub_pool].heads_per_rank;
  if (op.query_heads == 0 || op.query_heads % kv_heads != 0) return refuse(ErrorKind::invalid_argument);
  graphs_[op.graph] = ShadowGraph{op, std::vector<std::int64_t>(op.max_batch, 0),
                                  std::vector<std::vector<std::int64_t>>(op.max_batch, std::vector<std::int64_t>(op.max_pages, 0))};
  return expect(Done{});
}

Expectation PoolShadow::on(const Replay& op) {
  auto it = graphs_.find(op.graph);
  if (it == graphs_.end()) return refuse(ErrorKind::invalid_argument);
  ShadowGraph& g = it->second;
  const std::size_t bs = op.requests.size();
  if (bs > g.shape.max_batch) return refuse(ErrorKind::out_of_range);
  const auto ps = static_cast<std::uint64_t>(page_size_);
  for (const auto& request : op.requests) {
    if (request.empty()) return refuse(ErrorKind::invalid_argument);
    if (ceil_div(request.size(), ps) > g.shape.max_pages) return refuse(ErrorKind::out_of_range);
    for (std::int64_t t : request)
      if (t < 0 || !sides_[0].v2p.count(t / page_size_)) return refuse(ErrorKind::invalid_argument);
  }
  for (const auto& request : op.requests)
    for (std::int64_t t : request)
      if (loading(t / page_size_)) return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  // Every lane past the batch is the sink; every bound comes from this batch.
  std::vector<std::int64_t> loc(g.shape.max_batch, 0);
  for (std::size_t b = 0; b < bs; ++b) loc[b] = translate(op.requests[b].back());
  for (std::uint32_t l = 0; l < derived_.plan.layer_map.size(); ++l) {
    if (derived_.plan.layer_map[l].kind == LayerKind::cross) continue;  // no decoder rows
    if (auto e = check_write(l, loc)) return refuse(*e);
  }
  g.loc = loc;
  std::vector<std::int64_t> new_tokens(loc.size(), -1);
  for (std::size_t b = 0; b < bs; ++b) new_tokens[b] = op.requests[b].back();
  for (std::uint32_t l = 0; l < derived_.plan.layer_map.size(); ++l)
    if (derived_.plan.layer_map[l].kind != LayerKind::cross) record_write(l, loc, new_tokens, op.write_number);
  for (std::size_t b = 0; b < bs; ++b)
    for (std::uint64_t c = 0; c < ceil_div(op.requests[b].size(), ps); ++c)
      g.table[b][c] = translate(op.requests[b][c * ps]) / page_size_;
  const LayerPlacement& place = derived_.plan.layer_map[g.shape.layer];
  Decode d{g.loc, g.table, Bytes{}};
  d.attention.size = config_.tables_only ? 0
                                         : std::uint64_t{bs} * g.shape.query_heads *
                                               derived_.plan.sub_pools[place.sub_pool].v_head_dim * sizeof(float);
  if (config_.tables_only) {
    d.attention = Bytes::of({});  // no bytes, no attention
    return expect(std::move(d));
  }
  std::vector<std::int64_t> lengths(bs);
  for (std::size_t b = 0; b < bs; ++b) lengths[b] = static_cast<std::int64_t>(op.requests[b].size());
  if (std::optional<std::vector<std::uint8_t>> attention = predict_attention(g, bs, lengths, op.query_seed)) {
    d.attention = Bytes::of(std::move(*attention));
    return expect(std::move(d));
  }
  return expect(std::move(d), true);
}

namespace {
// An element of a row as float, exactly (the pool's dtype to fp32).
float element(const std::vector<std::uint8_t>& row, DType dtype, std::uint64_t index) {
  const std::uint8_t* p = row.data() + index * dtype_size_bytes(dtype);
  std::uint16_t half = 0;
  std::uint32_t word = 0;
  switch (dtype) {
    case DType::bf16:
      std::memcpy(&half, p, 2);
      return det::bf16_to_float(half);
    case DType::fp16:
      std::memcpy(&half, p, 2);
      return det::fp16_to_float(half);
    case DType::fp8_e4m3:
      return det::fp8e4m3_to_float(*p);
    case DType::fp32:
      std::memcpy(&word, p, 4);
      return det::from_bits(word);
  }
  return 0.0f;
}
}  // namespace

std::optional<std::vector<std::uint8_t>> PoolShadow::predict_attention(const ShadowGraph& g, std::size_t bs,
                                                                       const std::vector<std::int64_t>& lengths,
                                                                       std::uint64_t query_seed) const {
  // docs/decisions.md "The decode step and its reference attention", written again from the
  // formulas: position j of request b is physical token table[b][j // ps] * ps + j % ps; scores
  // s_j = (sum_d q[d] * k_j[d]) * scale in order; m the running maximum; p_j = exp(s_j - m);
  // out[e] = (sum_j p_j * v_j[e]) / (sum_j p_j). Every row must be known, else nullopt.
  const LayerPlacement& place = derived_.plan.layer_map[g.shape.layer];
  const SubPoolSpec& spec = derived_.plan.sub_pools[place.sub_pool];
  const DenseEntryLayout& layout = derived_.layouts[place.sub_pool];
  const bool mla = spec.kind == SubPoolKind::mla;
  const std::size_t k_part = *layout.part_index(mla ? "kv" : "k");
  const std::size_t v_part = *layout.part_index(mla ? "kv" : "v");
  const DType k_dtype = layout.parts[k_part].dtype, v_dtype = layout.parts[v_part].dtype;
  const std::uint64_t v_head_stride = layout.parts[v_part].head_dim();
  const std::uint32_t group = g.shape.query_heads / spec.heads_per_rank;
  const float scale = det::div(1.0f, det::sqrt(static_cast<float>(spec.k_head_dim)));
  std::vector<float> out(bs * g.shape.query_heads * spec.v_head_dim, 0.0f);
  for (std::size_t b = 0; b < bs; ++b) {
    const auto len = static_cast<std::size_t>(lengths[b]);
    std::vector<std::vector<std::uint8_t>> k_rows(len), v_rows(len);
    for (std::size_t j = 0; j < len; ++j) {
      const std::int64_t pt = g.table[b][j / static_cast<std::size_t>(page_size_)] * page_size_ +
                              static_cast<std::int64_t>(j) % page_size_;
      std::optional<std::vector<std::uint8_t>> k = known_row(place.sub_pool, pt, place.local_layer, k_part);
      std::optional<std::vector<std::uint8_t>> v = known_row(place.sub_pool, pt, place.local_layer, v_part);
      if (!k || !v) return std::nullopt;
      k_rows[j] = std::move(*k);
      v_rows[j] = std::move(*v);
    }
    for (std::uint32_t h = 0; h < g.shape.query_heads; ++h) {
      const std::uint32_t kv_head = h / group;
      std::vector<float> s(len), p(len);
      for (std::size_t j = 0; j < len; ++j) {
        float acc = 0.0f;
        for (std::uint32_t d = 0; d < spec.k_head_dim; ++d)
          acc = det::add(acc, det::mul(oracle_query_value(query_seed, static_cast<std::uint32_t>(b), h, d),
                                       element(k_rows[j], k_dtype, std::uint64_t{kv_head} * spec.k_head_dim + d)));
        s[j] = det::mul(acc, scale);
      }
      float m = len > 0 ? s[0] : 0.0f;
      for (std::size_t j = 1; j < len; ++j) m = s[j] > m ? s[j] : m;
      float l = 0.0f;
      for (std::size_t j = 0; j < len; ++j) {
        p[j] = det::exp_nonpositive(det::sub(s[j], m));
        l = det::add(l, p[j]);
      }
      for (std::uint32_t e = 0; e < spec.v_head_dim; ++e) {
        float acc = 0.0f;
        for (std::size_t j = 0; j < len; ++j)
          acc = det::add(acc, det::mul(p[j], element(v_rows[j], v_dtype, kv_head * v_head_stride + e)));
        out[(b * g.shape.query_heads + h) * spec.v_head_dim + e] = det::div(acc, l);
      }
    }
  }
  std::vector<std::uint8_t> bytes(out.size() * sizeof(float));
  if (!bytes.empty()) std::memcpy(bytes.data(), out.data(), bytes.size());
  return bytes;
}

Expectation PoolShadow::on(const Checkpoint&) { return expect(Done{}); }

// The host arena and transfers (SPEC 8): props/shadow_host.cpp.
void PoolShadow::learn(const Op& op, const OpResult& result) {
  if (!hybrid_ || !result.ok()) return;
  const auto bind = [&](const std::vector<std::int64_t>& pages) {
    if (pages.empty()) return;
    allocations_.push_back(pages);
    for (std::int64_t v : pages)
      for (ShadowSide& s : sides_) s.v2p[v] = 0;  // physical pages are not tracked here
  };
  const auto unbind = [&](std::size_t from_side, IdUnit unit, const std::vector<std::int64_t>& ids) {
    std::set<std::int64_t> gone;
    for (std::int64_t id : ids) gone.insert(unit == IdUnit::tokens ? id / page_size_ : id);
    for (std::size_t i = from_side; i < sides_.size(); ++i)
      for (std::int64_t v : gone) sides_[i].v2p.erase(v);
    if (from_side != 0) return;
    for (auto& a : allocations_) a.erase(std::remove_if(a.begin(), a.end(), [&](std::int64_t v) { return gone.count(v) != 0; }), a.end());
    allocations_.erase(std::remove_if(allocations_.begin(), allocations_.end(), [](const auto& a) { return a.empty(); }),
                       allocations_.end());
  };
  const Outcome& out = result.value();
  if (const auto* o = std::get_if<Alloc>(&op); o && std::holds_alternative<Allocated>(out)) bind(std::get<Allocated>(out).pages);
  if (std::holds_alternative<AllocMany>(op) && std::holds_alternative<AllocatedMany>(out))
    for (const auto& pages : std::get<AllocatedMany>(out).pages) bind(pages);
  if (const auto* o = std::get_if<Free>(&op)) unbind(0, o->unit, o->ids);
  if (const auto* o = std::get_if<FreeSwa>(&op)) unbind(1, o->unit, o->ids);
  if (const auto* o = std::get_if<StateAlloc>(&op); o && std::holds_alternative<Allocated>(out))
    state_requests_.insert(o->request);
  if (const auto* o = std::get_if<StateFree>(&op)) state_requests_.erase(o->request);
  if (const auto* o = std::get_if<MakeBatch>(&op)) batches_[o->batch] = ShadowBatch{o->tokens, o->tokens, false, o->encoder_tokens};
  if (const auto* o = std::get_if<Rebind>(&op); o && batches_.count(o->batch)) batches_[o->batch].physical = true;
  if (const auto* o = std::get_if<DropBatch>(&op)) batches_.erase(o->batch);
  if (const auto* o = std::get_if<BeginRead>(&op)) readers_[o->reader] = ShadowReader{0, std::set<std::int64_t>(o->pages.begin(), o->pages.end())};
  if (const auto* o = std::get_if<EndRead>(&op)) readers_.erase(o->reader);
}

// A token chain has no state sub-pool: every state operation is refused (SPEC 11).
Expectation PoolShadow::on(const StateAlloc&) { return refuse(ErrorKind::invalid_argument); }
Expectation PoolShadow::on(const StateFree&) { return refuse(ErrorKind::invalid_argument); }
Expectation PoolShadow::on(const StateWrite&) { return refuse(ErrorKind::invalid_argument); }
Expectation PoolShadow::on(const StateRead&) { return refuse(ErrorKind::invalid_argument); }
Expectation PoolShadow::on(const StateSlots&) { return refuse(ErrorKind::invalid_argument); }

}  // namespace kvtwin::props
