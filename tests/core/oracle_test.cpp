// The content oracle (core/oracle.h): rows are finite and never zero in every dtype, a fixed
// function of the seed and the row identity, different for different identities; and the byte
// digest reacts to every byte and to the length.
//
// Finiteness and non-zero-ness are judged from the bit fields of each format, written out here
// (IEEE binary16/bfloat16/binary32 and OCP e4m3), not through the project's converters.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/oracle.h"

namespace kvtwin {
namespace {

// Finite and non-zero, from the encoding: exponent field not all ones (e4m3: not S.1111.111).
bool finite_nonzero(DType d, const std::uint8_t* p) {
  switch (d) {
    case DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      const unsigned exp = (v >> 7) & 0xff, man = v & 0x7f;
      return exp != 0xff && (exp != 0 || man != 0);
    }
    case DType::fp16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      const unsigned exp = (v >> 10) & 0x1f, man = v & 0x3ff;
      return exp != 0x1f && (exp != 0 || man != 0);
    }
    case DType::fp8_e4m3: {
      const unsigned v = p[0] & 0x7f;
      return v != 0x7f && v != 0;
    }
    case DType::fp32: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      const unsigned exp = (v >> 23) & 0xff, man = v & 0x7fffff;
      return exp != 0xff && (exp != 0 || man != 0);
    }
  }
  return false;
}

const DType kAllDtypes[] = {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp32};

std::vector<std::uint8_t> row(std::uint64_t seed, const RowIdentity& id, DType d, std::size_t elements) {
  std::vector<std::uint8_t> out(elements * dtype_size_bytes(d), 0);
  fill_oracle_row(seed, id, d, out);
  return out;
}

TEST(Oracle, EveryElementIsFiniteAndNonZero) {
  for (DType d : kAllDtypes) {
    const std::size_t is = dtype_size_bytes(d);
    std::size_t negatives = 0, total = 0;
    for (std::int64_t token = 0; token < 64; ++token) {
      const RowIdentity id{token, static_cast<std::uint32_t>(token % 2), static_cast<std::uint32_t>(token % 5), 1,
                           static_cast<std::uint64_t>(token / 3)};
      const std::vector<std::uint8_t> r = row(0x5eed, id, d, 576);
      for (std::size_t i = 0; i < r.size(); i += is) {
        ASSERT_TRUE(finite_nonzero(d, &r[i])) << dtype_name(d) << " token " << token << " element " << i / is;
        negatives += (r[i + is - 1] & 0x80) != 0;
        ++total;
      }
    }
    // Both signs appear (not all zeros, not all one value).
    EXPECT_GT(negatives, total / 4) << dtype_name(d);
    EXPECT_LT(negatives, 3 * total / 4) << dtype_name(d);
  }
}

TEST(Oracle, RowsAreAFunctionOfSeedAndIdentity) {
  const RowIdentity id{1234, 1, 7, 0, 3};
  for (DType d : kAllDtypes) {
    EXPECT_EQ(row(42, id, d, 128), row(42, id, d, 128)) << dtype_name(d);
    EXPECT_NE(row(42, id, d, 128), row(43, id, d, 128)) << dtype_name(d);
    // Each field of the identity changes the row.
    std::vector<RowIdentity> others = {{1235, 1, 7, 0, 3}, {1234, 0, 7, 0, 3}, {1234, 1, 6, 0, 3},
                                       {1234, 1, 7, 1, 3}, {1234, 1, 7, 0, 4}};
    for (const RowIdentity& o : others) EXPECT_NE(row(42, id, d, 128), row(42, o, d, 128)) << dtype_name(d);
  }
  // Many rows, all distinct.
  std::set<std::vector<std::uint8_t>> seen;
  for (std::int64_t t = 0; t < 200; ++t) seen.insert(row(7, RowIdentity{t, 0, 0, 0, 0}, DType::bf16, 16));
  EXPECT_EQ(seen.size(), 200u);
}

// A family's rows, written out from the documented law (word i is pattern[i] ^ ((key + i *
// kOracleKeyStep) & mask), the tail byte by byte), not through the oracle's own loop.
std::vector<std::uint8_t> row_by_the_law(std::uint64_t seed, const RowIdentity& id, DType d, std::size_t bytes) {
  const std::vector<std::uint8_t>& pattern = oracle_pattern(seed, id, d, bytes);
  const std::uint64_t key = oracle_row_key(seed, id);
  const std::uint64_t mask = oracle_key_mask(d);
  std::vector<std::uint8_t> out(bytes);
  for (std::size_t b = 0; b < bytes; ++b) {
    const std::uint64_t word_key = (key + (b / 8) * kOracleKeyStep) & mask;
    out[b] = static_cast<std::uint8_t>(pattern[b] ^ (word_key >> (8 * (b % 8))));
  }
  return out;
}

