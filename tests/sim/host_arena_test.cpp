// Units for the host arena's rules (SPEC.md section 8, docs/host_arena.md), one named test per
// rule, each refusal checked to leave the whole table snapshot unchanged; then a RapidCheck
// sequence property that plays random operations against the arena and a tiny shadow written
// here from SPEC 8's words (only the live logical ids per side, the leases and the pending
// transfers; fit or no room predicted by arithmetic), calling verify() after every step.
//
// RapidCheck prints its seed first and, on a failure, the RC_PARAMS="reproduce=..." that replays
// it; the failure message lists the operations played, in trace-like syntax.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/check.h"
#include "sim/host_arena.h"

namespace kvtwin::sim {
namespace {

using Ids = std::vector<std::int64_t>;

HostArena arena_of(std::uint64_t total_bytes, std::vector<HostSideConfig> sides, bool with_bytes = false) {
  Result<HostArena> arena = HostArena::create(HostArenaConfig{total_bytes, std::move(sides), with_bytes});
  if (!arena.ok()) ADD_FAILURE() << arena.error().message;
  return std::move(arena).value();
}

// One side of 64-byte pages (page_size 4, E 16): `pages` host pages.
HostArena single(std::int64_t pages) { return arena_of(static_cast<std::uint64_t>(pages) * 64, {{"full", 4, 16}}); }

// full (up) and swa (down), both 64-byte pages: `pages` host pages per side's numbering.
HostArena composite(std::int64_t pages, bool with_bytes = false) {
  return arena_of(static_cast<std::uint64_t>(pages) * 64, {{"full", 4, 16}, {"swa", 4, 16}}, with_bytes);
}

HostAllocated allocated(HostArena& a, std::vector<std::uint64_t> pages, HostThreadId thread = 0) {
  HostAllocated none;  // what a failed call returns, so that the caller's indexing stays in bounds
  none.logical.resize(a.side_count());
  none.physical.resize(a.side_count());
  Result<HostAllocOutcome> r = a.alloc_many(thread, pages);
  if (!r.ok()) {
    ADD_FAILURE() << r.error().message;
    return none;
  }
  if (const auto* no_room = std::get_if<HostNoRoom>(&*r)) {
    ADD_FAILURE() << "no room: " << no_room->why;
    return none;
  }
  EXPECT_TRUE(a.verify().ok()) << a.verify().error().message;
  return std::get<HostAllocated>(*r);
}

void must(const Status& s) { ASSERT_TRUE(s.ok()) << s.error().message; }

// The call fails with `kind` and leaves every table as it was.
template <class F>
Error refused_unchanged(HostArena& a, ErrorKind kind, F call) {
  const HostArenaTables before = a.tables();
  const auto r = call();
  EXPECT_FALSE(r.ok());
  if (r.ok()) return {};
  EXPECT_EQ(error_kind_name(r.error().kind), error_kind_name(kind)) << r.error().message;
  EXPECT_EQ(a.tables(), before);
  EXPECT_TRUE(a.verify().ok());
  return r.error();
}

bool mentions(const Error& e, const std::string& text) { return e.message.find(text) != std::string::npos; }

// ---------------------------------------------------------------- sizing

TEST(HostArena, PageNumIsTotalOverTheLargestPageAndTheSidesStartAtOppositeEnds) {
  // full page 4 * 16 = 64 bytes, swa page 4 * 8 = 32 bytes: page_num = 650 // 64 = 10.
  HostArena a = arena_of(650, {{"full", 4, 16}, {"swa", 4, 8}});
  const HostArenaTables t = a.tables();
  EXPECT_EQ(t.page_num, 10);
  ASSERT_EQ(t.sides.size(), 2u);
  EXPECT_TRUE(t.sides[0].grows_up);
  EXPECT_FALSE(t.sides[1].grows_up);
  EXPECT_EQ(t.sides[0].page_bytes, 64u);
  EXPECT_EQ(t.sides[1].page_bytes, 32u);
  EXPECT_EQ(t.sides[0].watermark, 0);  // up: [0, wm)
  EXPECT_EQ(t.sides[1].watermark, 9);  // down: (wm, page_num - 1]
  for (const HostSideTables& s : t.sides) {
    EXPECT_EQ(s.free_extents, (std::vector<HostExtent>{{0, 10}}));  // no sink: every id is free
    EXPECT_TRUE(s.holes.empty());
    EXPECT_EQ(s.logical_to_physical, Ids(10, -1));
  }
  // Between the up frontier (0) and the down frontier ((9 + 1) * 32).
  EXPECT_EQ(a.gap_bytes(), 320u);
  EXPECT_TRUE(a.verify().ok());
}

TEST(HostArena, BadSizesAreErrorsThatSayWhatToChange) {
  Result<HostArena> none = HostArena::create(HostArenaConfig{640, {}, false});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::invalid_argument);
  Result<HostArena> three = HostArena::create(HostArenaConfig{640, {{"a", 1, 16}, {"b", 1, 16}, {"c", 1, 16}}, false});
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.error().kind, ErrorKind::invalid_argument);
  Result<HostArena> zero = HostArena::create(HostArenaConfig{640, {{"full", 0, 16}}, false});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("'full'"), std::string::npos) << zero.error().message;
  Result<HostArena> small = HostArena::create(HostArenaConfig{63, {{"full", 4, 16}}, false});
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().kind, ErrorKind::sizing);
  EXPECT_NE(small.error().message.find("increase total_bytes to at least 64"), std::string::npos)
      << small.error().message;
  Result<HostArena> huge = HostArena::create(HostArenaConfig{640, {{"full", UINT64_MAX, 16}}, false});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().kind, ErrorKind::overflow);
}

// ---------------------------------------------------------------- alloc_many

