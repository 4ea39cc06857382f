// Pool sizing (SPEC.md section 3) with worked numbers: one sub-pool, the full + SWA composite
// (equal and unequal entries), and the errors.
//
// The expected numbers are derived here from SPEC 3's formulas written out a second time, on the
// entries the test computes from the model's numbers.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "core/pool_config.h"
#include "core/sizing.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;

std::uint64_t ceil_div_u(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

struct Expected {
  std::uint64_t max_slots, min_slot_index, num_pages, min_page_index, page_bytes;
};

// SPEC 3, once more, from the entry sizes.
std::vector<Expected> expected_sizing(const std::vector<std::uint64_t>& entries, std::uint64_t ps,
                                      std::uint64_t total) {
  std::uint64_t floor = 0;
  for (std::uint64_t e : entries) floor = std::max({floor, e, ps * e});
  std::vector<Expected> out;
  for (std::uint64_t e : entries) {
    Expected x;
    x.max_slots = total / e;
    x.min_slot_index = ceil_div_u(floor, e);
    x.num_pages = x.max_slots / ps;
    x.min_page_index = ceil_div_u(x.min_slot_index, ps);
    x.page_bytes = e * ps;
    out.push_back(x);
  }
  return out;
}

void expect_matches(const PoolGeometry& g, const std::vector<Expected>& want) {
  ASSERT_EQ(g.sub_pools.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(g.sub_pools[i].name);
    EXPECT_EQ(g.sub_pools[i].max_slots, want[i].max_slots);
    EXPECT_EQ(g.sub_pools[i].min_slot_index, want[i].min_slot_index);
    EXPECT_EQ(g.sub_pools[i].num_pages, want[i].num_pages);
    EXPECT_EQ(g.sub_pools[i].min_page_index, want[i].min_page_index);
    EXPECT_EQ(g.sub_pools[i].page_bytes, want[i].page_bytes);
    EXPECT_EQ(g.sub_pools[i].usable_pages(), want[i].num_pages - want[i].min_page_index);
  }
}

Result<PoolDerived> derive(const std::string& model, std::uint64_t ps, std::uint64_t total, std::uint32_t tp = 1) {
  auto shape = find_model(model);
  if (!shape.ok()) return shape.error();
  PoolConfig c;
  c.shape = *shape;
  c.tp = tp;
  c.page_size = ps;
  c.total_bytes = total;
  return derive_pool(c);
}

TEST(Sizing, SingleSubPoolLlama) {
  auto d = derive("llama-3.1-8b", 64, 4294967296ULL);
  ASSERT_TRUE(d.ok()) << d.error().message;
  const std::uint64_t entry = 32 * 2 * 8 * 128 * 2;  // 131072
  const PoolGeometry& g = d->geometry;
  EXPECT_EQ(g.reserved_floor_bytes, 64 * entry);
  EXPECT_EQ(g.sub_pools[0].direction, GrowDirection::up);
  expect_matches(g, expected_sizing({entry}, 64, 4294967296ULL));
  // By hand: 32768 slots, floor 64 slots = page 0, 512 pages, first usable page 1.
  EXPECT_EQ(g.sub_pools[0].max_slots, 32768u);
  EXPECT_EQ(g.sub_pools[0].num_pages, 512u);
  EXPECT_EQ(g.sub_pools[0].min_page_index, 1u);
}

TEST(Sizing, CompositeWithEqualEntries) {
  // gpt-oss-20b: 12 full + 12 swa layers, 8 heads of 64, bf16: both entries 12 * 2 * 8 * 64 * 2.
  const std::uint64_t entry = 12 * 2 * 8 * 64 * 2;
  for (std::uint64_t ps : {1u, 16u, 64u, 256u}) {
    auto d = derive("gpt-oss-20b", ps, 1ULL << 30);
    ASSERT_TRUE(d.ok()) << d.error().message;
    ASSERT_TRUE(d->is_composite());
    EXPECT_EQ(d->geometry.sub_pools[0].name, "full");
    EXPECT_EQ(d->geometry.sub_pools[1].name, "swa");
    EXPECT_EQ(d->geometry.sub_pools[0].direction, GrowDirection::up);
    EXPECT_EQ(d->geometry.sub_pools[1].direction, GrowDirection::down);
    expect_matches(d->geometry, expected_sizing({entry, entry}, ps, 1ULL << 30));
  }
}

TEST(Sizing, CompositeWithUnequalEntriesSharesOneFloor) {
  // MiMo-V2-Flash: full 9 layers x 4 heads (K 192, V 128); swa 39 layers x 8 heads.
  const std::uint64_t full = 9 * 4 * (192 + 128) * 2;   // 23040
  const std::uint64_t swa = 39 * 8 * (192 + 128) * 2;   // 199680
  auto d = derive("mimo-v2-flash", 64, 4294967296ULL);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->layouts[0].entry_bytes, full);
  EXPECT_EQ(d->layouts[1].entry_bytes, swa);
  // The floor is the larger sub-pool's page: the full side must skip 555 of its slots (9 pages).
  EXPECT_EQ(d->geometry.reserved_floor_bytes, 64 * swa);
  expect_matches(d->geometry, expected_sizing({full, swa}, 64, 4294967296ULL));
  EXPECT_EQ(d->geometry.sub_pools[0].min_slot_index, 555u);
  EXPECT_EQ(d->geometry.sub_pools[0].min_page_index, 9u);
  EXPECT_EQ(d->geometry.sub_pools[1].min_page_index, 1u);
}

