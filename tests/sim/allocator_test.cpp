// Units for the page allocator's rules (SPEC.md section 4 and docs/decisions.md "Allocation"),
// played through the model with SPEC's worked examples. Every refused call is checked to leave
// the state digest unchanged.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::config_with_pages;
using testing::mha_shape;
using testing::must;
using testing::one_layer_pool;
using testing::must_as;
using testing::refused;

// A full + SWA composite of equal entries: both sides have `pages` pages of 256 bytes.
PoolConfig composite(std::uint64_t pages, CompactionMode mode = CompactionMode::eager) {
  return config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}), 4, pages, mode);
}

std::vector<std::int64_t> range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

TEST(Allocator, FreshTablesHoldOnlyTheSinkAndTheQueueIsAscending) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  const PoolTables t = *m.tables();
  ASSERT_EQ(t.sides.size(), 1u);
  const SideTables& s = t.sides[0];
  EXPECT_EQ(s.v2p.size(), 12u + 1);  // num_virtual + 1
  EXPECT_EQ(s.p2v.size(), 12u + 1);  // num_pages + 1
  EXPECT_EQ(s.v2p[0], 0);
  EXPECT_EQ(s.p2v[0], 0);
  for (std::size_t i = 1; i < s.v2p.size(); ++i) EXPECT_EQ(s.v2p[i], -1);
  EXPECT_EQ(s.free_queue, range(1, 12));  // min_page_index .. num_pages - 1
  EXPECT_EQ(s.watermark, 1);              // up side: wm starts at min_page_index
  EXPECT_EQ(s.allocated_pages, 0u);
}

TEST(Allocator, AnOperationBeforeBuildIsAnError) {
  Model m;
  OpResult r = m.apply(Alloc{4});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::invalid_argument);
  EXPECT_NE(r.error().message.find("build"), std::string::npos);
  EXPECT_FALSE(m.tables().ok());
}

TEST(Allocator, AllocBindsQueueFrontPagesToAscendingPhysicalPagesAtTheWatermark) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  EXPECT_EQ(must_as<Allocated>(m, Alloc{12}).pages, range(1, 4));
  // Free virtual page 2 (physical 2): eager compaction moves page 3 down to 2.
  must(m, Free{IdUnit::pages, {2}});
  // The queue is now 4..11 then 2: the front is taken first.
  EXPECT_EQ(must_as<Allocated>(m, Alloc{8}).pages, (std::vector<std::int64_t>{4, 5}));
  const SideTables s = m.tables()->sides[0];
  // Live: v1 -> p1, v3 -> p2 (moved), then v4, v5 at the old watermark 3: p3, p4.
  EXPECT_EQ(s.v2p[1], 1);
  EXPECT_EQ(s.v2p[3], 2);
  EXPECT_EQ(s.v2p[4], 3);
  EXPECT_EQ(s.v2p[5], 4);
  EXPECT_EQ(s.watermark, 5);
}

TEST(Allocator, AllocOfZeroTokensReturnsNothingAndChangesNothing) {
  Model m;
  must(m, BuildPool{one_layer_pool(6)});
  const std::uint64_t before = m.state_digest();
  EXPECT_TRUE(must_as<Allocated>(m, Alloc{0}).pages.empty());
  EXPECT_EQ(m.state_digest(), before);
}

TEST(Allocator, AllocOfAPartialPageIsAnError) {
  Model m;
  must(m, BuildPool{one_layer_pool(6)});
  must(m, Alloc{4});
  refused(m, Alloc{6}, ErrorKind::invalid_argument);
  OpResult r = m.apply(Alloc{6});
  EXPECT_NE(r.error().message.find("allocate 4 or 8"), std::string::npos) << r.error().message;
  // Near 2^64 the page above does not exist: the hint offers the one below, never a wrapped 0.
  OpResult huge = m.apply(Alloc{UINT64_MAX});
  ASSERT_FALSE(huge.ok());
  const std::string below = std::to_string(UINT64_MAX / 4 * 4);
  EXPECT_NE(huge.error().message.find("; allocate " + below + " tokens"), std::string::npos) << huge.error().message;
  EXPECT_EQ(huge.error().message.find(" or 0"), std::string::npos) << huge.error().message;
}

