// The shadow's host arena and transfers (SPEC.md section 8), written from SPEC 8 and
// docs/host_arena.md apart from sim/: a host side is a pair of maps and a set of holes whose band
// is derived from its size; compaction is "every side's live pages, in physical order, slide
// against its end"; a transfer is a record of the pages it copies, and everything it holds is
// derived from the records. Content: an offload's host page knows the rows its device page had
// when it started, a load-back's device page the rows its host page had; the bytes themselves
// are the model's business (the shadow predicts what reads and decode steps return afterwards).
#include <algorithm>

#include "core/reasons.h"
#include "props/shadow.h"

namespace kvtwin::props {
namespace {

Expectation expect(Outcome outcome) { return Expectation{OpResult(std::move(outcome)), false, std::nullopt}; }
Error error(ErrorKind kind, std::string_view why = {}) { return Error{kind, "(predicted by the shadow)", std::string(why)}; }
Expectation refuse(ErrorKind kind, std::string_view why = {}) { return Expectation{OpResult(error(kind, why)), false, std::nullopt}; }
Expectation refuse(const Error& e) { return Expectation{OpResult(e), false, std::nullopt}; }

}  // namespace

// ---------------------------------------------------------------- what the transfers hold

bool PoolShadow::transfer_holds(std::size_t side, std::int64_t physical, bool load_backs_only) const {
  for (const auto& [id, t] : transfers_) {
    if (load_backs_only && t.offload) continue;
    for (const ShadowCopy& c : t.copies)
      if (c.side == side && c.device_page == physical) return true;
  }
  return false;
}

bool PoolShadow::transfer_touches(std::size_t side, std::int64_t physical, bool load_backs_only) const {
  if (transfer_holds(side, physical, load_backs_only)) return true;
  const std::uint64_t begin = static_cast<std::uint64_t>(physical) * sides_[side].page_bytes;
  const std::uint64_t end = begin + sides_[side].page_bytes;
  for (const auto& [id, t] : transfers_) {
    if (load_backs_only && t.offload) continue;
    for (const ShadowCopy& c : t.copies) {
      if (c.host < 0) continue;
      const std::uint64_t copy_begin = static_cast<std::uint64_t>(c.device_page) * sides_[c.side].page_bytes;
      if (copy_begin < end && begin < copy_begin + sides_[c.side].page_bytes) return true;
    }
  }
  return false;
}

bool PoolShadow::loading(std::int64_t vpage) const {
  for (const auto& [id, t] : transfers_)
    if (!t.offload && std::find(t.pages.begin(), t.pages.end(), vpage) != t.pages.end()) return true;
  return false;
}

bool PoolShadow::host_page_in_use(std::size_t side, std::int64_t logical) const {
  if (logical < 0) return false;  // -1 in a load-back: an SWA half not loaded
  for (const auto& [id, t] : transfers_)
    for (const ShadowCopy& c : t.copies)
      if (c.side == side && c.host == logical) return true;
  return false;
}

bool PoolShadow::page_has_rows(std::size_t side, std::int64_t vpage) const {
  if (side >= rows_.size()) return false;
  const auto it = rows_[side].find(vpage);
  return it != rows_[side].end() && !it->second.empty();
}

bool PoolShadow::host_page_has_rows(std::size_t side, std::int64_t logical) const {
  if (side >= host_rows_.size()) return false;
  const auto it = host_rows_[side].find(logical);
  return it != host_rows_[side].end() && !it->second.empty();
}

std::vector<std::uint64_t> PoolShadow::lands_after(std::uint32_t stream, const std::vector<std::uint64_t>& waits) const {
  std::set<std::uint64_t> out(waits.begin(), waits.end());
  for (const auto& [id, t] : transfers_)
    if (t.stream == stream) {
      out.insert(t.sequence);
      out.insert(t.after.begin(), t.after.end());
    }
  return std::vector<std::uint64_t>(out.begin(), out.end());
}

std::vector<std::uint64_t> PoolShadow::captured(const std::optional<std::uint32_t>& wait_event) const {
  if (!wait_event) return {};
  const auto it = events_.find(*wait_event);
  return it == events_.end() ? std::vector<std::uint64_t>{} : it->second;
}

std::int64_t PoolShadow::host_physical(std::size_t side, std::int64_t logical) const {
  const auto it = host_sides_[side].l2p.find(logical);
  return it == host_sides_[side].l2p.end() ? -1 : it->second;
}

// ---------------------------------------------------------------- checks shared by the transfers

std::optional<Error> PoolShadow::transfer_start_error(std::uint32_t transfer, std::uint32_t stream,
                                                      const std::optional<std::uint32_t>& wait_event) const {
  if (transfers_.count(transfer)) return error(ErrorKind::invalid_argument);
  if (stream == 0) return error(ErrorKind::invalid_argument);
  if (wait_event && !events_.count(*wait_event)) return error(ErrorKind::invalid_argument);
  return std::nullopt;
}

std::optional<Error> PoolShadow::host_ids_error(std::size_t side, const std::vector<std::int64_t>& ids,
                                                bool allow_unloaded) const {
  std::set<std::int64_t> seen;
  for (std::int64_t id : ids) {
    if (allow_unloaded && id == -1) continue;
    if (id < 0 || id >= host_page_num_) return error(ErrorKind::out_of_range);
    if (!seen.insert(id).second) return error(ErrorKind::invalid_argument);
  }
  for (std::int64_t id : seen)
    if (!host_sides_[side].l2p.count(id)) return error(ErrorKind::invalid_argument);
  return std::nullopt;
}

bool PoolShadow::host_race(std::size_t side, const std::vector<std::int64_t>& ids, bool writes, std::uint32_t stream,
                           const std::vector<std::uint64_t>& waits) const {
  const std::vector<std::uint64_t> after = lands_after(stream, waits);
  for (const auto& [id, t] : transfers_) {
    if (std::binary_search(after.begin(), after.end(), t.sequence)) continue;
    if (!writes && !t.offload) continue;  // two transfers reading one host page do not race
    for (const ShadowCopy& c : t.copies)
      if (c.side == side && c.host >= 0 && std::find(ids.begin(), ids.end(), c.host) != ids.end()) return true;
  }
  return false;
}

Result<std::vector<std::int64_t>> PoolShadow::offload_pages(std::size_t side, IdUnit unit,
                                                            const std::vector<std::int64_t>& ids) const {
  std::set<std::int64_t> touched;
  if (auto e = virtual_pages(unit, ids, touched)) return *e;
  std::vector<std::int64_t> whole;
  const std::set<std::int64_t> listed(ids.begin(), ids.end());  // an offload may list thousands of tokens
  for (std::int64_t v : touched) {
    if (unit == IdUnit::pages) {
      whole.push_back(v);
      continue;
    }
    // Whole pages only: every token of the page listed.
    bool all = true;
    for (std::int64_t t = v * page_size_; t < (v + 1) * page_size_ && all; ++t) all = listed.count(t) != 0;
    if (all) whole.push_back(v);
  }
  for (std::int64_t v : whole)
    if (!sides_[0].v2p.count(v)) return error(ErrorKind::invalid_argument);
  for (std::int64_t v : whole)
    if (loading(v)) return error(ErrorKind::reader_conflict, reason::transfer_in_flight);
  std::vector<std::int64_t> selected;
  for (std::int64_t v : whole)
    if (sides_[side].v2p.count(v)) selected.push_back(v);  // an SWA tombstone is skipped whole
  return selected;
}

// ---------------------------------------------------------------- the operations

Expectation PoolShadow::on(const HostAlloc& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  if (op.pages.size() != host_sides_.size()) return refuse(ErrorKind::invalid_argument);
  const std::int64_t n = host_page_num_;
  // Bytes where each side's band ends (up) or begins (down), as the arena stands and packed.
  const ShadowHostSide& up = host_sides_[0];
  const bool two = host_sides_.size() == 2;
  const auto free_ids = [&](const ShadowHostSide& s) { return static_cast<std::uint64_t>(n) - s.l2p.size(); };
  bool ids_ok = true;
  for (std::size_t s = 0; s < host_sides_.size(); ++s) ids_ok = ids_ok && op.pages[s] <= free_ids(host_sides_[s]);
  bool as_is = ids_ok, packed = ids_ok;
  if (ids_ok) {
    const std::uint64_t up_end = static_cast<std::uint64_t>(up.band_size()) * up.page_bytes;
    const std::uint64_t down_begin =
        two ? static_cast<std::uint64_t>(n - host_sides_[1].band_size()) * host_sides_[1].page_bytes
            : static_cast<std::uint64_t>(n) * up.page_bytes;
    std::uint64_t beyond = 0, all = 0;
    for (std::size_t s = 0; s < host_sides_.size(); ++s) {
      const std::uint64_t holes = host_sides_[s].holes.size();
      beyond += (op.pages[s] > holes ? op.pages[s] - holes : 0) * host_sides_[s].page_bytes;
      all += (host_sides_[s].l2p.size() + op.pages[s]) * host_sides_[s].page_bytes;
    }
    as_is = beyond <= down_begin - up_end;
    packed = two ? all <= static_cast<std::uint64_t>(n) * host_sides_[1].page_bytes : true;
  }
  if (!as_is && !packed) return expect(NoRoom{});
  HostAllocated out;
  if (!as_is) {
    // A compaction waits for every lease and every transfer in flight: refused instead.
    if (leases_.count(op.thread)) return refuse(ErrorKind::invalid_argument);
    if (!leases_.empty()) return refuse(ErrorKind::reader_conflict, reason::lease_held);
    if (!transfers_.empty()) return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
    for (std::size_t s = 0; s < host_sides_.size(); ++s) {
      ShadowHostSide& side = host_sides_[s];
      std::vector<std::pair<std::int64_t, std::int64_t>> live(side.p2l.begin(), side.p2l.end());  // ascending physical
      if (!side.grows_up) std::reverse(live.begin(), live.end());
      side.p2l.clear();
      for (std::size_t i = 0; i < live.size(); ++i) {
        const std::int64_t dst = side.grows_up ? static_cast<std::int64_t>(i) : n - 1 - static_cast<std::int64_t>(i);
        if (live[i].first != dst) out.moves.push_back(PageMove{side.name, live[i].first, dst});
        side.p2l[dst] = live[i].second;
        side.l2p[live[i].second] = dst;
      }
      side.holes.clear();
    }
  }
  for (std::size_t s = 0; s < host_sides_.size(); ++s) {
    ShadowHostSide& side = host_sides_[s];
    std::vector<std::int64_t> logical, physical;
    for (std::int64_t l = 0; static_cast<std::uint64_t>(logical.size()) < op.pages[s]; ++l)
      if (!side.l2p.count(l)) logical.push_back(l);
    // Holes first (up ascending, down descending), then beyond the band.
    std::vector<std::int64_t> holes(side.holes.begin(), side.holes.end());
    if (!side.grows_up) std::reverse(holes.begin(), holes.end());
    for (std::int64_t h : holes)
      if (physical.size() < logical.size()) physical.push_back(h);
    std::int64_t next = side.grows_up ? side.band_size() : n - 1 - side.band_size();
    while (physical.size() < logical.size()) physical.push_back(side.grows_up ? next++ : next--);
    for (std::size_t i = 0; i < logical.size(); ++i) {
      side.holes.erase(physical[i]);
      side.l2p[logical[i]] = physical[i];
      side.p2l[physical[i]] = logical[i];
    }
    out.logical.push_back(logical);
    out.physical.push_back(physical);
  }
  return expect(std::move(out));
}

Expectation PoolShadow::on(const HostFree& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  std::optional<std::size_t> side;
  for (std::size_t i = 0; i < host_sides_.size(); ++i)
    if (host_sides_[i].name == op.side) side = i;
  if (!side) return refuse(ErrorKind::invalid_argument);
  for (std::int64_t l : op.pages)
    if (host_page_in_use(*side, l)) return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  ShadowHostSide& s = host_sides_[*side];
  const std::set<std::int64_t> ids(op.pages.begin(), op.pages.end());
  for (std::int64_t l : ids)
    if (l < 0) return refuse(ErrorKind::out_of_range, reason::negative_id);
  for (std::int64_t l : ids)
    if (l >= host_page_num_) return refuse(ErrorKind::out_of_range, reason::past_last_page);
  for (std::int64_t l : ids)
    if (!s.l2p.count(l)) return refuse(ErrorKind::double_free, reason::not_allocated);
  for (std::int64_t l : ids) {
    const std::int64_t p = s.l2p.at(l);
    s.l2p.erase(l);
    s.p2l.erase(p);
    s.holes.insert(p);
    host_rows_[*side].erase(l);
  }
  // The band gives back every hole at its inner end.
  while (s.band_size() > 0) {
    const std::int64_t inner = s.grows_up ? s.band_size() - 1 : host_page_num_ - s.band_size();
    if (!s.holes.erase(inner)) break;
  }
  return expect(Done{});
}

Expectation PoolShadow::on(const LeaseAcquire& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  ++leases_[op.thread];
  return expect(Done{});
}

Expectation PoolShadow::on(const LeaseRelease& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  auto it = leases_.find(op.thread);
  if (it == leases_.end()) return refuse(ErrorKind::invalid_argument);
  if (--it->second == 0) leases_.erase(it);
  return expect(Done{});
}

Expectation PoolShadow::on(const RecordEvent& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  events_[op.event] = op.stream == 0 ? std::vector<std::uint64_t>{} : lands_after(op.stream, {});
  return expect(Done{});
}

Expectation PoolShadow::on(const Offload& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  if (auto e = transfer_start_error(op.transfer, op.stream, op.wait_event)) return refuse(*e);
  std::optional<std::size_t> side;
  for (std::size_t i = 0; i < sides_.size(); ++i)
    if (sides_[i].name == op.side) side = i;
  if (!side) return refuse(ErrorKind::invalid_argument);
  Result<std::vector<std::int64_t>> selected = offload_pages(*side, op.unit, op.ids);
  if (!selected.ok()) return refuse(selected.error());
  if (op.host.size() != selected->size()) return refuse(ErrorKind::invalid_argument);
  if (auto e = host_ids_error(*side, op.host, false)) return refuse(*e);
  const std::vector<std::uint64_t> waits = captured(op.wait_event);
  if (host_race(*side, op.host, true, op.stream, waits))
    return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  ShadowTransfer t;
  t.offload = true;
  t.thread = op.thread;
  t.stream = op.stream;
  t.after = lands_after(op.stream, waits);
  t.sequence = next_sequence_++;
  t.pages = *selected;
  for (std::size_t i = 0; i < selected->size(); ++i) {
    const std::int64_t v = (*selected)[i];
    t.copies.push_back(ShadowCopy{*side, v, sides_[*side].physical(v), op.host[i]});
    // The host page will hold what the device page holds now.
    const auto rows = rows_[*side].find(v);
    if (rows == rows_[*side].end())
      host_rows_[*side].erase(op.host[i]);
    else
      host_rows_[*side][op.host[i]] = rows->second;
  }
  transfers_[op.transfer] = std::move(t);
  return expect(TransferStarted{op.transfer, *selected});
}

Expectation PoolShadow::on(const LoadBack& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  if (auto e = transfer_start_error(op.transfer, op.stream, op.wait_event)) return refuse(*e);
  if (op.host.empty() || (op.host.size() != 1 && op.host.size() != sides_.size())) return refuse(ErrorKind::invalid_argument);
  const std::size_t k = op.host[0].size();
  const bool swa_listed = op.host.size() == 2 && !op.host[1].empty();
  if (swa_listed && op.host[1].size() != k) return refuse(ErrorKind::invalid_argument);
  if (auto e = host_ids_error(0, op.host[0], false)) return refuse(*e);
  if (swa_listed)
    if (auto e = host_ids_error(1, op.host[1], true)) return refuse(*e);
  const std::vector<std::uint64_t> waits = captured(op.wait_event);
  for (std::size_t s = 0; s < op.host.size(); ++s)
    if (host_race(s, op.host[s], false, op.stream, waits))
      return refuse(ErrorKind::reader_conflict, reason::transfer_in_flight);
  if (k > 0 && !fits(static_cast<std::int64_t>(k))) return expect(NoRoom{});
  ShadowTransfer t;
  t.offload = false;
  t.thread = op.thread;
  t.stream = op.stream;
  t.after = lands_after(op.stream, waits);
  t.sequence = next_sequence_++;
  if (k > 0) {
    t.pages = take(static_cast<std::int64_t>(k));
    allocations_.push_back(t.pages);
  }
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t v = t.pages[i];
    for (std::size_t s = 0; s < sides_.size(); ++s) {
      const std::int64_t h = s == 0 ? op.host[0][i] : (swa_listed ? op.host[1][i] : -1);
      t.copies.push_back(ShadowCopy{s, v, sides_[s].physical(v), h});
      // The device page will hold what the host page holds (a fresh page knows no rows).
      if (h >= 0) {
        const auto rows = host_rows_[s].find(h);
        if (rows != host_rows_[s].end()) rows_[s][v] = rows->second;
      }
    }
  }
  const std::vector<std::int64_t> pages = t.pages;
  transfers_[op.transfer] = std::move(t);
  return expect(TransferStarted{op.transfer, pages});
}

