// The operation generator: one random operation for the pool a shadow describes, drawn from
// Choices (so it runs under RapidCheck or a seeded fuzzer alike) and weighted by the run's
// swarm weights. Operations are mostly valid (they name live allocations, existing batches,
// open readers and captured graphs, in the shapes a serving engine produces), with a controlled
// share of invalid ones (double frees, out-of-range ids, unmarked and duplicate locs, moves
// under readers, malformed buffers) so that every error path is exercised.
//
// It never applies anything: the caller plays the operation against the backend(s) and the
// shadow, which is how the next operation sees the new state.
//
// Now and then an operation rebuilds the pool (a new configuration from props/config_gen.h, the
// same one again, or one that must be refused: rows not a multiple of 16 bytes, or too few bytes),
// so that a run also checks what a rebuild resets and what a refused one keeps.
#pragma once

#include <cstdint>

#include "core/op.h"
#include "props/choices.h"
#include "props/shadow.h"
#include "props/swarm.h"

namespace kvtwin::props {

struct OpGenOptions {
  std::uint32_t invalid_one_in = 8;  // about one operation in this many is deliberately invalid
  // About one operation in this many (0: none) is drawn at a serving engine's real sizes rather
  // than a test's: batches, writes, reads and moves of up to kLargeLanes lanes, capture batches of
  // up to 256 requests and decode requests of up to kLargeRequestPages scattered pages (attention
  // past 256 tokens), page tables and remaps of up to 256 requests; one translate in 32 of those
  // takes up to kHugeTranslateIds ids. How many a pool can give is bounded by its live tokens, so
  // the configuration generator's larger pools (ConfigLimits::large_one_in) are where these reach
  // thousands. Small operations stay the common case, so shrinking still ends short.
  std::uint32_t large_one_in = 16;
  // Host arena operations (SPEC 8: host_alloc ... transfer_wait) at their swarm weights; off for a
  // run whose backends do not all have a host arena (the GPU's has none yet), so that such a run
  // never sees one. With it on but a pool without host_bytes, they are mostly replaced by alloc
  // (the rest are refused: no host arena).
  bool host_ops = false;
  // On a hybrid chain (SPEC 11), about one operation in this many (0: none) is a state operation
  // (state_alloc/free/write/read/slots, a reader of state slots). Runs with the GPU set it to 0.
  std::uint32_t state_one_in = 3;
  // On a pool with a storage tier (storage_bytes), about one operation in this
  // many (0: none) is store_pages or load_stored, over a few hashes so that reads hit and miss.
  std::uint32_t storage_one_in = 6;
};

inline constexpr std::int64_t kLargeLanes = 4096;
inline constexpr std::int64_t kLargeRequestPages = 64;
inline constexpr std::int64_t kHugeTranslateIds = std::int64_t{1} << 21;

Op generate_op(Choices& choices, const PoolShadow& shadow, const SwarmWeights& weights, const OpGenOptions& options = {});

}  // namespace kvtwin::props
