// The operation generator: one random operation for the pool a shadow describes, drawn from
// Choices (so it runs under RapidCheck or a seeded fuzzer alike) and weighted by the run's
// swarm weights. Operations are mostly valid (they name live allocations, existing batches,
// open readers and captured graphs, in the shapes a serving engine produces), with a controlled
// share of invalid ones (double frees, out-of-range ids, unmarked and duplicate locs, moves
// under readers, malformed buffers) so that every error path is exercised.
//
// It never applies anything: the caller plays the operation against the backend(s) and the
// shadow, which is how the next operation sees the new state.
#pragma once

#include <cstdint>

#include "core/op.h"
#include "props/choices.h"
#include "props/shadow.h"
#include "props/swarm.h"

namespace kvtwin::props {

struct OpGenOptions {
  std::uint32_t invalid_one_in = 8;  // about one operation in this many is deliberately invalid
};

Op generate_op(Choices& choices, const PoolShadow& shadow, const SwarmWeights& weights, const OpGenOptions& options = {});

}  // namespace kvtwin::props
