// The reference model's host arena and transfers (SPEC.md section 8). See model.h for the model
// and docs/host_arena.md for every decision below: each handler validates in the order that page
// lists, then changes the state, so that a refusal leaves it exactly as it was.
//
// How a transfer goes: it starts (offload, load_back) by checking everything, taking its
// thread's lease, resolving its ids (device virtual -> physical through v2p, host logical ->
// physical through the arena), recording its finish event (the arena's pending transfers) and
// handing its lease to that event; it holds its device and host pages from then on. The content
// oracle is told at start what the copy will put where (the ledger is intent); the bytes move
// when the copy lands (transfers.h: at the latest at its transfer_wait, in dependency order), and
// verify() reads a page only once its bytes have landed. transfer_wait lets everything go.
#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/oracle.h"
#include "core/printable.h"
#include "core/reasons.h"
#include "sim/model.h"
#include "sim/model_state.h"
#include "sim/translation.h"

namespace kvtwin::sim {
namespace {

std::string num(std::uint64_t v) { return std::to_string(v); }
std::string num(std::int64_t v) { return std::to_string(v); }
std::string num(std::uint32_t v) { return std::to_string(v); }

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

std::string op_text(std::string_view op) { return std::string(op) + ": "; }

std::string list_ids(const std::vector<std::int64_t>& ids, std::size_t limit = 8) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size() && i < limit; ++i) out += (i ? ", " : "") + num(ids[i]);
  if (ids.size() > limit) out += ", ... (" + num(std::uint64_t{ids.size()}) + " in all)";
  return out + "]";
}

Error in_flight(std::string message) {
  return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight, std::move(message));
}

Error broken(std::string message) { return make_error(ErrorKind::internal, "invariant broken: " + std::move(message)); }

}  // namespace

// ---------------------------------------------------------------- shared steps

Result<HostArena*> Model::host_arena(std::string_view op) {
  if (!pool_->host)
    return invalid(op_text(op) + "this pool has no host arena; build it with host_bytes (the bytes of the host arena "
                                 "its sides share, SPEC 8)");
  return &*pool_->host;
}

Status Model::check_transfer_start(std::string_view op, std::uint32_t transfer, std::uint32_t stream,
                                   const std::optional<std::uint32_t>& wait_event) const {
  if (pool_->transfers.find(transfer) != nullptr)
    return invalid(op_text(op) + "transfer " + num(transfer) + " is already in flight; wait for it (transfer_wait " +
                   num(transfer) + ") or use another id");
  // Stream 0 is the compute stream, where every other operation runs synchronously.
  if (stream == 0)
    return invalid(op_text(op) + "stream 0 is the compute stream; transfers run on copy streams 1 and up");
  if (wait_event && pool_->transfers.event(*wait_event) == nullptr)
    return invalid(op_text(op) + "event " + num(*wait_event) + " was never recorded; record it first (record_event) or "
                   "leave wait_event out");
  return ok_status();
}

std::vector<std::uint64_t> Model::captured_by(const std::optional<std::uint32_t>& wait_event) const {
  if (!wait_event) return {};
  const std::vector<std::uint64_t>* e = pool_->transfers.event(*wait_event);
  return e ? *e : std::vector<std::uint64_t>{};
}

Result<std::vector<std::int64_t>> Model::checked_host_ids(std::string_view op, std::size_t side,
                                                          const std::vector<std::int64_t>& ids,
                                                          bool allow_unloaded) const {
  const HostArena& host = *pool_->host;
  const HostArena::Side& s = host.side(side);
  std::set<std::int64_t> seen;
  for (std::int64_t id : ids) {
    if (allow_unloaded && id == -1) continue;
    if (id < 0 || id >= host.page_num())
      return make_error(ErrorKind::out_of_range, op_text(op) + "host page " + num(id) + " of side '" + s.name +
                                                     "' is outside its ids 0 .. " + num(host.page_num() - 1));
    if (!seen.insert(id).second)
      return invalid(op_text(op) + "host page " + num(id) + " of side '" + s.name +
                     "' is named twice; a transfer copies each host page once");
  }
  std::vector<std::int64_t> not_allocated;
  for (std::int64_t id : seen)
    if (s.logical_to_physical[static_cast<std::size_t>(id)] < 0) not_allocated.push_back(id);
  if (!not_allocated.empty())
    return invalid(op_text(op) + "host pages " + list_ids(not_allocated) + " of side '" + s.name +
                   "' are not allocated; allocate them first (host_alloc)");
  return std::vector<std::int64_t>(seen.begin(), seen.end());
}

