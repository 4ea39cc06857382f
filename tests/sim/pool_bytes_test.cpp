// sim/pool_bytes.h's digest kept per region: after any mix of writes (a span to write, a page
// copied), digest() equals the digest read from the whole buffer (core/bytes_digest.h), over
// ranges that cover regions whole, in part, or not at all; a fresh buffer digests to 0 without a
// region read; a write between two digests is always seen; many stale regions, recomputed on
// several threads, give the same digest.
#include "sim/pool_bytes.h"

#include <vector>

#include <gtest/gtest.h>

#include "core/bytes_digest.h"
#include "core/rng.h"

namespace kvtwin::sim {
namespace {

constexpr std::uint64_t kRegion = std::uint64_t{64} << 10;

std::vector<ByteRange> some_ranges(Rng& rng, std::uint64_t size) {
  std::vector<ByteRange> out;
  out.push_back({0, size});                 // the whole buffer, its ragged tail included
  out.push_back({kRegion, 3 * kRegion});    // whole regions only
  const std::uint64_t a = rng.below(size);  // anywhere
  out.push_back({a, rng.below(size - a + 1)});
  return out;
}

TEST(PoolBytesDigest, AFreshBufferDigestsToZero) {
  const PoolBytes bytes(10 * kRegion + 123);
  const std::vector<ByteRange> all = {{0, bytes.size()}};
  EXPECT_EQ(bytes.digest(all), 0u);
  EXPECT_EQ(bytes.digest(all), kvtwin::bytes_digest(bytes.all(), all));
}

TEST(PoolBytesDigest, EqualsTheDigestReadFromTheBufferAfterAnyWrites) {
  PoolBytes bytes(9 * kRegion + 4321);
  SubPoolGeometry page;
  page.name = "test";
  page.page_bytes = kRegion + 1000;  // an envelope across region boundaries
  Rng rng(7);
  for (int step = 0; step < 300; ++step) {
    switch (rng.below(3)) {
      case 0: {  // a short write anywhere
        const std::uint64_t at = rng.below(bytes.size());
        const std::uint64_t n = std::min<std::uint64_t>(rng.below(600) + 1, bytes.size() - at);
        for (std::uint8_t& b : bytes.writable(at, n)) b = static_cast<std::uint8_t>(rng.below(256));
        break;
      }
      case 1: {  // a long write across regions
        const std::uint64_t at = rng.below(bytes.size() / 2);
        for (std::uint8_t& b : bytes.writable(at, 2 * kRegion + 17)) b = static_cast<std::uint8_t>(rng.below(256));
        break;
      }
      default: {  // a page envelope copied
        const std::int64_t pages = static_cast<std::int64_t>(bytes.size() / page.page_bytes);
        const std::int64_t src = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(pages)));
        std::int64_t dst = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(pages)));
        if (dst == src) dst = (dst + 1) % pages;
        bytes.copy_page(page, src, dst);
      }
    }
    const std::vector<ByteRange> ranges = some_ranges(rng, bytes.size());
    for (const ByteRange& r : ranges) {
      const std::vector<ByteRange> one = {r};
      ASSERT_EQ(bytes.digest(one), kvtwin::bytes_digest(bytes.all(), one))
          << "step " << step << ", range [" << r.offset << ", +" << r.length << ")";
    }
  }
}

TEST(PoolBytesDigest, AWriteBetweenTwoDigestsIsSeen) {
  PoolBytes bytes(4 * kRegion);
  const std::vector<ByteRange> all = {{0, bytes.size()}};
  const std::uint64_t before = bytes.digest(all);
  bytes.writable(2 * kRegion + 8, 1)[0] = 1;
  const std::uint64_t after = bytes.digest(all);
  EXPECT_NE(after, before);
  bytes.writable(2 * kRegion + 8, 1)[0] = 0;  // written back to zero: the same digest as before
  EXPECT_EQ(bytes.digest(all), before);
}

TEST(PoolBytesDigest, ManyStaleRegionsDigestAsTheBufferDoes) {
  // 600 regions, most of them written between digests: past 256 stale ones, digest() recomputes
  // them on several threads (pool_bytes.h); every answer is the buffer's own.
  PoolBytes bytes(600 * kRegion + 77);
  Rng rng(11);
  const std::vector<ByteRange> all = {{0, bytes.size()}};
  for (int round = 0; round < 4; ++round) {
    for (std::uint64_t r = 0; r < 600; ++r) {
      if (rng.below(10) < 8) {  // 80% of the regions go stale
        const std::uint64_t at = r * kRegion + rng.below(kRegion - 64);
        for (std::uint8_t& b : bytes.writable(at, 64)) b = static_cast<std::uint8_t>(rng.below(256));
      }
    }
    ASSERT_EQ(bytes.digest(all), kvtwin::bytes_digest(bytes.all(), all)) << "round " << round;
    const std::vector<ByteRange> part = {{3 * kRegion + 5, 400 * kRegion}};
    ASSERT_EQ(bytes.digest(part), kvtwin::bytes_digest(bytes.all(), part)) << "round " << round;
  }
}

}  // namespace
}  // namespace kvtwin::sim
