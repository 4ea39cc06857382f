// The reference model. See model.h for what it is; each handler below cites the SPEC.md rule
// (or the docs/decisions.md entry) it implements. Every handler validates the whole operation
// before it changes anything.
#include "sim/model.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/bytes_digest.h"
#include "core/check.h"
#include "core/checked.h"
#include "core/printable.h"
#include "core/reasons.h"
#include "core/rng.h"
#include "core/table_check.h"
#include "core/tables_digest.h"
#include "sim/allocation_faults.h"
#include "sim/attention.h"
#include "sim/model_state.h"
#include "sim/chain_alloc.h"
#include "sim/translation.h"

namespace kvtwin::sim {
namespace {

std::string num(std::uint64_t v) { return std::to_string(v); }
std::string num(std::int64_t v) { return std::to_string(v); }
std::string num(std::uint32_t v) { return std::to_string(v); }

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }

// "[3, 5, 9]", at most `limit` ids then "...".
std::string list_ids(const std::vector<std::int64_t>& ids, std::size_t limit = 8) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size() && i < limit; ++i) out += (i ? ", " : "") + num(ids[i]);
  if (ids.size() > limit) out += ", ... (" + num(std::uint64_t{ids.size()}) + " in all)";
  return out + "]";
}

std::vector<std::int64_t> sorted_unique(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}


}  // namespace

// ---------------------------------------------------------------- the pool's state (sim/model_state.h)

Model::Model() = default;
Model::~Model() = default;

const PoolConfig& Model::config() const {
  KVTWIN_CHECK(built(), "config() needs a built pool");
  return pool_->config;
}

const PoolDerived& Model::derived() const {
  KVTWIN_CHECK(built(), "derived() needs a built pool");
  return pool_->derived;
}

std::vector<PagePair> Model::pair_for_compaction(const std::vector<std::int64_t>& survivors,
                                                 const std::vector<std::int64_t>& holes) const {
  return pair_in_order(survivors, holes);  // SPEC 4.1: paired in order, both ascending
}

std::span<std::uint8_t> Model::bytes_for_test() {
  KVTWIN_CHECK(built(), "bytes_for_test() needs a built pool");
  return pool_->bytes ? pool_->bytes->writable(0, pool_->bytes->size()) : std::span<std::uint8_t>();
}

PageAllocator& Model::allocator_for_test() {
  KVTWIN_CHECK(built(), "allocator_for_test() needs a built pool");
  digest_stale_ = true;  // a seam may change rows without recording them
  return pool_->allocator;
}

StateAllocator& Model::state_for_test() {
  KVTWIN_CHECK(built() && pool_->state, "state_for_test() needs a built hybrid chain");
  return *pool_->state;
}

const PageAllocator& Model::allocator_view() const {
  KVTWIN_CHECK(built(), "allocator_view() needs a built pool");
  return pool_->allocator;
}

PairingRule Model::pairing() const {
  return [this](const std::vector<std::int64_t>& survivors, const std::vector<std::int64_t>& holes) {
    return pair_for_compaction(survivors, holes);
  };
}

// ---------------------------------------------------------------- dispatch

const std::vector<ByteRange>& Model::touched_bytes() const { return touched_; }

bool Model::add_touched(std::uint64_t offset, std::uint64_t length) {
  if (!touched_.empty()) {
    ByteRange& last = touched_.back();
    if (offset >= last.offset && offset + length <= last.offset + last.length) return false;  // already noted
    if (offset == last.offset + last.length) {
      last.length += length;
      return true;
    }
  }
  touched_.push_back(ByteRange{offset, length});
  return true;
}

void Model::note_touched(std::uint64_t offset, std::uint64_t length) {
  touched_sum_holds_ = false;
  (void)add_touched(offset, length);
}

void Model::note_written_row(std::uint64_t offset, std::uint64_t length) {
  const PoolBytes& bytes = *pool_->bytes;
  // This row is the one write since the last row noted, and whole words: the ranges noted so far
  // are exactly the bytes written (a merge with an adjacent row then splits no word).
  const bool only_this_row = bytes.writes() == touched_sum_writes_ + 1 && bytes.last_written() == ByteRange{offset, length};
  const bool words = offset % 8 == 0 && length % 8 == 0;
  const bool new_range = add_touched(offset, length);
  if (!touched_sum_holds_ || !only_this_row || !words || !new_range) {
    touched_sum_holds_ = false;
    return;
  }
  touched_sum_writes_ = bytes.writes();
  if (touched_digest_asked_) touched_sum_ += bytes_digest_of_range(offset, bytes.range(offset, length));
}

std::optional<std::uint64_t> Model::touched_digest() const {
  if (!touched_sum_holds_ || built_this_op_ || !pool_ || !pool_->bytes || pool_->bytes->writes() != touched_sum_writes_)
    return std::nullopt;
  // Only a runner beside another backend asks, and it asks after every operation: from its first
  // question on, each row is digested as it is written (in cache); until then, a replay on the
  // model alone never pays for it, and the first answer is summed over the rows noted.
  if (touched_digest_asked_) return touched_sum_;
  touched_digest_asked_ = true;
  std::uint64_t sum = 0;
  for (const ByteRange& r : touched_) sum += bytes_digest_of_range(r.offset, pool_->bytes->range(r.offset, r.length));
  return sum;
}

OpResult Model::apply(const Op& op) {
  touched_.clear();
  touched_sum_ = 0;
  touched_sum_holds_ = true;
  touched_sum_writes_ = pool_ && pool_->bytes ? pool_->bytes->writes() : 0;
  built_this_op_ = std::holds_alternative<BuildPool>(op);
  // Batch lanes change only through these (WriteLoc::Source).
  if (std::holds_alternative<BuildPool>(op) || std::holds_alternative<MakeBatch>(op) || std::holds_alternative<Rebind>(op) ||
      std::holds_alternative<Split>(op) || std::holds_alternative<DropBatch>(op))
    ++batches_epoch_;
  if (built_this_op_) {
    locs_in_range_.clear();
    duplicate_free_locs_.clear();
  }
  readers_changed_ = false;
  host_tables_changed_ = false;
  host_pages_changed_.clear();
  state_changed_ = false;
  state_slots_written_.clear();
  state_requests_changed_.clear();
  if (pool_) {
    pool_->allocator.clear_changes();
    pool_->ledger.clear_changes();
    if (pool_->state) pool_->state->clear_changes();
  }
  if (!poisoned_.empty())
    return make_error(ErrorKind::environment,
                      "the model refuses every operation since it ran out of memory: " + poisoned_);
  if (!pool_ && !std::holds_alternative<BuildPool>(op))
    return invalid("'" + std::string(op_name(op)) + "' needs a pool, and none is built yet; the first operation must "
                   "be build");
  try {
    OpResult result = std::visit([this](const auto& o) { return on(o); }, op);
    absorb_table_changes();
    return result;
  } catch (const std::bad_alloc&) {
    return out_of_memory(op);
  } catch (const std::length_error&) {
    return out_of_memory(op);
  }
}

// An allocation failed (for real, or by the injector of allocation_faults.h). A build makes the
// new pool before it replaces the old one, so a failed build leaves the state as it was; any
// other operation may have failed halfway through its changes, so the model is poisoned.
OpResult Model::out_of_memory(const Op& op) {
  const std::string what = "out of memory in '" + std::string(op_name(op)) + "'";
  if (std::holds_alternative<BuildPool>(op))
    return make_error(ErrorKind::environment, what + "; the pool is as it was (try a smaller pool, or tables_only)");
  poisoned_ = what;
  return make_error(ErrorKind::environment,
                    what + "; the model's state is no longer known, and it refuses every later operation");
}

// ---------------------------------------------------------------- build (SPEC 3)

OpResult Model::on(const BuildPool& op) {
  KVTWIN_TRY(PoolDerived derived, derive_pool(op.config));
  for (const SubPoolGeometry& g : derived.geometry.sub_pools)
    if (g.num_pages > kMaxModelPages)
      return make_error(ErrorKind::unsupported,
                        "sub-pool '" + g.name + "' has " + num(g.num_pages) + " pages; the model keeps dense tables of "
                        "at most " + num(kMaxModelPages) + " pages per sub-pool; use a larger page size or fewer bytes");
  if (!op.config.tables_only && op.config.total_bytes > kMaxModelPoolBytes)
    return make_error(ErrorKind::unsupported,
                      "a pool of " + num(op.config.total_bytes) + " bytes is larger than the model's byte buffer limit "
                      "of " + num(kMaxModelPoolBytes) + " bytes; set tables_only: true to replay it without bytes");
  // SPEC 8: the host arena of host_bytes, one side per sub-pool in chain order, a side's host page
  // its device page envelope (docs/host_arena.md).
  std::optional<HostArena> host;
  if (op.config.host_bytes != 0) {
    if (!op.config.tables_only && op.config.host_bytes > kMaxModelPoolBytes)
      return make_error(ErrorKind::unsupported,
                        "a host arena of " + num(op.config.host_bytes) + " bytes is larger than the model's byte "
                        "buffer limit of " + num(kMaxModelPoolBytes) + " bytes; set tables_only: true or fewer host_bytes");
    HostArenaConfig hc;
    hc.total_bytes = op.config.host_bytes;
    hc.with_bytes = !op.config.tables_only;
    for (const DenseEntryLayout& layout : derived.layouts)
      hc.sides.push_back(HostSideConfig{layout.sub_pool, op.config.page_size, layout.entry_bytes});
    Result<HostArena> arena = HostArena::create(hc);
    if (!arena.ok()) return arena.error().with_context("host_bytes: ");
    if (static_cast<std::uint64_t>(arena->page_num()) > kMaxModelPages)
      return make_error(ErrorKind::unsupported,
                        "the host arena has " + num(static_cast<std::uint64_t>(arena->page_num())) +
                            " pages per side; the model keeps dense tables of at most " + num(kMaxModelPages) +
                            "; use fewer host_bytes or a larger page size");
    host = std::move(arena).value();
  }
  // Building (or rebuilding) replaces the whole state: tables, bytes, batches, readers, graphs,
  // the host arena and every transfer in flight.
  pool_ = std::make_unique<Pool>(op.config, std::move(derived), std::move(host));
  return Outcome(Done{});
}

// ---------------------------------------------------------------- allocation (SPEC 4, 4.3)

OpResult Model::on(const Alloc& op) {
  const auto ps = static_cast<std::uint64_t>(pool_->page_size);
  // SPEC 4: n % page_size != 0 is an error; n == 0 returns nothing.
  if (op.tokens % ps != 0) {
    // The nearest whole numbers of pages around it (the one above only when it fits 64 bits).
    const std::uint64_t below = op.tokens / ps * ps;
    const bool above_fits = below <= UINT64_MAX - ps;
    return invalid("alloc of " + num(op.tokens) + " tokens is not a whole number of pages of " + num(ps) +
                   " tokens; allocate " + num(below) + (above_fits ? " or " + num(below + ps) : std::string()) +
                   " tokens");
  }
  const std::uint64_t k = op.tokens / ps;
  if (k == 0) return Outcome(Allocated{});
  if (pool_->state) return alloc_hybrid(k, nullptr);  // SPEC 11: the chain's ends share the budget
  // "No room" is a normal result, with nothing changed.
  if (!pool_->allocator.fits(k)) return Outcome(NoRoom{});
  return Outcome(Allocated{pool_->allocator.alloc(k)});
}

