// The host arena (SPEC.md section 8). See host_arena.h; docs/host_arena.md lists the decisions.
#include "sim/host_arena.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/checked.h"
#include "core/reasons.h"

namespace kvtwin::sim {
namespace {

// "3, 5, 7" for a message; long lists are cut after 16 ids.
std::string ids_text(const std::vector<std::int64_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 16) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

std::string side_text(const HostArena::Side& s) { return "side '" + s.name + "'"; }

// The occupied band of a side: up [0, wm), down (wm, page_num - 1] (SPEC 8).
std::int64_t band_begin(const HostArena::Side& s) { return s.grows_up ? 0 : s.watermark + 1; }
std::int64_t band_end(const HostArena::Side& s, std::int64_t page_num) { return s.grows_up ? s.watermark : page_num; }

// ---------------------------------------------------------------- free logical extents

std::uint64_t free_id_count(const std::vector<HostExtent>& extents) {
  std::uint64_t n = 0;
  for (const HostExtent& e : extents) n += static_cast<std::uint64_t>(e.end - e.begin);
  return n;
}

// SPEC 8: logical ids are taken lowest first. The k lowest free ids, ascending. Pure.
std::vector<std::int64_t> lowest_free_ids(const std::vector<HostExtent>& extents, std::uint64_t k) {
  std::vector<std::int64_t> ids;
  ids.reserve(k);
  for (const HostExtent& e : extents)
    for (std::int64_t id = e.begin; id < e.end && ids.size() < k; ++id) ids.push_back(id);
  KVTWIN_CHECK(ids.size() == k, "an allocation takes only ids the free extents hold");
  return ids;
}

// Removes a free id from the extent holding it (splitting it in two when the id is inside).
void take_id(std::vector<HostExtent>& extents, std::int64_t id) {
  auto it = std::find_if(extents.begin(), extents.end(), [&](const HostExtent& e) { return id >= e.begin && id < e.end; });
  KVTWIN_CHECK(it != extents.end(), "an allocated logical id was free");
  const HostExtent e = *it;
  it = extents.erase(it);
  if (id + 1 < e.end) it = extents.insert(it, HostExtent{id + 1, e.end});
  if (e.begin < id) extents.insert(it, HostExtent{e.begin, id});
}

// SPEC 8: free merges logical extents. Adds a live id back as [id, id + 1) in its sorted place and
// merges it with the extent ending at id and the one starting at id + 1.
void give_back_id(std::vector<HostExtent>& extents, std::int64_t id) {
  auto next = std::find_if(extents.begin(), extents.end(), [&](const HostExtent& e) { return e.begin > id; });
  KVTWIN_CHECK(next == extents.begin() || std::prev(next)->end <= id, "a freed logical id was not free already");
  auto it = extents.insert(next, HostExtent{id, id + 1});
  if (std::next(it) != extents.end() && std::next(it)->begin == it->end) {
    it->end = std::next(it)->end;
    extents.erase(std::next(it));
  }
  if (it != extents.begin() && std::prev(it)->end == it->begin) {
    std::prev(it)->end = it->end;
    extents.erase(it);
  }
}

// ---------------------------------------------------------------- physical pages

struct PagesChoice {
  std::vector<std::int64_t> pages;  // in binding order
  std::int64_t watermark_after = 0;
};

// SPEC 8: a fitting allocation takes physical pages from the holes first (up side ascending, down
// side descending), then extends the watermark: up wm, wm + 1, ...; down wm, wm - 1, ...
// (docs/host_arena.md: the down side's order mirrors the up side's). Pure.
PagesChoice pages_for(bool grows_up, const std::set<std::int64_t>& holes, std::int64_t watermark, std::uint64_t k) {
  PagesChoice c;
  c.pages.reserve(k);
  if (grows_up) {
    for (auto it = holes.begin(); it != holes.end() && c.pages.size() < k; ++it) c.pages.push_back(*it);
  } else {
    for (auto it = holes.rbegin(); it != holes.rend() && c.pages.size() < k; ++it) c.pages.push_back(*it);
  }
  c.watermark_after = watermark;
  while (c.pages.size() < k) {
    if (grows_up) {
      c.pages.push_back(c.watermark_after++);
    } else {
      c.pages.push_back(c.watermark_after--);
    }
  }
  return c;
}

struct Packing {
  std::vector<HostPageMove> moves;  // in the order they run
  std::int64_t watermark_after = 0;
};

// SPEC 8 compaction: the live pages are packed against the side's end in physical order, logical
// ids unchanged. Up side: live pages ascending go to 0, 1, 2, ...; down side: live pages
// descending go to page_num - 1, page_num - 2, .... A page already in place does not move. In
// this order every move's dst is free when it runs (a hole, or a page that moved away before).
// Pure.
Packing plan_packing(const HostArena::Side& s, std::size_t side, std::int64_t page_num) {
  Packing p;
  if (s.grows_up) {
    std::int64_t dst = 0;
    for (std::int64_t src = 0; src < s.watermark; ++src) {
      if (s.physical_to_logical[src] < 0) continue;
      if (src != dst) p.moves.push_back(HostPageMove{side, src, dst});
      ++dst;
    }
    p.watermark_after = dst;
  } else {
    std::int64_t dst = page_num - 1;
    for (std::int64_t src = page_num - 1; src > s.watermark; --src) {
      if (s.physical_to_logical[src] < 0) continue;
      if (src != dst) p.moves.push_back(HostPageMove{side, src, dst});
      --dst;
    }
    p.watermark_after = dst;
  }
  return p;
}

// What alloc_many will do, computed from the state without touching it.
struct SidePlan {
  std::vector<std::int64_t> logical;   // ascending
  std::vector<std::int64_t> physical;  // physical[i] holds logical[i]
  std::int64_t watermark_after = 0;
};

struct AllocPlan {
  bool compact = false;
  std::vector<HostPageMove> moves;                // every side's packing, side 0 first
  std::vector<std::int64_t> packed_watermarks;    // per side, when compact
  std::vector<SidePlan> sides;
};

}  // namespace

// ---------------------------------------------------------------- building

Result<HostArena> HostArena::create(const HostArenaConfig& config) {
  if (config.sides.empty() || config.sides.size() > 2)
    return make_error(ErrorKind::invalid_argument,
                      "a host arena holds the full and swa sides of one device pool: 1 or 2 sides, not " +
                          std::to_string(config.sides.size()));
  HostArena arena;
  arena.total_bytes_ = config.total_bytes;
  std::uint64_t max_page_bytes = 0;
  for (std::size_t i = 0; i < config.sides.size(); ++i) {
    const HostSideConfig& c = config.sides[i];
    if (c.page_size == 0 || c.entry_bytes == 0)
      return make_error(ErrorKind::invalid_argument, "host arena side '" + c.name + "': page_size " +
                                                         std::to_string(c.page_size) + " and entry_bytes " +
                                                         std::to_string(c.entry_bytes) +
                                                         " must both be positive; pass the device sub-pool's values");
    // SPEC 8: a side's host page is exactly its device page envelope, page_size * E bytes.
    KVTWIN_TRY(const std::uint64_t page_bytes,
               checked_mul(c.page_size, c.entry_bytes, "host arena side '" + c.name + "' page bytes"));
    max_page_bytes = std::max(max_page_bytes, page_bytes);
    Side s;
    s.name = c.name;
    s.grows_up = i == 0;  // side 0 grows up, side 1 grows down
    s.page_bytes = page_bytes;
    arena.sides_.push_back(std::move(s));
  }
  // SPEC 8: page_num = total // max(page_bytes) host pages in each side's numbering.
  const std::uint64_t page_num = config.total_bytes / max_page_bytes;
  if (page_num == 0)
    return make_error(ErrorKind::sizing, "host arena of " + std::to_string(config.total_bytes) +
                                             " bytes holds no page of " + std::to_string(max_page_bytes) +
                                             " bytes (the largest side's page_size * E); increase total_bytes to at least " +
                                             std::to_string(max_page_bytes));
  KVTWIN_TRY(arena.page_num_, checked_to_i64(page_num, "host arena page_num"));
  for (Side& s : arena.sides_) {
    s.logical_to_physical.assign(page_num, -1);
    s.physical_to_logical.assign(page_num, -1);
    // Every logical id is free at start; no sink in the host arena (SPEC 8).
    s.free_extents = {HostExtent{0, arena.page_num_}};
    // Up side: occupied [0, wm), wm starts at 0. Down side: occupied (wm, page_num - 1], wm starts
    // at page_num - 1.
    s.watermark = s.grows_up ? 0 : arena.page_num_ - 1;
  }
  arena.with_bytes_ = config.with_bytes;
  if (config.with_bytes) arena.bytes_.assign(config.total_bytes, std::byte{0});
  return arena;
}

// ---------------------------------------------------------------- room

std::uint64_t HostArena::gap_bytes() const {
  const Side& up = sides_.front();
  const std::uint64_t up_end = static_cast<std::uint64_t>(up.watermark) * up.page_bytes;
  const std::uint64_t down_begin = sides_.size() == 2
                                       ? static_cast<std::uint64_t>(sides_.back().watermark + 1) * sides_.back().page_bytes
                                       : static_cast<std::uint64_t>(page_num_) * up.page_bytes;
  KVTWIN_CHECK(up_end <= down_begin, "the two sides' bands never overlap");
  return down_begin - up_end;
}

bool HostArena::fits_as_is(const std::vector<std::uint64_t>& k) const {
  // SPEC 8: it fits when each side has the logical ids and the bytes beyond existing holes fit
  // the gap. k[s] <= free ids <= page_num, so each product is at most total_bytes.
  const std::uint64_t gap = gap_bytes();
  std::uint64_t needed = 0;
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    const Side& side = sides_[s];
    if (k[s] > free_id_count(side.free_extents)) return false;
    const std::uint64_t beyond_holes = k[s] - std::min<std::uint64_t>(k[s], side.holes.size());
    const std::uint64_t bytes = beyond_holes * side.page_bytes;
    if (bytes > gap - needed) return false;
    needed += bytes;
  }
  return true;
}

