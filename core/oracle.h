// The content oracle: the bytes a write puts down are a fixed function of the run's seed and
// (virtual token, sub-pool, layer, part, write number). Any backend materializes the same rows
// from an operation alone, and a checker knows what every live row must hold.
//
// Values are finite and never zero (every element has a non-zero exponent): a kernel that
// writes nothing, or writes zeros, can never pass, and attention over them never sees NaN.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

// The same row in its two parts, for a backend that makes rows where its pool lives (the GPU
// uploads a pattern once and makes each lane's row from its key): word i (8 bytes,
// little-endian) of the row is pattern[i] ^ ((key + i * kOracleKeyStep) & oracle_key_mask(dtype)),
// and fill_oracle_row is exactly that (a row whose length is not a multiple of 8 ends in a byte
// tail that only fill_oracle_row makes).
inline constexpr std::uint64_t kOracleKeyStep = 0x9e3779b97f4a7c15ULL;
std::uint64_t oracle_row_key(std::uint64_t seed, const RowIdentity& id);
std::uint64_t oracle_key_mask(DType dtype);
// The pattern of (seed, sub-pool, layer, part, dtype, length) (the identity's token and write
// number do not matter): a reference into this thread's cache, valid until its next oracle call.
const std::vector<std::uint8_t>& oracle_pattern(std::uint64_t seed, const RowIdentity& id, DType dtype,
                                                std::size_t bytes);

// The oracle rows of one family: one (seed, sub-pool, layer, part, dtype, row length), every
// source token and write number. It takes the pattern once and then makes or checks each row
// from its key alone, as cheaply as copying the row: a writer or checker of many rows holds one
// (fill_oracle_row looks the pattern up for every row). The same rows as fill_oracle_row.
class OracleRowFamily {
 public:
  // `of`'s source token and write number do not matter.
  OracleRowFamily(std::uint64_t seed, const RowIdentity& of, DType dtype, std::size_t row_bytes);

  std::size_t row_bytes() const { return pattern_.size(); }
  // oracle_row_key of this family's row of (source token, write number).
  std::uint64_t key(std::int64_t source_token, std::uint64_t write_number) const;
  // The row of `key` into `out` (row_bytes() long).
  void fill(std::uint64_t key, std::span<std::uint8_t> out) const;
  // The first byte of `row` (row_bytes() long) that is not the row of `key`'s, or row_bytes()
  // when every byte is; made and compared a word at a time, no row materialized.
  std::size_t first_difference(std::uint64_t key, std::span<const std::uint8_t> row) const;

 private:
  std::uint64_t seed_ = 0;
  RowIdentity of_;
  std::uint64_t mask_ = 0;
  std::vector<std::uint8_t> pattern_;
};

// Query vectors for the reference attention: element `index` of request `request`, head `head`.
// Returns float values exactly representable in bf16, finite and non-zero.
float oracle_query_value(std::uint64_t query_seed, std::uint32_t request, std::uint32_t head, std::uint32_t index);

// A 64-bit digest of bytes (used for result comparison and page digests). Not cryptographic.
std::uint64_t digest_bytes(std::span<const std::uint8_t> bytes);

}  // namespace kvtwin