TEST(Allocator, NoRoomIsAResultAndChangesNothing) {
  Model m;
  must(m, BuildPool{one_layer_pool(6)});  // usable pages 1..5
  must(m, Alloc{4 * 4});
  const std::uint64_t before = m.state_digest();
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{2 * 4})));
  EXPECT_EQ(m.state_digest(), before);
  EXPECT_EQ(must_as<Allocated>(m, Alloc{4}).pages, (std::vector<std::int64_t>{5}));
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{4})));
}

// SPEC 4.1's worked example: an up side holding pages 5-9 frees pages 6 and 8; page 9 moves
// to 6 and the watermark drops to 8.
TEST(Allocator, EagerUpSideExampleFromSpec) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  must(m, Alloc{4 * 4});  // virtual 1..4 on physical 1..4
  EXPECT_EQ(must_as<Allocated>(m, Alloc{5 * 4}).pages, range(5, 10));
  ASSERT_EQ(m.tables()->sides[0].watermark, 10);
  const Compaction c = must_as<Compaction>(m, Free{IdUnit::pages, {6, 8}});
  ASSERT_EQ(c.moves.size(), 1u);
  EXPECT_EQ(c.moves[0], (PageMove{"full", 9, 6}));
  const SideTables s = m.tables()->sides[0];
  EXPECT_EQ(s.watermark, 8);
  EXPECT_EQ(s.v2p[9], 6);
  EXPECT_EQ(s.p2v[6], 9);
  EXPECT_EQ(s.p2v[9], -1);
  EXPECT_EQ(s.v2p[6], -1);
  EXPECT_EQ(s.v2p[8], -1);
}

// Survivors and holes are paired in ascending order: freeing 2, 3 and 5 of 1..8 (wm 9, new wm 6)
// leaves survivors 6, 7, 8 and holes 2, 3, 5: moves 6->2, 7->3, 8->5.
TEST(Allocator, EagerPairsSurvivorsAndHolesInAscendingOrder) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  must(m, Alloc{8 * 4});
  const Compaction c = must_as<Compaction>(m, Free{IdUnit::pages, {5, 3, 2}});
  EXPECT_EQ(c.moves, (std::vector<PageMove>{{"full", 6, 2}, {"full", 7, 3}, {"full", 8, 5}}));
  EXPECT_EQ(m.tables()->sides[0].watermark, 6);
}

// A freed page at the top of the band is not a hole: it leaves with the watermark, unmoved.
TEST(Allocator, EagerFreeOfTheTopPagesMovesNothing) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  must(m, Alloc{5 * 4});
  EXPECT_TRUE(must_as<Compaction>(m, Free{IdUnit::pages, {4, 5}}).moves.empty());
  EXPECT_EQ(m.tables()->sides[0].watermark, 4);
}

TEST(Allocator, FreedIdsGoToTheQueueBackInAscendingOrder) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});  // queue 1..7
  must(m, Alloc{3 * 4});          // takes 1, 2, 3
  must(m, Free{IdUnit::pages, {3, 1}});
  EXPECT_EQ(m.tables()->sides[0].free_queue, (std::vector<std::int64_t>{4, 5, 6, 7, 1, 3}));
}