bool HostArena::fits_packed(const std::vector<std::uint64_t>& k) const {
  // SPEC 8: "the live plus the requested pages would fit once packed": once packed a side has no
  // holes, the up side's band is [0, live_up) and the down side's [page_num - live_down, page_num).
  const Side& up = sides_.front();
  const std::uint64_t up_end = up.live_pages * up.page_bytes;
  const std::uint64_t down_begin =
      sides_.size() == 2 ? (static_cast<std::uint64_t>(page_num_) - sides_.back().live_pages) * sides_.back().page_bytes
                         : static_cast<std::uint64_t>(page_num_) * up.page_bytes;
  KVTWIN_CHECK(up_end <= down_begin, "packed bands never overlap");
  const std::uint64_t gap = down_begin - up_end;
  std::uint64_t needed = 0;
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    if (k[s] > free_id_count(sides_[s].free_extents)) return false;
    const std::uint64_t bytes = k[s] * sides_[s].page_bytes;
    if (bytes > gap - needed) return false;
    needed += bytes;
  }
  return true;
}

Status HostArena::check_compaction_allowed(HostThreadId thread) const {
  // SPEC 8: compaction requested by a thread that holds a lease is an error (it would wait for
  // its own lease).
  if (const auto own = leases_.find(thread); own != leases_.end())
    return make_error(ErrorKind::invalid_argument,
                      "alloc_many by thread " + std::to_string(thread) +
                          " fits only once the host arena is compacted, but that thread holds a lease (depth " +
                          std::to_string(own->second) +
                          "): a compaction waits for every lease, so it would wait for its own; release the lease "
                          "before allocating, or allocate before acquiring it");
  // SPEC 8: compaction waits for every lease to be released. The model does not wait: it refuses.
  if (!leases_.empty()) {
    std::string holders;
    for (const auto& [t, depth] : leases_)
      holders += (holders.empty() ? "" : ", ") + std::to_string(t) + " (depth " + std::to_string(depth) + ")";
    return make_refusal(ErrorKind::reader_conflict, reason::lease_held,
                        "alloc_many by thread " + std::to_string(thread) +
                            " fits only once the host arena is compacted, and a compaction would have to wait for "
                            "the leases held by thread(s) " +
                            holders + "; retry once they are released");
  }
  // SPEC 8: ... and for every recorded transfer event.
  if (pending_transfers_ > 0 && !compaction_ignores_transfers_)
    return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                        "alloc_many by thread " + std::to_string(thread) +
                            " fits only once the host arena is compacted, and a compaction would have to wait for " +
                            std::to_string(pending_transfers_) +
                            " recorded transfer event(s) still in flight; retry once they complete (transfer_wait)");
  return ok_status();
}

