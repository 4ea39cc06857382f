// The host reference of the byte ranges' digest (bytes_digest.h).
#include "core/bytes_digest.h"

#include <cstring>

namespace kvtwin {

std::uint64_t bytes_digest_of_range(std::uint64_t offset, std::span<const std::uint8_t> bytes) {
  std::uint64_t sum = 0;
  std::uint64_t at = 0;  // bytes of the range consumed
  const std::uint64_t n = bytes.size();
  // A partial first word: its bytes before the range are zero.
  if (offset % 8 != 0 && n > 0) {
    std::uint8_t w[8] = {};
    const std::uint64_t lead = offset % 8;
    const std::uint64_t take = std::min<std::uint64_t>(8 - lead, n);
    std::memcpy(w + lead, bytes.data(), take);
    std::uint64_t word = 0;
    std::memcpy(&word, w, 8);
    sum += bytes_digest_term(offset / 8, word);
    at = take;
  }
  // Whole words.
  for (; at + 8 <= n; at += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + at, 8);
    sum += bytes_digest_term((offset + at) / 8, word);
  }
  // A partial last word: its bytes past the range are zero.
  if (at < n) {
    std::uint8_t w[8] = {};
    std::memcpy(w, bytes.data() + at, n - at);
    std::uint64_t word = 0;
    std::memcpy(&word, w, 8);
    sum += bytes_digest_term((offset + at) / 8, word);
  }
  return sum;
}

std::uint64_t bytes_digest(std::span<const std::uint8_t> pool, std::span<const ByteRange> ranges) {
  std::uint64_t sum = 0;
  for (const ByteRange& r : ranges) sum += bytes_digest_of_range(r.offset, pool.subspan(r.offset, r.length));
  return sum;
}

Result<std::uint64_t> Backend::bytes_digest(std::span<const ByteRange> ranges) const {
  std::uint64_t sum = 0;
  for (const ByteRange& r : ranges) {
    KVTWIN_TRY(const std::vector<std::uint8_t> bytes, raw_bytes(r.offset, r.length));
    sum += bytes_digest_of_range(r.offset, bytes);
  }
  return sum;
}

}  // namespace kvtwin