TEST(Allocator, FreeByTokensUsesTheirPagesSortedUnique) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});
  must(m, Alloc{3 * 4});
  // tokens 13, 12, 5 -> pages 3, 3, 1 -> {1, 3}; duplicates are allowed.
  must(m, Free{IdUnit::tokens, {13, 12, 5}});
  const SideTables s = m.tables()->sides[0];
  EXPECT_EQ(s.v2p[1], -1);
  EXPECT_EQ(s.v2p[3], -1);
  EXPECT_EQ(s.v2p[2], 1);  // page 2 moved into hole 1 (new wm 2)
  EXPECT_EQ(s.free_queue, (std::vector<std::int64_t>{4, 5, 6, 7, 1, 3}));
}

TEST(Allocator, DoubleFreeIsAnErrorNamingTheIdsAndChangesNothing) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});
  must(m, Alloc{3 * 4});
  must(m, Free{IdUnit::pages, {2}});
  refused(m, Free{IdUnit::pages, {1, 2}}, ErrorKind::double_free);
  refused(m, Free{IdUnit::pages, {6}}, ErrorKind::double_free);  // never allocated
  OpResult r = m.apply(Free{IdUnit::pages, {2, 6, 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("[2, 6]"), std::string::npos) << r.error().message;
}

TEST(Allocator, FreeOutsideTheUsableRangeIsOutOfRange) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});
  must(m, Alloc{3 * 4});
  refused(m, Free{IdUnit::pages, {0}}, ErrorKind::out_of_range);  // the sink
  refused(m, Free{IdUnit::pages, {8}}, ErrorKind::out_of_range);
  refused(m, Free{IdUnit::pages, {-1}}, ErrorKind::out_of_range);
  refused(m, Free{IdUnit::tokens, {2}}, ErrorKind::out_of_range);  // token 2 is in page 0
  refused(m, Free{IdUnit::tokens, {-4}}, ErrorKind::out_of_range);
}

TEST(Allocator, AllocManyIsAllOrNothing) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});  // 7 usable pages
  must(m, Alloc{2 * 4});
  const std::uint64_t before = m.state_digest();
  // 3 + 3 pages do not fit into 5: nothing is allocated, not even the first request.
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, AllocMany{{12, 12}})));
  EXPECT_EQ(m.state_digest(), before);
  refused(m, AllocMany{{4, 5}}, ErrorKind::invalid_argument);  // a partial page in any request
  refused(m, AllocMany{{}}, ErrorKind::invalid_argument);
  const AllocatedMany got = must_as<AllocatedMany>(m, AllocMany{{8, 0, 12}});
  EXPECT_EQ(got.pages, (std::vector<std::vector<std::int64_t>>{{3, 4}, {}, {5, 6, 7}}));
}

// ---------------------------------------------------------------- lazy mode (SPEC 4.2)

TEST(Allocator, LazyFreeLeavesHolesAndKeepsTheWatermark) {
  Model m;
  must(m, BuildPool{one_layer_pool(12, CompactionMode::lazy)});
  must(m, Alloc{9 * 4});  // 1..9, wm 10
  EXPECT_TRUE(must_as<Compaction>(m, Free{IdUnit::pages, {6, 8, 3}}).moves.empty());
  const SideTables s = m.tables()->sides[0];
  EXPECT_EQ(s.watermark, 10);
  EXPECT_EQ(s.holes, (std::vector<std::int64_t>{3, 6, 8}));
  EXPECT_EQ(s.allocated_pages, 6u);
}

TEST(Allocator, LazyAllocUsesHolesInAscendingOrderThenTheBand) {
  Model m;
  must(m, BuildPool{one_layer_pool(14, CompactionMode::lazy)});
  must(m, Alloc{9 * 4});                 // v1..9 on p1..9
  must(m, Free{IdUnit::pages, {8, 3}});  // holes 3, 8; queue 10..13, 3, 8
  const Allocated a = must_as<Allocated>(m, Alloc{3 * 4});
  EXPECT_EQ(a.pages, (std::vector<std::int64_t>{10, 11, 12}));  // queue front
  const SideTables s = m.tables()->sides[0];
  EXPECT_EQ(s.v2p[10], 3);  // holes first, ascending
  EXPECT_EQ(s.v2p[11], 8);
  EXPECT_EQ(s.v2p[12], 10);  // then the band at the watermark
  EXPECT_EQ(s.watermark, 11);
  EXPECT_TRUE(s.holes.empty());
}