// ---------------------------------------------------------------- alloc_many

Result<HostAllocOutcome> HostArena::alloc_many(HostThreadId thread, const std::vector<std::uint64_t>& pages_per_side) {
  if (pages_per_side.size() != sides_.size())
    return make_error(ErrorKind::invalid_argument, "alloc_many takes one page count per side of the host arena (" +
                                                       std::to_string(sides_.size()) + "), not " +
                                                       std::to_string(pages_per_side.size()));
  // Plan. SPEC 8: fits as the arena stands -> allocate; else fits once packed -> compact every
  // side, then allocate; else no room, nothing changed. Compaction happens only here and only
  // when needed.
  AllocPlan plan;
  if (!fits_as_is(pages_per_side)) {
    if (!fits_packed(pages_per_side)) {
      std::string why = "the host arena has no room for";
      for (std::size_t s = 0; s < sides_.size(); ++s)
        why += (s ? "," : "") + std::string(" ") + std::to_string(pages_per_side[s]) + " page(s) of " +
               side_text(sides_[s]) + " (" + std::to_string(free_id_count(sides_[s].free_extents)) +
               " free logical ids, " + std::to_string(sides_[s].live_pages) + " live pages of " +
               std::to_string(sides_[s].page_bytes) + " bytes)";
      why += " even once packed (" + std::to_string(page_num_) +
             " host pages per side); free host pages or build the arena with more bytes";
      return HostAllocOutcome{HostNoRoom{std::move(why)}};
    }
    KVTWIN_TRY_STATUS(check_compaction_allowed(thread));
    plan.compact = true;
    for (std::size_t s = 0; s < sides_.size(); ++s) {
      Packing packing = plan_packing(sides_[s], s, page_num_);
      plan.moves.insert(plan.moves.end(), packing.moves.begin(), packing.moves.end());
      plan.packed_watermarks.push_back(packing.watermark_after);
    }
  }
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    const Side& side = sides_[s];
    SidePlan sp;
    sp.logical = lowest_free_ids(side.free_extents, pages_per_side[s]);
    // Once packed, a side has no holes and its watermark is the packed one.
    const std::set<std::int64_t> no_holes;
    const PagesChoice choice =
        plan.compact ? pages_for(side.grows_up, no_holes, plan.packed_watermarks[s], pages_per_side[s])
                     : pages_for(side.grows_up, side.holes, side.watermark, pages_per_side[s]);
    sp.physical = choice.pages;
    sp.watermark_after = choice.watermark_after;
    plan.sides.push_back(std::move(sp));
  }

  // Commit exactly the plan.
  HostAllocated out;
  out.compacted = plan.compact;
  out.moves = plan.moves;
  if (plan.compact) {
    for (const HostPageMove& m : plan.moves) {
      Side& side = sides_[m.side];
      const std::int64_t l = side.physical_to_logical[m.src];
      KVTWIN_CHECK(l >= 0 && side.physical_to_logical[m.dst] < 0, "a compaction move takes a live page to a free one");
      side.logical_to_physical[l] = m.dst;
      side.physical_to_logical[m.dst] = l;
      side.physical_to_logical[m.src] = -1;
      if (with_bytes_) {
        // The whole host page envelope moves with its logical id.
        std::memmove(bytes_.data() + m.dst * side.page_bytes, bytes_.data() + m.src * side.page_bytes, side.page_bytes);
      }
    }
    for (std::size_t s = 0; s < sides_.size(); ++s) {
      sides_[s].holes.clear();
      sides_[s].watermark = plan.packed_watermarks[s];
    }
  }
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    Side& side = sides_[s];
    const SidePlan& sp = plan.sides[s];
    for (std::size_t i = 0; i < sp.logical.size(); ++i) {
      const std::int64_t l = sp.logical[i], p = sp.physical[i];
      KVTWIN_CHECK(p >= 0 && p < page_num_ && side.physical_to_logical[p] < 0 && side.logical_to_physical[l] < 0,
                   "an allocation binds a free logical id to a free physical page of " + side_text(side));
      take_id(side.free_extents, l);
      side.holes.erase(p);
      side.logical_to_physical[l] = p;
      side.physical_to_logical[p] = l;
    }
    side.watermark = sp.watermark_after;
    side.live_pages += sp.logical.size();
    out.logical.push_back(sp.logical);
    out.physical.push_back(sp.physical);
  }
  // What must still hold: the bands stayed apart (gap_bytes checks it) and inside the arena.
  KVTWIN_CHECK(gap_bytes() <= total_bytes_, "an allocation keeps both bands inside the arena");
  return HostAllocOutcome{std::move(out)};
}