OpResult Model::on(const AllocMany& op) {
  const auto ps = static_cast<std::uint64_t>(pool_->page_size);
  if (op.tokens.empty()) return invalid("alloc_many needs at least one request; use alloc for a single one");
  std::uint64_t total_pages = 0;
  for (std::size_t i = 0; i < op.tokens.size(); ++i) {
    if (op.tokens[i] % ps != 0)
      return invalid("alloc_many request " + num(std::uint64_t{i}) + " of " + num(op.tokens[i]) +
                     " tokens is not a whole number of pages of " + num(ps) + " tokens; round it to a multiple of " + num(ps));
    KVTWIN_TRY(total_pages, checked_add(total_pages, op.tokens[i] / ps, "alloc_many page count"));
  }
  if (pool_->state) {
    std::vector<std::uint64_t> split;
    for (std::uint64_t n : op.tokens) split.push_back(n / ps);
    return alloc_hybrid(total_pages, &split);
  }
  // SPEC 4: all or nothing. The requests fit one after another exactly when their sum fits.
  if (!pool_->allocator.fits(total_pages)) return Outcome(NoRoom{});
  AllocatedMany out;
  for (std::uint64_t n : op.tokens) out.pages.push_back(n / ps == 0 ? std::vector<std::int64_t>{}
                                                                    : pool_->allocator.alloc(n / ps));
  return Outcome(std::move(out));
}

Result<std::vector<std::int64_t>> Model::virtual_pages_of(IdUnit unit, const std::vector<std::int64_t>& ids,
                                                          const char* op_name) const {
  const AllocatorSide& owner = pool_->allocator.owner();
  std::vector<std::int64_t> pages;
  pages.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0)
      return make_refusal(ErrorKind::out_of_range, reason::negative_id,
                          std::string(op_name) + ": id " + num(id) + " is negative; give virtual " +
                              (unit == IdUnit::tokens ? "token" : "page") + " ids");
    // SPEC 4 free: v = t // page_size for token ids.
    pages.push_back(unit == IdUnit::tokens ? id / pool_->page_size : id);
  }
  pages = sorted_unique(std::move(pages));  // docs/decisions.md: duplicates are allowed, made unique
  std::vector<std::int64_t> outside;
  for (std::int64_t v : pages)
    if (v < owner.min_page() || v >= owner.num_pages()) outside.push_back(v);
  // docs/decisions.md: the sink and pages below the first usable page are out of range; the
  // smallest page outside names the reason.
  if (!outside.empty())
    return make_refusal(ErrorKind::out_of_range,
                        outside.front() < owner.min_page() ? reason::reserved_page : reason::past_last_page,
                        std::string(op_name) + ": virtual pages " + list_ids(outside) + " are outside the usable range [" +
                            num(owner.min_page()) + ", " + num(owner.num_pages()) +
                            ") (page 0 is the sink and is never allocated); free only ids that alloc returned");
  return pages;
}

Status Model::check_readers(const FreePlan& plan) const {
  // SPEC 7 / docs/decisions.md: a move whose source or destination is held by an open reader
  // is refused, and the whole operation changes nothing.
  for (const SideFreeStep& step : plan.steps) {
    if (!step.compact) continue;
    const std::vector<std::uint32_t>& held = pool_->held[step.side];
    for (const PagePair& m : step.compaction.moves) {
      for (std::int64_t page : {m.src, m.dst}) {
        if (held[static_cast<std::size_t>(page)] == 0) continue;
        std::uint32_t holder = 0;
        for (const auto& [id, reader] : pool_->readers)
          if (reader.side == step.side && std::binary_search(reader.pages.begin(), reader.pages.end(), page)) {
            holder = id;
            break;
          }
        return make_error(ErrorKind::reader_conflict,
                          "compaction would move page " + num(m.src) + " to page " + num(m.dst) + " of sub-pool '" +
                              pool_->allocator.side(step.side).name() + "' while reader " + num(holder) +
                              " holds page " + num(page) + "; end the reader first (end_read " + num(holder) + ")");
      }
      // SPEC 8: a page whose physical address an in-flight transfer resolved may not move.
      if (!compaction_waits_for_transfers()) continue;
      for (std::int64_t page : {m.src, m.dst}) {
        const auto p = static_cast<std::size_t>(page);
        if (pool_->offload_held[step.side][p] == 0 && pool_->load_back_held[step.side][p] == 0) continue;
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "compaction would move page " + num(m.src) + " to page " + num(m.dst) + " of sub-pool '" +
                                pool_->allocator.side(step.side).name() + "' while an in-flight transfer copies page " +
                                num(page) + "; wait for the transfer first (transfer_wait)");
      }
    }
  }
  return ok_status();
}

Compaction Model::commit_free(const FreePlan& plan) {
  pool_->allocator.commit(plan);
  Compaction out;
  std::size_t moves = 0;
  for (const SideFreeStep& step : plan.steps) moves += step.compact ? step.compaction.moves.size() : 0;
  out.moves.reserve(moves);
  for (const SideFreeStep& step : plan.steps) {
    const AllocatorSide& side = pool_->allocator.side(step.side);
    // docs/decisions.md: a free forgets the rows of the freed pages.
    if (pool_->bytes)
      for (std::int64_t v : step.virtual_pages) pool_->ledger.forget_page(step.side, v);
    if (!step.compact) continue;
    for (const PagePair& m : step.compaction.moves) {
      // SPEC 4.1: each move copies the whole page envelope. The ledger is keyed by virtual page,
      // so it does not change: the bytes follow the page.
      if (pool_->bytes) {
        pool_->bytes->copy_page(side.geometry(), m.src, m.dst);
        note_touched(static_cast<std::uint64_t>(m.dst) * side.page_bytes(), side.page_bytes());
      }
      out.moves.push_back(PageMove{side.name(), m.src, m.dst});
    }
  }
  return out;
}

OpResult Model::on(const Free& op) {
  KVTWIN_TRY(std::vector<std::int64_t> pages, virtual_pages_of(op.unit, op.ids, "free"));
  std::vector<std::int64_t> unbound;
  for (std::int64_t v : pages)
    if (pool_->allocator.owner().physical_of(v) < 0) unbound.push_back(v);
  // SPEC 4: any v2p[v] < 0 is an error and nothing changes.
  if (!unbound.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated, "free: virtual pages " + list_ids(unbound) +
                                                  " are not allocated (double free or never allocated); free each "
                                                  "allocation once, with the ids alloc returned");
  // SPEC 8 (docs/host_arena.md): a page an in-flight transfer copies, on either side, is not freed.
  KVTWIN_TRY_STATUS(check_pages_not_in_flight("free", 0, pages, false));
  if (pool_->allocator.is_composite()) {
    std::vector<std::int64_t> swa_bound;
    for (std::int64_t v : pages)
      if (pool_->allocator.side(1).physical_of(v) > 0) swa_bound.push_back(v);
    KVTWIN_TRY_STATUS(check_pages_not_in_flight("free", 1, swa_bound, false));
  }
  const FreePlan plan = pool_->allocator.plan_free(pages, pairing());
  KVTWIN_TRY_STATUS(check_readers(plan));
  return Outcome(commit_free(plan));
}

OpResult Model::on(const FreeSwa& op) {
  if (!pool_->allocator.is_composite())
    return invalid("free_swa: this pool has no sliding-window sub-pool; free_swa applies to full + SWA composites");
  KVTWIN_TRY(std::vector<std::int64_t> pages, virtual_pages_of(op.unit, op.ids, "free_swa"));
  std::vector<std::int64_t> unallocated, tombstoned;
  for (std::int64_t v : pages) {
    if (pool_->allocator.owner().physical_of(v) < 0)
      unallocated.push_back(v);
    else if (pool_->allocator.side(1).physical_of(v) < 0)
      tombstoned.push_back(v);
  }
  // docs/decisions.md: free_swa of an unallocated page or of a tombstone is a double free.
  if (!unallocated.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated, "free_swa: virtual pages " + list_ids(unallocated) +
                                                  " are not allocated; free_swa only pages of live allocations");
  if (!tombstoned.empty())
    return make_refusal(ErrorKind::double_free, reason::left_window, "free_swa: virtual pages " + list_ids(tombstoned) +
                                                  " already left the window (their SWA pages are tombstones); free_swa "
                                                  "each page once");
  KVTWIN_TRY_STATUS(check_pages_not_in_flight("free_swa", 1, pages, false));
  const FreePlan plan = pool_->allocator.plan_free_swa(pages, pairing());
  KVTWIN_TRY_STATUS(check_readers(plan));
  return Outcome(commit_free(plan));
}

OpResult Model::on(const Flush&) {
  // SPEC 4.2: flush compacts exactly as 4.1; eager sides have no holes, so nothing moves.
  const FreePlan plan = pool_->allocator.plan_flush(pairing());
  KVTWIN_TRY_STATUS(check_readers(plan));
  // SPEC 11: the state sub-pool's holes too (after the token sides; docs/decisions.md).
  std::optional<CompactionPlan> state_plan;
  if (pool_->state) {
    state_plan = pool_->state->plan_flush(pairing());
    KVTWIN_TRY_STATUS(check_state_moves(*state_plan));
  }
  Compaction out = commit_free(plan);
  if (state_plan) {
    pool_->state->commit_flush(*state_plan);
    commit_state_moves(*state_plan, out.moves);
  }
  return Outcome(std::move(out));
}

// ---------------------------------------------------------------- moves and readers (SPEC 7)

Result<std::size_t> Model::side_named(const std::string& name) const {
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i)
    if (pool_->allocator.side(i).name() == name) return i;
  if (pool_->state && name == pool_->state->slots().name()) return state_side();
  std::string known;
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i)
    known += (i ? ", " : "") + pool_->allocator.side(i).name();
  if (pool_->state) known += ", " + pool_->state->slots().name();
  return invalid("this pool has no sub-pool '" + printable(name) + "'; its sub-pools: " + known);
}

OpResult Model::on(const MovePages& op) {
  KVTWIN_TRY(std::size_t s, side_named(op.sub_pool));
  if (pool_->state && s == state_side())
    return invalid("move_pages: the state sub-pool's slots move only by its own compaction (state_free, flush)");
  const AllocatorSide& side = pool_->allocator.side(s);
  if (op.dst.size() != op.src.size())
    return invalid("move_pages: " + num(std::uint64_t{op.dst.size()}) + " destinations for " +
                   num(std::uint64_t{op.src.size()}) + " sources; give one destination per source");
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t p : *list)
      if (p < side.min_page() || p >= side.num_pages())
        return out_of_range("move_pages: page " + num(p) + " is outside sub-pool '" + side.name() + "''s usable pages [" +
                            num(side.min_page()) + ", " + num(side.num_pages()) + "); the sink pages never move");
  std::set<std::int64_t> seen;
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t p : *list)
      if (!seen.insert(p).second)
        return invalid("move_pages: page " + num(p) + " appears twice; sources and destinations must be disjoint and "
                       "without repeats");
  for (std::int64_t p : op.dst) {
    // docs/decisions.md: every dst is an unbound page.
    if (side.virtual_of(p) >= 0)
      return invalid("move_pages: destination page " + num(p) + " of sub-pool '" + side.name() +
                     "' is bound to virtual page " + num(side.virtual_of(p)) +
                     "; a raw move may only overwrite an unbound page");
    // docs/decisions.md: and its bytes lie outside the other side's occupied band.
    if (pool_->allocator.is_composite()) {
      const AllocatorSide& other = pool_->allocator.side(1 - s);
      const std::uint64_t begin = static_cast<std::uint64_t>(p) * side.page_bytes(), end = begin + side.page_bytes();
      if (begin < other.band_end_byte() && other.band_begin_byte() < end)
        return invalid("move_pages: destination page " + num(p) + " of sub-pool '" + side.name() + "' (bytes [" +
                       num(begin) + ", " + num(end) + ")) overlaps the occupied band of sub-pool '" + other.name() +
                       "' (bytes [" + num(other.band_begin_byte()) + ", " + num(other.band_end_byte()) +
                       ")); choose a destination in the gap");
    }
  }
  // SPEC 11: nor over the state sub-pool's slots in use (its band and its quarantined slots).
  if (pool_->state)
    for (std::int64_t p : op.dst) {
      const std::uint64_t begin = static_cast<std::uint64_t>(p) * side.page_bytes(), end = begin + side.page_bytes();
      const std::uint64_t state_begin = pool_->state->slots().band_begin_byte(), state_end = pool_->state->frontier_bytes();
      if (begin < state_end && state_begin < end)
        return invalid("move_pages: destination page " + num(p) + " of sub-pool '" + side.name() + "' (bytes [" +
                       num(begin) + ", " + num(end) + ")) overlaps the state sub-pool's slots in use (bytes [" +
                       num(state_begin) + ", " + num(state_end) + ")); choose a destination in the gap");
    }
  for (std::size_t i = 0; i < op.src.size(); ++i)
    for (std::int64_t page : {op.src[i], op.dst[i]})
      if (pool_->held[s][static_cast<std::size_t>(page)] > 0)
        return make_error(ErrorKind::reader_conflict, "move_pages: page " + num(page) + " of sub-pool '" + side.name() +
                                                          "' is held by an open reader; end the reader first (end_read)");
  // SPEC 8: nor one an in-flight transfer copies.
  if (compaction_waits_for_transfers())
    for (std::size_t i = 0; i < op.src.size(); ++i)
      for (std::int64_t page : {op.src[i], op.dst[i]})
        if (pool_->offload_held[s][static_cast<std::size_t>(page)] > 0 ||
            pool_->load_back_held[s][static_cast<std::size_t>(page)] > 0)
          return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                              "move_pages: page " + num(page) + " of sub-pool '" + side.name() +
                                  "' is copied by an in-flight transfer; wait for it first (transfer_wait)");
  // Nor one whose bytes overlap a page a transfer copies, in the other sub-pool's pages: the move
  // reads its source (against a load-back filling it) and writes its destination (against any).
  if (compaction_waits_for_transfers() && !pool_->transfers.empty())
    for (std::size_t i = 0; i < op.src.size(); ++i)
      for (const auto& [page, reading] : {std::pair{op.src[i], true}, std::pair{op.dst[i], false}})
        if (const auto t = transfer_covering_page(s, page, reading))
          return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                              "move_pages: page " + num(page) + " of sub-pool '" + side.name() +
                                  "' overlaps a page in-flight transfer " + num(*t) +
                                  " copies; wait for it first (transfer_wait)");
  // Raw copies, no table change (docs/decisions.md "Moves and readers").
  if (pool_->bytes)
    for (std::size_t i = 0; i < op.src.size(); ++i) {
      pool_->bytes->copy_page(side.geometry(), op.src[i], op.dst[i]);
      note_touched(static_cast<std::uint64_t>(op.dst[i]) * side.page_bytes(), side.page_bytes());
    }
  return Outcome(Done{});
}