Status Model::check_host_race(std::string_view op, std::size_t side, const std::vector<std::int64_t>& host_ids,
                              bool writes, std::uint32_t stream, const std::vector<std::uint64_t>& waits_for) const {
  if (pool_->transfers.empty()) return ok_status();
  // A host page an in-flight transfer writes (an offload), or reads while this one would write it,
  // is a race unless this transfer lands after that one: on its stream, or waiting for an event
  // that captured it (directly or through what that waits for).
  const std::vector<std::uint32_t> before =
      pool_->transfers.in_flight_among(pool_->transfers.closed_after(stream, waits_for));
  const std::set<std::int64_t> ids(host_ids.begin(), host_ids.end());
  for (const auto& [id, t] : pool_->transfers.in_flight()) {
    if (std::find(before.begin(), before.end(), id) != before.end()) continue;
    if (!writes && t.direction == TransferDirection::load_back) continue;  // two readers
    for (const PageCopy& c : t.copies)
      if (c.side == side && c.host_logical >= 0 && ids.count(c.host_logical) != 0)
        return in_flight(op_text(op) + "host page " + num(c.host_logical) + " of side '" + pool_->host->side(side).name +
                         "' is " + (t.direction == TransferDirection::offload ? "written" : "read") +
                         " by in-flight transfer " + num(id) + ", and this transfer would not land after it; submit "
                         "it on stream " + num(t.stream) + ", wait for an event recorded there after it (record_event, "
                         "wait_event), or wait for it first (transfer_wait " + num(id) + ")");
  }
  return ok_status();
}

Status Model::check_pages_not_in_flight(std::string_view op, std::size_t side, const std::vector<std::int64_t>& pages,
                                        bool reading) const {
  if (pool_->transfers.empty()) return ok_status();
  const AllocatorSide& s = pool_->allocator.side(side);
  for (std::int64_t v : pages) {
    if (pool_->loading.count(v) != 0)
      return in_flight(op_text(op) + "virtual page " + num(v) +
                       " is being loaded back; it is not visible until its transfer_wait");
    const std::int64_t p = s.physical_of(v);
    if (p < s.min_page()) continue;
    if (!reading && pool_->offload_held[side][static_cast<std::size_t>(p)] > 0)
      return in_flight(op_text(op) + "virtual page " + num(v) + " (page " + num(p) + " of sub-pool '" + s.name() +
                       "') is copied by an in-flight offload; wait for it first (transfer_wait)");
  }
  return ok_status();
}

std::int64_t Model::transfer_host_page(std::uint32_t thread, std::size_t side, std::int64_t logical) {
  // SPEC 8: resolved only inside a lease (the transfer holds its thread's while it starts).
  Result<std::int64_t> p = pool_->host->resolve(thread, side, logical);
  KVTWIN_CHECK(p.ok(), "a transfer resolves host ids it checked, inside its lease");
  return *p;
}