// ---------------------------------------------------------------- free

Status HostArena::free(std::size_t side_index, const std::vector<std::int64_t>& logical) {
  if (side_index >= sides_.size())
    return make_error(ErrorKind::invalid_argument, "the host arena has " + std::to_string(sides_.size()) +
                                                       " side(s); there is no side " + std::to_string(side_index));
  Side& side = sides_[side_index];
  // Check every id before changing anything. As SPEC 4's device free, the ids are taken sorted
  // unique: naming a page twice in one call frees it once (docs/host_arena.md).
  std::vector<std::int64_t> ids = logical;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<std::int64_t> negative, past_end, not_allocated;
  for (std::int64_t l : ids) {
    if (l < 0) {
      negative.push_back(l);
    } else if (l >= page_num_) {
      past_end.push_back(l);
    } else if (side.logical_to_physical[l] < 0) {
      not_allocated.push_back(l);
    }
  }
  if (!negative.empty())
    return make_refusal(ErrorKind::out_of_range, reason::negative_id,
                        "free of " + side_text(side) + " host ids " + ids_text(negative) +
                            ": host logical ids are 0 or more; pass the ids alloc_many returned");
  if (!past_end.empty())
    return make_refusal(ErrorKind::out_of_range, reason::past_last_page,
                        "free of " + side_text(side) + " host ids " + ids_text(past_end) + ": the side has " +
                            std::to_string(page_num_) + " host pages (ids 0 .. " + std::to_string(page_num_ - 1) +
                            "); pass the ids alloc_many returned");
  // SPEC 8: freeing a page twice, or a page not allocated, is an error.
  if (!not_allocated.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "free of " + side_text(side) + " host ids " + ids_text(not_allocated) +
                            ": not allocated (double free or never allocated); nothing was freed");

  for (std::int64_t l : ids) {
    const std::int64_t p = side.logical_to_physical[l];
    side.logical_to_physical[l] = -1;
    side.physical_to_logical[p] = -1;
    // SPEC 8: physical host pages may have holes; a freed page is one until the watermark passes
    // it or an allocation or compaction fills it.
    side.holes.insert(p);
    // SPEC 8: free merges logical extents.
    give_back_id(side.free_extents, l);
  }
  side.live_pages -= ids.size();
  // SPEC 8: free moves the watermark back past adjacent holes.
  if (side.grows_up) {
    while (side.watermark > 0 && side.holes.erase(side.watermark - 1) == 1) --side.watermark;
  } else {
    while (side.watermark < page_num_ - 1 && side.holes.erase(side.watermark + 1) == 1) ++side.watermark;
  }
  return ok_status();
}