OpResult Model::on(const BeginRead& op) {
  if (pool_->readers.count(op.reader))
    return invalid("begin_read: reader " + num(op.reader) + " is already open; end it first or use another id");
  KVTWIN_TRY(std::size_t s, side_named(op.sub_pool));
  const AllocatorSide& side = pool_->state && s == state_side() ? pool_->state->slots() : pool_->allocator.side(s);
  for (std::int64_t p : op.pages)
    if (p < 0 || p >= side.num_pages())
      return out_of_range("begin_read: page " + num(p) + " is outside sub-pool '" + side.name() + "''s pages [0, " +
                          num(side.num_pages()) + ")");
  readers_changed_ = true;
  Reader reader{s, sorted_unique(op.pages)};
  for (std::int64_t p : reader.pages) ++pool_->held[s][static_cast<std::size_t>(p)];
  pool_->readers.emplace(op.reader, std::move(reader));
  return Outcome(Done{});
}

OpResult Model::on(const EndRead& op) {
  auto it = pool_->readers.find(op.reader);
  if (it == pool_->readers.end())
    return invalid("end_read: reader " + num(op.reader) + " is not open; begin_read opens a reader");
  readers_changed_ = true;
  for (std::int64_t p : it->second.pages) --pool_->held[it->second.side][static_cast<std::size_t>(p)];
  const bool state_reader = pool_->state && it->second.side == state_side();
  pool_->readers.erase(it);
  // SPEC 10.22: a quarantined slot no reader holds any more may be reused.
  if (state_reader) {
    const std::vector<std::uint32_t>& held = pool_->held[state_side()];
    pool_->state->release_quarantine([&](std::int64_t slot) { return held[static_cast<std::size_t>(slot)] > 0; });
    state_changed_ = true;
  }
  return Outcome(Done{});
}

// ---------------------------------------------------------------- batches (SPEC 6)

OpResult Model::on(const MakeBatch& op) {
  if (pool_->batches.count(op.batch))
    return invalid("batch " + num(op.batch) + " already exists; drop it first (drop_batch) or use another id");
  // Into the storage of the batch dropped last (a step's batches reuse it, no allocation a step).
  Batch& batch = pool_->dropped_batch;
  KVTWIN_TRY_STATUS(make_batch(op, batch));
  pool_->batches.emplace(op.batch, std::move(batch));
  return Outcome(Done{});
}

OpResult Model::on(const Rebind& op) {
  auto it = pool_->batches.find(op.batch);
  if (it == pool_->batches.end()) return invalid("rebind: no batch " + num(op.batch) + "; declare it with a batch op");
  KVTWIN_TRY_STATUS(rebind_batch(it->second, op.out_width, pool_->allocator.owner().v2p(), pool_->page_size));
  return Outcome(Ids{it->second.loc});
}

OpResult Model::on(const Split& op) {
  auto it = pool_->batches.find(op.batch);
  if (it == pool_->batches.end()) return invalid("split: no batch " + num(op.batch) + "; declare it with a batch op");
  if (op.left == op.right) return invalid("split: both children are batch " + num(op.left) + "; give two different ids");
  for (std::uint32_t child : {op.left, op.right})
    if (pool_->batches.count(child))
      return invalid("split: batch " + num(child) + " already exists; children need new ids (the parent stays)");
  KVTWIN_TRY(auto children, split_batch(it->second, op.at));
  const Marks marks{children.first.physical, children.second.physical};
  pool_->batches.emplace(op.left, std::move(children.first));
  pool_->batches.emplace(op.right, std::move(children.second));
  return Outcome(marks);
}

OpResult Model::on(const DropBatch& op) {
  auto it = pool_->batches.find(op.batch);
  if (it == pool_->batches.end()) return invalid("drop_batch: no batch " + num(op.batch) + "; nothing to drop");
  pool_->dropped_batch = std::move(it->second);  // its storage serves the next batch declared
  pool_->batches.erase(it);
  return Outcome(Done{});
}

// ---------------------------------------------------------------- the write door (SPEC 6)

std::int64_t Model::sink_end(std::size_t side) const {
  // docs/decisions.md: ids in pages below min_page_index (page 0 and any reserved page) are sink lanes.
  return pool_->allocator.side(side).min_page() * pool_->page_size;
}

std::int64_t Model::slot_count(std::size_t side) const {
  return static_cast<std::int64_t>(pool_->derived.geometry.sub_pools[side].max_slots);
}

Result<Model::LayerWrite> Model::plan_layer_write(std::uint32_t model_layer, const WriteLoc& loc) const {
  const LayerPlacement& place = pool_->derived.plan.layer_map[model_layer];
  LayerWrite w;
  w.side = place.sub_pool;
  w.local_layer = place.local_layer;
  w.tokens = loc.tokens;
  // The loc is in the owner's (full or MLA) physical id space; an SWA layer derives its own.
  const std::size_t loc_side = place.kind == LayerKind::swa ? 0 : place.sub_pool;
  // A loc inside the slots stays inside them until the pool is rebuilt: the layers of a batch,
  // written one op each, share their loc and are bounds-checked once.
  if (!locs_in_range_.holds(loc_side, loc, loc.loc)) {
    const std::int64_t loc_slots = slot_count(loc_side);
    for (std::size_t i = 0; i < loc.loc.size(); ++i)
      if (loc.loc[i] < 0 || loc.loc[i] >= loc_slots)
        return out_of_range("write to layer " + num(model_layer) + ": lane " + num(std::uint64_t{i}) + " has loc " +
                            num(loc.loc[i]) + ", outside sub-pool '" + pool_->allocator.side(loc_side).name() +
                            "''s slots [0, " + num(loc_slots) + "); give physical token ids of the pool (0 is the sink)");
    locs_in_range_.remember(loc_side, loc, loc.loc);
  }
  if (place.kind == LayerKind::swa) {
    // SPEC 4.3: the SWA loc from the full physical id; a tombstoned page goes to the sink.
    const AllocatorSide& full = pool_->allocator.side(0);
    const AllocatorSide& swa = pool_->allocator.side(1);
    w.derived = true;
    w.derived_locs.reserve(loc.loc.size());
    for (std::int64_t k : loc.loc) w.derived_locs.push_back(swa_token(full.p2v(), swa.v2p(), pool_->page_size, k));
  } else {
    w.given_locs = loc.loc;
  }
  // SPEC 6: two lanes with one non-sink loc are refused (docs/decisions.md: on the final loc).
  // Whether a loc has duplicates depends only on its lanes and the pool (the sink's end), so the
  // last duplicate-free loc of each sub-pool is remembered until the pool is rebuilt.
  const std::span<const std::int64_t> locs = w.locs();
  // An SWA layer's locs derive from the tables as well as the lanes: compared by content only.
  WriteLoc from = loc;
  if (w.derived) from.source.reset();
  if (!duplicate_free_locs_.holds(w.side, from, locs)) {
    KVTWIN_TRY_STATUS(check_duplicates(locs, sink_end(w.side), model_layer, pool_->allocator.side(w.side).name(),
                                       &loc_stamps_.at(w.side), slot_count(w.side)));
    duplicate_free_locs_.remember(w.side, from, locs);
  }
  // SPEC 8 (docs/host_arena.md): no row is written into a page an in-flight transfer copies (an
  // offload would copy it half written, a load-back would overwrite it).
  if (!pool_->transfers.empty()) {
    const std::int64_t sink = sink_end(w.side);
    for (std::size_t i = 0; i < locs.size(); ++i) {
      if (locs[i] < sink) continue;
      const std::int64_t page = locs[i] / pool_->page_size;
      if (transfer_holds_page(w.side, page, false))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "write to layer " + num(model_layer) + ": lane " + num(std::uint64_t{i}) + " writes page " +
                                num(page) + " of sub-pool '" +
                                pool_->allocator.side(w.side).name() +
                                "', which an in-flight transfer copies; wait for it first (transfer_wait)");
      if (const auto t = transfer_covering_page(w.side, page, false))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "write to layer " + num(model_layer) + ": lane " + num(std::uint64_t{i}) + " writes page " +
                                num(page) + " of sub-pool '" + pool_->allocator.side(w.side).name() +
                                "', whose bytes overlap a page in-flight transfer " + num(*t) +
                                " copies; wait for it first (transfer_wait)");
    }
  }
  return w;
}

void Model::forget_overlapped_rows(std::size_t written_side, std::uint64_t begin, std::uint64_t end) {
  // A row written on one side may land on bytes the other side holds (a loc outside its own
  // band); the other side's rows there no longer hold what the ledger remembers.
  if (!pool_->allocator.is_composite()) return;
  const std::size_t other = 1 - written_side;
  const DenseEntryLayout& layout = pool_->derived.layouts[other];
  const AllocatorSide& side = pool_->allocator.side(other);
  const std::uint64_t entry = layout.entry_bytes;
  for (std::uint64_t slot = begin / entry; slot * entry < end; ++slot) {
    const auto page = static_cast<std::int64_t>(slot) / pool_->page_size;
    if (page < side.min_page() || page >= side.num_pages()) continue;
    const std::int64_t v = side.virtual_of(page);
    if (v < 1) continue;
    for (std::size_t part = 0; part < layout.parts.size(); ++part) {
      const DensePart& p = layout.parts[part];
      for (std::uint32_t l = 0; l < p.layer_num; ++l) {
        const std::uint64_t row_begin = slot * entry + p.offset_bytes + l * p.layer_stride_bytes;
        if (row_begin < end && begin < row_begin + p.row_bytes())
          pool_->ledger.forget_row(other, v, RowSlot{static_cast<std::int64_t>(slot) % pool_->page_size, l, part});
      }
    }
  }
}

