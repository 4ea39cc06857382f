// Content oracle rows and the byte digest.
#include "core/oracle.h"

#include <algorithm>
#include <compare>
#include <cstring>
#include <map>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace kvtwin {
namespace {

// One finite, non-zero element of `dtype` from 16 random bits, little-endian into `out`.
inline void encode_element(DType dtype, std::uint32_t bits, std::uint8_t* out) {
  const std::uint32_t sign = (bits >> 15) & 1;
  switch (dtype) {
    case DType::bf16: {
      // exponent 120..135 (about 2^-7 .. 2^8), 7 random mantissa bits
      const std::uint32_t exponent = 120 + ((bits >> 7) & 0xf);
      const std::uint16_t v = static_cast<std::uint16_t>((sign << 15) | (exponent << 7) | (bits & 0x7f));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::fp16: {
      // exponent 8..23 of bias 15, 10 random mantissa bits
      const std::uint32_t exponent = 8 + ((bits >> 10) & 0xf);
      const std::uint16_t v = static_cast<std::uint16_t>((sign << 15) | (exponent << 10) | (bits & 0x3ff));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::fp8_e4m3: {
      // exponent 3..10 of bias 7 (never 15: S.1111.111 is NaN in e4m3)
      const std::uint32_t exponent = 3 + ((bits >> 3) & 0x7);
      out[0] = static_cast<std::uint8_t>((sign << 7) | (exponent << 3) | (bits & 0x7));
      return;
    }
    case DType::fp32: {
      const std::uint32_t exponent = 120 + ((bits >> 7) & 0xf);
      const std::uint32_t mantissa = ((bits & 0x7f) << 16) | (((bits >> 3) & 0xff) << 8) | (bits & 0xff);
      const std::uint32_t v = (sign << 31) | (exponent << 23) | mantissa;
      std::memcpy(out, &v, 4);
      return;
    }
  }
}

// The bits of one element that the per-row key may flip: the sign and the mantissa. The exponent
// stays the pattern's (in range: finite and non-zero), so every row is finite and non-zero too.
std::uint64_t key_mask(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 0x807f807f807f807fULL;
    case DType::fp16: return 0x83ff83ff83ff83ffULL;
    case DType::fp8_e4m3: return 0x8787878787878787ULL;
    case DType::fp32: return 0x807fffff807fffffULL;
  }
  return 0;
}

// A row's pattern: random elements of `dtype` (encode_element), four from each 64-bit draw (16
// bits each, low first). One per (seed, sub-pool, layer, part, dtype, length), made once.
std::vector<std::uint8_t> make_pattern(std::uint64_t base, DType dtype, std::size_t bytes) {
  const std::size_t itemsize = dtype_size_bytes(dtype);
  const std::size_t elements = bytes / itemsize;
  std::vector<std::uint8_t> out(bytes);
  for (std::size_t i = 0; i < elements; ++i) {
    const std::uint64_t draw = splitmix64_mix(base + (i / 4) * 0x9e3779b97f4a7c15ULL);
    encode_element(dtype, static_cast<std::uint32_t>(draw >> (16 * (i % 4))) & 0xffff, out.data() + i * itemsize);
  }
  return out;
}

struct PatternKey {
  std::uint64_t seed = 0;
  std::uint32_t sub_pool = 0, layer = 0, part = 0;
  DType dtype = DType::bf16;
  std::size_t bytes = 0;
  auto operator<=>(const PatternKey&) const = default;
};

// The patterns this thread has made (a cache: which rows exist never depends on it). Bounded: a
// thread that has made more than kPatternCacheBytes starts over.
constexpr std::size_t kPatternCacheBytes = std::size_t{64} << 20;

const std::vector<std::uint8_t>& pattern(const PatternKey& key) {
  thread_local std::map<PatternKey, std::vector<std::uint8_t>> cache;
  thread_local std::size_t cached_bytes = 0;
  thread_local const std::vector<std::uint8_t>* last = nullptr;
  thread_local PatternKey last_key;
  if (last != nullptr && last_key == key) return *last;
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cached_bytes + key.bytes > kPatternCacheBytes) {
      cache.clear();
      cached_bytes = 0;
    }
    std::uint64_t base = mix_seed(key.seed, 0x0a77e4e5ULL);  // the pattern's own domain
    base = mix_seed(base, (std::uint64_t{key.sub_pool} << 40) ^ (std::uint64_t{key.layer} << 8) ^ key.part);
    it = cache.emplace(key, make_pattern(base, key.dtype, key.bytes)).first;
    cached_bytes += key.bytes;
  }
  last = &it->second;
  last_key = key;
  return it->second;
}

}  // namespace

