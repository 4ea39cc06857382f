// The GPU backend's own invariant check, as a plain host function over a snapshot.
//
// GpuPool keeps each sub-pool's tables on the device and a few scalar counters on the host (the
// watermark, the allocated and hole counts, the free queue's head and length). The counters steer
// every allocation and compaction, yet the differential check only sees them through tables(),
// which reports them as they are. This check downloads the device tables and holds every counter
// against them, with the tables' own invariants (SPEC.md section 4): v2p and p2v inverse, the sink
// and sentinel rows, the band [min, wm), (wm, num_pages) or a float's span [span_low, wm) (SPEC 11)
// holding exactly the bound pages and the holes, the free queue partitioning the usable virtual
// ids with the bound ones.
//
// Kept apart from the CUDA code (no CUDA header) so that tests can break a snapshot field by
// field and see each check fire without a device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/result.h"

namespace kvtwin::gpu {

class SideCopy;

// One side's host counters and device tables, copied to the host.
struct SideSnapshot {
  std::string name;
  bool grows_up = true;
  bool floats = false;            // a float middle (SPEC 11): its band is [span_low, watermark)
  std::int64_t span_low = 0;
  bool owner = false;             // keeps the free queue (the first side of the chain)
  std::int64_t min_page = 1;      // min_page_index of this side
  std::int64_t num_pages = 0;
  std::int64_t num_virtual = 0;   // v2p has num_virtual + 1 rows
  std::int64_t first_virtual = 1; // the owner's min_page_index: the first allocatable virtual page
  std::uint64_t page_bytes = 0;
  // Host counters.
  std::int64_t watermark = 0;
  std::int64_t allocated = 0;
  std::int64_t holes = 0;
  std::int64_t queue_head = 0;
  std::int64_t queue_count = 0;
  // Device tables.
  std::vector<std::int64_t> v2p;         // num_virtual + 1
  std::vector<std::int64_t> p2v;         // num_pages + 1
  std::vector<std::int64_t> queue;       // the whole ring (owner side; max(num_virtual, 1) entries)
  std::vector<std::uint8_t> hole_flags;  // num_pages + 1
};

// What tables() shows of a side, read off its snapshot as the device holds it: the free queue
// front first (the owner's; none when it counts none), and the holes ascending (none when the
// side counts none).
std::vector<std::int64_t> free_queue_of(const SideSnapshot& s);
std::vector<std::int64_t> holes_of(const SideSnapshot& s);
// The side as tables() reports it, named `name`: its tables and counters taken off the snapshot
// (the tables moved out of it), its queue and holes read as above.
SideTables side_tables_of(std::string name, SideSnapshot&& s);

// Checks every side (chain order: the owner first) and, for a composite, the two together. An
// ErrorKind::internal Error names the side, the field and the numbers; ok when all hold.
// `lazy`: the pool is in lazy compaction mode (an eager side has no holes).
Status check_device_sides(const std::vector<SideSnapshot>& sides, bool lazy);

// The allocator's host copy of a grow-up or grow-down side (side_copy.h) against that side's
// device tables: v2p, p2v, the holes, the watermark, the allocated count and (owner) the free
// queue, front first. An ErrorKind::internal Error names the side, the field and the first row
// that differs; ok when the copy is the device's.
Status check_side_copy(const SideCopy& copy, const SideSnapshot& device);

}  // namespace kvtwin::gpu
