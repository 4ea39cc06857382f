// A digest of byte ranges of a pool that two backends compute where the bytes live: the model on
// the host over its buffer, the GPU on the device (one reduction kernel), so that comparing the
// bytes an operation wrote costs eight bytes per operation instead of downloading them. The bytes
// themselves come back only when the digests differ, to name the first byte that does.
//
// How it works: the pool is cut into 8-byte words at absolute offsets (word w is bytes
// [8w, 8w + 8)); a range contributes one term per word it overlaps, the word's bytes outside the
// range read as zero. A term is a bijective mix of the word keyed by its index, and the digest is
// the sum of the terms mod 2^64, so the order words are visited in does not matter (a parallel
// reduction gives the host's value exactly), any one word changed always changes the digest, and
// a row written at another place or two rows swapped change it unless 64 bits collide. A zero word
// is a zero term (every step of the mix maps 0 to 0), so bytes never written (a fresh pool is
// zero, SPEC 3) add nothing: a digest kept per region of the pool starts at 0 without reading it,
// and the model recomputes only the regions written since (sim/pool_bytes.h).
//
// What it does not cover: which ranges to digest (the runner takes the model's touched ranges,
// core/backend.h); both backends must be given the same ranges. A match is evidence, not proof:
// checkpoints still compare whole pools byte for byte.
#pragma once

#include <cstdint>
#include <span>

#include "core/backend.h"
#include "core/det_math.h"  // KVTWIN_HOST_DEVICE

namespace kvtwin {

// The term of word `index` holding `word` (little-endian bytes, those outside the range zero).
// Each step is a bijection of x that keeps 0 at 0: multiplying by an odd number (the index's odd
// key included) and xor-shifting right.
KVTWIN_HOST_DEVICE inline std::uint64_t bytes_digest_term(std::uint64_t index, std::uint64_t word) {
  std::uint64_t x = word * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 31;
  x *= (index * 0x9e3779b97f4a7c15ULL) << 1 | 1;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 32;
  return x;
}

// The terms of one range whose bytes are `bytes` (bytes.size() is the range's length), starting
// at pool offset `offset`.
std::uint64_t bytes_digest_of_range(std::uint64_t offset, std::span<const std::uint8_t> bytes);

// The digest of `ranges` of a pool whose whole buffer is `pool` (the ranges lie inside it).
std::uint64_t bytes_digest(std::span<const std::uint8_t> pool, std::span<const ByteRange> ranges);

}  // namespace kvtwin