Expectation PoolShadow::on(const TransferWait& op) {
  if (!has_host()) return refuse(ErrorKind::invalid_argument);
  if (transfers_.erase(op.transfer) == 0) return refuse(ErrorKind::invalid_argument);
  return expect(Done{});
}

// The storage tier changes no table the shadow keeps. Its capacity and eviction are not
// predicted, so neither is a store's answer, nor the rows a load writes into its host pages; what is: a load whose hashes no store of this pool's
// layout ever sent (among its trailing page_count pages) misses every page, when the shadow sees
// it is valid (a SPEC 10.15 store of zero pages as all, or a page of another layout or without
// the tag under this space (10.16), then shows as a hit).
Expectation PoolShadow::on(const StorePages& op) {
  Expectation e;
  e.predicted = false;
  if (!storage_ || !op.layout.empty() || op.hashes.size() != op.host.size()) return e;
  for (std::size_t i = 0; i < host_sides_.size(); ++i) {
    if (host_sides_[i].name != op.side) continue;
    const std::size_t n = op.hashes.size();
    const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(op.page_count, n));
    for (std::size_t k = n - count; k < n; ++k) maybe_stored_[i].insert(op.hashes[k]);
  }
  return e;
}

Expectation PoolShadow::on(const LoadStored& op) {
  Expectation unknown;
  unknown.predicted = false;
  if (!storage_ || op.hashes.size() != op.host.size()) return unknown;
  std::optional<std::size_t> side;
  for (std::size_t i = 0; i < host_sides_.size(); ++i)
    if (host_sides_[i].name == op.side) side = i;
  if (!side) return unknown;
  // A hit writes the stored page into its host page, rows the shadow does not know (what the tier
  // holds is not predicted): every listed host page forgets its rows, whatever the answer.
  for (std::int64_t l : op.host) host_rows_[*side].erase(l);
  const std::set<std::int64_t> distinct(op.host.begin(), op.host.end());
  if (distinct.size() != op.host.size()) return unknown;
  for (std::int64_t l : op.host)
    if (host_sides_[*side].l2p.count(l) == 0 || host_page_in_use(*side, l)) return unknown;
  for (std::uint64_t h : op.hashes)
    if (maybe_stored_[*side].count(h) != 0) return unknown;
  return expect(Ids{std::vector<std::int64_t>(op.hashes.size(), 0)});
}

}  // namespace kvtwin::props