void Model::write_row(std::size_t side, std::int64_t pt, std::uint32_t layer, std::size_t part, std::int64_t token,
                      std::uint64_t write_number) {
  const DenseEntryLayout& layout = pool_->derived.layouts[side];
  const OracleRowFamily& family = oracle_family(side, layer, part);
  std::span<std::uint8_t> row = pool_->bytes->row(layout, pt, part, layer);
  // The row itself, not its whole entry: a write of one layer changes 1/L of each entry, and the
  // side-by-side digest of what an op wrote costs what it wrote (a stray byte elsewhere in the
  // entry is found by the checkpoint's whole-pool comparison).
  const std::uint64_t begin = static_cast<std::uint64_t>(row.data() - std::as_const(*pool_->bytes).all().data());
  family.fill(family.key(token, write_number), row);
  note_written_row(begin, row.size());
  // The ledger remembers the row when its page is bound; a row of an unbound page is not data.
  const AllocatorSide& s = pool_->allocator.side(side);
  const std::int64_t page = pt / pool_->page_size;
  const std::int64_t v = page >= s.min_page() && page < s.num_pages() ? s.virtual_of(page) : -1;
  if (v >= 1) pool_->ledger.record(side, v, RowSlot{pt % pool_->page_size, layer, part}, token, write_number);
  forget_overlapped_rows(side, begin, begin + row.size());
  if (pool_->state) forget_state_overlapped(begin, begin + row.size());
}

void Model::commit_layer_write(const LayerWrite& w, std::uint64_t write_number) {
  if (!pool_->bytes) return;  // tables-only: validated, nothing to write
  const std::int64_t sink = sink_end(w.side);
  const std::span<const std::int64_t> locs = w.locs();
  for (std::size_t i = 0; i < locs.size(); ++i) {
    if (locs[i] < sink) continue;  // SPEC 6: a lane at the sink is discarded
    for (std::size_t part = 0; part < pool_->derived.layouts[w.side].parts.size(); ++part)
      write_row(w.side, locs[i], w.local_layer, part, w.tokens[i], write_number);
  }
}

OpResult Model::on(const Write& op) {
  const std::size_t layers = pool_->derived.plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("write: layer " + num(op.layer) + " is outside the model's " + num(std::uint64_t{layers}) + " layers");
  WriteLoc loc;
  if (op.batch) {
    if (!op.loc.empty() || !op.tokens.empty() || op.physical)
      return invalid("write: give either a batch or an explicit loc with its tokens, not both");
    auto it = pool_->batches.find(*op.batch);
    if (it == pool_->batches.end()) return invalid("write: no batch " + num(*op.batch) + "; declare it with a batch op");
    // SPEC 6: for_layer(batch, layer).
    const LayerKind kind = pool_->derived.plan.layer_map[op.layer].kind;
    KVTWIN_TRY(loc, for_layer(it->second, kind, op.layer));
    loc.source = WriteLoc::Source{*op.batch, batches_epoch_, kind == LayerKind::cross};
  } else {
    if (op.loc.size() != op.tokens.size())
      return invalid("write: " + num(std::uint64_t{op.loc.size()}) + " locs but " + num(std::uint64_t{op.tokens.size()}) +
                     " tokens; give the virtual token of every lane");
    if (op.loc.size() > kMaxLanes) return invalid("write: more than " + num(kMaxLanes) + " lanes");
    loc = WriteLoc{op.loc, op.physical, op.tokens, std::nullopt};  // SPEC 6: a loc translated elsewhere states its own mark
  }
  // SPEC 6: the unified pool's door checks the mark first, on every call (a flag read).
  KVTWIN_TRY_STATUS(check_mark(loc, op.layer));
  KVTWIN_TRY(LayerWrite w, plan_layer_write(op.layer, loc));
  commit_layer_write(w, op.write_number);
  return Outcome(Done{});
}

OpResult Model::on(const Read& op) {
  if (!pool_->bytes)
    return make_error(ErrorKind::unsupported, "read: a tables-only pool has no bytes; build with tables_only: false to read rows");
  const std::size_t layers = pool_->derived.plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("read: layer " + num(op.layer) + " is outside the model's " + num(std::uint64_t{layers}) + " layers");
  const LayerPlacement& place = pool_->derived.plan.layer_map[op.layer];
  const DenseEntryLayout& layout = pool_->derived.layouts[place.sub_pool];
  KVTWIN_TRY(const DensePart* part, layout.part(op.part));
  const std::size_t part_index = *layout.part_index(op.part);
  for (std::size_t i = 0; i < op.ids.size(); ++i)
    if (op.ids[i] < 0 || op.ids[i] >= slot_count(place.sub_pool))
      return out_of_range("read: id " + num(op.ids[i]) + " at position " + num(std::uint64_t{i}) + " is outside sub-pool '" +
                          layout.sub_pool + "''s slots [0, " + num(slot_count(place.sub_pool)) + ")");
  // SPEC 8: a load-back's pages hold nothing readable until its transfer_wait.
  if (!pool_->transfers.empty())
    for (std::int64_t id : op.ids)
      if (id >= sink_end(place.sub_pool) && transfer_holds_page(place.sub_pool, id / pool_->page_size, true))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "read: id " + num(id) + " is in a page an in-flight load-back is filling; wait for it "
                            "first (transfer_wait)");
  if (!pool_->transfers.empty())
    for (std::int64_t id : op.ids)
      if (id >= sink_end(place.sub_pool))
        if (const auto t = transfer_covering_page(place.sub_pool, id / pool_->page_size, true))
          return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                              "read: id " + num(id) + " is in a page whose bytes overlap a page in-flight load-back " +
                                  num(*t) + " is filling; wait for it first (transfer_wait)");
  std::vector<std::uint8_t> data;
  data.reserve(op.ids.size() * part->row_bytes());
  for (std::int64_t id : op.ids) {
    if (id < sink_end(place.sub_pool)) {
      // docs/decisions.md: a sink lane reads as zeros (the sink's bytes are never data).
      data.insert(data.end(), part->row_bytes(), 0);
      continue;
    }
    auto row = std::as_const(*pool_->bytes).row(layout, id, part_index, place.local_layer);
    data.insert(data.end(), row.begin(), row.end());
  }
  return Outcome(Bytes::of(std::move(data)));
}

// ---------------------------------------------------------------- translation (SPEC 5)

OpResult Model::on(const Translate& op) {
  KVTWIN_TRY(std::vector<std::int64_t> values, run_translate(op, pool_->allocator.owner().v2p(), pool_->page_size));
  return Outcome(Ids{std::move(values)});
}

OpResult Model::on(const SwaTranslate& op) {
  if (!pool_->allocator.is_composite())
    return invalid("swa_translate: this pool has no sliding-window sub-pool; it applies to full + SWA composites");
  Ids out;
  out.values.reserve(op.ids.size());
  for (std::int64_t k : op.ids)
    out.values.push_back(swa_token(pool_->allocator.side(0).p2v(), pool_->allocator.side(1).v2p(), pool_->page_size, k));
  return Outcome(std::move(out));
}

OpResult Model::on(const PageTable& op) {
  KVTWIN_TRY(Table table, run_page_table(op, pool_->allocator.owner().v2p(), pool_->page_size));
  return Outcome(std::move(table));
}

OpResult Model::on(const RemapIndices& op) {
  KVTWIN_TRY(std::vector<std::int64_t> values, run_remap_indices(op, pool_->allocator.owner().v2p(), pool_->page_size));
  return Outcome(Ids{std::move(values)});
}

// ---------------------------------------------------------------- the decode step (SPEC 7)

OpResult Model::on(const Capture& op) {
  if (pool_->graphs.count(op.graph))
    return invalid("capture: graph " + num(op.graph) + " is already captured; use another id");
  if (op.max_batch == 0 || op.max_pages == 0)
    return invalid("capture: max_batch and max_pages must be at least 1 (got " + num(op.max_batch) + " and " +
                   num(op.max_pages) + ")");
  if (std::uint64_t{op.max_batch} * op.max_pages > kMaxLanes)
    return invalid("capture: a page table of " + num(op.max_batch) + " x " + num(op.max_pages) + " exceeds " +
                   num(kMaxLanes) + " entries");
  const std::size_t layers = pool_->derived.plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("capture: layer " + num(op.layer) + " is outside the model's " + num(std::uint64_t{layers}) + " layers");
  const LayerPlacement& place = pool_->derived.plan.layer_map[op.layer];
  if (place.kind == LayerKind::swa || place.kind == LayerKind::cross)
    return invalid("capture: layer " + num(op.layer) + " is a '" + std::string(layer_kind_name(place.kind)) +
                   "' layer; the decode attention reads a full or MLA layer through the full page table");
  const std::uint32_t kv_heads = pool_->derived.plan.sub_pools[place.sub_pool].heads_per_rank;
  if (op.query_heads == 0 || op.query_heads % kv_heads != 0)
    return invalid("capture: query_heads " + num(op.query_heads) + " must be a positive multiple of the layer's " +
                   num(kv_heads) + " KV heads per rank");
  allocation_point();
  Graph g;
  g.shape = op;
  g.loc.assign(op.max_batch, 0);
  g.table.assign(op.max_batch, std::vector<std::int64_t>(op.max_pages, 0));  // initially all 0 (the sink)
  pool_->graphs.emplace(op.graph, std::move(g));
  return Outcome(Done{});
}

