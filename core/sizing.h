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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/result.h"

namespace kvtwin {

enum class GrowDirection : std::uint8_t { up, down };

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
  std::vector<SubPoolGeometry> sub_pools;  // [up] or [up, down]

  bool operator==(const PoolGeometry&) const = default;
};

// Sizes a chain of one or two sub-pools (the first grows up, the second down). Errors name
// the sub-pool, its slots, its floor and "increase total_bytes"; arithmetic is checked.
Result<PoolGeometry> size_pool(const std::vector<DenseEntryLayout>& layouts, std::uint64_t page_size,
                               std::uint64_t total_bytes);

}  // namespace kvtwin
