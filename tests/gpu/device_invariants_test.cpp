// The GPU backend's invariant check (gpu/device_invariants.h) on hand-made snapshots: a consistent
// lazy composite passes, and each host counter or table entry broken on its own is reported, by
// name. Runs everywhere (no device needed); GpuPool::verify() feeds it real device tables in the
// GPU suites (tests/gpu/differential.cpp runs it after every operation).
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "gpu/device_invariants.h"
#include "gpu/gpu_backend.h"
#include "gpu/side_copy.h"

namespace kvtwin::gpu {
namespace {

// A lazy full + SWA pool, as GpuPool would hold it after some allocations and frees.
//   full (up, pages [1, 10), watermark 6): v1 -> p2, v2 -> p3, v3 -> p1, v6 -> p5, hole at p4;
//        free queue 4 5 7 8 9, starting at ring slot 7 (it wraps).
//   swa (down, pages [1, 12), watermark 8): v1 -> p11, v2 -> p10, hole at p9; v3 and v6 are
//        tombstones (left the window).
std::vector<SideSnapshot> consistent() {
  SideSnapshot full;
  full.name = "full";
  full.grows_up = true;
  full.owner = true;
  full.min_page = 1;
  full.num_pages = 10;
  full.num_virtual = 10;
  full.first_virtual = 1;
  full.page_bytes = 256;
  full.watermark = 6;
  full.allocated = 4;
  full.holes = 1;
  full.queue_head = 7;
  full.queue_count = 5;
  full.v2p = {0, 2, 3, 1, -1, -1, 5, -1, -1, -1, -1};
  full.p2v = {0, 3, 1, 2, -1, 6, -1, -1, -1, -1, -1};
  full.queue = {8, 9, 0, 0, 0, 0, 0, 4, 5, 7};
  full.hole_flags = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};