TEST(HostArena, LogicalIdsAreTakenLowestFirst) {
  HostArena a = single(10);
  EXPECT_EQ(allocated(a, {3}).logical[0], (Ids{0, 1, 2}));
  EXPECT_EQ(allocated(a, {3}).logical[0], (Ids{3, 4, 5}));
  must(a.free(0, {1, 4}));
  EXPECT_EQ(a.tables().sides[0].free_extents, (std::vector<HostExtent>{{1, 2}, {4, 5}, {6, 10}}));
  // Lowest first across the extents: 1, 4, then 6.
  EXPECT_EQ(allocated(a, {3}).logical[0], (Ids{1, 4, 6}));
}

TEST(HostArena, UpSideTakesHolesAscendingThenExtendsTheWatermark) {
  HostArena a = single(10);
  EXPECT_EQ(allocated(a, {6}).physical[0], (Ids{0, 1, 2, 3, 4, 5}));
  must(a.free(0, {3, 1}));  // physical 3 and 1 become holes; the frontier page 5 is live
  EXPECT_EQ(a.tables().sides[0].holes, (Ids{1, 3}));
  EXPECT_EQ(a.tables().sides[0].watermark, 6);
  const HostAllocated got = allocated(a, {3});
  EXPECT_FALSE(got.compacted);
  EXPECT_EQ(got.logical[0], (Ids{1, 3, 6}));
  EXPECT_EQ(got.physical[0], (Ids{1, 3, 6}));  // holes ascending, then wm
  EXPECT_EQ(a.tables().sides[0].watermark, 7);
  EXPECT_TRUE(a.tables().sides[0].holes.empty());
}

TEST(HostArena, DownSideTakesHolesDescendingThenExtendsTheWatermarkDownward) {
  HostArena a = composite(10);
  EXPECT_EQ(allocated(a, {0, 6}).physical[1], (Ids{9, 8, 7, 6, 5, 4}));
  EXPECT_EQ(a.tables().sides[1].watermark, 3);
  must(a.free(1, {1, 3}));  // physical 8 and 6
  EXPECT_EQ(a.tables().sides[1].holes, (Ids{6, 8}));
  const HostAllocated got = allocated(a, {0, 3});
  EXPECT_FALSE(got.compacted);
  EXPECT_EQ(got.logical[1], (Ids{1, 3, 6}));
  EXPECT_EQ(got.physical[1], (Ids{8, 6, 3}));  // holes descending, then wm, wm - 1, ...
  EXPECT_EQ(a.tables().sides[1].watermark, 2);
  EXPECT_TRUE(a.tables().sides[0].logical_to_physical == Ids(10, -1));
}

TEST(HostArena, AllocManyOfNothingChangesNothing) {
  HostArena a = composite(4);
  const HostArenaTables before = a.tables();
  const HostAllocated got = allocated(a, {0, 0});
  EXPECT_EQ(got.logical, (std::vector<Ids>{{}, {}}));
  EXPECT_EQ(a.tables(), before);
}

TEST(HostArena, AllocManyWithTheWrongNumberOfCountsIsAnError) {
  HostArena a = composite(4);
  const Error e = refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.alloc_many(0, {1}); });
  EXPECT_TRUE(mentions(e, "one page count per side")) << e.message;
}

// SPEC 8 (and SPEC 10, bug 14): a request one side can take and the other cannot is refused as a
// whole; nothing of it is left behind.
TEST(HostArena, NoRoomIsAllOrNothingAndChangesNothing) {
  HostArena a = composite(10);
  allocated(a, {3, 4});  // gap left: (5 + 1) * 64 - 3 * 64 = 192 bytes, 3 pages
  must(a.free(0, {0}));  // a hole on the full side
  const HostArenaTables before = a.tables();
  // full alone fits (the hole and 2 from the gap), swa's 2 more do not: 6 pages needed beyond
  // holes' 1, even packed (live 2 + 4, request 3 + 2: 11 > 10).
  Result<HostAllocOutcome> r = a.alloc_many(0, {3, 2});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(std::holds_alternative<HostNoRoom>(*r));
  EXPECT_TRUE(std::get<HostNoRoom>(*r).why.find("even once packed") != std::string::npos);
  EXPECT_EQ(a.tables(), before);
  EXPECT_TRUE(a.verify().ok());
}

TEST(HostArena, NoRoomWhenASideRunsOutOfLogicalIdsEvenWithBytesLeft) {
  // full pages of 32 bytes, swa of 64: page_num = 640 // 64 = 10, so full has 10 ids (320 bytes).
  HostArena a = arena_of(640, {{"full", 2, 16}, {"swa", 4, 16}});
  allocated(a, {10, 0});
  EXPECT_EQ(a.gap_bytes(), 320u);  // bytes are left ...
  const HostArenaTables before = a.tables();
  Result<HostAllocOutcome> r = a.alloc_many(0, {1, 0});  // ... but no full logical id
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(std::holds_alternative<HostNoRoom>(*r));
  EXPECT_TRUE(std::get<HostNoRoom>(*r).why.find("0 free logical ids") != std::string::npos)
      << std::get<HostNoRoom>(*r).why;
  EXPECT_EQ(a.tables(), before);
  EXPECT_EQ(allocated(a, {0, 5}).logical[1], (Ids{0, 1, 2, 3, 4}));  // swa still has the bytes
}

// The worked example of docs/host_arena.md: holes that do not leave room as the arena stands
// but do once packed.
HostArena fragmented_composite() {
  HostArena a = composite(10);
  allocated(a, {4, 4});  // full l0-3 -> p0-3 (wm 4); swa l0-3 -> p9-6 (wm 5)
  must(a.free(0, {0, 2}));  // full holes p0, p2; frontier p3 live
  must(a.free(1, {1}));     // swa hole p8
  return a;
}

