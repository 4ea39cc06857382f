// Content oracle rows and the byte digest.
#include "core/oracle.h"

#include <cstring>

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

}  // namespace

// The row's elements, four from each 64-bit draw (16 bits each, low first), encoded by Encode
// (one of the cases of encode_element, chosen once per row rather than once per element: the
// oracle runs for every row a replay writes and every row a verify reads back).
template <std::size_t kItem, class Encode>
void fill_elements(std::uint64_t base, std::size_t elements, std::uint8_t* out, Encode encode) {
  const std::size_t whole = elements / 4;
  for (std::size_t block = 0; block < whole; ++block) {
    const std::uint64_t draw = splitmix64_mix(base + block * 0x9e3779b97f4a7c15ULL);
    std::uint8_t* o = out + block * 4 * kItem;
    encode(static_cast<std::uint32_t>(draw) & 0xffff, o);
    encode(static_cast<std::uint32_t>(draw >> 16) & 0xffff, o + kItem);
    encode(static_cast<std::uint32_t>(draw >> 32) & 0xffff, o + 2 * kItem);
    encode(static_cast<std::uint32_t>(draw >> 48) & 0xffff, o + 3 * kItem);
  }
  if (whole * 4 < elements) {
    const std::uint64_t draw = splitmix64_mix(base + whole * 0x9e3779b97f4a7c15ULL);
    for (std::size_t i = whole * 4, lane = 0; i < elements; ++i, ++lane)
      encode(static_cast<std::uint32_t>(draw >> (16 * lane)) & 0xffff, out + i * kItem);
  }
}

void fill_oracle_row(std::uint64_t seed, const RowIdentity& id, DType dtype, std::span<std::uint8_t> out) {
  const std::uint32_t itemsize = dtype_size_bytes(dtype);
  KVTWIN_CHECK(out.size() % itemsize == 0, "oracle row is not a whole number of elements");
  std::uint64_t base = mix_seed(seed, static_cast<std::uint64_t>(id.source_token));
  base = mix_seed(base, (std::uint64_t{id.sub_pool} << 40) ^ (std::uint64_t{id.layer} << 8) ^ id.part);
  base = mix_seed(base, id.write_number);
  const std::size_t elements = out.size() / itemsize;
  switch (dtype) {
    case DType::bf16:
      return fill_elements<2>(base, elements, out.data(), [](std::uint32_t bits, std::uint8_t* o) { encode_element(DType::bf16, bits, o); });
    case DType::fp16:
      return fill_elements<2>(base, elements, out.data(), [](std::uint32_t bits, std::uint8_t* o) { encode_element(DType::fp16, bits, o); });
    case DType::fp8_e4m3:
      return fill_elements<1>(base, elements, out.data(), [](std::uint32_t bits, std::uint8_t* o) { encode_element(DType::fp8_e4m3, bits, o); });
    case DType::fp32:
      return fill_elements<4>(base, elements, out.data(), [](std::uint32_t bits, std::uint8_t* o) { encode_element(DType::fp32, bits, o); });
  }
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
