// Checked 64-bit arithmetic for byte counts and ids.
//
// Every byte offset in a pool is a product of ids, entry sizes and page sizes; a real pool is
// hundreds of GiB, so int32 arithmetic wraps (SPEC.md section 10, bug 18) and even 64-bit
// products of hostile inputs can. Here an overflow is an Error value naming what was being
// computed, never a wrap.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/ids.h"
#include "core/result.h"

namespace kvtwin {

inline Error overflow_error(std::string_view what, std::uint64_t a, char op, std::uint64_t b) {
  return make_error(ErrorKind::overflow, std::string(what) + ": " + std::to_string(a) + " " + op + " " +
                                             std::to_string(b) +
                                             " does not fit in 64 bits; use smaller sizes");
}

inline Result<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b, std::string_view what) {
  std::uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return overflow_error(what, a, '+', b);
  return out;
}

inline Result<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b, std::string_view what) {
  std::uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return overflow_error(what, a, '*', b);
  return out;
}

inline Result<std::uint64_t> checked_sub(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (b > a) return overflow_error(what, a, '-', b);
  return a - b;
}

// a*b + c, checked at each step.
inline Result<std::uint64_t> checked_mul_add(std::uint64_t a, std::uint64_t b, std::uint64_t c,
                                             std::string_view what) {
  KVTWIN_TRY(std::uint64_t product, checked_mul(a, b, what));
  return checked_add(product, c, what);
}

// Rounds value up to a multiple of align (align > 0), checked.
inline Result<std::uint64_t> checked_align_up(std::uint64_t value, std::uint64_t align, std::string_view what) {
  if (align == 0) return make_error(ErrorKind::invalid_argument, std::string(what) + ": alignment is 0");
  const std::uint64_t rem = value % align;
  if (rem == 0) return value;
  return checked_add(value, align - rem, what);
}

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The largest value a signed 64-bit id may take (ids are int64 on the wire and in kernels).
inline constexpr std::uint64_t kMaxSignedId = static_cast<std::uint64_t>(INT64_MAX);

// An unsigned byte count or index as the int64 a kernel or a view stride holds; an error past 2^63-1.
inline Result<std::int64_t> checked_to_i64(std::uint64_t v, std::string_view what) {
  if (v > kMaxSignedId)
    return make_error(ErrorKind::overflow, std::string(what) + ": " + std::to_string(v) +
                                               " does not fit a signed 64-bit integer; use smaller sizes");
  return static_cast<std::int64_t>(v);
}

// Byte counts (ids.h), checked the same way.
inline Result<ByteCount> checked_add(ByteCount a, ByteCount b, std::string_view what) {
  KVTWIN_TRY(std::uint64_t sum, checked_add(a.bytes, b.bytes, what));
  return ByteCount{sum};
}
inline Result<ByteCount> checked_mul(ByteCount a, std::uint64_t count, std::string_view what) {
  KVTWIN_TRY(std::uint64_t product, checked_mul(a.bytes, count, what));
  return ByteCount{product};
}

// token = page * page_size + slot for either id space, checked: negative inputs, a slot outside
// the page, or a product past 2^63-1 are errors (ids.h's token_at is for values known in range).
template <class Tag>
Result<std::int64_t> checked_token_value(StrongId<Tag> page, std::int64_t page_size, std::int64_t slot,
                                         std::string_view what) {
  if (page.value < 0 || page_size <= 0 || slot < 0 || slot >= page_size)
    return make_error(ErrorKind::out_of_range, std::string(what) + ": page " + std::to_string(page.value) +
                                                   ", slot " + std::to_string(slot) + " of a page of " +
                                                   std::to_string(page_size) + " is not a token id");
  KVTWIN_TRY(std::uint64_t token, checked_mul_add(static_cast<std::uint64_t>(page.value),
                                                  static_cast<std::uint64_t>(page_size),
                                                  static_cast<std::uint64_t>(slot), what));
  return checked_to_i64(token, what);
}
inline Result<PhysicalTokenId> checked_token_at(PhysicalPageId page, std::int64_t page_size, std::int64_t slot) {
  KVTWIN_TRY(std::int64_t v, checked_token_value(page, page_size, slot, "physical token id"));
  return PhysicalTokenId{v};
}
inline Result<VirtualTokenId> checked_token_at(VirtualPageId page, std::int64_t page_size, std::int64_t slot) {
  KVTWIN_TRY(std::int64_t v, checked_token_value(page, page_size, slot, "virtual token id"));
  return VirtualTokenId{v};
}

}  // namespace kvtwin