TEST(HostArena, HolesThatFitAreUsedWithoutCompacting) {
  HostArena a = fragmented_composite();
  // Beyond holes: full 3 - 2 = 1 page, swa 2 - 1 = 1 page: 128 bytes, the gap is 128.
  const HostAllocated got = allocated(a, {3, 2});
  EXPECT_FALSE(got.compacted);
  EXPECT_TRUE(got.moves.empty());
  EXPECT_EQ(got.physical[0], (Ids{0, 2, 4}));
  EXPECT_EQ(got.physical[1], (Ids{8, 5}));
}

TEST(HostArena, CompactsOnlyWhenTheRequestFitsOnlyOncePackedAndKeepsLogicalIds) {
  HostArena a = fragmented_composite();
  // full live l1 @ p1, l3 @ p3; swa live l0 @ p9, l2 @ p7, l3 @ p6. As it stands: 5 - 2 = 3 full
  // pages beyond the holes, 192 bytes > gap 128. Packed: gap (10 - 3) * 64 - 2 * 64 = 320 = 5 pages.
  const HostAllocated got = allocated(a, {5, 0});
  EXPECT_TRUE(got.compacted);
  // Live pages packed against each side's end in physical order: full ascending to 0, 1; swa
  // descending to 9, 8, 7 (p9 stays).
  EXPECT_EQ(got.moves, (std::vector<HostPageMove>{{0, 1, 0}, {0, 3, 1}, {1, 7, 8}, {1, 6, 7}}));
  const HostArenaTables t = a.tables();
  // Logical ids unchanged; their physical pages moved.
  EXPECT_EQ(t.sides[0].logical_to_physical[1], 0);
  EXPECT_EQ(t.sides[0].logical_to_physical[3], 1);
  EXPECT_EQ(t.sides[1].logical_to_physical[0], 9);
  EXPECT_EQ(t.sides[1].logical_to_physical[2], 8);
  EXPECT_EQ(t.sides[1].logical_to_physical[3], 7);
  // Then the allocation: lowest free ids, from the packed watermark.
  EXPECT_EQ(got.logical[0], (Ids{0, 2, 4, 5, 6}));
  EXPECT_EQ(got.physical[0], (Ids{2, 3, 4, 5, 6}));
  EXPECT_EQ(t.sides[0].watermark, 7);
  EXPECT_EQ(t.sides[1].watermark, 6);
  EXPECT_TRUE(t.sides[0].holes.empty());
  EXPECT_TRUE(t.sides[1].holes.empty());
  EXPECT_EQ(a.gap_bytes(), 0u);
}

TEST(HostArena, CompactionWithNothingToAllocateOnASideStillPacksIt) {
  HostArena a = fragmented_composite();
  const HostAllocated got = allocated(a, {0, 4});  // swa: 4 - 1 = 3 beyond its hole > 2 in the gap
  EXPECT_TRUE(got.compacted);
  EXPECT_EQ(got.moves, (std::vector<HostPageMove>{{0, 1, 0}, {0, 3, 1}, {1, 7, 8}, {1, 6, 7}}));
  EXPECT_EQ(got.physical[1], (Ids{6, 5, 4, 3}));
}

// ---------------------------------------------------------------- free

TEST(HostArena, FreeTwiceIsAnErrorAndChangesNothing) {
  HostArena a = single(10);
  allocated(a, {4});
  must(a.free(0, {2}));
  const Error e = refused_unchanged(a, ErrorKind::double_free, [&] { return a.free(0, {1, 2}); });
  EXPECT_TRUE(mentions(e, "host ids 2: not allocated")) << e.message;
  EXPECT_EQ(a.tables().sides[0].logical_to_physical[1], 1);  // 1 was not freed either
}

TEST(HostArena, FreeOfAnIdNeverAllocatedIsAnErrorAndChangesNothing) {
  HostArena a = composite(10);
  allocated(a, {4, 2});
  refused_unchanged(a, ErrorKind::double_free, [&] { return a.free(1, {0, 5}); });
  refused_unchanged(a, ErrorKind::out_of_range, [&] { return a.free(0, {0, 10}); });
  refused_unchanged(a, ErrorKind::out_of_range, [&] { return a.free(0, {-1, 0}); });
  refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.free(2, {0}); });
}

TEST(HostArena, APageNamedTwiceInOneFreeIsFreedOnce) {
  HostArena a = single(10);
  allocated(a, {3});
  must(a.free(0, {1, 1}));  // as SPEC 4's device free: sorted unique
  EXPECT_EQ(a.tables().sides[0].live_pages, 2u);
  EXPECT_TRUE(a.verify().ok());
}

TEST(HostArena, FreeMergesLogicalExtents) {
  HostArena a = single(10);
  allocated(a, {10});
  must(a.free(0, {5}));
  must(a.free(0, {3}));
  EXPECT_EQ(a.tables().sides[0].free_extents, (std::vector<HostExtent>{{3, 4}, {5, 6}}));
  must(a.free(0, {4}));
  EXPECT_EQ(a.tables().sides[0].free_extents, (std::vector<HostExtent>{{3, 6}}));
  must(a.free(0, {0, 9, 6}));
  EXPECT_EQ(a.tables().sides[0].free_extents, (std::vector<HostExtent>{{0, 1}, {3, 7}, {9, 10}}));
}

TEST(HostArena, FreeMovesTheWatermarkBackPastAdjacentHoles) {
  HostArena a = single(10);
  allocated(a, {6});  // p0-5, wm 6
  must(a.free(0, {2}));
  EXPECT_EQ(a.tables().sides[0].watermark, 6);  // p2 is a hole inside the band
  must(a.free(0, {4}));
  EXPECT_EQ(a.tables().sides[0].watermark, 6);  // p5 still live
  must(a.free(0, {5}));
  EXPECT_EQ(a.tables().sides[0].watermark, 4);  // back past p5 and the hole p4
  EXPECT_EQ(a.tables().sides[0].holes, (Ids{2}));
  must(a.free(0, {3}));
  EXPECT_EQ(a.tables().sides[0].watermark, 2);  // back past p3 and the hole p2
  EXPECT_TRUE(a.tables().sides[0].holes.empty());
}