TEST(OracleRowFamily, MakesTheRowsOfTheLawForEveryTokenAndWrite) {
  for (DType d : kAllDtypes)
    for (std::size_t elements : {1, 3, 8, 64, 129}) {
      const std::size_t bytes = elements * dtype_size_bytes(d);
      const OracleRowFamily family(9, RowIdentity{0, 1, 5, 1, 0}, d, bytes);
      ASSERT_EQ(family.row_bytes(), bytes);
      for (std::int64_t token : {0, 17, 40000})
        for (std::uint64_t write : {0, 1, 99}) {
          const RowIdentity id{token, 1, 5, 1, write};
          std::vector<std::uint8_t> made(bytes);
          family.fill(family.key(token, write), made);
          EXPECT_EQ(made, row_by_the_law(9, id, d, bytes)) << dtype_name(d) << " " << elements << " elements";
          EXPECT_EQ(made, row(9, id, d, elements)) << "fill_oracle_row makes the same row";
        }
    }
}

TEST(OracleRowFamily, FirstDifferenceNamesTheFirstByteThatIsNotTheOracles) {
  for (DType d : kAllDtypes) {
    const std::size_t bytes = 37 * dtype_size_bytes(d);  // fp8: a row with a byte tail past its last word
    const OracleRowFamily family(3, RowIdentity{0, 0, 2, 0, 0}, d, bytes);
    const std::uint64_t key = family.key(1234, 7);
    const std::vector<std::uint8_t> good = row_by_the_law(3, RowIdentity{1234, 0, 2, 0, 7}, d, bytes);
    EXPECT_EQ(family.first_difference(key, good), bytes) << dtype_name(d);
    for (std::size_t at = 0; at < bytes; ++at) {
      std::vector<std::uint8_t> bad = good;
      bad[at] ^= 0x10;
      EXPECT_EQ(family.first_difference(key, bad), at) << dtype_name(d) << " byte " << at;
    }
    // Another token's row differs at its first byte whose key bits differ, and is never the same row.
    const std::vector<std::uint8_t> other = row_by_the_law(3, RowIdentity{1235, 0, 2, 0, 7}, d, bytes);
    const std::size_t expected =
        static_cast<std::size_t>(std::mismatch(other.begin(), other.end(), good.begin()).first - other.begin());
    ASSERT_LT(expected, bytes);
    EXPECT_EQ(family.first_difference(key, other), expected) << dtype_name(d);
  }
}

TEST(Oracle, QueryValuesAreFiniteNonZeroBf16) {
  std::set<float> distinct;
  for (std::uint32_t r = 0; r < 4; ++r) {
    for (std::uint32_t h = 0; h < 8; ++h) {
      for (std::uint32_t i = 0; i < 64; ++i) {
        const float q = oracle_query_value(99, r, h, i);
        std::uint32_t bits;
        std::memcpy(&bits, &q, 4);
        EXPECT_EQ(bits & 0xffff, 0u) << "not exactly a bf16 value";
        std::uint8_t b[4];
        std::memcpy(b, &q, 4);
        EXPECT_TRUE(finite_nonzero(DType::fp32, b));
        distinct.insert(q);
      }
    }
  }
  EXPECT_GT(distinct.size(), 100u);
  EXPECT_EQ(oracle_query_value(99, 1, 2, 3), oracle_query_value(99, 1, 2, 3));
}

TEST(Digest, ReactsToEveryByteAndToTheLength) {
  std::vector<std::uint8_t> bytes(77);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::uint64_t base = digest_bytes(bytes);
  EXPECT_EQ(base, digest_bytes(bytes));
  std::set<std::uint64_t> seen = {base};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (std::uint8_t flip : {std::uint8_t{0x01}, std::uint8_t{0x80}}) {
      std::vector<std::uint8_t> changed = bytes;
      changed[i] ^= flip;
      EXPECT_TRUE(seen.insert(digest_bytes(changed)).second) << "byte " << i << " flip " << int{flip};
    }
  }
  // Zeros of different lengths (including the tail of a partial word) all differ.
  std::set<std::uint64_t> lengths;
  for (std::size_t n = 0; n <= 24; ++n) lengths.insert(digest_bytes(std::vector<std::uint8_t>(n, 0)));
  EXPECT_EQ(lengths.size(), 25u);
}

}  // namespace
}  // namespace kvtwin
