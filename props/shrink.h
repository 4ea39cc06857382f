// The shrinker: makes a failing operation sequence short, so a fuzz failure becomes a trace a
// person can read.
//
// How: delta debugging over the sequence. Starting with halves, it tries removing each chunk
// of operations and keeps any removal after which the sequence still fails (the caller's
// predicate replays it from scratch); when no chunk of the current size can go, the chunks get
// smaller, down to single operations. Then it simplifies operations one at a time: shorter id
// lists (halves, then single ids), smaller allocations. Every candidate is tried in a fixed
// order, so the same failure always shrinks to the same sequence. The number of replays is
// bounded (ShrinkOptions::max_replays); the result is the shortest failing sequence found.
//
// It knows nothing about backends: "still fails" is whatever the predicate says (the fuzzer asks
// for the same check to fail again).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/op.h"

namespace kvtwin::props {

struct ShrinkOptions {
  std::uint64_t max_replays = 4000;
  // A budget of work rather than attempts: no replay starts once the replayed sequences hold
  // this many operations in all (a replay of a large pool costs per operation). 0: no budget.
  std::uint64_t max_replayed_ops = 0;
};

struct ShrinkStats {
  std::uint64_t replays = 0;
  std::uint64_t replayed_ops = 0;
  std::uint64_t ops_before = 0;
  std::uint64_t ops_after = 0;
};

using StillFails = std::function<bool(const std::vector<Op>&)>;

// `ops` must fail (the predicate holds for it); returns a failing sequence no longer than it.
std::vector<Op> shrink_ops(std::vector<Op> ops, const StillFails& still_fails, const ShrinkOptions& options = {},
                           ShrinkStats* stats = nullptr);

// Smaller variants of one operation, most aggressive first (for the simplification pass; exposed
// for tests). Every variant is a valid operation of the same kind.
std::vector<Op> simpler_variants(const Op& op);

}  // namespace kvtwin::props
