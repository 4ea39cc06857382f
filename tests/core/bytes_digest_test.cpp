// core/bytes_digest.h against its definition written out byte by byte here: terms of words at
// absolute offsets, the bytes outside a range zero; any one byte changed changes the digest; two
// rows swapped change it; the default Backend::bytes_digest (through raw_bytes) agrees.
#include "core/bytes_digest.h"

#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace kvtwin {
namespace {

// The definition: every word w the range overlaps, its bytes outside [offset, offset + n) zero.
std::uint64_t by_definition(const std::vector<std::uint8_t>& pool, const std::vector<ByteRange>& ranges) {
  std::uint64_t sum = 0;
  for (const ByteRange& r : ranges) {
    if (r.length == 0) continue;
    for (std::uint64_t w = r.offset / 8; w <= (r.offset + r.length - 1) / 8; ++w) {
      std::uint64_t word = 0;
      for (std::uint64_t b = 0; b < 8; ++b) {
        const std::uint64_t at = 8 * w + b;
        if (at >= r.offset && at < r.offset + r.length) word |= std::uint64_t{pool[at]} << (8 * b);
      }
      sum += bytes_digest_term(w, word);
    }
  }
  return sum;
}

std::vector<std::uint8_t> random_pool(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::uint8_t> pool(n);
  for (std::uint8_t& b : pool) b = static_cast<std::uint8_t>(rng.below(256));
  return pool;
}

TEST(BytesDigest, EqualsItsDefinitionOverRangesAlignedOrNot) {
  const std::vector<std::uint8_t> pool = random_pool(1000, 3);
  Rng rng(4);
  for (int i = 0; i < 500; ++i) {
    std::vector<ByteRange> ranges;
    const int count = static_cast<int>(rng.below(4));
    for (int k = 0; k < count; ++k) {
      const std::uint64_t offset = rng.below(1000);
      ranges.push_back({offset, rng.below(1000 - offset + 1)});
    }
    EXPECT_EQ(bytes_digest(pool, ranges), by_definition(pool, ranges)) << "case " << i;
  }
  // Long ranges (a moved page, a whole region): the whole words eight at a time where the
  // processor can, at every start and tail.
  const std::vector<std::uint8_t> large = random_pool(40000, 5);
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t offset = rng.below(200);
    const std::vector<ByteRange> ranges = {{offset, 20000 + rng.below(19000)}};
    EXPECT_EQ(bytes_digest(large, ranges), by_definition(large, ranges)) << "long case " << i;
  }
}

TEST(BytesDigest, AnyOneByteChangedOrTwoRowsSwappedChangeIt) {
  std::vector<std::uint8_t> pool = random_pool(512, 5);
  const std::vector<ByteRange> ranges = {{3, 250}, {300, 200}};
  const std::uint64_t before = bytes_digest(pool, ranges);
  for (const ByteRange& r : ranges)
    for (std::uint64_t at = r.offset; at < r.offset + r.length; ++at) {
      pool[at] ^= 0x40;
      EXPECT_NE(bytes_digest(pool, ranges), before) << "byte " << at;
      pool[at] ^= 0x40;
    }
  // Two 32-byte rows swapped (a row written at the other's place).
  std::vector<std::uint8_t> swapped = pool;
  std::swap_ranges(swapped.begin() + 64, swapped.begin() + 96, swapped.begin() + 128);
  EXPECT_NE(bytes_digest(swapped, ranges), before);
  // Bytes outside the ranges do not count.
  pool[260] ^= 1;
  EXPECT_EQ(bytes_digest(pool, ranges), before);
}

TEST(BytesDigest, ZeroBytesAddNothing) {
  const std::vector<std::uint8_t> zeros(4096, 0);
  EXPECT_EQ(bytes_digest(zeros, std::vector<ByteRange>{{0, 4096}, {17, 100}}), 0u);
  // So a range's digest is that of its nonzero words alone.
  std::vector<std::uint8_t> pool = zeros;
  pool[1000] = 7;
  EXPECT_EQ(bytes_digest(pool, std::vector<ByteRange>{{0, 4096}}), bytes_digest(pool, std::vector<ByteRange>{{1000, 1}}));
}

class VectorBackend : public Backend {
 public:
  explicit VectorBackend(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {}
  std::string_view name() const override { return "vector"; }
  OpResult apply(const Op&) override { return make_error(ErrorKind::unsupported, "no ops"); }
  Result<PoolTables> tables() const override { return make_error(ErrorKind::unsupported, "no tables"); }
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const override {
    if (offset + length > bytes_.size()) return make_error(ErrorKind::out_of_range, "outside");
    return std::vector<std::uint8_t>(bytes_.begin() + static_cast<std::ptrdiff_t>(offset),
                                     bytes_.begin() + static_cast<std::ptrdiff_t>(offset + length));
  }

 private:
  std::vector<std::uint8_t> bytes_;
};

TEST(BytesDigest, TheDefaultBackendDigestReadsThroughRawBytes) {
  const std::vector<std::uint8_t> pool = random_pool(300, 7);
  const VectorBackend b(pool);
  const std::vector<ByteRange> ranges = {{5, 17}, {40, 200}};
  EXPECT_EQ(b.bytes_digest(ranges).value(), bytes_digest(pool, ranges));
  EXPECT_FALSE(b.bytes_digest(std::vector<ByteRange>{{290, 20}}).ok());
}

}  // namespace
}  // namespace kvtwin