Result<std::vector<std::int64_t>> Model::offload_selection(std::size_t side, IdUnit unit,
                                                           const std::vector<std::int64_t>& ids) const {
  // Ranges as free's (docs/decisions.md), on every page the ids touch.
  KVTWIN_TRY(std::vector<std::int64_t> touched, virtual_pages_of(unit, ids, "offload"));
  // SPEC 8: transfers move whole pages. With token ids a page counts only when every one of its
  // tokens is listed; a page partly listed is skipped as a whole page (never a token at a time).
  std::vector<std::int64_t> whole;
  if (unit == IdUnit::pages) {
    whole = touched;
  } else {
    std::set<std::int64_t> tokens(ids.begin(), ids.end());
    for (std::int64_t v : touched) {
      std::int64_t listed = 0;
      for (std::int64_t t = v * pool_->page_size; t < (v + 1) * pool_->page_size; ++t) listed += tokens.count(t);
      if (listed == pool_->page_size) whole.push_back(v);
    }
  }
  std::vector<std::int64_t> unallocated;
  for (std::int64_t v : whole)
    if (pool_->allocator.owner().physical_of(v) < 0) unallocated.push_back(v);
  if (!unallocated.empty())
    return invalid("offload: virtual pages " + list_ids(unallocated) +
                   " are not allocated; offload only pages of live allocations");
  KVTWIN_TRY_STATUS(check_pages_not_in_flight("offload", side, whole, true));
  // SPEC 8: a sliding-window side selects whole bound pages; a tombstone is skipped whole.
  const AllocatorSide& s = pool_->allocator.side(side);
  std::vector<std::int64_t> selected;
  for (std::int64_t v : whole)
    if (s.physical_of(v) >= s.min_page()) selected.push_back(v);
  return selected;
}

bool Model::transfer_holds_page(std::size_t side, std::int64_t page, bool load_backs_only) const {
  if (page < 0 || static_cast<std::size_t>(page) >= pool_->load_back_held[side].size()) return false;
  const auto p = static_cast<std::size_t>(page);
  return pool_->load_back_held[side][p] > 0 || (!load_backs_only && pool_->offload_held[side][p] > 0);
}

std::optional<std::uint32_t> Model::transfer_covering_page(std::size_t side, std::int64_t page,
                                                         bool load_backs_only) const {
  const auto& sub_pools = pool_->derived.geometry.sub_pools;
  const std::uint64_t begin = static_cast<std::uint64_t>(page) * sub_pools[side].page_bytes;
  const std::uint64_t end = begin + sub_pools[side].page_bytes;
  for (const auto& [id, t] : pool_->transfers.in_flight()) {
    if (load_backs_only && t.direction == TransferDirection::offload) continue;
    for (const PageCopy& c : t.copies) {
      if (c.host_logical < 0) continue;
      const std::uint64_t copy_begin = static_cast<std::uint64_t>(c.device_page) * sub_pools[c.side].page_bytes;
      if (copy_begin < end && begin < copy_begin + sub_pools[c.side].page_bytes) return id;
    }
  }
  return std::nullopt;
}

bool Model::device_rows_pending(std::size_t side, std::int64_t vpage) const {
  return pool_->device_pending.count({side, vpage}) != 0;
}

bool Model::host_rows_pending(std::size_t side, std::int64_t logical) const {
  return pool_->host_pending.count({side, logical}) != 0;
}

// ---------------------------------------------------------------- landing

void Model::land(std::uint32_t transfer) {
  const bool with_bytes = pool_->bytes.has_value() && pool_->host->with_bytes();
  for (std::uint32_t id : pool_->transfers.landing_order(transfer, transfer_waits_for_producer())) {
    const Transfer& t = *pool_->transfers.find(id);
    for (const PageCopy& c : t.copies) {
      if (c.host_logical < 0) continue;  // a load-back's SWA half that is bound but not loaded
      if (with_bytes) {
        const SubPoolGeometry& g = pool_->derived.geometry.sub_pools[c.side];
        const std::uint64_t offset = static_cast<std::uint64_t>(c.device_page) * g.page_bytes;
        std::span<std::byte> host = pool_->host->physical_page_bytes(c.side, c.host_page);
        KVTWIN_CHECK(host.size() == g.page_bytes, "a host page is its side's device page envelope");
        // The copy uses the physical pages the transfer resolved when it started.
        if (t.direction == TransferDirection::offload) {
          std::memcpy(host.data(), std::as_const(*pool_->bytes).range(offset, g.page_bytes).data(), g.page_bytes);
          ++pool_->host_writes;
        } else {
          std::memcpy(pool_->bytes->writable(offset, g.page_bytes).data(), host.data(), g.page_bytes);
          note_touched(offset, g.page_bytes);
        }
      }
      if (t.direction == TransferDirection::offload) {
        const auto pending = pool_->host_pending.find({c.side, c.host_logical});
        KVTWIN_CHECK(pending != pool_->host_pending.end(), "a copy that lands was pending");
        pool_->host_pending.erase(pending);
        host_pages_changed_.emplace_back(c.side, c.host_logical);
      } else {
        const auto pending = pool_->device_pending.find({c.side, c.virtual_page});
        KVTWIN_CHECK(pending != pool_->device_pending.end(), "a copy that lands was pending");
        pool_->device_pending.erase(pending);
        if (pool_->bytes) pool_->ledger.mark_page_changed(c.side, c.virtual_page);
      }
    }
    pool_->transfers.mark_landed(id);
    host_tables_changed_ = true;
  }
}

