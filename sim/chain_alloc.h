// Allocation across a hybrid chain (SPEC.md section 11): [state up | owner down] and the tri-pool
// [state up | swa float | owner down] share one byte budget, so an allocation on one end looks at
// where the others are.
//
// How it works: like page_allocator.h, every allocation is a pure plan and a commit. An owner
// allocation of k pages moves the owner's band down to F'; the float must then fit between the
// state frontier and F' (its holes first, then its gaps); when F' cuts into the float's span, the
// float is relocated away from the owner (make_room): its live pages laid side by side in the
// middle of the room that is left, each moved once; when even that cannot make room, nothing
// changes. A state slot takes the lowest state hole or the state watermark; when its bytes lie
// under the float, the float is relocated away from the state end the same way; a slot that still
// holds what a reader reads (the quarantine of SPEC 10.22) is never taken.
//
// What it does not cover: readers (the model checks a plan's moves against them), bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sim/page_allocator.h"
#include "sim/state_allocator.h"

namespace kvtwin::sim {

// A hybrid chain's allocation of k pages (SPEC 11): the owner's pages, the float's pages, and the
// float's relocation when the owner's growth cuts into its span. Pure data.
struct ChainAllocPlan {
  bool fits = false;
  std::uint64_t k = 0;
  std::vector<std::int64_t> float_pages;
  std::optional<CompactionPlan> relocation;
};

// A state slot's allocation (SPEC 11): fits, or not; the float's relocation when the slot needs
// bytes the float occupies.
struct StateAllocPlan {
  bool fits = false;
  bool quarantined = false;  // the slot it would take still holds what a reader reads (SPEC 10.22): refuse it
  std::optional<CompactionPlan> relocation;
};

ChainAllocPlan plan_chain_alloc(const PageAllocator& tokens, const StateAllocator& state, std::uint64_t k);
// Binds the plan's pages (after its relocation) and returns the virtual pages.
std::vector<std::int64_t> commit_chain_alloc(PageAllocator& tokens, const ChainAllocPlan& plan);

StateAllocPlan plan_state_alloc(const PageAllocator& tokens, const StateAllocator& state);
// Relocates the float (when planned) and binds a slot for `request`; returns the virtual slot.
std::int64_t commit_state_alloc(PageAllocator& tokens, StateAllocator& state, std::uint64_t request,
                                const StateAllocPlan& plan);

// The state frontier and the float's byte bounds the owner's band must stay above (SPEC 11): the
// float's span when it holds a live page, else the state frontier (an empty float is transparent).
std::uint64_t chain_low_end_bytes(const PageAllocator& tokens, const StateAllocator& state);

}  // namespace kvtwin::sim