// ---------------------------------------------------------------- leases and transfers

void HostArena::acquire(HostThreadId thread) {
  // SPEC 8: leases are per thread and reentrant; a nested acquire only deepens.
  ++leases_[thread];
}

Status HostArena::release(HostThreadId thread) {
  const auto it = leases_.find(thread);
  // SPEC 8: release without acquire is an error.
  if (it == leases_.end())
    return make_error(ErrorKind::invalid_argument,
                      "release of the host arena's lease by thread " + std::to_string(thread) +
                          ", which holds none: every release pairs with an earlier acquire on the same thread");
  if (--it->second == 0) leases_.erase(it);
  return ok_status();
}

std::uint64_t HostArena::lease_depth(HostThreadId thread) const {
  const auto it = leases_.find(thread);
  return it == leases_.end() ? 0 : it->second;
}

Result<std::int64_t> HostArena::resolve(HostThreadId thread, std::size_t side_index, std::int64_t logical) const {
  if (side_index >= sides_.size())
    return make_error(ErrorKind::invalid_argument, "the host arena has " + std::to_string(sides_.size()) +
                                                       " side(s); there is no side " + std::to_string(side_index));
  const Side& side = sides_[side_index];
  // SPEC 8: a transfer resolves logical -> physical only inside a lease (compaction may move the
  // page the moment no lease holds it).
  if (lease_depth(thread) == 0)
    return make_error(ErrorKind::invalid_argument,
                      "resolve of " + side_text(side) + " host id " + std::to_string(logical) + " by thread " +
                          std::to_string(thread) +
                          " outside a lease: acquire the host arena's lease on this thread first and keep it "
                          "until the copy that uses the physical page has completed");
  if (logical < 0 || logical >= page_num_)
    return make_error(ErrorKind::out_of_range, "resolve of " + side_text(side) + " host id " + std::to_string(logical) +
                                                   ": ids are 0 .. " + std::to_string(page_num_ - 1));
  const std::int64_t p = side.logical_to_physical[logical];
  if (p < 0)
    return make_error(ErrorKind::invalid_argument, "resolve of " + side_text(side) + " host id " +
                                                       std::to_string(logical) +
                                                       ": not allocated; resolve only ids alloc_many returned");
  return p;
}