void Model::land_everything() {
  if (!pool_->host) return;
  for (std::uint32_t id : pool_->transfers.unlanded())
    if (!pool_->transfers.find(id)->landed) land(id);
}

// ---------------------------------------------------------------- host allocation, leases, events

OpResult Model::on(const HostAlloc& op) {
  KVTWIN_TRY(HostArena* host, host_arena("host_alloc"));
  host->set_compaction_ignores_transfers_for_test(!compaction_waits_for_transfers());
  // SPEC 8 (host_arena.h): all or nothing; compacts first when it fits only once packed.
  KVTWIN_TRY(HostAllocOutcome outcome, host->alloc_many(op.thread, op.pages));
  if (std::holds_alternative<HostNoRoom>(outcome)) return Outcome(NoRoom{});
  const HostAllocated& a = std::get<HostAllocated>(outcome);
  host_tables_changed_ = true;
  kvtwin::HostAllocated out;
  out.logical = a.logical;
  out.physical = a.physical;
  for (const HostPageMove& m : a.moves) {
    out.moves.push_back(PageMove{host->side(m.side).name, m.src, m.dst});
    // The page's envelope moved with its logical id; the rows the oracle remembers did not change.
    if (host->with_bytes()) ++pool_->host_writes;
    host_pages_changed_.emplace_back(m.side, host->side(m.side).physical_to_logical[static_cast<std::size_t>(m.dst)]);
  }
  return Outcome(std::move(out));
}

OpResult Model::on(const HostFree& op) {
  KVTWIN_TRY(HostArena* host, host_arena("host_free"));
  std::optional<std::size_t> side;
  std::string names;
  for (std::size_t i = 0; i < host->side_count(); ++i) {
    if (host->side(i).name == op.side) side = i;
    names += (i ? ", " : "") + host->side(i).name;
  }
  if (!side) return invalid("host_free: the host arena has no side '" + printable(op.side) + "'; its sides: " + names);
  // docs/host_arena.md: a host page an in-flight transfer uses is not freed (checked first).
  for (std::int64_t l : op.pages)
    if (pool_->host_held[*side].count(l) != 0)
      return in_flight("host_free: host page " + num(l) + " of side '" + op.side +
                       "' is used by an in-flight transfer; wait for it first (transfer_wait)");
  KVTWIN_TRY_STATUS(host->free(*side, op.pages));
  for (std::int64_t l : op.pages) pool_->host_rows[*side].erase(l);
  host_tables_changed_ = true;
  return Outcome(Done{});
}

OpResult Model::on(const LeaseAcquire& op) {
  KVTWIN_TRY(HostArena* host, host_arena("lease_acquire"));
  host->acquire(op.thread);
  host_tables_changed_ = true;
  return Outcome(Done{});
}

OpResult Model::on(const LeaseRelease& op) {
  KVTWIN_TRY(HostArena* host, host_arena("lease_release"));
  KVTWIN_TRY_STATUS(host->release(op.thread));
  host_tables_changed_ = true;
  return Outcome(Done{});
}