// In lazy mode holes count toward room: a full band with holes still takes an allocation.
TEST(Allocator, LazyHolesCountTowardRoom) {
  Model m;
  must(m, BuildPool{one_layer_pool(6, CompactionMode::lazy)});  // usable 1..5
  must(m, Alloc{5 * 4});
  must(m, Free{IdUnit::pages, {2}});
  EXPECT_EQ(must_as<Allocated>(m, Alloc{4}).pages, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(m.tables()->sides[0].v2p[2], 2);
}

TEST(Allocator, FlushCompactsTheHolesExactlyAsEagerDoes) {
  // The same frees, eager and lazy + flush, end in the same tables.
  Model eager, lazy;
  must(eager, BuildPool{one_layer_pool(12)});
  must(lazy, BuildPool{one_layer_pool(12, CompactionMode::lazy)});
  for (Model* m : {&eager, &lazy}) must(*m, Alloc{9 * 4});
  const Compaction from_eager = must_as<Compaction>(eager, Free{IdUnit::pages, {2, 5, 8}});
  must(lazy, Free{IdUnit::pages, {2, 5, 8}});
  const Compaction from_flush = must_as<Compaction>(lazy, Flush{});
  EXPECT_EQ(from_flush.moves, from_eager.moves);
  EXPECT_EQ(from_flush.moves, (std::vector<PageMove>{{"full", 7, 2}, {"full", 9, 5}}));
  PoolTables te = *eager.tables(), tl = *lazy.tables();
  EXPECT_EQ(te.sides[0].v2p, tl.sides[0].v2p);
  EXPECT_EQ(te.sides[0].p2v, tl.sides[0].p2v);
  EXPECT_EQ(te.sides[0].watermark, tl.sides[0].watermark);
  EXPECT_TRUE(tl.sides[0].holes.empty());
  // An eager flush has nothing to do.
  EXPECT_TRUE(must_as<Compaction>(eager, Flush{}).moves.empty());
}

// ---------------------------------------------------------------- composite (SPEC 4.3)

TEST(Allocator, CompositeAllocBindsTheSameVirtualPagesOnBothSidesFromOppositeEnds) {
  Model m;
  must(m, BuildPool{composite(12)});
  const PoolTables fresh = *m.tables();
  ASSERT_EQ(fresh.sides.size(), 2u);
  EXPECT_EQ(fresh.sides[1].name, "swa");
  EXPECT_EQ(fresh.sides[1].watermark, 11);  // down side: num_pages - 1
  EXPECT_EQ(fresh.sides[1].v2p.size(), fresh.sides[0].v2p.size());
  EXPECT_TRUE(fresh.sides[1].free_queue.empty());
  EXPECT_EQ(must_as<Allocated>(m, Alloc{3 * 4}).pages, range(1, 4));
  const PoolTables t = *m.tables();
  // Full: [1, 4) ascending. SWA: [wm - k + 1, wm] = [9, 11], ascending, bound in order.
  EXPECT_EQ(t.sides[0].v2p[1], 1);
  EXPECT_EQ(t.sides[0].v2p[3], 3);
  EXPECT_EQ(t.sides[1].v2p[1], 9);
  EXPECT_EQ(t.sides[1].v2p[2], 10);
  EXPECT_EQ(t.sides[1].v2p[3], 11);
  EXPECT_EQ(t.sides[1].watermark, 8);
}

TEST(Allocator, CompositeJointCapacityIsTheGapOverBothPageSizes) {
  // 12 pages of 256 bytes: gap = (11 + 1) * 256 - 1 * 256 = 2816 bytes = 11 pages; both sides
  // take one page per allocated page, so the joint capacity is 11 // 2 = 5 pages.
  Model m;
  must(m, BuildPool{composite(12)});
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{6 * 4})));
  EXPECT_EQ(must_as<Allocated>(m, Alloc{5 * 4}).pages.size(), 5u);
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{4})));
}