Status HostArena::complete_transfer() {
  if (pending_transfers_ == 0)
    return make_error(ErrorKind::invalid_argument,
                      "complete_transfer with no recorded transfer pending: record each transfer once, complete it once");
  --pending_transfers_;
  return ok_status();
}

Result<std::span<std::byte>> HostArena::page_bytes(HostThreadId thread, std::size_t side_index, std::int64_t logical) {
  if (!with_bytes_)
    return make_error(ErrorKind::unsupported,
                      "this host arena holds tables only; build it with with_bytes = true to read or write its bytes");
  KVTWIN_TRY(const std::int64_t p, resolve(thread, side_index, logical));
  const std::uint64_t page_bytes = sides_[side_index].page_bytes;
  const std::uint64_t offset = static_cast<std::uint64_t>(p) * page_bytes;
  KVTWIN_CHECK(offset + page_bytes <= bytes_.size(), "a host page lies inside the arena's bytes");
  return std::span<std::byte>(bytes_.data() + offset, page_bytes);
}

std::span<std::byte> HostArena::physical_page_bytes(std::size_t side, std::int64_t physical) {
  KVTWIN_CHECK(with_bytes_ && side < sides_.size() && physical >= 0 && physical < page_num_,
               "a physical host page of a side, in an arena with bytes");
  const std::uint64_t page_bytes = sides_[side].page_bytes;
  return std::span<std::byte>(bytes_.data() + static_cast<std::uint64_t>(physical) * page_bytes, page_bytes);
}

std::span<const std::byte> HostArena::physical_page_bytes(std::size_t side, std::int64_t physical) const {
  KVTWIN_CHECK(with_bytes_ && side < sides_.size() && physical >= 0 && physical < page_num_,
               "a physical host page of a side, in an arena with bytes");
  const std::uint64_t page_bytes = sides_[side].page_bytes;
  return std::span<const std::byte>(bytes_.data() + static_cast<std::uint64_t>(physical) * page_bytes, page_bytes);
}

// ---------------------------------------------------------------- views and checks

HostArenaTables HostArena::tables() const {
  HostArenaTables t;
  t.total_bytes = total_bytes_;
  t.page_num = page_num_;
  for (const Side& s : sides_) {
    HostSideTables st;
    st.name = s.name;
    st.grows_up = s.grows_up;
    st.page_bytes = s.page_bytes;
    st.watermark = s.watermark;
    st.logical_to_physical = s.logical_to_physical;
    st.physical_to_logical = s.physical_to_logical;
    st.holes.assign(s.holes.begin(), s.holes.end());
    st.free_extents = s.free_extents;
    st.live_pages = s.live_pages;
    t.sides.push_back(std::move(st));
  }
  t.leases.assign(leases_.begin(), leases_.end());
  t.pending_transfers = pending_transfers_;
  return t;
}