OpResult Model::on(const RecordEvent& op) {
  KVTWIN_TRY(HostArena * host, host_arena("record_event"));
  (void)host;
  pool_->transfers.record_event(op.event, op.stream);
  host_tables_changed_ = true;
  return Outcome(Done{});
}

// ---------------------------------------------------------------- transfers

OpResult Model::on(const Offload& op) {
  KVTWIN_TRY(HostArena* host, host_arena("offload"));
  KVTWIN_TRY_STATUS(check_transfer_start("offload", op.transfer, op.stream, op.wait_event));
  KVTWIN_TRY(const std::size_t side, side_named(op.side));
  KVTWIN_TRY(const std::vector<std::int64_t> selected, offload_selection(side, op.unit, op.ids));
  if (op.host.size() != selected.size())
    return invalid("offload: " + num(std::uint64_t{selected.size()}) + " whole bound page(s) of sub-pool '" + op.side +
                   "' are selected " + list_ids(selected) + " but 'host' names " + num(std::uint64_t{op.host.size()}) +
                   " host page(s); give one host page per selected page, in ascending virtual page order");
  KVTWIN_TRY_STATUS(checked_host_ids("offload", side, op.host, false));
  const std::vector<std::uint64_t> waits = captured_by(op.wait_event);
  KVTWIN_TRY_STATUS(check_host_race("offload", side, op.host, true, op.stream, waits));

  // SPEC 8's submission order: (1) the producer's event (waits), (2) the lease, (3) resolve the
  // ids, (4) the copy (lands later), (5) the finish event, and the lease handed to it.
  Transfer t;
  t.id = op.transfer;
  t.direction = TransferDirection::offload;
  t.thread = op.thread;
  t.stream = op.stream;
  t.after = pool_->transfers.closed_after(op.stream, waits);
  t.pages = selected;
  host->acquire(op.thread);
  const AllocatorSide& s = pool_->allocator.side(side);
  for (std::size_t i = 0; i < selected.size(); ++i) {
    PageCopy c;
    c.side = side;
    c.virtual_page = selected[i];
    c.device_page = s.physical_of(selected[i]);
    c.host_logical = op.host[i];
    c.host_page = transfer_host_page(op.thread, side, op.host[i]);
    ++pool_->offload_held[side][static_cast<std::size_t>(c.device_page)];
    ++pool_->host_held[side][c.host_logical];
    // The content oracle: the host page will hold exactly the device page's rows.
    if (pool_->bytes) {
      std::vector<WrittenRow> rows = pool_->ledger.page_rows(side, c.virtual_page);
      if (rows.empty())
        pool_->host_rows[side].erase(c.host_logical);
      else
        pool_->host_rows[side][c.host_logical] = std::move(rows);
    }
    pool_->host_pending.insert({side, c.host_logical});
    t.copies.push_back(c);
  }
  host->record_pending_transfer();
  KVTWIN_CHECK(host->release(op.thread).ok(), "the lease a transfer took is released, handed to its finish event");
  pool_->transfers.start(std::move(t));
  host_tables_changed_ = true;
  return Outcome(TransferStarted{op.transfer, selected});
}

