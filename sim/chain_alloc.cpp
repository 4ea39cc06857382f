// Allocation across a hybrid chain (SPEC.md section 11). See chain_alloc.h.
#include "sim/chain_alloc.h"

#include <algorithm>

#include "core/check.h"

namespace kvtwin::sim {
namespace {

bool float_live(const PageAllocator& tokens) {
  return tokens.is_composite() && tokens.side(1).allocated_pages() > 0;
}

}  // namespace

std::uint64_t chain_low_end_bytes(const PageAllocator& tokens, const StateAllocator& state) {
  if (float_live(tokens)) return tokens.side(1).band_end_byte();
  return state.frontier_bytes();
}

ChainAllocPlan plan_chain_alloc(const PageAllocator& tokens, const StateAllocator& state, std::uint64_t k) {
  ChainAllocPlan plan;
  plan.k = k;
  const AllocatorSide& owner = tokens.owner();
  if (k > tokens.free_queue().size() || k > owner.remaining_pages()) return plan;
  // The owner (grows down): its holes first, then band pages below its watermark (SPEC 4, 4.2).
  const std::uint64_t from_holes = std::min<std::uint64_t>(k, owner.holes().size());
  const std::uint64_t new_pages = k - from_holes;
  const std::int64_t new_begin = owner.band_begin() - static_cast<std::int64_t>(new_pages);
  if (new_begin < owner.min_page()) return plan;
  const std::uint64_t owner_begin_bytes = static_cast<std::uint64_t>(new_begin) * owner.page_bytes();
  const std::uint64_t state_end = state.frontier_bytes();
  if (owner_begin_bytes < state_end) return plan;  // the state end is never moved by the owner
  if (!tokens.is_composite()) {
    plan.fits = true;  // [state up | owner down]
    return plan;
  }
  // The float (SPEC 11): its holes, then the gaps, between the state frontier and F'.
  const AllocatorSide& fl = tokens.side(1);
  if (k > fl.remaining_pages()) return plan;
  plan.float_pages = fl.float_pages_for(k, state_end, owner_begin_bytes);
  if (plan.float_pages.size() == k) {
    plan.fits = true;
    return plan;
  }
  plan.float_pages.clear();
  if (fl.allocated_pages() == 0) return plan;  // an empty float that does not fit: no room
  // make_room: F' cuts into the span. The live pages are laid side by side away from the owner,
  // in the middle of the room that is left once they and the k new pages fit (so that the float
  // meets an end again as late as it can), each moved at most once; the new pages then extend
  // them toward the larger gap.
  const auto epp = fl.page_bytes();
  const std::int64_t lo = std::max<std::int64_t>(fl.min_page(), static_cast<std::int64_t>((state_end + epp - 1) / epp));
  const std::int64_t hi = std::min<std::int64_t>(fl.num_pages(), static_cast<std::int64_t>(owner_begin_bytes / epp));
  const auto live = static_cast<std::int64_t>(fl.allocated_pages());
  if (hi - lo < live + static_cast<std::int64_t>(k)) return plan;  // cannot: nothing changes
  const std::int64_t new_low = lo + (hi - lo - live - static_cast<std::int64_t>(k)) / 2;
  plan.relocation = fl.plan_relocation(new_low);
  plan.float_pages = fl.float_extension(new_low, new_low + live, k, state_end, owner_begin_bytes);
  std::sort(plan.float_pages.begin(), plan.float_pages.end());
  plan.fits = true;
  return plan;
}

std::vector<std::int64_t> commit_chain_alloc(PageAllocator& tokens, const ChainAllocPlan& plan) {
  KVTWIN_CHECK(plan.fits, "commit_chain_alloc commits a plan that fits");
  const std::vector<std::int64_t> vpages = tokens.take_free_ids(plan.k);
  // SPEC 4.3: the owner first, then the SWA side on the same virtual pages.
  tokens.side_mut(0).bind(vpages);
  if (tokens.is_composite()) {
    AllocatorSide& fl = tokens.side_mut(1);
    if (plan.relocation) fl.apply_relocation(*plan.relocation);
    fl.bind_pages(vpages, plan.float_pages);
  }
  return vpages;
}

StateAllocPlan plan_state_alloc(const PageAllocator& tokens, const StateAllocator& state) {
  StateAllocPlan plan;
  const std::int64_t slot = state.next_physical();
  if (slot < 0) return plan;
  // SPEC 10.22: a slot compaction moved away from under a reader is not reused until it is done
  // (the model refuses a plan that would take a quarantined slot).
  plan.quarantined = state.quarantined().count(slot) != 0;
  const AllocatorSide& slots = state.slots();
  if (slot < slots.band_end()) {
    plan.fits = true;  // a hole: no new bytes
    return plan;
  }
  const std::uint64_t slot_end = static_cast<std::uint64_t>(slot + 1) * slots.page_bytes();
  const std::uint64_t owner_begin = tokens.owner().band_begin_byte();
  if (!float_live(tokens)) {
    plan.fits = slot_end <= owner_begin;  // an empty float is transparent
    return plan;
  }
  const AllocatorSide& fl = tokens.side(1);
  if (slot_end <= fl.band_begin_byte()) {
    plan.fits = true;
    return plan;
  }
  // make_room: the float laid side by side away from the state end, in the middle of the room
  // between the slot's end and the owner's band (as for the owner's make_room).
  const auto epp = fl.page_bytes();
  const std::int64_t lo = std::max<std::int64_t>(fl.min_page(), static_cast<std::int64_t>((slot_end + epp - 1) / epp));
  const std::int64_t hi = std::min<std::int64_t>(fl.num_pages(), static_cast<std::int64_t>(owner_begin / epp));
  const auto live = static_cast<std::int64_t>(fl.allocated_pages());
  if (hi - lo < live) return plan;  // nothing changes
  plan.relocation = fl.plan_relocation(lo + (hi - lo - live) / 2);
  plan.fits = true;
  return plan;
}

std::int64_t commit_state_alloc(PageAllocator& tokens, StateAllocator& state, std::uint64_t request,
                                const StateAllocPlan& plan) {
  KVTWIN_CHECK(plan.fits, "commit_state_alloc commits a plan that fits");
  if (plan.relocation) tokens.side_mut(1).apply_relocation(*plan.relocation);
  return state.alloc(request);
}

}  // namespace kvtwin::sim
