// Checked 64-bit arithmetic (core/checked.h) and the id helpers (core/ids.h).
//
// Every expected value is computed here in 128-bit arithmetic, so "exact or an error" is judged
// against the true result, around the edges that matter: 2^31 (where int32 kernels wrap, SPEC
// bug 18), 2^32, 2^63 (the largest signed id) and 2^64.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/checked.h"
#include "core/ids.h"

namespace kvtwin {
namespace {

using u128 = unsigned __int128;
constexpr u128 kU64Max = static_cast<u128>(UINT64_MAX);

// Values around the edges, each with its neighbours.
std::vector<std::uint64_t> edge_values() {
  std::vector<std::uint64_t> out = {0, 1, 2, 3, 16, 32, 4095, 4096, 131072};
  for (int bit : {31, 32, 62, 63}) {
    const std::uint64_t p = std::uint64_t{1} << bit;
    for (std::uint64_t d : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2}}) {
      out.push_back(p - d);
      out.push_back(p + d);
    }
  }
  out.push_back(UINT64_MAX);
  out.push_back(UINT64_MAX - 1);
  out.push_back(UINT64_MAX / 3);
  return out;
}

TEST(Checked, AddIsExactOrAnOverflowError) {
  for (std::uint64_t a : edge_values()) {
    for (std::uint64_t b : edge_values()) {
      const u128 exact = static_cast<u128>(a) + b;
      auto r = checked_add(a, b, "test sum");
      if (exact <= kU64Max) {
        ASSERT_TRUE(r.ok()) << a << " + " << b;
        EXPECT_EQ(static_cast<u128>(*r), exact);
      } else {
        ASSERT_FALSE(r.ok()) << a << " + " << b;
        EXPECT_EQ(r.error().kind, ErrorKind::overflow);
        EXPECT_NE(r.error().message.find("test sum"), std::string::npos) << r.error().message;
        EXPECT_NE(r.error().message.find(std::to_string(a)), std::string::npos) << r.error().message;
      }
    }
  }
}

TEST(Checked, MulIsExactOrAnOverflowError) {
  for (std::uint64_t a : edge_values()) {
    for (std::uint64_t b : edge_values()) {
      const u128 exact = static_cast<u128>(a) * b;
      auto r = checked_mul(a, b, "test product");
      if (exact <= kU64Max) {
        ASSERT_TRUE(r.ok()) << a << " * " << b;
        EXPECT_EQ(static_cast<u128>(*r), exact);
      } else {
        ASSERT_FALSE(r.ok()) << a << " * " << b;
        EXPECT_EQ(r.error().kind, ErrorKind::overflow);
        EXPECT_NE(r.error().message.find("does not fit in 64 bits"), std::string::npos);
      }
    }
  }
}

TEST(Checked, MulAddAndSubAreExactOrErrors) {
  for (std::uint64_t a : edge_values()) {
    for (std::uint64_t b : edge_values()) {
      const u128 exact = static_cast<u128>(a) * b + 4096;
      auto r = checked_mul_add(a, b, 4096, "mul_add");
      // An error exactly when the product or the sum leaves 64 bits.
      const bool fits = static_cast<u128>(a) * b <= kU64Max && exact <= kU64Max;
      ASSERT_EQ(r.ok(), fits) << a << " * " << b << " + 4096";
      if (fits) {
        EXPECT_EQ(static_cast<u128>(*r), exact);
      }

      auto d = checked_sub(a, b, "difference");
      ASSERT_EQ(d.ok(), a >= b);
      if (a >= b) {
        EXPECT_EQ(*d, a - b);
      }
    }
  }
}

TEST(Checked, AlignUpIsExactOrAnError) {
  for (std::uint64_t v : edge_values()) {
    for (std::uint64_t align : {std::uint64_t{16}, std::uint64_t{32}, std::uint64_t{4096}}) {
      const u128 exact = (static_cast<u128>(v) + align - 1) / align * align;
      auto r = checked_align_up(v, align, "align");
      ASSERT_EQ(r.ok(), exact <= kU64Max) << v;
      if (r.ok()) {
        EXPECT_EQ(static_cast<u128>(*r), exact);
        EXPECT_EQ(*r % align, 0u);
        EXPECT_GE(*r, v);
      }
    }
  }
  auto zero = checked_align_up(5, 0, "align");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().kind, ErrorKind::invalid_argument);
}