OpResult Model::on(const LoadBack& op) {
  KVTWIN_TRY(HostArena* host, host_arena("load_back"));
  KVTWIN_TRY_STATUS(check_transfer_start("load_back", op.transfer, op.stream, op.wait_event));
  const std::size_t sides = pool_->allocator.side_count();
  if (op.host.empty() || (op.host.size() != 1 && op.host.size() != sides))
    return invalid("load_back: 'host' has " + num(std::uint64_t{op.host.size()}) + " list(s); give one per side (" +
                   num(std::uint64_t{sides}) + "), or the first side's alone");
  const std::size_t k = op.host[0].size();
  const bool swa_listed = op.host.size() == 2 && !op.host[1].empty();
  if (op.host.size() == 2 && swa_listed && op.host[1].size() != k)
    return invalid("load_back: the SWA list names " + num(std::uint64_t{op.host[1].size()}) + " host page(s) for " +
                   num(std::uint64_t{k}) + " pages; give one per page (-1: not loaded) or none");
  KVTWIN_TRY_STATUS(checked_host_ids("load_back", 0, op.host[0], false));
  if (swa_listed) KVTWIN_TRY_STATUS(checked_host_ids("load_back", 1, op.host[1], true));
  const std::vector<std::uint64_t> waits = captured_by(op.wait_event);
  for (std::size_t s = 0; s < op.host.size(); ++s)
    KVTWIN_TRY_STATUS(check_host_race("load_back", s, op.host[s], false, op.stream, waits));
  // SPEC 8: load-back allocates the device pages first (on a composite the same virtual pages on
  // the SWA side, as alloc binds them); no room changes nothing.
  if (k > 0 && !pool_->allocator.fits(k)) return Outcome(NoRoom{});

  Transfer t;
  t.id = op.transfer;
  t.direction = TransferDirection::load_back;
  t.thread = op.thread;
  t.stream = op.stream;
  t.after = pool_->transfers.closed_after(op.stream, waits);
  t.pages = k > 0 ? pool_->allocator.alloc(k) : std::vector<std::int64_t>{};
  host->acquire(op.thread);
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t v = t.pages[i];
    pool_->loading.insert(v);
    for (std::size_t s = 0; s < sides; ++s) {
      PageCopy c;
      c.side = s;
      c.virtual_page = v;
      c.device_page = pool_->allocator.side(s).physical_of(v);
      c.host_logical = s == 0 ? op.host[0][i] : (swa_listed ? op.host[1][i] : -1);
      c.host_page = c.host_logical >= 0 ? transfer_host_page(op.thread, s, c.host_logical) : -1;
      ++pool_->load_back_held[s][static_cast<std::size_t>(c.device_page)];
      if (c.host_logical >= 0) {
        ++pool_->host_held[s][c.host_logical];
        pool_->device_pending.insert({s, v});
        // The content oracle: the device page will hold exactly the host page's rows.
        if (pool_->bytes) {
          const auto rows = pool_->host_rows[s].find(c.host_logical);
          if (rows != pool_->host_rows[s].end()) pool_->ledger.set_page_rows(s, v, rows->second);
        }
      }
      t.copies.push_back(c);
    }
  }
  host->record_pending_transfer();
  KVTWIN_CHECK(host->release(op.thread).ok(), "the lease a transfer took is released, handed to its finish event");
  std::vector<std::int64_t> pages = t.pages;
  pool_->transfers.start(std::move(t));
  host_tables_changed_ = true;
  return Outcome(TransferStarted{op.transfer, std::move(pages)});
}

OpResult Model::on(const TransferWait& op) {
  KVTWIN_TRY(HostArena* host, host_arena("transfer_wait"));
  if (pool_->transfers.find(op.transfer) == nullptr)
    return invalid("transfer_wait: transfer " + num(op.transfer) + " is not in flight; it never started, or was waited "
                   "for already");
  land(op.transfer);
  const Transfer t = pool_->transfers.finish(op.transfer);
  for (const PageCopy& c : t.copies) {
    std::vector<std::uint32_t>& held =
        t.direction == TransferDirection::offload ? pool_->offload_held[c.side] : pool_->load_back_held[c.side];
    KVTWIN_CHECK(held[static_cast<std::size_t>(c.device_page)] > 0, "a transfer's device page is held until its wait");
    --held[static_cast<std::size_t>(c.device_page)];
    if (c.host_logical >= 0) {
      auto it = pool_->host_held[c.side].find(c.host_logical);
      KVTWIN_CHECK(it != pool_->host_held[c.side].end(), "a transfer's host page is held until its wait");
      if (--it->second == 0) pool_->host_held[c.side].erase(it);
    }
  }
  if (t.direction == TransferDirection::load_back)
    for (std::int64_t v : t.pages) pool_->loading.erase(v);  // SPEC 8: visible only now
  KVTWIN_TRY_STATUS(host->complete_transfer());
  host_tables_changed_ = true;
  return Outcome(Done{});
}

// ---------------------------------------------------------------- verify and digest