TEST(HostArena, FreeMovesTheDownWatermarkBackPastAdjacentHoles) {
  HostArena a = composite(10);
  allocated(a, {0, 5});  // swa l0-4 -> p9-5, wm 4
  must(a.free(1, {3}));  // p6
  must(a.free(1, {4}));  // p5: back past it and the hole p6
  EXPECT_EQ(a.tables().sides[1].watermark, 6);
  EXPECT_TRUE(a.tables().sides[1].holes.empty());
  must(a.free(1, {0, 1, 2}));
  EXPECT_EQ(a.tables().sides[1].watermark, 9);
}

// ---------------------------------------------------------------- leases and transfers

TEST(HostArena, LeasesArePerThreadAndReentrant) {
  HostArena a = single(4);
  allocated(a, {2});
  a.acquire(1);
  a.acquire(1);  // nested: deepens
  a.acquire(2);
  EXPECT_EQ(a.lease_depth(1), 2u);
  EXPECT_EQ(a.lease_depth(2), 1u);
  must(a.release(1));
  ASSERT_TRUE(a.resolve(1, 0, 1).ok());  // still inside the outer lease
  EXPECT_EQ(*a.resolve(1, 0, 1), 1);
  must(a.release(1));
  EXPECT_EQ(a.lease_depth(1), 0u);
  EXPECT_EQ(a.tables().leases, (std::vector<std::pair<HostThreadId, std::uint64_t>>{{2, 1}}));
}

TEST(HostArena, ReleaseWithoutAcquireIsAnError) {
  HostArena a = single(4);
  a.acquire(1);
  const Error e = refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.release(2); });
  EXPECT_TRUE(mentions(e, "thread 2, which holds none")) << e.message;
  must(a.release(1));
  refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.release(1); });
}

TEST(HostArena, ResolveOutsideALeaseIsAnError) {
  HostArena a = single(4);
  allocated(a, {2});
  Result<std::int64_t> outside = a.resolve(1, 0, 0);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().kind, ErrorKind::invalid_argument);
  EXPECT_TRUE(mentions(outside.error(), "outside a lease")) << outside.error().message;
  a.acquire(2);  // another thread's lease does not cover thread 1
  EXPECT_FALSE(a.resolve(1, 0, 0).ok());
  EXPECT_TRUE(a.resolve(2, 0, 0).ok());
  // Inside a lease: an id not allocated, or outside the table, is still an error.
  EXPECT_EQ(a.resolve(2, 0, 3).error().kind, ErrorKind::invalid_argument);
  EXPECT_EQ(a.resolve(2, 0, 4).error().kind, ErrorKind::out_of_range);
}

TEST(HostArena, CompactionByAThreadHoldingALeaseIsAnErrorAndChangesNothing) {
  HostArena a = fragmented_composite();
  a.acquire(7);
  const Error e = refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.alloc_many(7, {5, 0}); });
  EXPECT_TRUE(mentions(e, "would wait for its own")) << e.message;
  // An allocation that needs no compaction is fine under the lease.
  EXPECT_FALSE(allocated(a, {3, 2}, 7).compacted);
}

TEST(HostArena, CompactionWhileAnotherThreadHoldsALeaseRefusesSayingItWouldWait) {
  HostArena a = fragmented_composite();
  a.acquire(3);
  a.acquire(3);
  const Error e = refused_unchanged(a, ErrorKind::reader_conflict, [&] { return a.alloc_many(1, {5, 0}); });
  EXPECT_TRUE(mentions(e, "would have to wait for the leases held by thread(s) 3 (depth 2)")) << e.message;
  must(a.release(3));
  refused_unchanged(a, ErrorKind::reader_conflict, [&] { return a.alloc_many(1, {5, 0}); });
  must(a.release(3));
  EXPECT_TRUE(allocated(a, {5, 0}, 1).compacted);
}

TEST(HostArena, CompactionWhileATransferIsPendingRefuses) {
  HostArena a = fragmented_composite();
  a.record_pending_transfer();
  const Error e = refused_unchanged(a, ErrorKind::reader_conflict, [&] { return a.alloc_many(1, {5, 0}); });
  EXPECT_TRUE(mentions(e, "1 recorded transfer event(s) still in flight")) << e.message;
  must(a.complete_transfer());
  refused_unchanged(a, ErrorKind::invalid_argument, [&] { return a.complete_transfer(); });
  EXPECT_TRUE(allocated(a, {5, 0}, 1).compacted);
}

