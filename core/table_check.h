// The allocator tables' invariants (SPEC.md section 4), checked from the tables alone.
//
// Every backend exposes its tables through core/backend.h; this check needs nothing else, so the
// runner runs it on every player after every operation: a GPU run alone is checked as strictly
// as the model, and the model's own verify() uses it for its table half. It costs O(pages) per
// call; a caller that only changed a few pages may check just those (check_table_invariants with
// a page list, see below) and leave the full check for checkpoints.
//
// Checked per side: table sizes (num_virtual + 1, num_pages + 1), the sink row (0/0) and the -1
// sentinels; v2p and p2v mutual inverses over bound pages; nothing bound below min_page_index;
// the watermark inside its range; every page inside the band [begin, end) bound or a hole and
// nothing outside it; eager sides without holes; holes ascending and unique; the allocated
// counter equal to a recount. Across sides: the owner's free queue and its bound virtual pages
// partition [min_page_index, num_virtual) with no repeats; an SWA side binds only virtual pages
// the owner binds; the two bands do not overlap in bytes.
//
// What it does not cover: readers, batches, graphs and bytes (backend-specific; the model's
// verify() checks those).
//
// The incremental check (check_table_invariants_changed) is the same rules restricted to the rows
// an operation changed, plus the counts that tie the rest together in O(1): bound pages + holes =
// the band's width on every side, free ids + bound ids = the usable ids on the owner, no holes on
// an eager side, the two bands apart. Run after every operation of a pool that was fully checked
// before, it finds a broken rule at a changed row at once; a change the backend failed to report
// is found by the full check at the next checkpoint (or by a count that no longer adds up).
#pragma once

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/pool_config.h"
#include "core/result.h"

namespace kvtwin {

// Ok, or an ErrorKind::internal error naming the first broken invariant ("invariant broken: ...").
Status check_table_invariants(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode);

// One side's tables where the backend keeps them (no copy).
struct SideTablesView {
  std::string_view name;
  std::span<const std::int64_t> v2p;  // num_virtual + 1 rows
  std::span<const std::int64_t> p2v;  // num_pages + 1 rows
  std::int64_t watermark = 0;
  std::uint64_t allocated_pages = 0;
  std::size_t hole_count = 0;
  std::function<bool(std::int64_t)> is_hole;
  std::int64_t span_low = 0;  // a float middle (SPEC 11)
};

struct PoolTablesView {
  std::vector<SideTablesView> sides;  // chain order
  std::size_t free_queue_size = 0;    // the owner's
  // Hybrid chains (SPEC 11): one past the state sub-pool's last byte in use (its band or its
  // highest quarantined slot). The state side has its own check (check_state_table_invariants_changed).
  std::uint64_t state_frontier_bytes = 0;
};

// What one operation changed, per side: the virtual pages whose v2p row changed, and the physical
// pages whose p2v row or hole status changed (repeats allowed).
struct TableChanges {
  std::vector<std::span<const std::int64_t>> virtual_pages;
  std::vector<std::span<const std::int64_t>> physical_pages;
};

// SPEC 11: the state sub-pool's tables alone (its side, request table and quarantine); `state_end`
// gets one past its last byte in use. O(slots): run by a full verify (at checkpoints); after each
// operation, check_state_table_invariants_changed below.
Status check_state_table_invariants(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode,
                                    std::uint64_t& state_end);

// SPEC 11: the state sub-pool's tables where the backend keeps them, and what one operation
// changed: its slot rows (as TableChanges, one side) and the requests it named.
struct StateTablesView {
  SideTablesView slots;
  std::size_t free_queue_size = 0;
  std::size_t request_count = 0;
  std::function<std::int64_t(std::uint64_t)> slot_of;  // a request's virtual slot, or -1
  std::vector<std::int64_t> quarantine;                 // ascending (a few slots: held by readers)
};
struct StateChanges {
  std::span<const std::int64_t> virtual_slots;
  std::span<const std::int64_t> physical_slots;
  std::span<const std::uint64_t> requests;
};
// The state sub-pool's invariants over the changed rows and requests, the O(1) counts and the whole
// quarantine; `state_end` gets one past its last byte in use. O(changes + quarantine), not O(slots):
// a 1 TiB pool holds tens of thousands of state slots (prefix checkpoints), so the whole check
// (check_state_table_invariants) runs at checkpoints only.
Status check_state_table_invariants_changed(const StateTablesView& tables, const PoolDerived& derived,
                                            CompactionMode mode, const StateChanges& changes, std::uint64_t& state_end);

// The invariants above over the changed rows, and the O(1) counts; O(changes), not O(pages).
Status check_table_invariants_changed(const PoolTablesView& tables, const PoolDerived& derived, CompactionMode mode,
                                      const TableChanges& changes);

}  // namespace kvtwin