Status Model::verify_host(bool tables_too) const {
  const HostArena& host = *pool_->host;
  if (tables_too) KVTWIN_TRY_STATUS(host.verify());
  // Holds, pending rows and the arena's pending transfers equal a recount of the transfers; while
  // a transfer is in flight, the pages it resolved are still where it resolved them (nothing moved
  // them: SPEC 7 and 8).
  std::vector<std::vector<std::uint32_t>> offload(pool_->offload_held.size()), load_back(pool_->load_back_held.size());
  for (std::size_t s = 0; s < offload.size(); ++s) {
    offload[s].assign(pool_->offload_held[s].size(), 0);
    load_back[s].assign(pool_->load_back_held[s].size(), 0);
  }
  std::vector<std::map<std::int64_t, std::uint32_t>> host_held(pool_->host_held.size());
  std::set<std::int64_t> loading;
  std::multiset<std::pair<std::size_t, std::int64_t>> device_pending, host_pending;
  for (const auto& [id, t] : pool_->transfers.in_flight()) {
    const std::string who = "transfer " + num(id);
    for (const PageCopy& c : t.copies) {
      const AllocatorSide& s = pool_->allocator.side(c.side);
      if (s.physical_of(c.virtual_page) != c.device_page)
        return broken(who + " copies page " + num(c.device_page) + " of sub-pool '" + s.name() + "' for virtual page " +
                      num(c.virtual_page) + ", which is now at page " + num(s.physical_of(c.virtual_page)) +
                      " (a page moved, or was resolved wrongly, while the transfer was in flight)");
      (t.direction == TransferDirection::offload ? offload : load_back)[c.side][static_cast<std::size_t>(c.device_page)]++;
      if (c.host_logical < 0) continue;
      const std::int64_t mapped = host.side(c.side).logical_to_physical[static_cast<std::size_t>(c.host_logical)];
      if (mapped != c.host_page)
        return broken(who + " copies physical host page " + num(c.host_page) + " of side '" + host.side(c.side).name +
                      "' for host page " + num(c.host_logical) + ", which the arena maps to " + num(mapped) +
                      " (a host page moved, or was resolved outside the lease, while the transfer was in flight)");
      ++host_held[c.side][c.host_logical];
      if (!t.landed) {
        if (t.direction == TransferDirection::offload)
          host_pending.insert({c.side, c.host_logical});
        else
          device_pending.insert({c.side, c.virtual_page});
      }
    }
    if (t.direction == TransferDirection::load_back) loading.insert(t.pages.begin(), t.pages.end());
  }
  if (offload != pool_->offload_held || load_back != pool_->load_back_held)
    return broken("the device pages held by transfers differ from a recount of the transfers in flight");
  if (host_held != pool_->host_held)
    return broken("the host pages held by transfers differ from a recount of the transfers in flight");
  if (loading != pool_->loading) return broken("the pages being loaded back differ from a recount of the load-backs");
  if (device_pending != pool_->device_pending || host_pending != pool_->host_pending)
    return broken("the pages whose copy has not landed differ from a recount of the transfers");
  if (host.pending_transfers() != pool_->transfers.in_flight().size())
    return broken("the host arena counts " + num(host.pending_transfers()) + " recorded transfer events, but " +
                  num(std::uint64_t{pool_->transfers.in_flight().size()}) + " transfers are in flight");
  for (std::size_t s = 0; s < pool_->host_rows.size(); ++s)
    for (const auto& [logical, rows] : pool_->host_rows[s])
      if (host.side(s).logical_to_physical[static_cast<std::size_t>(logical)] < 0)
        return broken("rows are remembered for host page " + num(logical) + " of side '" + host.side(s).name +
                      "', which is not allocated");
  return ok_status();
}