TEST(HostArena, NoRoomIsReportedEvenUnderALease) {
  HostArena a = composite(4);
  allocated(a, {2, 2});
  a.acquire(1);
  Result<HostAllocOutcome> r = a.alloc_many(1, {1, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::holds_alternative<HostNoRoom>(*r));
}

// ---------------------------------------------------------------- bytes

TEST(HostArena, BytesFollowTheirLogicalPageThroughCompaction) {
  HostArena a = composite(10, /*with_bytes=*/true);
  allocated(a, {4, 4});
  a.acquire(1);
  // Never all zeros: page (side, l) is filled with 1 + 16 * side + l, offset by the byte index.
  auto pattern = [](std::size_t side, std::int64_t l, std::size_t i) {
    return static_cast<std::byte>(1 + 16 * side + static_cast<std::size_t>(l) + i % 7);
  };
  for (std::size_t s = 0; s < 2; ++s)
    for (std::int64_t l = 0; l < 4; ++l) {
      Result<std::span<std::byte>> page = a.page_bytes(1, s, l);
      ASSERT_TRUE(page.ok()) << page.error().message;
      ASSERT_EQ(page->size(), 64u);
      for (std::size_t i = 0; i < page->size(); ++i) (*page)[i] = pattern(s, l, i);
    }
  must(a.release(1));
  must(a.free(0, {0, 2}));
  must(a.free(1, {1}));
  ASSERT_TRUE(allocated(a, {5, 0}).compacted);
  a.acquire(1);
  for (const auto& [s, l] : std::vector<std::pair<std::size_t, std::int64_t>>{{0, 1}, {0, 3}, {1, 0}, {1, 2}, {1, 3}}) {
    Result<std::span<std::byte>> page = a.page_bytes(1, s, l);
    ASSERT_TRUE(page.ok());
    for (std::size_t i = 0; i < page->size(); ++i)
      ASSERT_EQ((*page)[i], pattern(s, l, i)) << "side " << s << " logical " << l << " byte " << i;
  }
  must(a.release(1));
  EXPECT_FALSE(a.page_bytes(1, 0, 1).ok());  // outside a lease
}

TEST(HostArena, PageBytesNeedAnArenaWithBytes) {
  HostArena a = single(4);
  allocated(a, {1});
  a.acquire(1);
  Result<std::span<std::byte>> page = a.page_bytes(1, 0, 0);
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.error().kind, ErrorKind::unsupported);
}

// ---------------------------------------------------------------- verify

TEST(HostArena, VerifyNoticesEachBrokenInvariant) {
  auto broken = [](auto corrupt, const std::string& expected) {
    HostArena a = fragmented_composite();
    ASSERT_TRUE(a.verify().ok());
    corrupt(a);
    const Status s = a.verify();
    ASSERT_FALSE(s.ok()) << expected;
    EXPECT_EQ(s.error().kind, ErrorKind::internal);
    EXPECT_TRUE(mentions(s.error(), expected)) << s.error().message;
  };
  broken([](HostArena& a) { a.side_for_test(0).physical_to_logical[0] = 1; }, "physical 0 -> logical 1 does not map back");
  broken([](HostArena& a) { a.side_for_test(0).logical_to_physical[1] = 3; }, "-> logical 3");
  broken([](HostArena& a) { a.side_for_test(1).free_extents = {{1, 2}, {2, 3}, {4, 10}}; }, "sorted and merged");
  broken([](HostArena& a) { a.side_for_test(1).free_extents = {{1, 2}, {3, 10}}; }, "both free and mapped");
  broken([](HostArena& a) { a.side_for_test(0).free_extents = {{0, 1}, {4, 10}}; }, "free and");
  broken([](HostArena& a) { a.side_for_test(0).holes.erase(2); }, "the holes are not");
  broken(
      [](HostArena& a) {
        a.side_for_test(0).watermark = 5;  // holes kept consistent: only the frontier page p4 is wrong
        a.side_for_test(0).holes.insert(4);
      },
      "is a hole");
  broken([](HostArena& a) { a.side_for_test(0).live_pages = 3; }, "live_pages says");
  broken(
      [](HostArena& a) {
        HostArena::Side& s = a.side_for_test(1);  // swa l3 from p6 to p3, inside the full band [0, 4)
        s.physical_to_logical[6] = -1;
        s.physical_to_logical[3] = 3;
        s.logical_to_physical[3] = 3;
        s.watermark = 2;
        s.holes = {4, 5, 6, 8};
      },
      "band ends at byte");
  broken(
      [](HostArena& a) {
        HostArena::Side& s = a.side_for_test(0);  // move l3 from p3 to p9: outside the band
        s.physical_to_logical[3] = -1;
        s.physical_to_logical[9] = 3;
        s.logical_to_physical[3] = 9;
      },
      "outside the band");
}

// ---------------------------------------------------------------- the sequence property

// Operations in trace-like syntax. Free picks ids among the live ones (pick % live count) and may
// add one stray id, which may be live, free, negative or past the table.
struct AllocOp {
  HostThreadId thread = 0;
  std::vector<std::uint64_t> pages;
};
struct FreeOp {
  std::size_t side = 0;
  std::vector<std::uint64_t> picks;
  bool stray = false;
  std::int64_t stray_id = 0;
};
struct AcquireOp {
  HostThreadId thread = 0;
};
struct ReleaseOp {
  HostThreadId thread = 0;
};
struct ResolveOp {
  HostThreadId thread = 0;
  std::size_t side = 0;
  std::uint64_t pick = 0;
};
// Asks side `side` for as many pages as the shadow says fit once packed (0 on the other side):
// the request that needs a compaction whenever the other side has holes. Played as an AllocOp.
struct FillOp {
  HostThreadId thread = 0;
  std::size_t side = 0;
};
struct RecordTransferOp {};
struct CompleteTransferOp {};
using Op = std::variant<AllocOp, FillOp, FreeOp, AcquireOp, ReleaseOp, ResolveOp, RecordTransferOp, CompleteTransferOp>;

std::string list_text(const auto& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out + "]";
}

