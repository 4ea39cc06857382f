// The allocator tables' invariants (table_check.h).
#include "core/table_check.h"

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtwin {
namespace {

Error broken(std::string message) { return make_error(ErrorKind::internal, "invariant broken: " + std::move(message)); }

std::string n(std::int64_t v) { return std::to_string(v); }

// The band of a side: up [min, wm), down (wm, num_pages).
struct Band {
  std::int64_t begin = 0, end = 0;
  bool contains(std::int64_t p) const { return p >= begin && p < end; }
};

// "sub-pool 'NAME': ", the start of every message about a side, made only when a check fails:
// the incremental checks run after every operation, and formatting the name each time cost more
// than the checks themselves.
struct SidePrefix {
  std::string_view name;
};
std::string operator+(const SidePrefix& side, std::string_view rest) {
  std::string out = "sub-pool '";
  out += side.name;
  out += "': ";
  out += rest;
  return out;
}

// What every check of a side starts with (full or incremental): table sizes, the sink row, the
// -1 sentinels and the watermark's range; sets the band.
Status check_side_frame(const SidePrefix& side, std::span<const std::int64_t> v2p, std::span<const std::int64_t> p2v,
                        std::int64_t watermark, std::int64_t span_low, const SubPoolGeometry& g,
                        std::int64_t num_virtual, Band& band) {
  const auto num_pages = static_cast<std::int64_t>(g.num_pages);
  const auto min_page = static_cast<std::int64_t>(g.min_page_index);
  if (static_cast<std::int64_t>(v2p.size()) != num_virtual + 1 || static_cast<std::int64_t>(p2v.size()) != num_pages + 1)
    return broken(side + "v2p has " + n(static_cast<std::int64_t>(v2p.size())) + " rows and p2v " +
                  n(static_cast<std::int64_t>(p2v.size())) + "; SPEC 4 sizes them num_virtual + 1 = " +
                  n(num_virtual + 1) + " and num_pages + 1 = " + n(num_pages + 1));
  if (v2p[0] != 0 || p2v[0] != 0)
    return broken(side + "the sink row is v2p[0] = " + n(v2p[0]) + ", p2v[0] = " + n(p2v[0]) + "; both must be 0");
  if (v2p.back() != -1 || p2v.back() != -1) return broken(side + "the last row of v2p or p2v is not the -1 sentinel");
  // SPEC 11: a float middle's band is its span [span_low, watermark), inside the usable pages.
  if (g.direction == GrowDirection::float_middle) {
    if (span_low < min_page || span_low > watermark || watermark > num_pages)
      return broken(side + "the float's span [" + n(span_low) + ", " + n(watermark) + ") is outside the usable pages [" +
                    n(min_page) + ", " + n(num_pages) + ")");
    band = Band{span_low, watermark};
    return ok_status();
  }
  const bool up = g.direction == GrowDirection::up;
  if (up ? (watermark < min_page || watermark > num_pages) : (watermark < min_page - 1 || watermark > num_pages - 1))
    return broken(side + "watermark " + n(watermark) + " is outside its range");
  band = up ? Band{min_page, watermark} : Band{watermark + 1, num_pages};
  return ok_status();
}

Status check_side(const SideTables& s, const SubPoolGeometry& g, std::int64_t num_virtual, std::int64_t owner_min,
                  CompactionMode mode, Band& band) {
  const SidePrefix side{s.name};
  const auto num_pages = static_cast<std::int64_t>(g.num_pages);
  const auto min_page = static_cast<std::int64_t>(g.min_page_index);
  KVTWIN_TRY_STATUS(check_side_frame(side, s.v2p, s.p2v, s.watermark, s.span_low, g, num_virtual, band));
  std::uint64_t bound = 0;
  for (std::int64_t v = 1; v < num_virtual; ++v) {
    const std::int64_t p = s.v2p[static_cast<std::size_t>(v)];
    if (p == -1) continue;
    if (v < owner_min)
      return broken(side + "virtual page " + n(v) + " below the first usable page " + n(owner_min) + " is bound");
    if (p < min_page || p >= num_pages)
      return broken(side + "v2p[" + n(v) + "] = " + n(p) + " is outside the usable pages [" + n(min_page) + ", " +
                    n(num_pages) + ")");
    if (s.p2v[static_cast<std::size_t>(p)] != v)
      return broken(side + "v2p[" + n(v) + "] = " + n(p) + " but p2v[" + n(p) + "] = " +
                    n(s.p2v[static_cast<std::size_t>(p)]) + "; v2p and p2v must be mutual inverses");
    ++bound;
  }
  if (bound != s.allocated_pages)
    return broken(side + "allocated counter is " + std::to_string(s.allocated_pages) + " but " + std::to_string(bound) +
                  " pages are bound");
  for (std::size_t i = 0; i < s.holes.size(); ++i) {
    const std::int64_t h = s.holes[i];
    if (i > 0 && h <= s.holes[i - 1]) return broken(side + "holes are not ascending and unique at hole " + n(h));
    if (!band.contains(h)) return broken(side + "hole " + n(h) + " lies outside the band [" + n(band.begin) + ", " + n(band.end) + ")");
    if (s.p2v[static_cast<std::size_t>(h)] >= 0) return broken(side + "page " + n(h) + " is both bound and a hole");
  }
  // SPEC 11: a float keeps interior holes in either mode (it never compacts on a free).
  if (mode == CompactionMode::eager && !s.holes.empty() && g.direction != GrowDirection::float_middle)
    return broken(side + "an eager side has " + std::to_string(s.holes.size()) + " holes; eager compaction leaves none");
  for (std::int64_t p = 1; p < num_pages; ++p) {
    const std::int64_t v = s.p2v[static_cast<std::size_t>(p)];
    if (v == -1) continue;
    if (p < min_page) return broken(side + "reserved page " + n(p) + " below the sink floor is bound to virtual page " + n(v));
    if (v < 1 || v >= num_virtual || s.v2p[static_cast<std::size_t>(v)] != p)
      return broken(side + "p2v[" + n(p) + "] = " + n(v) + " but v2p of it is not " + n(p) +
                    "; v2p and p2v must be mutual inverses");
    if (!band.contains(p))
      return broken(side + "page " + n(p) + " outside the band [" + n(band.begin) + ", " + n(band.end) + ") is bound");
  }
  // Every band page is bound or a hole (the holes are ascending, so one walk finds each).
  std::size_t next_hole = 0;
  for (std::int64_t p = band.begin; p < band.end; ++p) {
    if (next_hole < s.holes.size() && s.holes[next_hole] == p) {
      ++next_hole;
      continue;
    }
    if (s.p2v[static_cast<std::size_t>(p)] < 0)
      return broken(side + "page " + n(p) + " inside the band [" + n(band.begin) + ", " + n(band.end) +
                    ") is neither bound nor a hole");
  }
  return ok_status();
}

// SPEC 11: a hybrid chain's bands in byte order: the state frontier, then the float's span (when
// it holds a live page; an empty float is transparent), then the owner's band.
Status check_hybrid_order(std::uint64_t state_end, std::span<const Band> bands, std::span<const std::uint64_t> allocated,
                          const PoolDerived& derived) {
  const std::vector<SubPoolGeometry>& g = derived.geometry.sub_pools;
  std::uint64_t low = state_end;
  std::string low_name = "state";
  if (g.size() == 2 && allocated[1] > 0) {
    const std::uint64_t float_begin = static_cast<std::uint64_t>(bands[1].begin) * g[1].page_bytes;
    if (float_begin < low)
      return broken("the float '" + g[1].name + "' starts at byte " + std::to_string(float_begin) +
                    ", below the state frontier at byte " + std::to_string(low) + "; the sub-pools overlap");
    low = static_cast<std::uint64_t>(bands[1].end) * g[1].page_bytes;
    low_name = g[1].name;
  }
  const std::uint64_t owner_begin = static_cast<std::uint64_t>(bands[0].begin) * g[0].page_bytes;
  if (low > owner_begin)
    return broken("the '" + low_name + "' band ends at byte " + std::to_string(low) + ", past the '" + g[0].name +
                  "' band's start at byte " + std::to_string(owner_begin) + "; the sub-pools overlap");
  return ok_status();
}

// SPEC 10.22: the state's quarantine (ascending) lies unbound at or above its band; `state_end`
// gets one past the last byte in use (the band's end or past the highest quarantined slot).
Status check_quarantine(std::span<const std::int64_t> quarantine, std::span<const std::int64_t> p2v, const Band& band,
                        const SubPoolGeometry& g, std::uint64_t& state_end) {
  const auto num_slots = static_cast<std::int64_t>(g.num_pages);
  state_end = static_cast<std::uint64_t>(band.end) * g.page_bytes;
  for (std::size_t i = 0; i < quarantine.size(); ++i) {
    const std::int64_t q = quarantine[i];
    if (i > 0 && q <= quarantine[i - 1]) return broken("the state quarantine is not ascending");
    if (q < band.end || q >= num_slots || p2v[static_cast<std::size_t>(q)] >= 0)
      return broken("quarantined state slot " + n(q) + " is bound or inside the band [" + n(band.begin) + ", " +
                    n(band.end) + "); SPEC 10.22: a slot moved away from under a reader is not reused until it is done");
    state_end = std::max(state_end, static_cast<std::uint64_t>(q + 1) * g.page_bytes);
  }
  return ok_status();
}

// The state sub-pool's tables (SPEC 11): an up side of page size 1 with its own free queue, the
// request table a bijection onto its bound slots, the quarantine unbound slots at or above the band.
Status check_state_tables(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode,
                          std::uint64_t& state_end) {
  if (!tables.state) return broken("a hybrid chain's tables have no state side");
  const SideTables& s = *tables.state;
  const SubPoolGeometry& g = *derived.geometry.state;
  const auto num_slots = static_cast<std::int64_t>(g.num_pages);
  const auto min_slot = static_cast<std::int64_t>(g.min_page_index);
  Band band;
  KVTWIN_TRY_STATUS(check_side(s, g, num_slots, min_slot, mode, band));
  std::vector<bool> queued(static_cast<std::size_t>(num_slots), false);
  for (std::int64_t v : s.free_queue) {
    if (v < min_slot || v >= num_slots) return broken("state free queue holds slot " + n(v) + " outside the id range");
    if (queued[static_cast<std::size_t>(v)]) return broken("state free queue holds slot " + n(v) + " twice");
    if (s.v2p[static_cast<std::size_t>(v)] >= 0) return broken("state slot " + n(v) + " is both queued as free and bound");
    queued[static_cast<std::size_t>(v)] = true;
  }
  for (std::int64_t v = min_slot; v < num_slots; ++v)
    if (!queued[static_cast<std::size_t>(v)] && s.v2p[static_cast<std::size_t>(v)] < 0)
      return broken("state slot " + n(v) + " is neither free (queued) nor bound");
  std::vector<bool> owned(static_cast<std::size_t>(num_slots), false);
  for (std::size_t i = 0; i < tables.state_requests.size(); ++i) {
    const auto& [request, v] = tables.state_requests[i];
    if (i > 0 && request <= tables.state_requests[i - 1].first) return broken("the state request table is not ascending");
    if (v < min_slot || v >= num_slots || s.v2p[static_cast<std::size_t>(v)] < 0)
      return broken("request " + std::to_string(request) + " holds state slot " + n(v) + ", which is not bound");
    if (owned[static_cast<std::size_t>(v)]) return broken("two requests hold state slot " + n(v));
    owned[static_cast<std::size_t>(v)] = true;
  }
  if (tables.state_requests.size() != s.allocated_pages)
    return broken(std::to_string(tables.state_requests.size()) + " requests hold state slots but " +
                  std::to_string(s.allocated_pages) + " are bound");
  return check_quarantine(tables.state_quarantine, s.p2v, band, g, state_end);
}

}  // namespace

Status check_state_table_invariants(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode,
                                    std::uint64_t& state_end) {
  return check_state_tables(tables, derived, mode, state_end);
}

Status check_state_table_invariants_changed(const StateTablesView& t, const PoolDerived& derived,
                                            CompactionMode mode, const StateChanges& changes, std::uint64_t& state_end) {
  if (!derived.geometry.state) return broken("a hybrid chain's geometry has no state sub-pool");
  const SubPoolGeometry& g = *derived.geometry.state;
  const SideTablesView& s = t.slots;
  const SidePrefix side{s.name};
  const auto num_slots = static_cast<std::int64_t>(g.num_pages);
  const auto min_slot = static_cast<std::int64_t>(g.min_page_index);
  Band band;
  KVTWIN_TRY_STATUS(check_side_frame(side, s.v2p, s.p2v, s.watermark, 0, g, num_slots, band));
  // The counts: the band is its bound slots and holes; free and bound ids are every usable id;
  // one request a bound slot.
  if (s.allocated_pages + s.hole_count != static_cast<std::uint64_t>(band.end - band.begin))
    return broken(side + std::to_string(s.allocated_pages) + " bound slots and " + std::to_string(s.hole_count) +
                  " holes do not fill the band [" + n(band.begin) + ", " + n(band.end) + ")");
  if (mode == CompactionMode::eager && s.hole_count != 0)
    return broken(side + "an eager state sub-pool has " + std::to_string(s.hole_count) + " holes");
  if (t.free_queue_size + s.allocated_pages != static_cast<std::uint64_t>(num_slots - min_slot))
    return broken(side + std::to_string(t.free_queue_size) + " free ids and " + std::to_string(s.allocated_pages) +
                  " bound slots are not the " + n(num_slots - min_slot) + " usable slot ids");
  if (t.request_count != s.allocated_pages)
    return broken(std::to_string(t.request_count) + " requests hold state slots but " +
                  std::to_string(s.allocated_pages) + " are bound");
  // The changed rows, as on a token side.
  for (std::int64_t v : changes.virtual_slots) {
    if (v < 1 || v >= num_slots) return broken(side + "a change names virtual slot " + n(v) + " outside the table");
    const std::int64_t p = s.v2p[static_cast<std::size_t>(v)];
    if (p == -1) continue;
    if (v < min_slot || p < min_slot || p >= num_slots || s.p2v[static_cast<std::size_t>(p)] != v || !band.contains(p))
      return broken(side + "v2p[" + n(v) + "] = " + n(p) + ": a bound slot's id and physical slot are usable, inverse " +
                    "(p2v of it is " + n(p >= 0 && p < num_slots ? s.p2v[static_cast<std::size_t>(p)] : -2) +
                    ") and inside the band [" + n(band.begin) + ", " + n(band.end) + ")");
  }
  for (std::int64_t p : changes.physical_slots) {
    if (p < 1 || p >= num_slots) return broken(side + "a change names physical slot " + n(p) + " outside the table");
    const std::int64_t v = s.p2v[static_cast<std::size_t>(p)];
    const bool hole = s.is_hole(p);
    if (v == -1) {
      if (hole != band.contains(p))
        return broken(side + "slot " + n(p) + (hole ? " is a hole outside" : " is neither bound nor a hole inside") +
                      " the band [" + n(band.begin) + ", " + n(band.end) + ")");
      continue;
    }
    if (hole || p < min_slot || v < min_slot || v >= num_slots || s.v2p[static_cast<std::size_t>(v)] != p ||
        !band.contains(p))
      return broken(side + "p2v[" + n(p) + "] = " + n(v) + ": a bound slot is not a hole, is inverse to v2p and lies " +
                    "inside the band [" + n(band.begin) + ", " + n(band.end) + ")");
  }
  // The requests the operation named hold bound slots (or none).
  for (std::uint64_t r : changes.requests) {
    const std::int64_t v = t.slot_of(r);
    if (v == -1) continue;
    if (v < min_slot || v >= num_slots || s.v2p[static_cast<std::size_t>(v)] < min_slot)
      return broken("request " + std::to_string(r) + " holds state slot " + n(v) + ", which is not bound");
  }
  // SPEC 10.22: the quarantine (whole: a few slots).
  return check_quarantine(t.quarantine, s.p2v, band, g, state_end);
}

Status check_table_invariants(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode) {
  const std::vector<SubPoolGeometry>& geometry = derived.geometry.sub_pools;
  if (tables.sides.size() != geometry.size())
    return broken("the tables have " + std::to_string(tables.sides.size()) + " sides but the pool has " +
                  std::to_string(geometry.size()) + " sub-pools");
  const auto num_virtual = static_cast<std::int64_t>(geometry[0].num_pages);
  const auto owner_min = static_cast<std::int64_t>(geometry[0].min_page_index);
  std::vector<Band> bands(geometry.size());
  for (std::size_t i = 0; i < geometry.size(); ++i) {
    if (tables.sides[i].name != geometry[i].name)
      return broken("side " + std::to_string(i) + " is named '" + tables.sides[i].name + "' but the pool's is '" +
                    geometry[i].name + "'");
    KVTWIN_TRY_STATUS(check_side(tables.sides[i], geometry[i], num_virtual, owner_min, mode, bands[i]));
  }
  // The owner's free queue and its bound pages partition [min_page_index, num_virtual).
  const SideTables& owner = tables.sides[0];
  std::vector<bool> queued(static_cast<std::size_t>(num_virtual), false);
  for (std::int64_t v : owner.free_queue) {
    if (v < owner_min || v >= num_virtual) return broken("free queue holds virtual page " + n(v) + " outside the id range");
    if (queued[static_cast<std::size_t>(v)]) return broken("free queue holds virtual page " + n(v) + " twice");
    if (owner.v2p[static_cast<std::size_t>(v)] >= 0)
      return broken("virtual page " + n(v) + " is both queued as free and bound to page " +
                    n(owner.v2p[static_cast<std::size_t>(v)]));
    queued[static_cast<std::size_t>(v)] = true;
  }
  for (std::int64_t v = owner_min; v < num_virtual; ++v)
    if (!queued[static_cast<std::size_t>(v)] && owner.v2p[static_cast<std::size_t>(v)] < 0)
      return broken("virtual page " + n(v) + " is neither free (queued) nor bound");
  for (std::size_t i = 1; i < tables.sides.size(); ++i) {
    const SideTables& other = tables.sides[i];
    if (!other.free_queue.empty()) return broken("side '" + other.name + "' keeps a free queue; only the owner does");
    for (std::int64_t v = 1; v < num_virtual; ++v)
      if (other.v2p[static_cast<std::size_t>(v)] >= 0 && owner.v2p[static_cast<std::size_t>(v)] < 0)
        return broken("virtual page " + n(v) + " is bound on side '" + other.name + "' but not on the owner side");
  }
  if (derived.has_state()) {
    std::uint64_t state_end = 0;
    KVTWIN_TRY_STATUS(check_state_tables(tables, derived, mode, state_end));
    std::vector<std::uint64_t> allocated;
    for (const SideTables& t : tables.sides) allocated.push_back(t.allocated_pages);
    return check_hybrid_order(state_end, bands, allocated, derived);
  }
  if (tables.state) return broken("a token chain's tables have a state side");
  if (geometry.size() == 2) {
    const std::uint64_t up_end = static_cast<std::uint64_t>(bands[0].end) * geometry[0].page_bytes;
    const std::uint64_t down_begin = static_cast<std::uint64_t>(bands[1].begin) * geometry[1].page_bytes;
    if (up_end > down_begin)
      return broken("the '" + geometry[0].name + "' band ends at byte " + std::to_string(up_end) + ", past the '" +
                    geometry[1].name + "' band's start at byte " + std::to_string(down_begin) + "; the sides overlap");
  }
  return ok_status();
}

Status check_table_invariants_changed(const PoolTablesView& tables, const PoolDerived& derived, CompactionMode mode,
                                      const TableChanges& changes) {
  const std::vector<SubPoolGeometry>& geometry = derived.geometry.sub_pools;
  if (tables.sides.size() != geometry.size())
    return broken("the tables have " + std::to_string(tables.sides.size()) + " sides but the pool has " +
                  std::to_string(geometry.size()) + " sub-pools");
  const auto num_virtual = static_cast<std::int64_t>(geometry[0].num_pages);
  const auto owner_min = static_cast<std::int64_t>(geometry[0].min_page_index);
  // A chain has at most two token sides (core/sizing.h): their bands live here, not on the heap.
  std::array<Band, 2> band_array{};
  std::array<std::uint64_t, 2> allocated_array{};
  if (geometry.size() > band_array.size())
    return broken("the pool has " + std::to_string(geometry.size()) + " token sub-pools; a chain has at most " +
                  std::to_string(band_array.size()));
  const std::span<Band> bands(band_array.data(), geometry.size());
  for (std::size_t i = 0; i < geometry.size(); ++i) {
    const SideTablesView& s = tables.sides[i];
    const SubPoolGeometry& g = geometry[i];
    const SidePrefix side{s.name};
    const auto num_pages = static_cast<std::int64_t>(g.num_pages);
    const auto min_page = static_cast<std::int64_t>(g.min_page_index);
    KVTWIN_TRY_STATUS(check_side_frame(side, s.v2p, s.p2v, s.watermark, s.span_low, g, num_virtual, bands[i]));
    const Band& band = bands[i];
    // Every band page is bound or a hole, and every bound page is in the band: the counts add up.
    if (s.allocated_pages + s.hole_count != static_cast<std::uint64_t>(band.end - band.begin))
      return broken(side + std::to_string(s.allocated_pages) + " bound pages and " + std::to_string(s.hole_count) +
                    " holes do not fill the band [" + n(band.begin) + ", " + n(band.end) + ")");
    if (mode == CompactionMode::eager && s.hole_count != 0 && g.direction != GrowDirection::float_middle)
      return broken(side + "an eager side has " + std::to_string(s.hole_count) + " holes; eager compaction leaves none");
    for (std::int64_t v : changes.virtual_pages[i]) {
      if (v < 1 || v >= num_virtual) return broken(side + "a change names virtual page " + n(v) + " outside the table");
      const std::int64_t p = s.v2p[static_cast<std::size_t>(v)];
      if (p == -1) {
        // Unbound on the owner: unbound on every other side too.
        if (i == 0)
          for (std::size_t o = 1; o < tables.sides.size(); ++o)
            if (tables.sides[o].v2p[static_cast<std::size_t>(v)] >= 0)
              return broken("virtual page " + n(v) + " is bound on side '" + std::string(tables.sides[o].name) +
                            "' but not on the owner side");
        continue;
      }
      if (v < owner_min)
        return broken(side + "virtual page " + n(v) + " below the first usable page " + n(owner_min) + " is bound");
      if (p < min_page || p >= num_pages)
        return broken(side + "v2p[" + n(v) + "] = " + n(p) + " is outside the usable pages [" + n(min_page) + ", " +
                      n(num_pages) + ")");
      if (s.p2v[static_cast<std::size_t>(p)] != v)
        return broken(side + "v2p[" + n(v) + "] = " + n(p) + " but p2v[" + n(p) + "] = " +
                      n(s.p2v[static_cast<std::size_t>(p)]) + "; v2p and p2v must be mutual inverses");
      if (i > 0 && tables.sides[0].v2p[static_cast<std::size_t>(v)] < 0)
        return broken("virtual page " + n(v) + " is bound on side '" + std::string(s.name) + "' but not on the owner side");
    }
    for (std::int64_t p : changes.physical_pages[i]) {
      if (p < 1 || p >= num_pages) return broken(side + "a change names physical page " + n(p) + " outside the table");
      const std::int64_t v = s.p2v[static_cast<std::size_t>(p)];
      const bool hole = s.is_hole(p);
      if (v == -1) {
        if (hole && !band.contains(p))
          return broken(side + "hole " + n(p) + " lies outside the band [" + n(band.begin) + ", " + n(band.end) + ")");
        if (!hole && band.contains(p))
          return broken(side + "page " + n(p) + " inside the band [" + n(band.begin) + ", " + n(band.end) +
                        ") is neither bound nor a hole");
        continue;
      }
      if (hole) return broken(side + "page " + n(p) + " is both bound and a hole");
      if (p < min_page) return broken(side + "reserved page " + n(p) + " below the sink floor is bound to virtual page " + n(v));
      if (v < 1 || v >= num_virtual || s.v2p[static_cast<std::size_t>(v)] != p)
        return broken(side + "p2v[" + n(p) + "] = " + n(v) + " but v2p of it is not " + n(p) +
                      "; v2p and p2v must be mutual inverses");
      if (!band.contains(p))
        return broken(side + "page " + n(p) + " outside the band [" + n(band.begin) + ", " + n(band.end) + ") is bound");
    }
  }
  // The owner's free ids and bound ids partition the usable ids: the counts add up.
  const std::uint64_t usable_ids = static_cast<std::uint64_t>(num_virtual - owner_min);
  if (tables.free_queue_size + tables.sides[0].allocated_pages != usable_ids)
    return broken("the free queue holds " + std::to_string(tables.free_queue_size) + " ids and " +
                  std::to_string(tables.sides[0].allocated_pages) + " are bound, but there are " +
                  std::to_string(usable_ids) + " usable ids");
  if (derived.has_state()) {
    for (std::size_t i = 0; i < geometry.size(); ++i) allocated_array[i] = tables.sides[i].allocated_pages;
    return check_hybrid_order(tables.state_frontier_bytes, bands,
                              std::span<const std::uint64_t>(allocated_array.data(), geometry.size()), derived);
  }
  if (geometry.size() == 2) {
    const std::uint64_t up_end = static_cast<std::uint64_t>(bands[0].end) * geometry[0].page_bytes;
    const std::uint64_t down_begin = static_cast<std::uint64_t>(bands[1].begin) * geometry[1].page_bytes;
    if (up_end > down_begin)
      return broken("the '" + geometry[0].name + "' band ends at byte " + std::to_string(up_end) + ", past the '" +
                    geometry[1].name + "' band's start at byte " + std::to_string(down_begin) + "; the sides overlap");
  }
  return ok_status();
}

}  // namespace kvtwin