Status Model::verify_host_page(std::size_t side, std::int64_t logical) const {
  const HostArena& host = *pool_->host;
  const auto found = pool_->host_rows[side].find(logical);
  if (found == pool_->host_rows[side].end()) return ok_status();
  const std::int64_t p = host.side(side).logical_to_physical[static_cast<std::size_t>(logical)];
  if (p < 0) return broken("rows are remembered for host page " + num(logical) + ", which is not allocated");
  const DenseEntryLayout& layout = pool_->derived.layouts[side];
  const std::span<const std::byte> page = host.physical_page_bytes(side, p);
  const std::vector<WrittenRow>& rows = found->second;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].written) continue;
    const RowSlot at = pool_->ledger.row_position(side, i);
    const DensePart& part = layout.parts[at.part];
    const OracleRowFamily& family = oracle_family(side, at.layer, at.part);
    const std::uint64_t offset = static_cast<std::uint64_t>(at.slot) * layout.entry_bytes + part.offset_bytes +
                                 std::uint64_t{at.layer} * part.layer_stride_bytes;
    const std::span<const std::uint8_t> row(reinterpret_cast<const std::uint8_t*>(page.data()) + offset, part.row_bytes());
    if (family.first_difference(family.key(rows[i].source_token, rows[i].write_number), row) != row.size())
      return broken("host page " + num(logical) + " of side '" + host.side(side).name + "' (physical " + num(p) +
                    ") slot " + num(at.slot) + " part '" + part.name + "' layer " + num(at.layer) +
                    " does not hold the oracle row of token " + num(rows[i].source_token) + " at write " +
                    num(rows[i].write_number) + " (what its offload copied)");
  }
  return ok_status();
}

void Model::digest_host(StateDigest& d, bool with_bytes) const {
  if (!pool_->host) return;
  const HostArenaTables tables = pool_->host->tables();
  for (const HostSideTables& s : tables.sides) {
    d.add(s.watermark);
    d.add(s.logical_to_physical);
    d.add(s.physical_to_logical);
    d.add(s.holes);
    for (const HostExtent& e : s.free_extents) {
      d.add(e.begin);
      d.add(e.end);
    }
    d.add(s.live_pages);
  }
  for (const auto& [thread, depth] : tables.leases) {
    d.add(thread);
    d.add(depth);
  }
  d.add(tables.pending_transfers);
  for (std::size_t s = 0; s < pool_->host_rows.size(); ++s)
    for (const auto& [logical, rows] : pool_->host_rows[s]) {
      d.add(std::uint64_t{s});
      d.add(logical);
      for (const WrittenRow& r : rows) {
        d.add(r.written);
        d.add(r.source_token);
        d.add(r.write_number);
      }
    }
  for (const auto& [id, t] : pool_->transfers.in_flight()) {
    d.add(std::uint64_t{id});
    d.add(std::uint64_t{static_cast<std::uint8_t>(t.direction)});
    d.add(std::uint64_t{t.thread});
    d.add(std::uint64_t{t.stream});
    d.add(t.sequence);
    for (std::uint64_t w : t.after) d.add(w);
    for (const PageCopy& c : t.copies) {
      d.add(std::uint64_t{c.side});
      d.add(c.virtual_page);
      d.add(c.device_page);
      d.add(c.host_logical);
      d.add(c.host_page);
    }
    d.add(t.pages);
    d.add(t.landed);
  }
  for (const auto& [id, captured] : pool_->transfers.events()) {
    d.add(std::uint64_t{id});
    for (std::uint64_t sequence : captured) d.add(sequence);
  }
  d.add(pool_->transfers.next_sequence());
  for (const auto& held : pool_->offload_held)
    for (std::uint32_t h : held) d.add(std::uint64_t{h});
  for (const auto& held : pool_->load_back_held)
    for (std::uint32_t h : held) d.add(std::uint64_t{h});
  for (const auto& held : pool_->host_held)
    for (const auto& [logical, n] : held) {
      d.add(logical);
      d.add(std::uint64_t{n});
    }
  d.add(std::vector<std::int64_t>(pool_->loading.begin(), pool_->loading.end()));
  d.add(pool_->host_writes);
  if (with_bytes && pool_->host->with_bytes()) {
    const std::span<const std::byte> all = pool_->host->all_bytes();
    d.add(digest_bytes(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(all.data()), all.size())));
  }
}

}  // namespace kvtwin::sim
