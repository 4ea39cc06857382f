// Pool sizing arithmetic (SPEC.md section 3).
#include "core/sizing.h"

#include <algorithm>

#include "core/checked.h"
#include "core/planted_sizing.h"

namespace kvtwin {

Result<PoolGeometry> size_pool(const std::vector<DenseEntryLayout>& layouts, std::uint64_t page_size,
                               std::uint64_t total_bytes) {
  if (layouts.empty() || layouts.size() > 2)
    return make_error(ErrorKind::invalid_argument,
                      "a pool chain holds one or two sub-pools, got " + std::to_string(layouts.size()));
  if (page_size == 0) return make_error(ErrorKind::invalid_argument, "page size is 0; use a page size of at least 1");
  if (total_bytes == 0) return make_error(ErrorKind::sizing, "total_bytes is 0; give the pool some bytes");
  PoolGeometry g;
  g.total_bytes = total_bytes;
  g.page_size = page_size;
  // A planted self-test bug (core/planted_sizing.h): the floor from the first sub-pool only.
  const bool one_sided_floor = planted_sizing_bug() == PlantedSizingBug::one_sided_floor;
  for (const DenseEntryLayout& l : layouts) {
    KVTWIN_TRY_STATUS(l.validate());
    KVTWIN_TRY(std::uint64_t page_bytes, checked_mul(page_size, l.entry_bytes, "page bytes of '" + l.sub_pool + "'"));
    if (one_sided_floor && &l != &layouts.front()) continue;
    g.reserved_floor_bytes = std::max({g.reserved_floor_bytes, l.entry_bytes, page_bytes});
  }
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const DenseEntryLayout& l = layouts[i];
    SubPoolGeometry s;
    s.name = l.sub_pool;
    s.direction = i == 0 ? GrowDirection::up : GrowDirection::down;
    s.entry_bytes = l.entry_bytes;
    s.page_size = page_size;
    s.max_slots = total_bytes / l.entry_bytes;
    s.min_slot_index = ceil_div(g.reserved_floor_bytes, l.entry_bytes);
    s.num_pages = s.max_slots / page_size;
    s.min_page_index = ceil_div(s.min_slot_index, page_size);
    s.page_bytes = page_size * l.entry_bytes;  // checked above
    // SPEC 3: num_pages <= min_page_index leaves no page above the sink's floor.
    if (s.num_pages <= s.min_page_index) {
      // The smallest total that gives this sub-pool one usable page: (min_page_index + 1) pages.
      auto needed = checked_mul(s.min_page_index + 1, s.page_bytes, "smallest total_bytes");
      const std::string needed_text = needed.ok() ? std::to_string(*needed) + " bytes" : "more than 2^64 bytes";
      return make_error(ErrorKind::sizing,
                        "sub-pool '" + s.name + "' fits " + std::to_string(s.max_slots) + " slots (" +
                            std::to_string(s.num_pages) + " pages of " + std::to_string(s.page_bytes) +
                            " bytes) in " + std::to_string(total_bytes) + " bytes, but its reserved floor of " +
                            std::to_string(g.reserved_floor_bytes) + " bytes (first usable page " +
                            std::to_string(s.min_page_index) +
                            ") leaves no usable page; increase total_bytes (at least " + needed_text +
                            ") or lower the page size");
    }
    g.sub_pools.push_back(s);
  }
  // SPEC 4.3: the two ends of a chain share the bytes between the up side's first usable page and
  // the down side's top; an allocation takes one page of each. A chain where not even one pair
  // fits could never allocate anything: refused like a single sub-pool with no usable page.
  if (g.sub_pools.size() == 2) {
    const SubPoolGeometry& up = g.sub_pools[0];
    const SubPoolGeometry& down = g.sub_pools[1];
    const std::uint64_t up_frontier = up.min_page_index * up.page_bytes;
    const std::uint64_t down_top = down.num_pages * down.page_bytes;
    const std::uint64_t pair_bytes = up.page_bytes + down.page_bytes;  // each at most total_bytes
    const std::uint64_t gap = down_top > up_frontier ? down_top - up_frontier : 0;
    if (gap < pair_bytes) {
      // The smallest total holding one pair: the down side's top at up_frontier + pair_bytes or above.
      auto top = checked_add(up_frontier, pair_bytes, "smallest total_bytes");
      std::string needed_text = "more than 2^64 bytes";
      if (top.ok()) {
        auto needed = checked_mul(ceil_div(*top, down.page_bytes), down.page_bytes, "smallest total_bytes");
        if (needed.ok()) needed_text = std::to_string(*needed) + " bytes";
      }
      return make_error(ErrorKind::sizing,
                        "sub-pools '" + up.name + "' and '" + down.name + "' share " + std::to_string(gap) +
                            " bytes between the reserved floor and the top of the pool, but one allocated page "
                            "takes a page of each, " + std::to_string(up.page_bytes) + " + " +
                            std::to_string(down.page_bytes) + " = " + std::to_string(pair_bytes) +
                            " bytes: no page could ever be allocated; increase total_bytes (at least " +
                            needed_text + ") or lower the page size");
    }
  }
  return g;
}

}  // namespace kvtwin