TEST(Allocator, CompositeWithUnequalEntriesSizesEachSideByItsOwnPages) {
  // SWA layers have 2 heads (E 128), the full layer 1 head (E 64): 2 full pages + 1 SWA page
  // take as many bytes as 4 full pages.
  ModelShape shape = mha_shape({LayerKind::swa, LayerKind::full});
  shape.swa_num_kv_heads = 2;
  Model m;
  must(m, BuildPool{config_with_pages(shape, 4, 24)});  // 24 full pages of 256 B = 6144 B; SWA pages of 512 B
  const PoolDerived& d = m.derived();
  ASSERT_EQ(d.geometry.sub_pools[1].page_bytes, 512u);
  const std::uint64_t floor = d.geometry.reserved_floor_bytes;  // 512
  const std::uint64_t full_min = d.geometry.sub_pools[0].min_page_index;
  // gap = 6144 - full_min * 256; joint = gap // (256 + 512).
  const std::uint64_t joint = (6144 - full_min * 256) / 768;
  EXPECT_EQ(floor, 512u);
  EXPECT_EQ(full_min, 2u);  // floor 512 / E 64 = 8 slots = 2 pages of 4
  EXPECT_EQ(joint, 7u);     // (6144 - 512) // 768; R_full = 22 and R_swa = 11 do not bind
  EXPECT_EQ(must_as<Allocated>(m, Alloc{joint * 4}).pages.size(), joint);
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{4})));
}

TEST(Allocator, FreeSwaLeavesATombstoneAndKeepsTheFullPage) {
  Model m;
  must(m, BuildPool{composite(12)});
  must(m, Alloc{3 * 4});  // SWA: v1 -> 9, v2 -> 10, v3 -> 11; wm 8
  const Compaction c = must_as<Compaction>(m, FreeSwa{IdUnit::pages, {2}});
  // SWA is a down side: new_wm = 9; survivors in (8, 9] = {9}; holes above 9 = {10}: 9 -> 10.
  EXPECT_EQ(c.moves, (std::vector<PageMove>{{"swa", 9, 10}}));
  const PoolTables t = *m.tables();
  EXPECT_EQ(t.sides[1].v2p[2], -1);  // tombstone
  EXPECT_EQ(t.sides[1].v2p[1], 10);
  EXPECT_EQ(t.sides[0].v2p[2], 2);  // the full page and the virtual id stay
  EXPECT_EQ(t.sides[1].watermark, 9);
  EXPECT_EQ(t.sides[1].allocated_pages, 2u);
  EXPECT_EQ(t.sides[0].allocated_pages, 3u);
  // A second free_swa of the tombstone, or of an unallocated page, is a double free.
  refused(m, FreeSwa{IdUnit::pages, {2}}, ErrorKind::double_free);
  refused(m, FreeSwa{IdUnit::pages, {5}}, ErrorKind::double_free);
}