OpResult Model::on(const Replay& op) {
  auto it = pool_->graphs.find(op.graph);
  if (it == pool_->graphs.end()) return invalid("replay: graph " + num(op.graph) + " was never captured; capture it first");
  Graph& graph = it->second;
  const Capture& shape = graph.shape;
  const std::int64_t ps = pool_->page_size;
  const std::vector<std::int64_t>& v2p = pool_->allocator.owner().v2p();
  const std::size_t bs = op.requests.size();
  if (bs > shape.max_batch)
    return out_of_range("replay: " + num(std::uint64_t{bs}) + " requests exceed graph " + num(op.graph) +
                        "'s max_batch " + num(shape.max_batch) + "; capture a larger graph");
  std::vector<std::int64_t> lengths(bs);
  for (std::size_t b = 0; b < bs; ++b) {
    const std::vector<std::int64_t>& tokens = op.requests[b];
    if (tokens.empty()) return invalid("replay: request " + num(std::uint64_t{b}) + " has no tokens; give its tokens, the new one last");
    lengths[b] = static_cast<std::int64_t>(tokens.size());
    const std::uint64_t pages = ceil_div(tokens.size(), static_cast<std::uint64_t>(ps));
    if (pages > shape.max_pages)
      return out_of_range("replay: request " + num(std::uint64_t{b}) + " spans " + num(pages) + " pages, more than graph " +
                          num(op.graph) + "'s max_pages " + num(shape.max_pages) + "; capture a wider page table");
    for (std::size_t j = 0; j < tokens.size(); ++j) {
      const std::int64_t t = tokens[j];
      const std::int64_t v = t >= 0 ? t / ps : -1;
      if (v < 1 || v >= pool_->allocator.num_virtual() || v2p[static_cast<std::size_t>(v)] < 0)
        return invalid("replay: request " + num(std::uint64_t{b}) + " position " + num(std::uint64_t{j}) + ": virtual token " +
                       num(t) + " is not allocated; a decode step reads and writes allocated tokens only");
    }
  }
  // SPEC 8: a load-back's pages are not visible until its transfer_wait.
  if (!pool_->loading.empty())
    for (std::size_t b = 0; b < bs; ++b)
      for (std::int64_t t : op.requests[b])
        if (pool_->loading.count(t / ps) != 0)
          return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                              "replay: request " + num(std::uint64_t{b}) + " reads virtual token " + num(t) +
                                  ", whose page an in-flight load-back is filling; wait for it first (transfer_wait)");
  // 1. The capture-stable loc buffer, refilled out of graph: lane b < bs gets translate(new
  //    token of b), every lane >= bs the sink (SPEC 7: no stale tail).
  std::vector<std::int64_t> loc(shape.max_batch, 0);
  std::vector<std::int64_t> new_tokens(shape.max_batch, -1);
  for (std::size_t b = 0; b < bs; ++b) {
    new_tokens[b] = op.requests[b].back();
    loc[b] = translate_token(v2p, ps, new_tokens[b]);
  }
  // 2. Every layer writes its rows for lane b's new token (docs/decisions.md: cross-attention
  //    layers take no decoder rows). Planned for every layer before anything is written.
  std::vector<LayerWrite> writes;
  for (std::uint32_t l = 0; l < pool_->derived.plan.layer_map.size(); ++l) {
    if (pool_->derived.plan.layer_map[l].kind == LayerKind::cross) continue;
    KVTWIN_TRY(LayerWrite w, plan_layer_write(l, WriteLoc{loc, true, new_tokens, std::nullopt}));
    writes.push_back(std::move(w));
  }
  // ---- commit
  graph.loc = loc;
  for (const LayerWrite& w : writes) commit_layer_write(w, op.write_number);
  // 3. The capture-stable page table, refilled out of graph from this batch's lengths: row b,
  //    column c < ceil(len_b / ps) gets max(v2p[request_b[c * ps] // ps], 0); others keep theirs.
  for (std::size_t b = 0; b < bs; ++b) {
    const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(lengths[b]), static_cast<std::uint64_t>(ps));
    for (std::uint64_t c = 0; c < pages; ++c)
      graph.table[b][c] = translate_page_of_token(v2p, ps, op.requests[b][c * static_cast<std::uint64_t>(ps)]);
  }
  // 4. The reference attention at the captured layer (empty in tables-only mode).
  std::vector<std::uint8_t> attention;
  if (pool_->bytes) {
    const LayerPlacement& place = pool_->derived.plan.layer_map[shape.layer];
    const SubPoolSpec& spec = pool_->derived.plan.sub_pools[place.sub_pool];
    const DenseEntryLayout& layout = pool_->derived.layouts[place.sub_pool];
    const bool mla = spec.kind == SubPoolKind::mla;
    AttentionShape a;
    a.layout = &layout;
    a.k_part = *layout.part_index(mla ? "kv" : "k");
    a.v_part = *layout.part_index(mla ? "kv" : "v");
    a.local_layer = place.local_layer;
    a.kv_heads = spec.heads_per_rank;
    a.k_head_dim = spec.k_head_dim;
    a.v_head_dim = spec.v_head_dim;
    a.query_heads = shape.query_heads;
    a.page_size = ps;
    std::vector<std::vector<std::int64_t>> rows(graph.table.begin(), graph.table.begin() + static_cast<std::ptrdiff_t>(bs));
    attention = reference_decode_attention(*pool_->bytes, a, rows, lengths, op.query_seed);
  }
  return Outcome(Decode{graph.loc, graph.table, Bytes::of(std::move(attention))});
}

OpResult Model::on(const Checkpoint&) {
  // Every in-flight copy lands (a device synchronizes its copy streams); the transfers stay in
  // flight until their transfer_wait (docs/host_arena.md).
  land_everything();
  return Outcome(Done{});
}

// The host arena and transfers (SPEC 8): model_host.cpp.

// ---------------------------------------------------------------- what a checker reads

Result<PoolTables> Model::tables() const {
  if (!poisoned_.empty()) return make_error(ErrorKind::environment, "tables: the model is poisoned: " + poisoned_);
  if (!pool_) return invalid("tables: no pool is built yet");
  PoolTables out;
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i) {
    const AllocatorSide& s = pool_->allocator.side(i);
    SideTables t;
    t.name = s.name();
    t.v2p = s.v2p();
    t.p2v = s.p2v();
    if (i == 0) t.free_queue.assign(pool_->allocator.free_queue().begin(), pool_->allocator.free_queue().end());
    t.watermark = s.watermark();
    t.holes.assign(s.holes().begin(), s.holes().end());
    t.allocated_pages = s.allocated_pages();
    if (s.floats()) t.span_low = s.span_low();
    out.sides.push_back(std::move(t));
  }
  add_state_tables(out);
  return out;
}

void Model::add_state_tables(PoolTables& out) const {
  if (pool_->state) {
    const StateAllocator& st = *pool_->state;
    SideTables t;
    t.name = st.slots().name();
    t.v2p = st.slots().v2p();
    t.p2v = st.slots().p2v();
    t.free_queue.assign(st.free_queue().begin(), st.free_queue().end());
    t.watermark = st.slots().watermark();
    t.holes.assign(st.slots().holes().begin(), st.slots().holes().end());
    t.allocated_pages = st.slots().allocated_pages();
    out.state = std::move(t);
    out.state_requests.assign(st.requests().begin(), st.requests().end());
    out.state_quarantine.assign(st.quarantined().begin(), st.quarantined().end());
  }
}

void Model::recount_tables_digest() const {
  const PageAllocator& a = pool_->allocator;
  digested_.assign(a.side_count(), DigestedSide{});
  digested_rows_ = 0;
  for (std::size_t i = 0; i < a.side_count(); ++i) {
    const AllocatorSide& s = a.side(i);
    DigestedSide& d = digested_[i];
    d.v2p = s.v2p();
    d.p2v = s.p2v();
    d.hole.assign(s.p2v().size(), 0);
    for (std::int64_t h : s.holes()) d.hole[static_cast<std::size_t>(h)] = 1;
    for (std::size_t r = 0; r < d.v2p.size(); ++r) digested_rows_ += tables_digest_term(i, TablesDigestPart::v2p, r, d.v2p[r]);
    for (std::size_t r = 0; r < d.p2v.size(); ++r) digested_rows_ += tables_digest_term(i, TablesDigestPart::p2v, r, d.p2v[r]);
    for (std::int64_t h : s.holes())
      digested_rows_ += tables_digest_term(i, TablesDigestPart::hole, static_cast<std::uint64_t>(h), 1);
  }
  digest_stale_ = false;
}

void Model::absorb_table_changes() {
  if (!pool_) return;
  if (built_this_op_) digest_stale_ = true;
  if (digest_stale_) return;  // summed whole at the next digest
  const PageAllocator& a = pool_->allocator;
  for (std::size_t i = 0; i < a.side_count(); ++i) {
    const AllocatorSide& s = a.side(i);
    DigestedSide& d = digested_[i];
    for (std::int64_t v : s.changed_virtual()) {
      const auto r = static_cast<std::size_t>(v);
      if (d.v2p[r] == s.v2p()[r]) continue;
      digested_rows_ += tables_digest_term(i, TablesDigestPart::v2p, r, s.v2p()[r]) -
                        tables_digest_term(i, TablesDigestPart::v2p, r, d.v2p[r]);
      d.v2p[r] = s.v2p()[r];
    }
    for (std::int64_t p : s.changed_physical()) {
      const auto r = static_cast<std::size_t>(p);
      if (d.p2v[r] != s.p2v()[r]) {
        digested_rows_ += tables_digest_term(i, TablesDigestPart::p2v, r, s.p2v()[r]) -
                          tables_digest_term(i, TablesDigestPart::p2v, r, d.p2v[r]);
        d.p2v[r] = s.p2v()[r];
      }
      const std::uint8_t hole = s.holes().count(p) != 0 ? 1 : 0;
      if (hole != d.hole[r]) {
        const std::uint64_t term = tables_digest_term(i, TablesDigestPart::hole, r, 1);
        digested_rows_ += hole != 0 ? term : std::uint64_t{0} - term;
        d.hole[r] = hole;
      }
    }
  }
}

Result<std::uint64_t> Model::tables_digest() const {
  if (!poisoned_.empty() || !pool_) return Backend::tables_digest();  // tables() says why not
  if (digest_stale_) recount_tables_digest();
  const PageAllocator& a = pool_->allocator;
  std::uint64_t sum = digested_rows_ + a.free_queue_digest_terms();
  for (std::size_t i = 0; i < a.side_count(); ++i) {
    const AllocatorSide& s = a.side(i);
    sum += tables_digest_counters(i, s.watermark(), s.allocated_pages(), i == 0 ? a.free_queue().size() : 0,
                                  s.holes().size());
    if (s.floats() && s.span_low() != 0) sum += tables_digest_term(i, TablesDigestPart::watermark, 1, s.span_low());
  }
  if (pool_->state) {
    // SPEC 11: the state sub-pool's slots are bounded by the requests running; summed whole.
    PoolTables state_only;
    add_state_tables(state_only);
    sum += digest_tables(state_only);
  }
  return sum;
}

Result<HostArenaTables> Model::host_tables() const {
  if (!poisoned_.empty()) return make_error(ErrorKind::environment, "host_tables: the model is poisoned: " + poisoned_);
  if (!pool_) return invalid("host_tables: no pool is built yet");
  if (!pool_->host) return invalid("host_tables: this pool has no host arena (host_bytes is 0)");
  return pool_->host->tables();
}

Result<std::vector<std::uint8_t>> Model::raw_bytes(std::uint64_t offset, std::uint64_t length) const {
  if (!poisoned_.empty()) return make_error(ErrorKind::environment, "raw_bytes: the model is poisoned: " + poisoned_);
  if (!pool_) return invalid("raw_bytes: no pool is built yet");
  if (!pool_->bytes) return make_error(ErrorKind::unsupported, "raw_bytes: a tables-only pool has no bytes");
  const std::uint64_t size = pool_->bytes->size();
  if (offset > size || length > size - offset)
    return out_of_range("raw_bytes: [" + num(offset) + ", " + num(offset) + " + " + num(length) +
                        ") is outside the pool's " + num(size) + " bytes");
  auto r = pool_->bytes->range(offset, length);
  return std::vector<std::uint8_t>(r.begin(), r.end());
}

Result<std::uint64_t> Model::bytes_digest(std::span<const ByteRange> ranges) const {
  if (!poisoned_.empty()) return make_error(ErrorKind::environment, "bytes_digest: the model is poisoned: " + poisoned_);
  KVTWIN_TRY(const std::span<const std::uint8_t> all, bytes_view());
  for (const ByteRange& r : ranges)
    if (r.offset > all.size() || r.length > all.size() - r.offset)
      return out_of_range("bytes_digest: [" + num(r.offset) + ", " + num(r.offset) + " + " + num(r.length) +
                          ") is outside the pool's " + num(std::uint64_t{all.size()}) + " bytes");
  return pool_->bytes->digest(ranges);
}

Result<std::span<const std::uint8_t>> Model::bytes_view() const {
  if (!pool_) return invalid("raw_bytes: no pool is built yet");
  if (!pool_->bytes) return make_error(ErrorKind::unsupported, "raw_bytes: a tables-only pool has no bytes");
  return std::as_const(*pool_->bytes).all();
}

std::optional<RowIdentity> Model::expected_row(std::size_t sub_pool, std::int64_t physical_token, std::uint32_t layer,
                                               std::size_t part) const {
  if (!pool_ || !pool_->bytes || sub_pool >= pool_->allocator.side_count() || physical_token < 0) return std::nullopt;
  const AllocatorSide& s = pool_->allocator.side(sub_pool);
  const DenseEntryLayout& layout = pool_->derived.layouts[sub_pool];
  if (part >= layout.parts.size() || layer >= layout.parts[part].layer_num) return std::nullopt;
  const std::int64_t page = physical_token / pool_->page_size;
  if (page < s.min_page() || page >= s.num_pages()) return std::nullopt;
  const std::int64_t v = s.virtual_of(page);
  if (v < 1) return std::nullopt;
  const WrittenRow* row = pool_->ledger.find(sub_pool, v, RowSlot{physical_token % pool_->page_size, layer, part});
  if (!row) return std::nullopt;
  return RowIdentity{row->source_token, static_cast<std::uint32_t>(sub_pool), layer, static_cast<std::uint32_t>(part),
                     row->write_number};
}