  SideSnapshot swa;
  swa.name = "swa";
  swa.grows_up = false;
  swa.owner = false;
  swa.min_page = 1;
  swa.num_pages = 12;
  swa.num_virtual = 10;
  swa.first_virtual = 1;
  swa.page_bytes = 200;
  swa.watermark = 8;
  swa.allocated = 2;
  swa.holes = 1;
  swa.v2p = {0, 11, 10, -1, -1, -1, -1, -1, -1, -1, -1};
  swa.p2v = {0, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 1, -1};
  swa.hole_flags = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
  return {full, swa};
}

TEST(DeviceInvariants, ConsistentSnapshotPasses) {
  const Status s = check_device_sides(consistent(), true);
  EXPECT_TRUE(s.ok()) << s.error().message;
  // One side alone (a plain full pool) passes too.
  const Status single = check_device_sides({consistent()[0]}, true);
  EXPECT_TRUE(single.ok()) << single.error().message;
}

struct Breakage {
  const char* what;
  std::function<void(std::vector<SideSnapshot>&)> apply;
  const char* expected;  // a phrase of the message
};

TEST(DeviceInvariants, EachBrokenCounterOrEntryIsReported) {
  const std::vector<Breakage> cases = {
      {"sink row", [](auto& s) { s[0].v2p[0] = 1; }, "sink row"},
      {"sentinel row", [](auto& s) { s[1].p2v[12] = 0; }, "sentinel rows"},
      {"v2p row count", [](auto& s) { s[0].v2p.pop_back(); }, "v2p has 10 rows"},
      {"p2v not the inverse", [](auto& s) { s[0].p2v[2] = 2; }, "must be inverse"},
      {"v2p points at an unbound page", [](auto& s) { s[0].v2p[4] = 7; }, "must be inverse"},
      {"bound below the first usable page", [](auto& s) { s[0].v2p[1] = 0; }, "bound virtual pages are in"},
      {"allocated counter", [](auto& s) { s[0].allocated = 3; }, "allocated counter is 3"},
      {"hole counter", [](auto& s) { s[1].holes = 0; }, "holes counter is 0"},
      {"watermark below a bound page", [](auto& s) { s[0].watermark = 5; }, "outside the band [1, 5)"},
      {"watermark past the band", [](auto& s) { s[0].watermark = 7; }, "neither bound nor a hole"},
      {"down watermark", [](auto& s) { s[1].watermark = 9; }, "flagged as a hole"},
      {"watermark out of range", [](auto& s) { s[1].watermark = 12; }, "watermark counter 12"},
      {"hole flag on a bound page", [](auto& s) { s[0].hole_flags[2] = 1; }, "bound and flagged"},
      {"hole flag on the sink", [](auto& s) { s[0].hole_flags[0] = 1; }, "sink or sentinel row is flagged"},
      {"eager side with holes", [](auto&) {}, "eager side has 1 holes"},
      {"queue counter", [](auto& s) { s[0].queue_count = 4; }, "queue counter 4 + allocated 4"},
      {"queue head", [](auto& s) { s[0].queue_head = 10; }, "do not fit its ring"},
      {"queued twice", [](auto& s) { s[0].queue[8] = 4; }, "twice"},
      {"queued and bound", [](auto& s) { s[0].queue[9] = 6; }, "queued as free and bound"},
      {"queue entry outside the ids", [](auto& s) { s[0].queue[0] = 10; }, "outside the usable ids"},
      {"a queue on the SWA side", [](auto& s) { s[1].queue_count = 1; }, "without a free queue"},
      {"SWA binds what full does not",
       [](auto& s) {
         s[1].v2p[4] = 9;
         s[1].p2v[9] = 4;
         s[1].hole_flags[9] = 0;
         s[1].allocated = 3;
         s[1].holes = 0;
       },
       "bound here but not on the full side"},
      {"bands overlap", [](auto& s) { s[1].page_bytes = 150; }, "before the full band ends"},
  };
  for (const Breakage& b : cases) {
    std::vector<SideSnapshot> sides = consistent();
    b.apply(sides);
    const bool lazy = std::string(b.what) != "eager side with holes";
    const Status s = check_device_sides(sides, lazy);
    ASSERT_FALSE(s.ok()) << b.what << ": not reported";
    EXPECT_EQ(s.error().kind, ErrorKind::internal) << b.what;
    EXPECT_NE(s.error().message.find(b.expected), std::string::npos)
        << b.what << ": expected \"" << b.expected << "\" in: " << s.error().message;
  }
}

TEST(DeviceInvariants, ChainShapeIsChecked) {
  EXPECT_FALSE(check_device_sides({}, true).ok());
  std::vector<SideSnapshot> sides = consistent();
  std::swap(sides[0], sides[1]);
  EXPECT_FALSE(check_device_sides(sides, true).ok()) << "the owner comes first";
}

// A backend that is not the GPU's: verify_gpu_backend has no device tables to check there.
class NotTheGpu : public Backend {
 public:
  std::string_view name() const override { return "not-the-gpu"; }
  OpResult apply(const Op&) override { return make_error(ErrorKind::unsupported, "a stub"); }
  Result<PoolTables> tables() const override { return make_error(ErrorKind::unsupported, "a stub"); }
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t, std::uint64_t) const override {
    return make_error(ErrorKind::unsupported, "a stub");
  }
};

// The allocator's host copy (gpu/side_copy.h) against a side's device tables: a snapshot that
// holds what the copy holds passes, and each field of it changed on its own (as a kernel that
// missed a row, or a copy that missed a change, would leave it) is reported by name.
SideSnapshot snapshot_of(const SideCopy& copy, const std::string& name) {
  SideSnapshot s;
  s.name = name;
  s.grows_up = copy.grows_up();
  s.owner = copy.owner();
  s.min_page = copy.min_page();
  s.num_pages = copy.num_pages();
  s.num_virtual = static_cast<std::int64_t>(copy.v2p().size()) - 1;
  s.watermark = copy.watermark();
  s.allocated = copy.allocated();
  s.holes = static_cast<std::int64_t>(copy.holes().size());
  s.v2p = copy.v2p();
  s.p2v = copy.p2v();
  s.hole_flags.assign(copy.p2v().size(), 0);
  for (std::int64_t p : copy.holes()) s.hole_flags[static_cast<std::size_t>(p)] = 1;
  if (copy.owner()) {
    // The ring starting mid-way, so that the queue wraps.
    s.queue.assign(static_cast<std::size_t>(s.num_virtual), 0);
    s.queue_head = 3;
    s.queue_count = static_cast<std::int64_t>(copy.queue().size());
    for (std::size_t i = 0; i < copy.queue().size(); ++i)
      s.queue[(3 + i) % s.queue.size()] = copy.queue()[i];
  }
  return s;
}