TEST(Sizing, TheSmallestPoolThatFitsAndTheOneBelowIt) {
  const std::uint64_t entry = 131072, ps = 64;
  // Two pages: page 0 is the sink, page 1 is usable.
  auto fits = derive("llama-3.1-8b", ps, 2 * ps * entry);
  ASSERT_TRUE(fits.ok()) << fits.error().message;
  EXPECT_EQ(fits->geometry.sub_pools[0].usable_pages(), 1u);
  auto below = derive("llama-3.1-8b", ps, 2 * ps * entry - 1);
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.error().kind, ErrorKind::sizing);
  EXPECT_THAT(below.error().message, HasSubstr("sub-pool 'full'"));
  EXPECT_THAT(below.error().message, HasSubstr(std::to_string((2 * ps * entry - 1) / entry) + " slots"));
  EXPECT_THAT(below.error().message, HasSubstr("floor of " + std::to_string(ps * entry)));
  EXPECT_THAT(below.error().message, HasSubstr("increase total_bytes"));
  EXPECT_THAT(below.error().message, HasSubstr("at least " + std::to_string(2 * ps * entry)));
}

TEST(Sizing, ACompositeThatCouldNeverAllocateIsRefused) {
  // gpt-oss-20b at TP 8 would do too; at TP 1 both entries are 24576 bytes, pages of 16 slots
  // 393216 bytes, the floor one page. Two pages a side: each side has one usable page, but the
  // bytes they share (the up side's page 1 to the down side's top) hold one page, not one of each.
  const std::uint64_t epp = 16 * 24576;
  auto two = derive("gpt-oss-20b", 16, 2 * epp);
  ASSERT_FALSE(two.ok()) << "one usable page a side, and every alloc would be no_room";
  EXPECT_EQ(two.error().kind, ErrorKind::sizing);
  EXPECT_THAT(two.error().message, HasSubstr("sub-pools 'full' and 'swa' share " + std::to_string(epp) + " bytes"));
  EXPECT_THAT(two.error().message, HasSubstr("no page could ever be allocated"));
  EXPECT_THAT(two.error().message, HasSubstr("at least " + std::to_string(3 * epp) + " bytes"));
  EXPECT_FALSE(derive("gpt-oss-20b", 16, 3 * epp - 1).ok());
  auto three = derive("gpt-oss-20b", 16, 3 * epp);
  ASSERT_TRUE(three.ok()) << "the smallest that holds one page of each: " << three.error().message;
  const SubPoolGeometry& up = three->geometry.sub_pools[0];
  const SubPoolGeometry& down = three->geometry.sub_pools[1];
  EXPECT_EQ(down.num_pages * down.page_bytes - up.min_page_index * up.page_bytes, up.page_bytes + down.page_bytes);
}

TEST(Sizing, ErrorsForBadArguments) {
  auto layouts = derive("llama-3.1-8b", 64, 1ULL << 32)->layouts;
  EXPECT_EQ(size_pool(layouts, 0, 1ULL << 32).error().kind, ErrorKind::invalid_argument);
  EXPECT_EQ(size_pool(layouts, 64, 0).error().kind, ErrorKind::sizing);
  EXPECT_EQ(size_pool({}, 64, 1ULL << 32).error().kind, ErrorKind::invalid_argument);
  std::vector<DenseEntryLayout> three = {layouts[0], layouts[0], layouts[0]};
  EXPECT_FALSE(size_pool(three, 64, 1ULL << 32).ok());
  // A page size whose page bytes overflow 64 bits.
  auto huge = size_pool(layouts, 1ULL << 50, UINT64_MAX);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().kind, ErrorKind::overflow);
  // A page size so large that the sizing hint itself would overflow: still a clean error.
  auto no_room = size_pool(layouts, (1ULL << 46), UINT64_MAX);
  ASSERT_FALSE(no_room.ok());
  EXPECT_EQ(no_room.error().kind, ErrorKind::sizing);
  EXPECT_THAT(no_room.error().message, HasSubstr("more than 2^64 bytes"));
}

TEST(Sizing, PastTwoToTheThirtyTwoBytesIsExact) {
  // A 512 GiB pool: byte counts far past 2^32, slots past 2^21.
  const std::uint64_t total = 512ULL << 30, entry = 131072, ps = 64;
  auto d = derive("llama-3.1-8b", ps, total);
  ASSERT_TRUE(d.ok());
  expect_matches(d->geometry, expected_sizing({entry}, ps, total));
  EXPECT_EQ(d->geometry.sub_pools[0].max_slots, total / entry);
}

}  // namespace
}  // namespace kvtwin