std::string ByteOwner::describe() const {
  std::ostringstream os;
  os << "sub-pool '" << sub_pool_name << "' token " << physical_token << " (physical page " << physical_page;
  if (virtual_page >= 0)
    os << ", virtual page " << virtual_page << ")";
  else
    os << ", unbound)";
  if (part)
    os << " part '" << *part << "' layer " << layer << " byte " << byte_in_row;
  else
    os << " entry padding";
  if (expected)
    os << "; the oracle expects the row of token " << expected->source_token << " at write " << expected->write_number;
  else
    os << "; no row is remembered there";
  return os.str();
}

Result<ByteOwner> Model::locate_byte(std::uint64_t offset) const {
  if (!pool_) return invalid("locate_byte: no pool is built yet");
  if (offset >= pool_->config.total_bytes)
    return out_of_range("locate_byte: byte " + num(offset) + " is past the pool's " + num(pool_->config.total_bytes) + " bytes");
  std::size_t side = 0;
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i) {
    const AllocatorSide& s = pool_->allocator.side(i);
    if (offset >= s.band_begin_byte() && offset < s.band_end_byte()) {
      side = i;
      break;
    }
  }
  const DenseEntryLayout& layout = pool_->derived.layouts[side];
  const AllocatorSide& s = pool_->allocator.side(side);
  ByteOwner o;
  o.sub_pool = side;
  o.sub_pool_name = s.name();
  o.physical_token = static_cast<std::int64_t>(offset / layout.entry_bytes);
  o.physical_page = o.physical_token / pool_->page_size;
  o.virtual_page = o.physical_page < s.num_pages() ? s.virtual_of(o.physical_page) : -1;
  const std::uint64_t in_entry = offset % layout.entry_bytes;
  for (std::size_t part = 0; part < layout.parts.size() && !o.part; ++part) {
    const DensePart& p = layout.parts[part];
    for (std::uint32_t l = 0; l < p.layer_num; ++l) {
      const std::uint64_t begin = p.offset_bytes + l * p.layer_stride_bytes;
      if (in_entry >= begin && in_entry < begin + p.row_bytes()) {
        o.part = p.name;
        o.layer = l;
        o.byte_in_row = in_entry - begin;
        o.expected = expected_row(side, o.physical_token, l, part);
        break;
      }
    }
  }
  return o;
}

// ---------------------------------------------------------------- verify

namespace {
Error broken(std::string message) { return make_error(ErrorKind::internal, "invariant broken: " + std::move(message)); }
}  // namespace

Status Model::verify_side(std::size_t i) const {
  const AllocatorSide& s = pool_->state && i == state_side() ? pool_->state->slots() : pool_->allocator.side(i);
  const std::string side = "sub-pool '" + s.name() + "': ";
  // The band stays inside the buffer and above the sink's reserved floor.
  if (s.band_begin_byte() < pool_->derived.geometry.reserved_floor_bytes || s.band_end_byte() > pool_->config.total_bytes)
    return broken(side + "band bytes [" + num(s.band_begin_byte()) + ", " + num(s.band_end_byte()) + ") leave [reserved floor " +
                  num(pool_->derived.geometry.reserved_floor_bytes) + ", total " + num(pool_->config.total_bytes) + ")");
  // Readers' hold counts equal a recount.
  std::vector<std::uint32_t> recount(static_cast<std::size_t>(s.num_pages()), 0);
  for (const auto& [id, reader] : pool_->readers)
    if (reader.side == i)
      for (std::int64_t p : reader.pages) {
        if (p < 0 || p >= s.num_pages()) return broken(side + "reader " + num(id) + " holds page " + num(p) + " outside the sub-pool");
        ++recount[static_cast<std::size_t>(p)];
      }
  if (recount != pool_->held[i]) return broken(side + "reader hold counts differ from a recount of the open readers");
  return ok_status();
}

Status Model::verify_tables(const PoolTables& tables) const {
  // The table invariants every backend is held to (core/table_check.h), on this model's tables.
  KVTWIN_TRY_STATUS(check_table_invariants(tables, pool_->derived, pool_->config.mode));
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i) KVTWIN_TRY_STATUS(verify_side(i));
  if (pool_->state) KVTWIN_TRY_STATUS(verify_state());
  return verify_batches_and_graphs();
}

Status Model::verify_batches_and_graphs() const {
  for (const auto& [id, b] : pool_->batches)
    if (b.tokens.size() != b.loc.size() || (!b.encoder_loc.empty() && b.encoder_loc.size() != b.loc.size()))
      return broken("batch " + num(id) + " has lanes of different lengths");
  for (const auto& [id, g] : pool_->graphs) {
    if (g.loc.size() != g.shape.max_batch || g.table.size() != g.shape.max_batch)
      return broken("graph " + num(id) + "'s capture-stable buffers changed size");
    for (const auto& row : g.table)
      if (row.size() != g.shape.max_pages) return broken("graph " + num(id) + "'s page table changed width");
  }
  return ok_status();
}

const OracleRowFamily& Model::oracle_family(std::size_t side, std::uint32_t layer, std::size_t part) const {
  const DenseEntryLayout& layout = pool_->derived.layouts.at(side);
  KVTWIN_CHECK(part < layout.parts.size() && layer < layout.parts[part].layer_num, "an oracle family of the layout");
  std::unique_ptr<OracleRowFamily>& family = pool_->oracle_families[side][part][layer];
  if (!family) {
    const DensePart& p = layout.parts[part];
    family = std::make_unique<OracleRowFamily>(
        pool_->config.seed, RowIdentity{0, static_cast<std::uint32_t>(side), layer, static_cast<std::uint32_t>(part), 0},
        p.dtype, p.row_bytes());
  }
  return *family;
}

Status Model::verify_row(std::size_t i, std::int64_t v, const RowSlot& at, const WrittenRow& row) const {
  const AllocatorSide& s = pool_->allocator.side(i);
  const DenseEntryLayout& layout = pool_->derived.layouts[i];
  // Read through translation: the physical token of (v, slot) is v2p[v] * ps + slot.
  const std::int64_t p = s.physical_of(v);
  if (p < s.min_page())
    return broken("sub-pool '" + s.name() + "': a row of virtual page " + num(v) + " is remembered, but the page is not bound");
  const std::int64_t pt = p * pool_->page_size + at.slot;
  const OracleRowFamily& family = oracle_family(i, at.layer, at.part);
  auto actual = std::as_const(*pool_->bytes).row(layout, pt, at.part, at.layer);
  const std::size_t differs_at = family.first_difference(family.key(row.source_token, row.write_number), actual);
  if (differs_at != actual.size()) {
    const DensePart& part = layout.parts[at.part];
    return broken("sub-pool '" + s.name() + "': virtual token " + num(v * pool_->page_size + at.slot) + " (physical " +
                  num(pt) + ") part '" + part.name + "' layer " + num(at.layer) + " does not hold the oracle row of token " +
                  num(row.source_token) + " at write " + num(row.write_number) + "; first difference at byte " +
                  num(std::uint64_t{differs_at}) + " of the row");
  }
  return ok_status();
}

Status Model::verify_rows() const {
  if (!pool_->bytes) return ok_status();
  Status status = ok_status();
  for (std::size_t i = 0; i < pool_->allocator.side_count() && status.ok(); ++i)
    pool_->ledger.for_each_row(i, [&](std::int64_t v, const RowSlot& at, const WrittenRow& row) {
      // A load-back's page holds its rows once its copy has landed (docs/host_arena.md).
      if (status.ok() && !device_rows_pending(i, v)) status = verify_row(i, v, at, row);
    });
  return status;
}

Status Model::verify_changed() const {
  if (!pool_) return ok_status();
  if (built_this_op_) return verify();
  const PageAllocator& a = pool_->allocator;
  PoolTablesView& view = changed_view_;
  TableChanges& changes = changed_tables_;
  view.sides.clear();
  view.free_queue_size = a.free_queue().size();
  view.state_frontier_bytes = 0;
  changes.virtual_pages.clear();
  changes.physical_pages.clear();
  for (std::size_t i = 0; i < a.side_count(); ++i) {
    const AllocatorSide& s = a.side(i);
    view.sides.push_back(SideTablesView{s.name(), s.v2p(), s.p2v(), s.watermark(), s.allocated_pages(), s.holes().size(),
                                        [&s](std::int64_t p) { return s.holes().count(p) != 0; },
                                        s.floats() ? s.span_low() : 0});
    changes.virtual_pages.push_back(s.changed_virtual());
    changes.physical_pages.push_back(s.changed_physical());
  }
  if (pool_->state) view.state_frontier_bytes = pool_->state->frontier_bytes();
  KVTWIN_TRY_STATUS(check_table_invariants_changed(view, pool_->derived, pool_->config.mode, changes));
  // SPEC 11: the state sub-pool's changed rows and requests (the token sides' are checked above);
  // a pool of 1 TiB holds tens of thousands of state slots, so the whole check waits for verify().
  if (pool_->state && (state_changed_ || readers_changed_)) {
    const StateAllocator& st = *pool_->state;
    const AllocatorSide& sl = st.slots();
    StateTablesView state_view{
        SideTablesView{sl.name(), sl.v2p(), sl.p2v(), sl.watermark(), sl.allocated_pages(), sl.holes().size(),
                       [&sl](std::int64_t p) { return sl.holes().count(p) != 0; }, 0},
        st.free_queue().size(), st.requests().size(), [&st](std::uint64_t r) { return st.slot_of(r); },
        std::vector<std::int64_t>(st.quarantined().begin(), st.quarantined().end())};
    std::uint64_t state_end = 0;
    KVTWIN_TRY_STATUS(check_state_table_invariants_changed(
        state_view, pool_->derived, pool_->config.mode,
        StateChanges{sl.changed_virtual(), sl.changed_physical(), state_requests_changed_}, state_end));
    if (state_end != st.frontier_bytes())
      return broken("the state sub-pool's frontier is byte " + num(st.frontier_bytes()) + " but its tables end at byte " +
                    num(state_end));
    KVTWIN_TRY_STATUS(verify_state_changed());
  }
  for (std::size_t i = 0; i < a.side_count(); ++i) {
    const AllocatorSide& s = a.side(i);
    if (s.band_begin_byte() < pool_->derived.geometry.reserved_floor_bytes || s.band_end_byte() > pool_->config.total_bytes)
      return broken("sub-pool '" + s.name() + "': band bytes [" + num(s.band_begin_byte()) + ", " + num(s.band_end_byte()) +
                    ") leave [reserved floor " + num(pool_->derived.geometry.reserved_floor_bytes) + ", total " +
                    num(pool_->config.total_bytes) + ")");
    if (readers_changed_) KVTWIN_TRY_STATUS(verify_side(i));
  }
  KVTWIN_TRY_STATUS(verify_batches_and_graphs());
  if (!pool_->bytes) return ok_status();
  // Every row the operation wrote (and still remembers) reads back the oracle's bytes, and so do
  // the first and last remembered rows of every page it bound, unbound or moved (a page copied
  // from the wrong place, or cut short, shows there; every row of it at the next full verify).
  Status status = ok_status();
  const auto check = [&](std::size_t i) {
    return [&, i](std::int64_t page, const RowSlot& at, const WrittenRow& row) {
      if (status.ok()) status = verify_row(i, page, at, row);
    };
  };
  for (std::size_t i = 0; i < a.side_count() && status.ok(); ++i) {
    pool_->ledger.for_each_changed_row(i, [&](std::int64_t vpage, const RowSlot& at, const WrittenRow& row) {
      if (status.ok() && !device_rows_pending(i, vpage)) status = verify_row(i, vpage, at, row);
    });
    std::vector<std::int64_t>& pages = changed_pages_;
    pages.assign(a.side(i).changed_virtual().begin(), a.side(i).changed_virtual().end());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (std::int64_t v : pages)
      if (!device_rows_pending(i, v)) pool_->ledger.for_first_and_last_row_of_page(i, v, check(i));
  }
  KVTWIN_TRY_STATUS(status);
  // SPEC 8: the host arena's tables and the transfers when the operation changed them (O(host
  // pages), as a host compaction is), and every row of each host page whose rows or bytes it changed.
  if (!pool_->host) return ok_status();
  if (host_tables_changed_) KVTWIN_TRY_STATUS(verify_host(true));
  if (pool_->host->with_bytes())
    for (const auto& [side, logical] : host_pages_changed_)
      if (!host_rows_pending(side, logical)) KVTWIN_TRY_STATUS(verify_host_page(side, logical));
  return ok_status();
}