TEST(DeviceInvariants, TheAllocatorsHostCopyIsHeldAgainstTheTables) {
  SubPoolGeometry g;
  g.name = "full";
  g.direction = GrowDirection::up;
  g.entry_bytes = g.page_bytes = 64;
  g.page_size = 1;
  g.num_pages = g.max_slots = 10;
  g.min_page_index = g.min_slot_index = 1;
  // Lazy: six pages bound, virtual page 4's page a hole, its id back at the queue's end.
  SideCopy copy;
  copy.init(g, 10, true);
  const std::vector<std::int64_t> six = copy.queue_front(6);
  copy.bind(six, copy.pages_for(6));
  copy.take_virtual(6);
  copy.add_holes(copy.unbind({4}, false));
  copy.put_virtual({4});
  const Status same = check_side_copy(copy, snapshot_of(copy, "full"));
  ASSERT_TRUE(same.ok()) << same.error().message;

  const std::vector<std::pair<const char*, std::function<void(SideSnapshot&)>>> cases = {
      {"v2p (first at virtual page 2", [](SideSnapshot& s) { s.v2p[2] = 7; }},
      {"p2v (first at page 6", [](SideSnapshot& s) { s.p2v[6] = -1; }},
      {"the watermark and the allocated count", [](SideSnapshot& s) { s.watermark = 8; }},
      {"the watermark and the allocated count", [](SideSnapshot& s) { s.allocated = 6; }},
      {"the holes (1 in the copy, 2 flagged", [](SideSnapshot& s) { s.hole_flags[5] = 1; }},
      {"the holes (1 in the copy, 0 flagged", [](SideSnapshot& s) { s.hole_flags[4] = 0; }},
      {"the free queue (4 ids in the copy, 3 on the device", [](SideSnapshot& s) { --s.queue_count; }},
      {"the free queue (4 ids in the copy, 4 on the device; first different at position 1",
       [](SideSnapshot& s) { std::swap(s.queue[4], s.queue[5]); }},
      {"which side owns the free queue", [](SideSnapshot& s) { s.owner = false; }},
  };
  for (const auto& [expected, apply] : cases) {
    SideSnapshot s = snapshot_of(copy, "full");
    apply(s);
    const Status broken = check_side_copy(copy, s);
    ASSERT_FALSE(broken.ok()) << expected << ": not reported";
    EXPECT_EQ(broken.error().kind, ErrorKind::internal);
    EXPECT_NE(broken.error().message.find(expected), std::string::npos) << broken.error().message;
    EXPECT_NE(broken.error().message.find("sub-pool 'full'"), std::string::npos) << broken.error().message;
  }
}

TEST(VerifyGpuBackend, RefusesAnotherBackend) {
  const NotTheGpu other;
  const Status s = verify_gpu_backend(other);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::invalid_argument);
  EXPECT_NE(s.error().message.find("not-the-gpu"), std::string::npos) << s.error().message;
}

TEST(VerifyGpuBackend, NothingBuiltNothingToBreak) {
  // No device work happens before a pool is built, so this runs everywhere.
  const std::unique_ptr<Backend> gpu = make_gpu_backend();
  const Status s = verify_gpu_backend(*gpu);
  EXPECT_TRUE(s.ok()) << s.error().message;
  // No pool, no tables read: a checkpoint's comparison then asks tables() (which says why not).
  std::optional<PoolTables> read = PoolTables{};
  EXPECT_TRUE(verify_gpu_backend(*gpu, read).ok());
  EXPECT_FALSE(read.has_value());
}

}  // namespace
}  // namespace kvtwin::gpu