TEST(Allocator, FreeSkipsTombstonesAndFreesSwaBeforeFull) {
  Model m;
  must(m, BuildPool{composite(12)});
  must(m, Alloc{4 * 4});  // full v1..4 -> p1..4 (wm 5); SWA v1..4 -> p8..11 (wm 7)
  // SWA page 8 of v1 leaves the window: new_wm 8, no survivor in (7, 8]: nothing moves.
  EXPECT_TRUE(must_as<Compaction>(m, FreeSwa{IdUnit::pages, {1}}).moves.empty());
  // Freeing 1 and 3: the SWA side frees only v3 (v1 is a tombstone; strict > 0): p10 goes,
  // new_wm 9, survivor 9 (v2) moves to the hole 10. Then the full side frees v1 and v3:
  // new_wm 3, survivor 4 (v4) moves to the hole 1. SWA moves are listed first.
  const Compaction c = must_as<Compaction>(m, Free{IdUnit::pages, {1, 3}});
  EXPECT_EQ(c.moves, (std::vector<PageMove>{{"swa", 9, 10}, {"full", 4, 1}}));
  const PoolTables t = *m.tables();
  EXPECT_EQ(t.sides[0].allocated_pages, 2u);
  EXPECT_EQ(t.sides[1].allocated_pages, 2u);
  EXPECT_EQ(t.sides[1].v2p[2], 10);
  EXPECT_EQ(t.sides[1].v2p[4], 11);
  EXPECT_EQ(t.sides[0].v2p[4], 1);
  EXPECT_EQ(t.sides[0].free_queue, (std::vector<std::int64_t>{5, 6, 7, 8, 9, 10, 11, 1, 3}));
}

TEST(Allocator, FreeSwaOnASinglePoolIsAnError) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});
  must(m, Alloc{4});
  refused(m, FreeSwa{IdUnit::pages, {1}}, ErrorKind::invalid_argument);
}

TEST(Allocator, LazyCompositeFreeLeavesHolesOnBothSides) {
  Model m;
  must(m, BuildPool{composite(12, CompactionMode::lazy)});
  must(m, Alloc{4 * 4});  // full 1..4 (wm 5); SWA 8..11 (wm 7)
  EXPECT_TRUE(must_as<Compaction>(m, Free{IdUnit::pages, {2}}).moves.empty());
  const PoolTables t = *m.tables();
  EXPECT_EQ(t.sides[0].holes, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(t.sides[1].holes, (std::vector<std::int64_t>{9}));
  // Reuse: the SWA hole comes first on the down side, then the band [wm - rest + 1, wm].
  must(m, Alloc{2 * 4});  // queue: 5.. first
  const PoolTables u = *m.tables();
  EXPECT_EQ(u.sides[0].v2p[5], 2);
  EXPECT_EQ(u.sides[0].v2p[6], 5);
  EXPECT_EQ(u.sides[1].v2p[5], 9);
  EXPECT_EQ(u.sides[1].v2p[6], 7);
  // flush on the SWA side first, then full (docs/decisions.md): nothing left to compact here.
  EXPECT_TRUE(must_as<Compaction>(m, Flush{}).moves.empty());
}

// docs/decisions.md, lazy composite pre-check: pages each side takes from its holes need no
// gap; only the rest, times that side's page bytes, must fit between the frontiers.
TEST(Allocator, LazyCompositeRoomCountsEachSidesHoles) {
  Model m;
  must(m, BuildPool{composite(12, CompactionMode::lazy)});
  must(m, Alloc{5 * 4});  // full 1..5 (wm 6); SWA 7..11 (wm 6): gap = 7 * 256 - 6 * 256 = 256
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{4})));  // 1 page needs 256 + 256 bytes
  must(m, Free{IdUnit::pages, {2, 4}});  // holes: full 2, 4; SWA 8, 10
  const Allocated a = must_as<Allocated>(m, Alloc{2 * 4});  // both from holes, no gap needed
  const PoolTables t = *m.tables();
  EXPECT_EQ(t.sides[0].v2p[a.pages[0]], 2);
  EXPECT_EQ(t.sides[0].v2p[a.pages[1]], 4);
  EXPECT_EQ(t.sides[1].v2p[a.pages[0]], 8);
  EXPECT_EQ(t.sides[1].v2p[a.pages[1]], 10);
  EXPECT_EQ(t.sides[0].watermark, 6);
  EXPECT_EQ(t.sides[1].watermark, 6);
  EXPECT_TRUE(std::holds_alternative<NoRoom>(must(m, Alloc{4})));  // the gap is still 256 bytes
}

}  // namespace
}  // namespace kvtwin::sim