TEST(Checked, CeilDiv) {
  for (std::uint64_t a : edge_values())
    for (std::uint64_t b : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{64}, std::uint64_t{1} << 33})
      EXPECT_EQ(static_cast<u128>(ceil_div(a, b)), (static_cast<u128>(a) + b - 1) / b) << a << " / " << b;
}

TEST(Checked, ToSignedStopsAtTwoToTheSixtyThree) {
  for (std::uint64_t v : edge_values()) {
    auto r = checked_to_i64(v, "stride");
    ASSERT_EQ(r.ok(), v <= static_cast<std::uint64_t>(INT64_MAX)) << v;
    if (r.ok()) {
      EXPECT_EQ(static_cast<std::uint64_t>(*r), v);
    }
    if (!r.ok()) {
      EXPECT_EQ(r.error().kind, ErrorKind::overflow);
    }
  }
}

TEST(Checked, ByteCountArithmetic) {
  const ByteCount page{8388608};
  auto two_pages = checked_add(page, page, "two pages");
  ASSERT_TRUE(two_pages.ok());
  EXPECT_EQ(two_pages->bytes, 2 * 8388608ULL);
  auto pool = checked_mul(page, 512, "pool");
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->bytes, 4294967296ULL);
  EXPECT_FALSE(checked_mul(ByteCount{std::uint64_t{1} << 40}, std::uint64_t{1} << 24, "huge").ok());
  EXPECT_FALSE(checked_add(ByteCount{UINT64_MAX}, ByteCount{1}, "huge").ok());
}

TEST(Ids, PageAndSlotSplitAndJoin) {
  for (std::int64_t ps : {1, 7, 64, 256}) {
    for (std::int64_t t : {0, 1, 63, 64, 65, 1000, 123456789}) {
      const PhysicalTokenId pt{t};
      const VirtualTokenId vt{t};
      EXPECT_EQ(page_of(pt, ps).value * ps + slot_of(pt, ps), t);
      EXPECT_EQ(token_at(page_of(pt, ps), ps, slot_of(pt, ps)), pt);
      EXPECT_EQ(token_at(page_of(vt, ps), ps, slot_of(vt, ps)), vt);
      auto checked = checked_token_at(page_of(pt, ps), ps, slot_of(pt, ps));
      ASSERT_TRUE(checked.ok());
      EXPECT_EQ(*checked, pt);
    }
  }
  EXPECT_EQ(kSinkToken.value, 0);
  EXPECT_EQ(kSinkPage.value, 0);
}

TEST(Ids, CheckedTokenAtRefusesWrapsAndBadSlots) {
  // The largest page whose last slot still fits int64, and the one after it.
  const std::int64_t ps = 64;
  const std::int64_t last_page = INT64_MAX / ps;  // slots up to INT64_MAX - INT64_MAX % ps
  auto ok = checked_token_at(PhysicalPageId{last_page}, ps, INT64_MAX % ps);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->value, INT64_MAX);
  auto past = checked_token_at(PhysicalPageId{last_page + 1}, ps, 0);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.error().kind, ErrorKind::overflow);
  auto slot_past_page = checked_token_at(VirtualPageId{3}, ps, ps);
  ASSERT_FALSE(slot_past_page.ok());
  EXPECT_EQ(slot_past_page.error().kind, ErrorKind::out_of_range);
  EXPECT_FALSE(checked_token_at(VirtualPageId{-1}, ps, 0).ok());
  EXPECT_FALSE(checked_token_at(VirtualPageId{1}, 0, 0).ok());
  // Past 2^31 is ordinary: a 64-bit id, exact.
  auto big = checked_token_at(PhysicalPageId{(std::int64_t{1} << 31) / ps + 5}, ps, 7);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->value, ((std::int64_t{1} << 31) / ps + 5) * ps + 7);
  EXPECT_GT(big->value, std::int64_t{INT32_MAX});
}

}  // namespace
}  // namespace kvtwin