// The digest kept as operations changed the tables is the digest of the tables (an operation
// that changed a row without recording it would leave it behind).
Status Model::verify_tables_digest(const PoolTables& tables) const {
  if (digest_stale_) return ok_status();  // summed whole at the next digest
  KVTWIN_TRY(const std::uint64_t kept, Model::tables_digest());  // the model's own, not an override's
  const std::uint64_t whole = digest_tables(tables);
  if (kept != whole)
    return broken("the tables digest kept as operations changed the tables (" + num(kept) +
                  ") is not the digest of the tables (" + num(whole) +
                  "): an operation changed a table row without recording it (AllocatorSide::changed_virtual, "
                  "changed_physical) or the free queue outside its two ends");
  return ok_status();
}

Status Model::verify() const {
  if (!pool_) return ok_status();  // nothing built, nothing to break
  // One copy of the tables for both of their checks (a 1 TiB pool's are megabytes).
  KVTWIN_TRY(const PoolTables tables, this->tables());
  KVTWIN_TRY_STATUS(verify_tables(tables));
  KVTWIN_TRY_STATUS(verify_rows());
  KVTWIN_TRY_STATUS(verify_tables_digest(tables));
  if (!pool_->host) return ok_status();
  KVTWIN_TRY_STATUS(verify_host(true));
  if (!pool_->host->with_bytes()) return ok_status();
  for (std::size_t side = 0; side < pool_->host_rows.size(); ++side)
    for (const auto& [logical, rows] : pool_->host_rows[side])
      if (!host_rows_pending(side, logical)) KVTWIN_TRY_STATUS(verify_host_page(side, logical));
  return ok_status();
}

std::uint64_t Model::state_digest(bool with_bytes) const {
  StateDigest d;
  if (!pool_) return d.value();
  d.add(pool_config_to_json(pool_->config).dump());
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i) {
    const AllocatorSide& s = pool_->allocator.side(i);
    d.add(s.v2p());
    d.add(s.p2v());
    d.add(s.watermark());
    d.add(std::vector<std::int64_t>(s.holes().begin(), s.holes().end()));
    d.add(s.allocated_pages());
    for (std::uint32_t h : pool_->held[i]) d.add(std::uint64_t{h});
    if (pool_->bytes)
      pool_->ledger.for_each_row(i, [&](std::int64_t v, const RowSlot& at, const WrittenRow& row) {
        d.add(v);
        d.add(at.slot);
        d.add(std::uint64_t{at.layer});
        d.add(std::uint64_t{at.part});
        d.add(row.source_token);
        d.add(row.write_number);
      });
  }
  d.add(std::vector<std::int64_t>(pool_->allocator.free_queue().begin(), pool_->allocator.free_queue().end()));
  for (std::size_t i = 0; i < pool_->allocator.side_count(); ++i)
    if (pool_->allocator.side(i).floats()) d.add(pool_->allocator.side(i).span_low());
  if (pool_->state) {
    const StateAllocator& st = *pool_->state;
    d.add(st.slots().v2p());
    d.add(st.slots().p2v());
    d.add(st.slots().watermark());
    d.add(std::vector<std::int64_t>(st.slots().holes().begin(), st.slots().holes().end()));
    d.add(std::vector<std::int64_t>(st.free_queue().begin(), st.free_queue().end()));
    for (const auto& [request, slot] : st.requests()) {
      d.add(request);
      d.add(slot);
    }
    d.add(std::vector<std::int64_t>(st.quarantined().begin(), st.quarantined().end()));
    for (std::uint32_t h : pool_->held[state_side()]) d.add(std::uint64_t{h});
    for (const auto& [slot, row] : pool_->state_rows) {
      d.add(slot);
      d.add(row.first);
      d.add(row.second);
    }
  }
  for (const auto& [id, b] : pool_->batches) {
    d.add(std::uint64_t{id});
    d.add(b.tokens);
    d.add(b.loc);
    d.add(b.physical);
    d.add(b.encoder_loc);
  }
  for (const auto& [id, r] : pool_->readers) {
    d.add(std::uint64_t{id});
    d.add(std::uint64_t{r.side});
    d.add(r.pages);
  }
  for (const auto& [id, g] : pool_->graphs) {
    d.add(std::uint64_t{id});
    d.add(to_string(Op(g.shape)));
    d.add(g.loc);
    for (const auto& row : g.table) d.add(row);
  }
  if (pool_->bytes && with_bytes) d.add(digest_bytes(pool_->bytes->all()));
  digest_host(d, with_bytes);
  return d.value();
}

bool Model::perturb_for_test(std::string_view what, std::uint64_t pick) {
  KVTWIN_CHECK(pool_ != nullptr, "perturb_for_test needs a built pool");
  digest_stale_ = true;  // the seams below change rows without recording them
  PageAllocator& a = pool_->allocator;
  const std::size_t side = static_cast<std::size_t>(pick % a.side_count());
  AllocatorSide::TablesForTest t = a.side_for_test(side).tables_for_test();
  const auto bump = [pick](std::vector<std::int64_t>& v) {
    if (v.empty()) return false;
    v[static_cast<std::size_t>(pick % v.size())] += 1;
    return true;
  };
  if (what == "v2p") return bump(t.v2p);
  if (what == "p2v") return bump(t.p2v);
  if (what == "watermark") return ++t.watermark, true;
  if (what == "allocated") return ++t.allocated, true;
  if (what == "holes") {
    if (!t.holes.empty()) return t.holes.erase(t.holes.begin()), true;
    return t.holes.insert(t.watermark), true;
  }
  if (what == "free_queue") {
    std::deque<std::int64_t>& q = a.free_queue_for_test();
    if (q.empty()) return false;
    q[static_cast<std::size_t>(pick % q.size())] += 1;
    a.recount_free_queue_terms();  // the queue changed outside its two ends
    return true;
  }
  if (what == "held") {
    std::vector<std::uint32_t>& h = pool_->held[side];
    if (h.empty()) return false;
    h[static_cast<std::size_t>(pick % h.size())] += 1;
    return true;
  }
  if (what == "ledger") {
    if (!pool_->bytes) return false;
    std::optional<std::int64_t> page;
    pool_->ledger.for_each_row(side, [&](std::int64_t v, const RowSlot&, const WrittenRow&) {
      if (!page) page = v;
    });
    if (!page) return false;
    pool_->ledger.forget_page(side, *page);
    return true;
  }
  if (what == "batch") {
    ++batches_epoch_;
    for (auto& [id, b] : pool_->batches) {
      if (b.loc.empty()) continue;
      b.loc[static_cast<std::size_t>(pick % b.loc.size())] += 1;
      return true;
    }
    return false;
  }
  if (what == "reader") {
    if (pool_->readers.empty()) return false;
    pool_->readers.begin()->second.pages.push_back(-7);
    return true;
  }
  if (what == "graph") {
    for (auto& [id, g] : pool_->graphs) {
      if (g.loc.empty()) continue;
      g.loc[static_cast<std::size_t>(pick % g.loc.size())] += 1;
      return true;
    }
    return false;
  }
  if (what == "bytes") {
    if (!pool_->bytes) return false;
    std::span<std::uint8_t> all = bytes_for_test();
    if (all.empty()) return false;
    all[static_cast<std::size_t>(pick % all.size())] ^= 0x01;
    return true;
  }
  if (what == "host_tables") {
    if (!pool_->host) return false;
    pool_->host->side_for_test(pick % pool_->host->side_count()).watermark += 1;
    return true;
  }
  if (what == "host_rows") {
    if (!pool_->host) return false;
    for (auto& side_rows : pool_->host_rows)
      if (!side_rows.empty()) return side_rows.erase(side_rows.begin()), true;
    return false;
  }
  if (what == "host_bytes") {
    if (!pool_->host || !pool_->host->with_bytes()) return false;
    std::span<std::byte> page = pool_->host->physical_page_bytes(0, static_cast<std::int64_t>(pick % static_cast<std::uint64_t>(pool_->host->page_num())));
    page[static_cast<std::size_t>(pick % page.size())] ^= std::byte{0x01};
    return true;
  }
  if (what == "transfer") {
    if (pool_->transfers.empty()) return false;
    Transfer* t = pool_->transfers.find_for_test(pool_->transfers.in_flight().begin()->first);
    t->landed = !t->landed;
    return true;
  }
  if (what == "transfer_held") {
    if (!pool_->host) return false;
    std::vector<std::uint32_t>& h = pool_->offload_held[side];
    if (h.empty()) return false;
    h[static_cast<std::size_t>(pick % h.size())] += 1;
    return true;
  }
  KVTWIN_CHECK(false, "perturb_for_test: unknown piece of state");
  return false;
}

}  // namespace kvtwin::sim

// ---------------------------------------------------------------- the state sub-pool and the float (SPEC 11)

namespace kvtwin::sim {
namespace {
// The oracle identity of state bytes names this sub-pool index (token sub-pools are 0 and 1).
constexpr std::uint32_t kStateOracleSubPool = 7;

Error no_state(const char* op) {
  return make_error(ErrorKind::invalid_argument, std::string(op) +
                                                     ": this pool has no state sub-pool; state operations apply to "
                                                     "hybrid chains (SPEC 11: [state up | full down], [state up | swa "
                                                     "float | full down])");
}
}  // namespace

std::size_t Model::state_side() const { return pool_->allocator.side_count(); }

bool Model::state_slot_quarantined(std::int64_t physical_slot) const {
  return pool_->state->quarantined().count(physical_slot) != 0;
}

Status Model::check_relocation_readers(const CompactionPlan& relocation) const {
  // SPEC 7: a relocation is a move; no open reader may hold a page it moves.
  const std::vector<std::uint32_t>& held = pool_->held[1];
  for (const PagePair& m : relocation.moves)
    for (std::int64_t page : {m.src, m.dst})
      if (held[static_cast<std::size_t>(page)] > 0)
        return make_error(ErrorKind::reader_conflict,
                          "make_room would move the float's page " + num(m.src) + " to page " + num(m.dst) +
                              " of sub-pool '" + pool_->allocator.side(1).name() + "' while a reader holds page " +
                              num(page) + "; end the reader first (end_read)");
  // SPEC 8: nor may a transfer in flight copy one (a relocation is a compaction move).
  if (compaction_waits_for_transfers())
    for (const PagePair& m : relocation.moves)
      for (std::int64_t page : {m.src, m.dst})
        if (pool_->offload_held[1][static_cast<std::size_t>(page)] > 0 ||
            pool_->load_back_held[1][static_cast<std::size_t>(page)] > 0)
          return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                              "make_room would move the float's page " + num(m.src) + " to page " + num(m.dst) +
                                  " of sub-pool '" + pool_->allocator.side(1).name() +
                                  "' while an in-flight transfer copies page " + num(page) +
                                  "; wait for it first (transfer_wait)");
  return ok_status();
}

void Model::copy_relocation(const CompactionPlan& relocation, std::vector<PageMove>& moves) {
  const AllocatorSide& fl = pool_->allocator.side(1);
  // In the plan's order: every destination is free when it is written (AllocatorSide::plan_relocation).
  if (pool_->bytes)
    for (const PagePair& m : float_copy_order(relocation.moves)) {
      pool_->bytes->copy_page(fl.geometry(), m.src, m.dst);
      note_touched(static_cast<std::uint64_t>(m.dst) * fl.page_bytes(), fl.page_bytes());
    }
  for (const PagePair& m : relocation.moves) moves.push_back(PageMove{fl.name(), m.src, m.dst});
}

