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

}  // namespace kvtwin