Status HostArena::verify() const {
  auto broken = [](const std::string& what) {
    return make_error(ErrorKind::internal, "host arena invariant broken: " + what);
  };
  if (sides_.empty() || sides_.size() > 2) return broken("the arena has " + std::to_string(sides_.size()) + " sides");
  if (page_num_ <= 0) return broken("page_num is " + std::to_string(page_num_));
  const std::int64_t n = page_num_;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    const Side& s = sides_[i];
    const std::string who = side_text(s);
    if (s.grows_up != (i == 0)) return broken(who + " grows the wrong way (side 0 grows up, side 1 down)");
    if (s.page_bytes == 0 || static_cast<std::uint64_t>(n) > total_bytes_ / s.page_bytes)
      return broken(who + ": " + std::to_string(n) + " pages of " + std::to_string(s.page_bytes) +
                    " bytes do not fit in " + std::to_string(total_bytes_) + " bytes");
    if (s.logical_to_physical.size() != static_cast<std::size_t>(n) ||
        s.physical_to_logical.size() != static_cast<std::size_t>(n))
      return broken(who + ": the maps do not have page_num = " + std::to_string(n) + " rows");
    // The watermark: up in [0, page_num], down in [-1, page_num - 1].
    if (s.grows_up ? (s.watermark < 0 || s.watermark > n) : (s.watermark < -1 || s.watermark > n - 1))
      return broken(who + ": watermark " + std::to_string(s.watermark) + " outside its range");
    const std::int64_t begin = band_begin(s), end = band_end(s, n);
    // Logical -> physical: every mapped id points into the band, at a page that points back.
    std::uint64_t live = 0;
    for (std::int64_t l = 0; l < n; ++l) {
      const std::int64_t p = s.logical_to_physical[l];
      if (p == -1) continue;
      if (p < begin || p >= end)
        return broken(who + ": logical " + std::to_string(l) + " maps to physical " + std::to_string(p) +
                      " outside the band [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
      if (s.physical_to_logical[p] != l)
        return broken(who + ": logical " + std::to_string(l) + " -> physical " + std::to_string(p) + " -> logical " +
                      std::to_string(s.physical_to_logical[p]));
      ++live;
    }
    // Physical -> logical, the other way.
    for (std::int64_t p = 0; p < n; ++p) {
      const std::int64_t l = s.physical_to_logical[p];
      if (l == -1) continue;
      if (l < 0 || l >= n || s.logical_to_physical[l] != p)
        return broken(who + ": physical " + std::to_string(p) + " -> logical " + std::to_string(l) +
                      " does not map back");
    }
    if (live != s.live_pages)
      return broken(who + ": " + std::to_string(live) + " mapped logical ids, live_pages says " +
                    std::to_string(s.live_pages));
    // Holes: exactly the unmapped pages inside the band.
    std::set<std::int64_t> holes;
    for (std::int64_t p = begin; p < end; ++p)
      if (s.physical_to_logical[p] == -1) holes.insert(p);
    if (holes != s.holes)
      return broken(who + ": the holes are not the unmapped pages of the band [" + std::to_string(begin) + ", " +
                    std::to_string(end) + ")");
    // The watermark was moved back past adjacent holes: the band's frontier page is live.
    if (begin < end && s.physical_to_logical[s.grows_up ? end - 1 : begin] == -1)
      return broken(who + ": the page next to the watermark " + std::to_string(s.watermark) +
                    " is a hole; the watermark should have moved back past it");
    // Free extents: non-empty, inside [0, page_num), ascending with a gap between two (merged),
    // every id in them free, and they plus the live ids are every id.
    std::int64_t previous_end = -1;
    std::uint64_t free_ids = 0;
    for (const HostExtent& e : s.free_extents) {
      if (e.begin < 0 || e.end > n || e.begin >= e.end)
        return broken(who + ": free extent [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") is empty or outside the ids");
      if (e.begin <= previous_end)
        return broken(who + ": free extent [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") overlaps, touches or precedes the one before it (extents are sorted and merged)");
      for (std::int64_t l = e.begin; l < e.end; ++l)
        if (s.logical_to_physical[l] != -1)
          return broken(who + ": logical " + std::to_string(l) + " is both free and mapped");
      free_ids += static_cast<std::uint64_t>(e.end - e.begin);
      previous_end = e.end;
    }
    if (free_ids + live != static_cast<std::uint64_t>(n))
      return broken(who + ": " + std::to_string(free_ids) + " free and " + std::to_string(live) + " live ids, not " +
                    std::to_string(n));
  }
  // The two bands are apart in bytes: up ends at wm_up * page_bytes_up, down starts at
  // (wm_down + 1) * page_bytes_down.
  const Side& up = sides_.front();
  const std::uint64_t up_end = static_cast<std::uint64_t>(up.watermark) * up.page_bytes;
  if (sides_.size() == 2) {
    const Side& down = sides_.back();
    const std::uint64_t down_begin = static_cast<std::uint64_t>(down.watermark + 1) * down.page_bytes;
    if (up_end > down_begin)
      return broken("the up side's band ends at byte " + std::to_string(up_end) + ", past the down side's start " +
                    std::to_string(down_begin));
  }
  for (const auto& [thread, depth] : leases_)
    if (depth == 0) return broken("thread " + std::to_string(thread) + " holds a lease of depth 0");
  if (bytes_.size() != (with_bytes_ ? total_bytes_ : 0))
    return broken("the byte buffer holds " + std::to_string(bytes_.size()) + " bytes");
  return ok_status();
}

}  // namespace kvtwin::sim