// A row is its (sub-pool, layer, part) pattern with the sign and mantissa bits of every element
// flipped by a per-row key: word i (8 bytes) of the row is pattern[i] ^ ((key + i * golden) & mask).
// Distinct identities give distinct keys, so two rows differ in nearly every element (a row written
// to the wrong place, or half written, shows anywhere in it), and the fill is one xor per 8 bytes:
// the oracle runs for every row a replay writes and every row a verify reads back, so it costs
// about what copying the row would.
std::uint64_t oracle_row_key(std::uint64_t seed, const RowIdentity& id) {
  std::uint64_t key = mix_seed(seed, static_cast<std::uint64_t>(id.source_token));
  key = mix_seed(key, (std::uint64_t{id.sub_pool} << 40) ^ (std::uint64_t{id.layer} << 8) ^ id.part);
  return mix_seed(key, id.write_number);
}

std::uint64_t oracle_key_mask(DType dtype) { return key_mask(dtype); }

const std::vector<std::uint8_t>& oracle_pattern(std::uint64_t seed, const RowIdentity& id, DType dtype,
                                                std::size_t bytes) {
  KVTWIN_CHECK(bytes % dtype_size_bytes(dtype) == 0, "oracle row is not a whole number of elements");
  return pattern(PatternKey{seed, id.sub_pool, id.layer, id.part, dtype, bytes});
}

namespace {

// Word i of a row is pattern[i] ^ ((key + i * kOracleKeyStep) & mask), the key stepped by one add
// a word; a row that is not a whole number of words ends in a byte tail, little-endian. The words
// come from fill_words and differ_words, one word at a time, or eight at a time in 512-bit lanes
// where the processor has AVX-512 (the same words: each lane steps its own key by 8 words).

// Words [0, words) of the row whose word 0 has key `key` into `out`.
void fill_words(const std::uint8_t* pattern, std::uint64_t key, std::uint64_t mask, std::uint8_t* out,
                std::size_t words) {
  std::uint64_t k = key;
  for (std::size_t i = 0; i < words; ++i, k += kOracleKeyStep) {
    std::uint64_t w = 0;
    std::memcpy(&w, pattern + i * 8, 8);
    w ^= k & mask;
    std::memcpy(out + i * 8, &w, 8);
  }
}

// The or of every bit in which words [0, words) of `row` differ from the row of `key`'s.
std::uint64_t differ_words(const std::uint8_t* pattern, std::uint64_t key, std::uint64_t mask, const std::uint8_t* row,
                           std::size_t words) {
  std::uint64_t k = key;
  std::uint64_t differ = 0;
  for (std::size_t i = 0; i < words; ++i, k += kOracleKeyStep) {
    std::uint64_t have = 0, want = 0;
    std::memcpy(&have, row + i * 8, 8);
    std::memcpy(&want, pattern + i * 8, 8);
    differ |= have ^ want ^ (k & mask);
  }
  return differ;
}

// Byte b (past the last whole word, `words`) of a row whose tail key is `tail_key`.
std::uint8_t tail_byte(const std::uint8_t* pattern, std::uint64_t tail_key, std::size_t words, std::size_t b) {
  return static_cast<std::uint8_t>(pattern[b] ^ (tail_key >> (8 * (b - words * 8))));
}

#if defined(__x86_64__)
using Lanes = std::uint64_t __attribute__((vector_size(64)));

__attribute__((target("avx512f"))) Lanes lane_keys(std::uint64_t key) {
  Lanes k;
  for (int j = 0; j < 8; ++j) k[j] = key + static_cast<std::uint64_t>(j) * kOracleKeyStep;
  return k;
}

__attribute__((target("avx512f"))) void fill_words_avx512(const std::uint8_t* pattern, std::uint64_t key,
                                                          std::uint64_t mask, std::uint8_t* out, std::size_t words) {
  Lanes k = lane_keys(key);
  const Lanes step = Lanes{} + 8 * kOracleKeyStep;
  std::size_t i = 0;
  for (; i + 8 <= words; i += 8, k += step) {
    Lanes w;
    std::memcpy(&w, pattern + i * 8, sizeof w);
    w ^= k & mask;
    std::memcpy(out + i * 8, &w, sizeof w);
  }
  fill_words(pattern + i * 8, key + i * kOracleKeyStep, mask, out + i * 8, words - i);
}

__attribute__((target("avx512f"))) std::uint64_t differ_words_avx512(const std::uint8_t* pattern, std::uint64_t key,
                                                                    std::uint64_t mask, const std::uint8_t* row,
                                                                    std::size_t words) {
  Lanes k = lane_keys(key);
  const Lanes step = Lanes{} + 8 * kOracleKeyStep;
  Lanes differ = Lanes{};
  std::size_t i = 0;
  for (; i + 8 <= words; i += 8, k += step) {
    Lanes have, want;
    std::memcpy(&have, row + i * 8, sizeof have);
    std::memcpy(&want, pattern + i * 8, sizeof want);
    differ |= have ^ want ^ (k & mask);
  }
  std::uint64_t any = differ_words(pattern + i * 8, key + i * kOracleKeyStep, mask, row + i * 8, words - i);
  for (int j = 0; j < 8; ++j) any |= differ[j];
  return any;
}

const bool kWideLanes = __builtin_cpu_supports("avx512f");
#endif

void fill_row(const std::uint8_t* pattern, std::uint64_t key, std::uint64_t mask, std::span<std::uint8_t> out) {
  const std::size_t words = out.size() / 8;
#if defined(__x86_64__)
  if (kWideLanes && words >= 16)
    fill_words_avx512(pattern, key, mask, out.data(), words);
  else
#endif
    fill_words(pattern, key, mask, out.data(), words);
  // A row shorter than a word's multiple (rows are multiples of 16 bytes in a pool; other callers
  // may ask for any whole number of elements): the tail, byte by byte, little-endian.
  const std::uint64_t tail_key = (key + words * kOracleKeyStep) & mask;
  for (std::size_t b = words * 8; b < out.size(); ++b) out[b] = tail_byte(pattern, tail_key, words, b);
}

// The or of every bit in which `row` differs from the row of `key`.
std::uint64_t row_differs(const std::uint8_t* pattern, std::uint64_t key, std::uint64_t mask,
                          std::span<const std::uint8_t> row) {
  const std::size_t words = row.size() / 8;
  std::uint64_t differ = 0;
#if defined(__x86_64__)
  if (kWideLanes && words >= 16)
    differ = differ_words_avx512(pattern, key, mask, row.data(), words);
  else
#endif
    differ = differ_words(pattern, key, mask, row.data(), words);
  const std::uint64_t tail_key = (key + words * kOracleKeyStep) & mask;
  for (std::size_t b = words * 8; b < row.size(); ++b) differ |= row[b] ^ tail_byte(pattern, tail_key, words, b);
  return differ;
}

}  // namespace

