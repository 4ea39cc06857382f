// Pool sizing arithmetic (SPEC.md section 3).
#include "core/sizing.h"

#include <algorithm>

#include "core/checked.h"
#include "core/planted_sizing.h"

namespace kvtwin {

std::string_view grow_direction_name(GrowDirection d) {
  switch (d) {
    case GrowDirection::up:
      return "up";
    case GrowDirection::down:
      return "down";
    case GrowDirection::float_middle:
      return "float";
  }
  return "?";
}

namespace {

// SPEC 11: a hybrid chain holds, above the sink's floor, one active and two cached states plus
// a page of every token sub-pool; otherwise it could never serve a request and is refused.
Status check_boot_floor(const PoolGeometry& g) {
  const SubPoolGeometry& state = *g.state;
  const SubPoolGeometry& owner = g.sub_pools.front();
  const std::uint64_t frontier = state.min_page_index * state.page_bytes;
  const std::uint64_t top = owner.num_pages * owner.page_bytes;
  const std::uint64_t above_floor = top > frontier ? top - frontier : 0;
  KVTWIN_TRY(std::uint64_t states_bytes, checked_mul(kBootStates, state.entry_bytes, "the state sub-pool's boot floor"));
  std::uint64_t pages_bytes = 0;
  for (const SubPoolGeometry& s : g.sub_pools) {
    KVTWIN_TRY(pages_bytes, checked_add(pages_bytes, s.page_bytes, "the state sub-pool's boot floor"));
  }
  KVTWIN_TRY(std::uint64_t need, checked_add(states_bytes, pages_bytes, "the state sub-pool's boot floor"));
  if (above_floor >= need) return ok_status();
  std::string needed_text = "more than 2^64 bytes";
  auto top_needed = checked_add(frontier, need, "smallest total_bytes");
  if (top_needed.ok()) {
    auto total = checked_mul(ceil_div(*top_needed, owner.page_bytes), owner.page_bytes, "smallest total_bytes");
    if (total.ok()) needed_text = std::to_string(*total) + " bytes";
  }
  return make_error(ErrorKind::sizing,
                    "sub-pool '" + state.name + "': the chain holds " + std::to_string(above_floor) +
                        " bytes above the reserved floor of " + std::to_string(g.reserved_floor_bytes) +
                        " bytes, but one active and two cached states (3 * E_state = 3 * " +
                        std::to_string(state.entry_bytes) + " = " + std::to_string(states_bytes) +
                        " bytes) and a page of every token sub-pool (" + std::to_string(pages_bytes) + " bytes) need " +
                        std::to_string(need) + "; increase total_bytes (at least " + needed_text +
                        ") or lower the page size");
}

}  // namespace

Result<PoolGeometry> size_pool(const std::vector<DenseEntryLayout>& layouts, std::uint64_t page_size,
                               std::uint64_t total_bytes, const StateEntryLayout* state) {
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
  if (state) {
    KVTWIN_TRY_STATUS(state->validate());
    // SPEC 11: the sink slot is charged once: the floor counts E_state, never page_size * E_state.
    // A planted self-test bug (core/planted_sizing.h, SPEC 10.23) charges it per page.
    std::uint64_t charged = state->entry_bytes;
    if (planted_sizing_bug() == PlantedSizingBug::state_sink_per_page) {
      KVTWIN_TRY(charged, checked_mul(page_size, state->entry_bytes, "state sink"));
    }
    g.reserved_floor_bytes = std::max(g.reserved_floor_bytes, charged);
  }
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const DenseEntryLayout& l = layouts[i];
    SubPoolGeometry s;
    s.name = l.sub_pool;
    // Token chains: [first up | second down]. Hybrid chains (SPEC 11): the owner grows down from
    // the top, an SWA sub-pool floats in the middle.
    if (state)
      s.direction = i == 0 ? GrowDirection::down : GrowDirection::float_middle;
    else
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
  if (state) {
    SubPoolGeometry s;
    s.name = state->sub_pool;
    s.direction = GrowDirection::up;
    s.entry_bytes = state->entry_bytes;
    s.page_size = 1;  // SPEC 11: slot-granular
    s.max_slots = total_bytes / state->entry_bytes;
    s.min_slot_index = ceil_div(g.reserved_floor_bytes, state->entry_bytes);
    s.num_pages = s.max_slots;
    s.min_page_index = s.min_slot_index;
    s.page_bytes = state->entry_bytes;
    if (s.num_pages <= s.min_page_index)
      return make_error(ErrorKind::sizing, "sub-pool '" + s.name + "' fits " + std::to_string(s.max_slots) +
                                               " state slots of " + std::to_string(s.entry_bytes) + " bytes in " +
                                               std::to_string(total_bytes) + " bytes, but its reserved floor of " +
                                               std::to_string(g.reserved_floor_bytes) + " bytes (first usable slot " +
                                               std::to_string(s.min_slot_index) +
                                               ") leaves no usable slot; increase total_bytes");
    g.state = s;
    // SPEC 11: a fresh state slot costs ceil(E_state / sum of token entries) tokens.
    std::uint64_t token_entries = 0;
    for (const SubPoolGeometry& t : g.sub_pools) token_entries += t.entry_bytes;  // each <= total_bytes
    g.state_token_cost = ceil_div(state->entry_bytes, token_entries);
    if (g.sub_pools.size() == 2) g.float_start_page = total_bytes / 2 / g.sub_pools[1].page_bytes;
    KVTWIN_TRY_STATUS(check_boot_floor(g));
    return g;
  }
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