std::string op_text(const Op& op) {
  struct Show {
    std::string operator()(const AllocOp& o) const {
      return R"({"op":"host_alloc","thread":)" + std::to_string(o.thread) + R"(,"pages":)" + list_text(o.pages) + "}";
    }
    std::string operator()(const FreeOp& o) const {
      return R"({"op":"host_free","side":)" + std::to_string(o.side) + R"(,"picks":)" + list_text(o.picks) +
             (o.stray ? R"(,"stray":)" + std::to_string(o.stray_id) : std::string()) + "}";
    }
    std::string operator()(const AcquireOp& o) const {
      return R"({"op":"lease","thread":)" + std::to_string(o.thread) + "}";
    }
    std::string operator()(const ReleaseOp& o) const {
      return R"({"op":"release","thread":)" + std::to_string(o.thread) + "}";
    }
    std::string operator()(const ResolveOp& o) const {
      return R"({"op":"resolve","thread":)" + std::to_string(o.thread) + R"(,"side":)" + std::to_string(o.side) +
             R"(,"pick":)" + std::to_string(o.pick) + "}";
    }
    std::string operator()(const FillOp& o) const {
      return R"({"op":"host_fill","thread":)" + std::to_string(o.thread) + R"(,"side":)" + std::to_string(o.side) + "}";
    }
    std::string operator()(const RecordTransferOp&) const { return R"({"op":"record_transfer"})"; }
    std::string operator()(const CompleteTransferOp&) const { return R"({"op":"complete_transfer"})"; }
  };
  return std::visit(Show{}, op);
}

void showValue(const Op& op, std::ostream& os) { os << op_text(op); }

struct ArenaCase {
  std::uint64_t total_bytes = 0;
  std::vector<HostSideConfig> sides;
};

void showValue(const ArenaCase& c, std::ostream& os) {
  os << "total_bytes " << c.total_bytes;
  for (const HostSideConfig& s : c.sides) os << ", " << s.name << " page_size " << s.page_size << " E " << s.entry_bytes;
}

// The shadow: SPEC 8 in as few words as possible. Only which logical ids are live per side,
// the lease depths and the pending transfers; its page count and page bytes computed here.
struct Shadow {
  std::int64_t page_num = 0;
  std::vector<std::uint64_t> page_bytes;
  std::vector<std::set<std::int64_t>> live;
  std::map<HostThreadId, std::uint64_t> leases;
  std::uint64_t pending = 0;

  std::uint64_t free_ids(std::size_t s) const { return static_cast<std::uint64_t>(page_num) - live[s].size(); }

  // SPEC 8: "the live plus the requested pages would fit once packed". Packed, the up side uses
  // bytes [0, live_up * pb_up), the down side [(page_num - live_down) * pb_down, page_num * pb_down).
  bool fits_packed(const std::vector<std::uint64_t>& k) const {
    const std::uint64_t n = static_cast<std::uint64_t>(page_num);
    const auto total_live = [&](std::size_t s) { return live[s].size() + k[s]; };
    for (std::size_t s = 0; s < live.size(); ++s)
      if (k[s] > free_ids(s)) return false;
    if (live.size() == 1) return true;  // one side: ids and pages are the same count
    return total_live(0) * page_bytes[0] + total_live(1) * page_bytes[1] <= n * page_bytes[1];
  }

  // The k lowest ids not live (SPEC 8: lowest first).
  std::vector<std::int64_t> lowest_free(std::size_t s, std::uint64_t k) const {
    std::vector<std::int64_t> ids;
    for (std::int64_t l = 0; l < page_num && ids.size() < k; ++l)
      if (!live[s].count(l)) ids.push_back(l);
    return ids;
  }
};

// Whether `k` fits as the arena stands, from its own tables: holes first, the rest from the gap.
bool fits_as_tables_stand(const HostArenaTables& t, const std::vector<std::uint64_t>& k) {
  const auto& up = t.sides.front();
  const std::uint64_t up_end = static_cast<std::uint64_t>(up.watermark) * up.page_bytes;
  const std::uint64_t down_begin = t.sides.size() == 2
                                       ? static_cast<std::uint64_t>(t.sides[1].watermark + 1) * t.sides[1].page_bytes
                                       : static_cast<std::uint64_t>(t.page_num) * up.page_bytes;
  std::uint64_t needed = 0;
  for (std::size_t s = 0; s < t.sides.size(); ++s) {
    const std::uint64_t from_holes = std::min<std::uint64_t>(k[s], t.sides[s].holes.size());
    needed += (k[s] - from_holes) * t.sides[s].page_bytes;
  }
  return needed <= down_begin - up_end;
}

// The physical pages SPEC 8 says an allocation without compaction takes: holes first (up
// ascending, down descending), then the watermark outward.
std::vector<std::int64_t> expected_pages(const HostSideTables& s, std::uint64_t k) {
  std::vector<std::int64_t> pages = s.holes;
  if (!s.grows_up) std::reverse(pages.begin(), pages.end());
  if (pages.size() > k) pages.resize(k);
  for (std::int64_t next = s.watermark; pages.size() < k; next += s.grows_up ? 1 : -1) pages.push_back(next);
  return pages;
}

rc::Gen<Op> op_gen(std::int64_t page_num, std::size_t sides) {
  using namespace rc;
  const auto thread = gen::inRange<HostThreadId>(1, 3);
  // Small requests and frees of several pages, so that holes build up and compaction is needed.
  // A side's count is often 0, so that one side's holes stand while the other side grows.
  const auto count = gen::weightedOneOf<std::uint64_t>(
      {{1, gen::just<std::uint64_t>(0)},
       {2, gen::resize(kNominalSize, gen::inRange<std::uint64_t>(0, static_cast<std::uint64_t>(page_num) / 3 + 3))}});
  const auto side = gen::inRange<std::size_t>(0, sides);
  return gen::weightedOneOf<Op>({
      {8, gen::map(gen::tuple(thread, gen::container<std::vector<std::uint64_t>>(sides, count)),
                   [](const auto& t) { return Op{AllocOp{std::get<0>(t), std::get<1>(t)}}; })},
      {6, gen::map(gen::tuple(side, gen::container<std::vector<std::uint64_t>>(gen::resize(kNominalSize, gen::arbitrary<std::uint64_t>())),
                              gen::weightedElement<bool>({{5, false}, {1, true}}),
                              gen::inRange<std::int64_t>(-1, page_num + 1)),
                   [](const auto& t) {
                     auto picks = std::get<1>(t);
                     if (picks.size() > 6) picks.resize(6);
                     return Op{FreeOp{std::get<0>(t), picks, std::get<2>(t), std::get<3>(t)}};
                   })},
      {1, gen::map(thread, [](HostThreadId t) { return Op{AcquireOp{t}}; })},
      {3, gen::map(thread, [](HostThreadId t) { return Op{ReleaseOp{t}}; })},
      {2, gen::map(gen::tuple(thread, side, gen::arbitrary<std::uint64_t>()),
                   [](const auto& t) { return Op{ResolveOp{std::get<0>(t), std::get<1>(t), std::get<2>(t)}}; })},
      {3, gen::map(gen::tuple(thread, side), [](const auto& t) { return Op{FillOp{std::get<0>(t), std::get<1>(t)}}; })},
      {1, gen::just(Op{RecordTransferOp{}})},
      {2, gen::just(Op{CompleteTransferOp{}})},
  });
}