void fill_oracle_row(std::uint64_t seed, const RowIdentity& id, DType dtype, std::span<std::uint8_t> out) {
  fill_row(oracle_pattern(seed, id, dtype, out.size()).data(), oracle_row_key(seed, id), key_mask(dtype), out);
}

OracleRowFamily::OracleRowFamily(std::uint64_t seed, const RowIdentity& of, DType dtype, std::size_t row_bytes)
    : seed_(seed), of_(of), mask_(key_mask(dtype)), pattern_(oracle_pattern(seed, of, dtype, row_bytes)) {}

std::uint64_t OracleRowFamily::key(std::int64_t source_token, std::uint64_t write_number) const {
  RowIdentity id = of_;
  id.source_token = source_token;
  id.write_number = write_number;
  return oracle_row_key(seed_, id);
}

void OracleRowFamily::fill(std::uint64_t key, std::span<std::uint8_t> out) const {
  KVTWIN_CHECK(out.size() == pattern_.size(), "an oracle row is filled whole");
  fill_row(pattern_.data(), key, mask_, out);
}

std::size_t OracleRowFamily::first_difference(std::uint64_t key, std::span<const std::uint8_t> row) const {
  KVTWIN_CHECK(row.size() == pattern_.size(), "an oracle row is compared whole");
  if (row_differs(pattern_.data(), key, mask_, row) == 0) return row.size();
  // Rare: name the byte (the row made whole, then compared).
  std::vector<std::uint8_t> expected(row.size());
  fill(key, expected);
  return static_cast<std::size_t>(std::mismatch(row.begin(), row.end(), expected.begin()).first - row.begin());
}

float oracle_query_value(std::uint64_t query_seed, std::uint32_t request, std::uint32_t head, std::uint32_t index) {
  const std::uint64_t h = splitmix64_mix(mix_seed(mix_seed(query_seed, request), (std::uint64_t{head} << 32) | index));
  std::uint8_t bytes[2];
  encode_element(DType::bf16, static_cast<std::uint32_t>(h & 0xffff), bytes);
  // Keep queries small (exponent 120..127) so scores stay in a gentle range.
  std::uint16_t v = 0;
  std::memcpy(&v, bytes, 2);
  v = static_cast<std::uint16_t>((v & 0x807f) | ((120u + ((h >> 20) & 0x7)) << 7));
  const std::uint32_t f = std::uint32_t{v} << 16;
  float out = 0;
  std::memcpy(&out, &f, 4);
  return out;
}

std::uint64_t digest_bytes(std::span<const std::uint8_t> bytes) {
  std::uint64_t h = 0x6a09e667f3bcc909ULL ^ bytes.size();
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    h = splitmix64_mix(h ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  std::uint64_t tail = 0;
  for (std::size_t s = 0; i < bytes.size(); ++i, s += 8) tail |= std::uint64_t{bytes[i]} << s;
  return splitmix64_mix(h ^ tail ^ 0xff51afd7ed558ccdULL);
}

}  // namespace kvtwin
