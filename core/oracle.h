// The content oracle: the bytes a write puts down are a fixed function of the run's seed and
// (virtual token, sub-pool, layer, part, write number). Any backend materializes the same rows
// from an operation alone, and a checker knows what every live row must hold.
//
// Values are finite and never zero (every element has a non-zero exponent): a kernel that
// writes nothing, or writes zeros, can never pass, and attention over them never sees NaN.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace kvtwin {

struct RowIdentity {
  std::int64_t source_token = 0;  // the virtual token whose row this is
  std::uint32_t sub_pool = 0;
  std::uint32_t layer = 0;        // layer inside the sub-pool
  std::uint32_t part = 0;         // part index inside the entry
  std::uint64_t write_number = 0;

  bool operator==(const RowIdentity&) const = default;
};

// Fills `out` (a whole row: row_bytes long, a multiple of the dtype size) with the oracle row.
void fill_oracle_row(std::uint64_t seed, const RowIdentity& id, DType dtype, std::span<std::uint8_t> out);

// Query vectors for the reference attention: element `index` of request `request`, head `head`.
// Returns float values exactly representable in bf16, finite and non-zero.
float oracle_query_value(std::uint64_t query_seed, std::uint32_t request, std::uint32_t head, std::uint32_t index);

// A 64-bit digest of bytes (used for result comparison and page digests). Not cryptographic.
std::uint64_t digest_bytes(std::span<const std::uint8_t> bytes);

}  // namespace kvtwin