rc::Gen<ArenaCase> case_gen() {
  using namespace rc;
  return gen::exec([] {
    ArenaCase c;
    const std::size_t sides = *gen::weightedElement<std::size_t>({{1, 1}, {3, 2}});
    const char* names[] = {"full", "swa"};
    std::uint64_t max_page = 0;
    for (std::size_t s = 0; s < sides; ++s) {
      HostSideConfig side{names[s], *gen::element<std::uint64_t>(1, 2, 4), *gen::element<std::uint64_t>(16, 32, 48)};
      max_page = std::max(max_page, side.page_size * side.entry_bytes);
      c.sides.push_back(side);
    }
    const std::uint64_t page_num = *gen::weightedOneOf<std::uint64_t>(
        {{1, gen::inRange<std::uint64_t>(1, 4)}, {4, gen::resize(kNominalSize, gen::inRange<std::uint64_t>(4, 17))}});
    c.total_bytes = page_num * max_page + *gen::inRange<std::uint64_t>(0, max_page);
    return c;
  });
}

RC_GTEST_PROP(HostArenaProps, EveryStepAgreesWithTheShadowAndVerifies, ()) {
  // A broken always-on check inside the arena fails the case (and shrinks it) instead of
  // aborting the run.
  const InvariantScope invariants_throw;
  const ArenaCase arena_case = *case_gen();
  Result<HostArena> built = HostArena::create(HostArenaConfig{arena_case.total_bytes, arena_case.sides, false});
  RC_ASSERT(built.ok());
  HostArena arena = std::move(built).value();

  Shadow shadow;
  std::uint64_t max_page = 0;
  for (const HostSideConfig& s : arena_case.sides) {
    shadow.page_bytes.push_back(s.page_size * s.entry_bytes);
    max_page = std::max(max_page, s.page_size * s.entry_bytes);
  }
  shadow.page_num = static_cast<std::int64_t>(arena_case.total_bytes / max_page);
  shadow.live.resize(arena_case.sides.size());
  RC_ASSERT(arena.page_num() == shadow.page_num);

  // Up to 300 operations a case (three times the size), so that arenas fill, fragment and compact.
  const auto ops = *rc::gen::scale(3.0, rc::gen::container<std::vector<Op>>(op_gen(shadow.page_num, arena_case.sides.size())));
  std::string played;
  // What the case exercised, printed as RapidCheck's distribution of tags.
  bool saw_compaction = false, saw_refused_compaction = false, saw_no_room = false, saw_refused_free = false;
  for (std::size_t step = 0; step < ops.size(); ++step) {
    Op op = ops[step];
    played += "  " + op_text(op);
    if (const auto* fill = std::get_if<FillOp>(&op)) {
      std::vector<std::uint64_t> pages(shadow.live.size(), 0);
      for (std::uint64_t k = shadow.free_ids(fill->side); k > 0; --k) {
        pages[fill->side] = k;
        if (shadow.fits_packed(pages)) break;
        pages[fill->side] = 0;
      }
      op = AllocOp{fill->thread, pages};
      played += " as " + op_text(op);
    }
    played += "\n";
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) RC_FAIL("step " + std::to_string(step) + ": " + what + "\noperations played:\n" + played);
    };
    const HostArenaTables before = arena.tables();

    if (const auto* o = std::get_if<AllocOp>(&op)) {
      Result<HostAllocOutcome> r = arena.alloc_many(o->thread, o->pages);
      if (!shadow.fits_packed(o->pages)) {
        expect(r.ok() && std::holds_alternative<HostNoRoom>(*r), "the shadow says no room even once packed");
        saw_no_room = true;
        expect(arena.tables() == before, "no room changed the tables");
      } else if (!r.ok()) {
        // Refused only for a compaction that would wait: the request did not fit as it stood,
        // and a lease or a transfer is open; the caller's own lease is an invalid argument.
        expect(!fits_as_tables_stand(before, o->pages), "refused a request that fits without compaction: " +
                                                            r.error().message);
        const bool own = shadow.leases.count(o->thread) > 0;
        const bool others = shadow.leases.size() > (own ? 1u : 0u) || shadow.pending > 0;
        expect(own ? r.error().kind == ErrorKind::invalid_argument
                   : others && r.error().kind == ErrorKind::reader_conflict,
               "refused for the wrong reason: " + r.error().message);
        expect(arena.tables() == before, "a refused alloc_many changed the tables");
        saw_refused_compaction = true;
      } else {
        expect(std::holds_alternative<HostAllocated>(*r), "no room where the shadow says it fits packed");
        const HostAllocated& got = std::get<HostAllocated>(*r);
        const bool as_is = fits_as_tables_stand(before, o->pages);
        expect(got.compacted == !as_is, "compacted " + std::to_string(got.compacted) + " where fitting as is was " +
                                            std::to_string(as_is));
        if (got.compacted) expect(shadow.leases.empty() && shadow.pending == 0, "compacted under a lease or a transfer");
        saw_compaction = saw_compaction || got.compacted;
        const HostArenaTables after = arena.tables();
        for (std::size_t s = 0; s < shadow.live.size(); ++s) {
          expect(got.logical[s] == shadow.lowest_free(s, o->pages[s]), "side " + std::to_string(s) +
                                                                            " did not take the lowest free ids");
          if (!got.compacted) {
            expect(got.physical[s] == expected_pages(before.sides[s], o->pages[s]),
                   "side " + std::to_string(s) + " did not take holes first, then the watermark");
          } else {
            // Packed, then extended from the packed watermark: no holes; the band is the live pages.
            const std::uint64_t live = shadow.live[s].size() + o->pages[s];
            expect(after.sides[s].holes.empty(), "holes left after a compaction");
            expect(after.sides[s].watermark == (after.sides[s].grows_up ? static_cast<std::int64_t>(live)
                                                                        : shadow.page_num - 1 -
                                                                              static_cast<std::int64_t>(live)),
                   "side " + std::to_string(s) + " is not packed against its end");
          }
          // Logical ids unchanged: every id live before is live after.
          for (std::int64_t l : shadow.live[s]) expect(after.sides[s].logical_to_physical[l] >= 0, "a live id was lost");
          for (std::int64_t l : got.logical[s]) shadow.live[s].insert(l);
        }
        if (!got.compacted) expect(got.moves.empty(), "moves without a compaction");
      }
    } else if (const auto* o = std::get_if<FreeOp>(&op)) {
      std::vector<std::int64_t> ids;
      const std::vector<std::int64_t> live(shadow.live[o->side].begin(), shadow.live[o->side].end());
      if (!live.empty())
        for (std::uint64_t pick : o->picks) ids.push_back(live[pick % live.size()]);
      if (o->stray) ids.push_back(o->stray_id);
      const Status r = arena.free(o->side, ids);
      const bool out_of_range = o->stray && (o->stray_id < 0 || o->stray_id >= shadow.page_num);
      const bool not_live = o->stray && !out_of_range && !shadow.live[o->side].count(o->stray_id);
      if (out_of_range || not_live) {
        expect(!r.ok() && r.error().kind == (out_of_range ? ErrorKind::out_of_range : ErrorKind::double_free),
               "a free of a stray id was not refused as it should be");
        expect(arena.tables() == before, "a refused free changed the tables");
        saw_refused_free = true;
      } else {
        expect(r.ok(), "a free of live ids failed: " + (r.ok() ? std::string() : r.error().message));
        for (std::int64_t l : ids) shadow.live[o->side].erase(l);
      }
    } else if (const auto* o = std::get_if<AcquireOp>(&op)) {
      arena.acquire(o->thread);
      ++shadow.leases[o->thread];
    } else if (const auto* o = std::get_if<ReleaseOp>(&op)) {
      const Status r = arena.release(o->thread);
      if (shadow.leases.count(o->thread) == 0) {
        expect(!r.ok() && r.error().kind == ErrorKind::invalid_argument, "release without acquire was accepted");
      } else {
        expect(r.ok(), "release of a held lease failed");
        if (--shadow.leases[o->thread] == 0) shadow.leases.erase(o->thread);
      }
    } else if (const auto* o = std::get_if<ResolveOp>(&op)) {
      const std::vector<std::int64_t> live(shadow.live[o->side].begin(), shadow.live[o->side].end());
      const std::int64_t l = live.empty() ? 0 : live[o->pick % live.size()];
      Result<std::int64_t> r = arena.resolve(o->thread, o->side, l);
      if (shadow.leases.count(o->thread) == 0 || live.empty()) {
        expect(!r.ok(), "resolve outside a lease, or of an id not allocated, was accepted");
      } else {
        expect(r.ok() && *r == before.sides[o->side].logical_to_physical[l], "resolve disagrees with the tables");
      }
    } else if (std::holds_alternative<RecordTransferOp>(op)) {
      arena.record_pending_transfer();
      ++shadow.pending;
    } else {
      const Status r = arena.complete_transfer();
      expect(r.ok() == (shadow.pending > 0), "complete_transfer disagrees with the pending count");
      if (shadow.pending > 0) --shadow.pending;
    }

    // After every step: the invariants from scratch, and the arena's ids, leases and transfers
    // are the shadow's.
    const Status verified = arena.verify();
    expect(verified.ok(), verified.ok() ? std::string() : verified.error().message);
    const HostArenaTables t = arena.tables();
    for (std::size_t s = 0; s < shadow.live.size(); ++s) {
      std::set<std::int64_t> mapped;
      for (std::int64_t l = 0; l < t.page_num; ++l)
        if (t.sides[s].logical_to_physical[l] >= 0) mapped.insert(l);
      expect(mapped == shadow.live[s], "side " + std::to_string(s) + "'s live ids differ from the shadow's");
    }
    expect(t.leases == std::vector<std::pair<HostThreadId, std::uint64_t>>(shadow.leases.begin(), shadow.leases.end()),
           "leases differ from the shadow's");
    expect(t.pending_transfers == shadow.pending, "pending transfers differ from the shadow's");
  }
  RC_TAG(arena_case.sides.size() == 2 ? "two sides" : "one side");
  if (saw_compaction) RC_TAG("compacted");
  if (saw_refused_compaction) RC_TAG("compaction refused");
  if (saw_no_room) RC_TAG("no room");
  if (saw_refused_free) RC_TAG("free refused");
}

}  // namespace
}  // namespace kvtwin::sim