OpResult Model::alloc_hybrid(std::uint64_t k, const std::vector<std::uint64_t>* split) {
  // SPEC 11: the owner's band grows down; the float fits between the state and it, relocated
  // (make_room) when the owner's growth cuts into it; no room changes nothing.
  const ChainAllocPlan plan = plan_chain_alloc(pool_->allocator, *pool_->state, k);
  if (!plan.fits) return Outcome(NoRoom{});
  if (plan.relocation) KVTWIN_TRY_STATUS(check_relocation_readers(*plan.relocation));
  std::vector<PageMove> moves;
  if (plan.relocation) copy_relocation(*plan.relocation, moves);
  const std::vector<std::int64_t> vpages = commit_chain_alloc(pool_->allocator, plan);
  if (!split) return Outcome(Allocated{vpages, std::move(moves)});
  // alloc_many: one allocation of the sum, handed out in order (the same pages as one after
  // another on a token chain; here the float is sized for the whole at once).
  AllocatedMany out;
  std::size_t at = 0;
  for (std::uint64_t n : *split) {
    out.pages.emplace_back(vpages.begin() + static_cast<std::ptrdiff_t>(at),
                           vpages.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return Outcome(std::move(out));
}

Status Model::check_state_moves(const CompactionPlan& plan) const {
  // SPEC 10.22: a move may leave a slot a reader holds (the reader keeps reading the old bytes,
  // which stay there, quarantined), but never overwrite one.
  const std::vector<std::uint32_t>& held = pool_->held[state_side()];
  for (const PagePair& m : plan.moves)
    if (held[static_cast<std::size_t>(m.dst)] > 0)
      return make_error(ErrorKind::reader_conflict, "state compaction would move slot " + num(m.src) + " onto slot " +
                                                        num(m.dst) + ", which an open reader holds; end the reader first");
  return ok_status();
}

void Model::commit_state_moves(const CompactionPlan& plan, std::vector<PageMove>& moves) {
  StateAllocator& st = *pool_->state;
  const std::vector<std::uint32_t>& held = pool_->held[state_side()];
  st.quarantine_moved(plan, [&](std::int64_t slot) { return held[static_cast<std::size_t>(slot)] > 0; });
  for (const PagePair& m : plan.moves) {
    // A slot's envelope is its whole entry (page size 1); the ledger is keyed by virtual slot.
    if (pool_->bytes) {
      pool_->bytes->copy_page(st.slots().geometry(), m.src, m.dst);
      note_touched(static_cast<std::uint64_t>(m.dst) * st.entry_bytes(), st.entry_bytes());
    }
    moves.push_back(PageMove{st.slots().name(), m.src, m.dst});
  }
  state_changed_ = true;
}

OpResult Model::on(const StateAlloc& op) {
  if (!pool_->state) return no_state("state_alloc");
  state_requests_changed_.push_back(op.request);
  if (pool_->state->slot_of(op.request) >= 0)
    return invalid("state_alloc: request " + num(op.request) + " already holds state slot " +
                   num(pool_->state->slot_of(op.request)) + "; free it first (state_free)");
  const StateAllocPlan plan = plan_state_alloc(pool_->allocator, *pool_->state);
  // SPEC 10.22: the slot still holds what a reader reads: no room until the reader is done.
  if (!plan.fits || (plan.quarantined && state_slot_quarantined(pool_->state->next_physical())))
    return Outcome(NoRoom{});
  if (plan.relocation) KVTWIN_TRY_STATUS(check_relocation_readers(*plan.relocation));
  std::vector<PageMove> moves;
  if (plan.relocation) copy_relocation(*plan.relocation, moves);
  state_changed_ = true;
  const std::int64_t v = commit_state_alloc(pool_->allocator, *pool_->state, op.request, plan);
  return Outcome(Allocated{{v}, std::move(moves)});
}

OpResult Model::on(const StateFree& op) {
  if (!pool_->state) return no_state("state_free");
  const std::int64_t v = pool_->state->slot_of(op.request);
  state_requests_changed_.push_back(op.request);
  if (v < 0)
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "state_free: request " + num(op.request) +
                            " holds no state slot (double free or never allocated); free each state slot once");
  const CompactionPlan plan = pool_->state->plan_free(op.request, pairing());
  KVTWIN_TRY_STATUS(check_state_moves(plan));
  pool_->state->commit_free(op.request, plan);
  pool_->state_rows.erase(v);  // a freed slot forgets its state
  Compaction out;
  commit_state_moves(plan, out.moves);
  return Outcome(std::move(out));
}

void Model::write_state_slot(std::int64_t vslot, std::uint64_t request, std::uint64_t write_number) {
  const StateEntryLayout& layout = *pool_->derived.state_layout;
  const std::int64_t slot = pool_->state->slots().physical_of(vslot);
  const std::uint64_t base = static_cast<std::uint64_t>(slot) * layout.entry_bytes;
  std::span<std::uint8_t> entry = pool_->bytes->writable(base, layout.entry_bytes);
  for (std::size_t b = 0; b < layout.blocks.size(); ++b) {
    const StateBlock& block = layout.blocks[b];
    for (std::uint32_t l = 0; l < block.layer_num; ++l) {
      const RowIdentity id{static_cast<std::int64_t>(request), kStateOracleSubPool, l, static_cast<std::uint32_t>(b),
                           write_number};
      fill_oracle_row(pool_->config.seed, id, block.dtype,
                      entry.subspan(block.offset_bytes + l * block.layer_stride_bytes, block.layer_stride_bytes));
    }
  }
  note_touched(base, layout.entry_bytes);
  pool_->state_rows[vslot] = {request, write_number};
}

void Model::forget_state_overlapped(std::uint64_t begin, std::uint64_t end) {
  // A token row written outside its band may land on a state slot's bytes: that slot's state is
  // no longer what the ledger remembers.
  const AllocatorSide& slots = pool_->state->slots();
  const std::uint64_t e = pool_->state->entry_bytes();
  for (std::uint64_t slot = begin / e; slot * e < end && slot < static_cast<std::uint64_t>(slots.num_pages()); ++slot) {
    const std::int64_t v = slots.virtual_of(static_cast<std::int64_t>(slot));
    if (v >= 1) pool_->state_rows.erase(v);
  }
}

OpResult Model::on(const StateWrite& op) {
  if (!pool_->state) return no_state("state_write");
  const std::int64_t v = pool_->state->slot_of(op.request);
  if (v < 0) return invalid("state_write: request " + num(op.request) + " holds no state slot; state_alloc gives it one");
  state_changed_ = true;
  state_slots_written_.push_back(v);
  if (pool_->bytes) write_state_slot(v, op.request, op.write_number);
  return Outcome(Done{});
}

OpResult Model::on(const StateRead& op) {
  if (!pool_->state) return no_state("state_read");
  if (!pool_->bytes)
    return make_error(ErrorKind::unsupported, "state_read: a tables-only pool has no bytes; build with tables_only: false");
  const StateEntryLayout& layout = *pool_->derived.state_layout;
  KVTWIN_TRY(const StateBlock* block, layout.block(op.block));
  if (op.layer >= block->layer_num)
    return out_of_range("state_read: layer " + num(op.layer) + " is outside block '" + block->name + "''s " +
                        num(block->layer_num) + " state layers");
  const AllocatorSide& slots = pool_->state->slots();
  std::vector<std::uint8_t> data;
  for (std::size_t i = 0; i < op.slots.size(); ++i) {
    const std::int64_t slot = op.slots[i];
    if (slot < 0 || slot >= slots.num_pages())
      return out_of_range("state_read: slot " + num(slot) + " at position " + num(std::uint64_t{i}) +
                          " is outside the state sub-pool's slots [0, " + num(slots.num_pages()) + ")");
  }
  data.reserve(op.slots.size() * block->layer_stride_bytes);
  for (std::int64_t slot : op.slots) {
    if (slot < slots.min_page()) {
      data.insert(data.end(), block->layer_stride_bytes, 0);  // the sink reads as zeros
      continue;
    }
    KVTWIN_TRY(std::uint64_t at, state_byte_address(layout, slot, *block, op.layer));
    auto bytes = pool_->bytes->range(at, block->layer_stride_bytes);
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  return Outcome(Bytes::of(std::move(data)));
}

OpResult Model::on(const StateSlots& op) {
  if (!pool_->state) return no_state("state_slots");
  Ids out;
  for (std::uint64_t r : op.requests) {
    const std::int64_t v = pool_->state->slot_of(r);
    out.values.push_back(v < 0 ? 0 : std::max<std::int64_t>(pool_->state->slots().physical_of(v), 0));
  }
  return Outcome(std::move(out));
}

Status Model::verify_state() const {
  KVTWIN_TRY_STATUS(verify_side(state_side()));
  KVTWIN_TRY_STATUS(verify_quarantine_held());
  if (!pool_->bytes) return ok_status();
  // Every remembered state reads back, through the slot table, the oracle's bytes.
  std::vector<std::uint8_t> expected;
  for (const auto& [v, row] : pool_->state_rows) KVTWIN_TRY_STATUS(verify_state_row(v, row, expected));
  return ok_status();
}

Status Model::verify_state_changed() const {
  const StateAllocator& st = *pool_->state;
  if (readers_changed_) KVTWIN_TRY_STATUS(verify_side(state_side()));
  KVTWIN_TRY_STATUS(verify_quarantine_held());
  if (!pool_->bytes) return ok_status();
  // The remembered states of the slots the operation moved, bound or wrote, each once (a state is
  // megabytes of oracle bytes).
  std::vector<std::int64_t> slots = st.slots().changed_virtual();
  slots.insert(slots.end(), state_slots_written_.begin(), state_slots_written_.end());
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  std::vector<std::uint8_t> expected;
  for (std::int64_t v : slots)
    if (const auto row = pool_->state_rows.find(v); row != pool_->state_rows.end())
      KVTWIN_TRY_STATUS(verify_state_row(v, row->second, expected));
  return ok_status();
}

Status Model::verify_quarantine_held() const {
  // SPEC 10.22: a quarantined slot is held by a reader still.
  for (std::int64_t q : pool_->state->quarantined())
    if (pool_->held[state_side()][static_cast<std::size_t>(q)] == 0)
      return broken("state slot " + num(q) + " is quarantined, but no reader holds it; end_read releases it");
  return ok_status();
}

Status Model::verify_state_row(std::int64_t v, const std::pair<std::uint64_t, std::uint64_t>& row,
                               std::vector<std::uint8_t>& expected) const {
  const StateAllocator& st = *pool_->state;
  const StateEntryLayout& layout = *pool_->derived.state_layout;
  const std::int64_t slot = st.slots().physical_of(v);
  if (slot < st.slots().min_page())
    return broken("state slot " + num(v) + "'s state is remembered, but the slot is not bound");
  for (std::size_t b = 0; b < layout.blocks.size(); ++b) {
    const StateBlock& block = layout.blocks[b];
    for (std::uint32_t l = 0; l < block.layer_num; ++l) {
      const RowIdentity id{static_cast<std::int64_t>(row.first), kStateOracleSubPool, l, static_cast<std::uint32_t>(b),
                           row.second};
      expected.resize(block.layer_stride_bytes);
      fill_oracle_row(pool_->config.seed, id, block.dtype, expected);
      const std::uint64_t at = static_cast<std::uint64_t>(slot) * layout.entry_bytes + block.offset_bytes +
                               l * block.layer_stride_bytes;
      auto actual = pool_->bytes->range(at, block.layer_stride_bytes);
      if (!std::equal(actual.begin(), actual.end(), expected.begin()))
        return broken("state slot " + num(v) + " (physical " + num(slot) + ") block '" + block.name + "' layer " +
                      num(l) + " does not hold the oracle's state of request " + num(row.first) + " at write " +
                      num(row.second));
    }
  }
  return ok_status();
}

}  // namespace kvtwin::sim
