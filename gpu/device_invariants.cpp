// The GPU backend's invariant check over a host snapshot (device_invariants.h).
#include "gpu/device_invariants.h"

#include <algorithm>

#include "gpu/side_copy.h"

namespace kvtwin::gpu {
namespace {

Error broken(const SideSnapshot& s, const std::string& message) {
  return make_error(ErrorKind::internal, "gpu invariant broken: sub-pool '" + s.name + "': " + message);
}

std::string num(std::int64_t v) { return std::to_string(v); }

bool in_band(const SideSnapshot& s, std::int64_t p) {
  if (s.floats) return p >= s.span_low && p < s.watermark;
  return s.grows_up ? (p >= s.min_page && p < s.watermark) : (p > s.watermark && p < s.num_pages);
}

std::string band_text(const SideSnapshot& s) {
  if (s.floats) return "[" + num(s.span_low) + ", " + num(s.watermark) + ")";
  return s.grows_up ? "[" + num(s.min_page) + ", " + num(s.watermark) + ")"
                    : "(" + num(s.watermark) + ", " + num(s.num_pages) + ")";
}

std::int64_t band_pages(const SideSnapshot& s) {
  if (s.floats) return s.watermark - s.span_low;
  return s.grows_up ? s.watermark - s.min_page : s.num_pages - 1 - s.watermark;
}

Status check_shapes(const SideSnapshot& s) {
  const auto rows = [](const auto& v) { return static_cast<std::int64_t>(v.size()); };
  if (s.num_pages <= s.min_page || s.min_page < 1 || s.num_virtual < 1 || s.first_virtual < 1)
    return broken(s, "geometry num_pages " + num(s.num_pages) + ", min_page " + num(s.min_page) + ", num_virtual " +
                         num(s.num_virtual) + ", first virtual page " + num(s.first_virtual) + " is not a built side");
  if (rows(s.v2p) != s.num_virtual + 1)
    return broken(s, "v2p has " + num(rows(s.v2p)) + " rows on the device; SPEC 4 sizes it num_virtual + 1 = " +
                         num(s.num_virtual + 1));
  if (rows(s.p2v) != s.num_pages + 1 || rows(s.hole_flags) != s.num_pages + 1)
    return broken(s, "p2v and hole flags have " + num(rows(s.p2v)) + " and " + num(rows(s.hole_flags)) +
                         " rows; each must have num_pages + 1 = " + num(s.num_pages + 1));
  if (s.owner && rows(s.queue) != std::max<std::int64_t>(s.num_virtual, 1))
    return broken(s, "the free queue's ring has " + num(rows(s.queue)) + " entries, not num_virtual " + num(s.num_virtual));
  return ok_status();
}

Status check_side(const SideSnapshot& s, bool lazy) {
  KVTWIN_TRY_STATUS(check_shapes(s));
  const std::int64_t V = s.num_virtual, N = s.num_pages;
  // The sink row and the -1 sentinels (SPEC 4).
  if (s.v2p[0] != 0 || s.p2v[0] != 0)
    return broken(s, "the sink row is v2p[0] = " + num(s.v2p[0]) + ", p2v[0] = " + num(s.p2v[0]) + "; both must be 0");
  if (s.v2p[static_cast<std::size_t>(V)] != -1 || s.p2v[static_cast<std::size_t>(N)] != -1)
    return broken(s, "the sentinel rows are v2p[" + num(V) + "] = " + num(s.v2p[static_cast<std::size_t>(V)]) + ", p2v[" +
                         num(N) + "] = " + num(s.p2v[static_cast<std::size_t>(N)]) + "; both must be -1");
  // The watermark counter (SPEC 4): up [min, num_pages], down [min - 1, num_pages - 1]; a float's
  // span (SPEC 11) min <= span_low <= watermark <= num_pages.
  if (s.floats && (s.span_low < s.min_page || s.span_low > s.watermark || s.watermark > N))
    return broken(s, "the float's span counters [" + num(s.span_low) + ", " + num(s.watermark) +
                         ") are outside its usable pages [" + num(s.min_page) + ", " + num(N) + ")");
  if (!s.floats && s.span_low != 0) return broken(s, "a side that does not float counts a span");
  if (!s.floats &&
      (s.grows_up ? (s.watermark < s.min_page || s.watermark > N) : (s.watermark < s.min_page - 1 || s.watermark > N - 1)))
    return broken(s, "watermark counter " + num(s.watermark) + " is outside its range for a " +
                         (s.grows_up ? "grow-up" : "grow-down") + " side of pages [" + num(s.min_page) + ", " + num(N) + ")");
  // v2p and p2v are inverse over bound pages; nothing below the first usable pages is bound.
  std::int64_t bound = 0;
  for (std::int64_t v = 1; v < V; ++v) {
    const std::int64_t p = s.v2p[static_cast<std::size_t>(v)];
    if (p == -1) continue;
    if (v < s.first_virtual || p < s.min_page || p >= N)
      return broken(s, "v2p[" + num(v) + "] = " + num(p) + ": bound virtual pages are in [" + num(s.first_virtual) + ", " +
                           num(V) + ") and their pages in [" + num(s.min_page) + ", " + num(N) + ")");
    if (s.p2v[static_cast<std::size_t>(p)] != v)
      return broken(s, "v2p[" + num(v) + "] = " + num(p) + " but p2v[" + num(p) + "] = " +
                           num(s.p2v[static_cast<std::size_t>(p)]) + "; v2p and p2v must be inverse");
    ++bound;
  }
  std::int64_t bound_pages = 0, flagged = 0;
  for (std::int64_t p = 1; p < N; ++p) {
    const std::int64_t v = s.p2v[static_cast<std::size_t>(p)];
    const bool is_bound = v != -1;
    const bool is_hole = s.hole_flags[static_cast<std::size_t>(p)] != 0;
    if (is_bound) {
      if (v < s.first_virtual || v >= V || s.v2p[static_cast<std::size_t>(v)] != p)
        return broken(s, "p2v[" + num(p) + "] = " + num(v) + " but v2p of it is not " + num(p) +
                             "; v2p and p2v must be inverse");
      ++bound_pages;
    }
    flagged += is_hole ? 1 : 0;
    if (is_bound && is_hole) return broken(s, "page " + num(p) + " is bound and flagged as a hole");
    if (in_band(s, p) && !is_bound && !is_hole)
      return broken(s, "page " + num(p) + " inside the band " + band_text(s) + " (watermark " + num(s.watermark) +
                           ") is neither bound nor a hole");
    if (!in_band(s, p) && (is_bound || is_hole))
      return broken(s, "page " + num(p) + " outside the band " + band_text(s) + " (watermark " + num(s.watermark) +
                           ") is " + (is_bound ? "bound" : "flagged as a hole"));
  }
  if (s.hole_flags[0] != 0 || s.hole_flags[static_cast<std::size_t>(N)] != 0)
    return broken(s, "the sink or sentinel row is flagged as a hole");
  // The other host counters against the tables.
  if (s.allocated != bound || s.allocated != bound_pages)
    return broken(s, "allocated counter is " + num(s.allocated) + " but v2p binds " + num(bound) + " pages and p2v " +
                         num(bound_pages));
  if (s.holes != flagged)
    return broken(s, "holes counter is " + num(s.holes) + " but " + num(flagged) + " pages are flagged as holes");
  // SPEC 11: a float keeps interior holes in either mode (it never compacts on a free), and an
  // empty float is a point.
  if (!lazy && !s.floats && s.holes != 0)
    return broken(s, "an eager side has " + num(s.holes) + " holes; eager compaction leaves none");
  if (s.floats && s.allocated == 0 && s.holes != 0)
    return broken(s, "an empty float keeps " + num(s.holes) + " holes; an empty float is transparent (a point)");
  if (band_pages(s) != s.allocated + s.holes)
    return broken(s, "the band " + band_text(s) + " holds " + num(band_pages(s)) + " pages, not allocated " +
                         num(s.allocated) + " + holes " + num(s.holes));
  if (!s.owner) {
    if (s.queue_count != 0 || s.queue_head != 0)
      return broken(s, "a side without a free queue counts " + num(s.queue_count) + " queued ids at head " + num(s.queue_head));
    return ok_status();
  }
  // The owner's free queue: queue_count ids from queue_head in the ring, each a distinct unbound
  // usable virtual page; with the bound ones they are every usable virtual page.
  const std::int64_t capacity = static_cast<std::int64_t>(s.queue.size());
  if (s.queue_count < 0 || s.queue_count > capacity || s.queue_head < 0 || s.queue_head >= capacity)
    return broken(s, "free queue counters: " + num(s.queue_count) + " ids from head " + num(s.queue_head) +
                         " do not fit its ring of " + num(capacity));
  std::vector<bool> queued(static_cast<std::size_t>(V), false);
  for (std::int64_t i = 0; i < s.queue_count; ++i) {
    const std::int64_t v = s.queue[static_cast<std::size_t>((s.queue_head + i) % capacity)];
    if (v < s.first_virtual || v >= V)
      return broken(s, "free queue entry " + num(i) + " is virtual page " + num(v) + ", outside the usable ids [" +
                           num(s.first_virtual) + ", " + num(V) + ")");
    if (queued[static_cast<std::size_t>(v)]) return broken(s, "free queue holds virtual page " + num(v) + " twice");
    if (s.v2p[static_cast<std::size_t>(v)] != -1)
      return broken(s, "virtual page " + num(v) + " is queued as free and bound to page " +
                           num(s.v2p[static_cast<std::size_t>(v)]));
    queued[static_cast<std::size_t>(v)] = true;
  }
  if (s.queue_count + s.allocated != V - s.first_virtual)
    return broken(s, "queue counter " + num(s.queue_count) + " + allocated " + num(s.allocated) + " is not the " +
                         num(V - s.first_virtual) + " usable virtual pages");
  return ok_status();
}

}  // namespace

std::vector<std::int64_t> free_queue_of(const SideSnapshot& s) {
  std::vector<std::int64_t> out;
  if (!s.owner || s.queue_count == 0 || s.queue.empty()) return out;
  out.reserve(static_cast<std::size_t>(s.queue_count));
  const auto ring = static_cast<std::int64_t>(s.queue.size());
  for (std::int64_t i = 0; i < s.queue_count; ++i) out.push_back(s.queue[static_cast<std::size_t>((s.queue_head + i) % ring)]);
  return out;
}

std::vector<std::int64_t> holes_of(const SideSnapshot& s) {
  std::vector<std::int64_t> out;
  if (s.holes == 0) return out;
  for (std::size_t p = 0; p < s.hole_flags.size(); ++p)
    if (s.hole_flags[p] != 0) out.push_back(static_cast<std::int64_t>(p));
  return out;
}

SideTables side_tables_of(std::string name, SideSnapshot&& s) {
  SideTables t;
  t.name = std::move(name);
  t.free_queue = free_queue_of(s);
  t.holes = holes_of(s);
  t.v2p = std::move(s.v2p);
  t.p2v = std::move(s.p2v);
  t.watermark = s.watermark;
  t.span_low = s.span_low;
  t.allocated_pages = static_cast<std::uint64_t>(s.allocated);
  return t;
}

Status check_device_sides(const std::vector<SideSnapshot>& sides, bool lazy) {
  if (sides.empty() || sides.size() > 2 || !sides[0].owner || (sides.size() == 2 && sides[1].owner))
    return make_error(ErrorKind::internal, "gpu invariant broken: a pool has one or two sides, the first owning the free queue");
  for (const SideSnapshot& s : sides) KVTWIN_TRY_STATUS(check_side(s, lazy));
  if (sides.size() == 1) return ok_status();
  const SideSnapshot& full = sides[0];
  const SideSnapshot& swa = sides[1];
  if (swa.floats) {
    // SPEC 11's tri-pool [state up | swa float | owner down]: the float binds only virtual pages
    // the owner has, and its span (when it holds a live page) ends at or below the owner's band.
    if (swa.num_virtual != full.num_virtual || swa.first_virtual != full.min_page || full.grows_up || full.floats)
      return broken(swa, "a tri-pool's float shares the owner's virtual ids, and the owner grows down");
    for (std::int64_t v = 1; v < full.num_virtual; ++v)
      if (swa.v2p[static_cast<std::size_t>(v)] >= 0 && full.v2p[static_cast<std::size_t>(v)] < 0)
        return broken(swa, "virtual page " + num(v) + " is bound here but not on the owner side");
    const std::uint64_t float_end = static_cast<std::uint64_t>(swa.watermark) * swa.page_bytes;
    const std::uint64_t owner_begin = static_cast<std::uint64_t>(full.watermark + 1) * full.page_bytes;
    if (swa.allocated > 0 && float_end > owner_begin)
      return broken(swa, "its span ends at byte " + std::to_string(float_end) + ", past the owner's band start at byte " +
                             std::to_string(owner_begin));
    return ok_status();
  }
  if (swa.num_virtual != full.num_virtual || swa.first_virtual != full.min_page || !full.grows_up || swa.grows_up)
    return broken(swa, "a composite's sides share the owner's virtual ids and grow from opposite ends");
  // The SWA side binds only virtual pages the full side owns (a tombstone is -1 on SWA only).
  for (std::int64_t v = 1; v < full.num_virtual; ++v)
    if (swa.v2p[static_cast<std::size_t>(v)] >= 0 && full.v2p[static_cast<std::size_t>(v)] < 0)
      return broken(swa, "virtual page " + num(v) + " is bound here but not on the full side");
  // The two occupied bands never overlap (SPEC 4).
  const std::uint64_t full_end = static_cast<std::uint64_t>(full.watermark) * full.page_bytes;
  const std::uint64_t swa_begin = static_cast<std::uint64_t>(swa.watermark + 1) * swa.page_bytes;
  if (full_end > swa_begin)
    return broken(swa, "its band starts at byte " + std::to_string(swa_begin) + ", before the full band ends at byte " +
                           std::to_string(full_end));
  return ok_status();
}

Status check_side_copy(const SideCopy& copy, const SideSnapshot& device) {
  const auto differs = [&](const std::string& what) {
    return broken(device, "the allocator's host copy of " + what + " differs from the device tables");
  };
  const auto first_row = [](const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
  };
  // A table's first differing row, as each holds it ("ends" past a shorter one).
  const auto table_differs = [&](const std::string& table, const std::string& row, const std::vector<std::int64_t>& a,
                                 const std::vector<std::int64_t>& b) {
    const std::size_t i = first_row(a, b);
    const auto at = [i](const std::vector<std::int64_t>& t) { return i < t.size() ? num(t[i]) : std::string("ends"); };
    return differs(table + " (first at " + row + " " + num(static_cast<std::int64_t>(i)) + ": the copy " + at(a) +
                   ", the device " + at(b) + ")");
  };
  if (copy.v2p() != device.v2p) return table_differs("v2p", "virtual page", copy.v2p(), device.v2p);
  if (copy.p2v() != device.p2v) return table_differs("p2v", "page", copy.p2v(), device.p2v);
  if (copy.watermark() != device.watermark || copy.allocated() != device.allocated)
    return differs("the watermark and the allocated count (the copy " + num(copy.watermark()) + " and " +
                   num(copy.allocated()) + ", the device " + num(device.watermark) + " and " + num(device.allocated) + ")");
  std::vector<std::int64_t> flagged;
  for (std::size_t p = 0; p < device.hole_flags.size(); ++p)
    if (device.hole_flags[p] != 0) flagged.push_back(static_cast<std::int64_t>(p));
  const std::vector<std::int64_t> holes(copy.holes().begin(), copy.holes().end());
  if (holes != flagged) {
    const std::size_t i = first_row(holes, flagged);
    return differs("the holes (" + num(static_cast<std::int64_t>(holes.size())) + " in the copy, " +
                   num(static_cast<std::int64_t>(flagged.size())) + " flagged on the device; the first that differs: " +
                   (i < holes.size() ? "the copy's " + num(holes[i]) : "the device's " + num(flagged[i])) + ")");
  }
  if (copy.owner() != device.owner) return differs("which side owns the free queue");
  if (copy.owner()) {
    const std::vector<std::int64_t> queue(copy.queue().begin(), copy.queue().end());
    const std::vector<std::int64_t> ring = free_queue_of(device);
    if (queue != ring) {
      const std::size_t i = first_row(queue, ring);
      return differs("the free queue (" + num(static_cast<std::int64_t>(queue.size())) + " ids in the copy, " +
                     num(static_cast<std::int64_t>(ring.size())) + " on the device; first different at position " +
                     num(static_cast<std::int64_t>(i)) + ")");
    }
  }
  return ok_status();
}

}  // namespace kvtwin::gpu
