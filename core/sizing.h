// Sizing a pool (SPEC.md section 3): one raw byte buffer of total_bytes shared by a chain of
// sub-pools, one growing up from the low end and one growing down from the high end, or a
// single sub-pool growing up to the end. Every sub-pool's views start at byte 0.
//
//   reserved_floor = max(max_i E_i, max_i page_size * E_i)         (all sub-pools are page-aware)
//   max_slots      = total // E          min_slot_index = ceil(reserved_floor / E)
//   num_pages      = max_slots // ps     min_page_index = ceil(min_slot_index / ps)
//   epp            = E * ps
// and a sub-pool with num_pages <= min_page_index cannot be built; nor can a chain of two whose
// shared bytes (up side's first usable page to the down side's top) hold no page of each.
//
// Hybrid chains (SPEC 11) put a `state` sub-pool (page size 1, one slot per request) at the low
// end: [state up | owner down] or [state up | swa float | owner down]. The sink is charged once:
// reserved_floor takes E_state itself, never page_size * E_state; the chain is refused when the
// bytes above the floor cannot hold three states (one active, two cached) plus a page of every
// token sub-pool; a fresh state slot costs ceil(E_state / sum of token entries) tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/result.h"
#include "core/state_layout.h"

namespace kvtwin {

// float_middle: the sliding window of a tri-pool, a span between the two ends (SPEC 11).
enum class GrowDirection : std::uint8_t { up, down, float_middle };
std::string_view grow_direction_name(GrowDirection d);

struct SubPoolGeometry {
  std::string name;
  GrowDirection direction = GrowDirection::up;
  std::uint64_t entry_bytes = 0;
  std::uint64_t page_size = 0;
  std::uint64_t max_slots = 0;
  std::uint64_t min_slot_index = 0;
  std::uint64_t num_pages = 0;
  std::uint64_t min_page_index = 0;
  std::uint64_t page_bytes = 0;  // epp

  // Pages a side may ever hold: num_pages - min_page_index.
  std::uint64_t usable_pages() const { return num_pages - min_page_index; }

  bool operator==(const SubPoolGeometry&) const = default;
};

struct PoolGeometry {
  std::uint64_t total_bytes = 0;
  std::uint64_t reserved_floor_bytes = 0;
  std::uint64_t page_size = 0;
  std::vector<SubPoolGeometry> sub_pools;  // token sub-pools: [up] or [up, down]; hybrid: [owner down] or [owner down, swa float]
  // Hybrid chains (SPEC 11): the state sub-pool at the low end (page size 1, grows up), the
  // tokens a fresh state slot costs, and the SWA page where an empty float starts (the middle).
  std::optional<SubPoolGeometry> state = {};
  std::uint64_t state_token_cost = 0;
  std::uint64_t float_start_page = 0;

  bool has_state() const { return state.has_value(); }
  bool has_float() const { return has_state() && sub_pools.size() == 2; }
  bool operator==(const PoolGeometry&) const = default;
};

// The smallest multiple of 3 states a hybrid chain must hold above its floor (SPEC 11).
inline constexpr std::uint64_t kBootStates = 3;

// Sizes a chain of one or two sub-pools (the first grows up, the second down). Errors name
// the sub-pool, its slots, its floor and "increase total_bytes"; arithmetic is checked.
// With `state`, the chain is hybrid (SPEC 11): the state sub-pool at the low end, the owner
// (layouts[0]) growing down, an SWA sub-pool (layouts[1]) in the float middle.
Result<PoolGeometry> size_pool(const std::vector<DenseEntryLayout>& layouts, std::uint64_t page_size,
                               std::uint64_t total_bytes, const StateEntryLayout* state = nullptr);

}  // namespace kvtwin
