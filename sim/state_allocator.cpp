// The state sub-pool's allocator (SPEC.md section 11). See state_allocator.h.
#include "sim/state_allocator.h"

#include <algorithm>

#include "core/check.h"

namespace kvtwin::sim {

StateAllocator::StateAllocator(const SubPoolGeometry& geometry, CompactionMode mode)
    : slots_(geometry, static_cast<std::int64_t>(geometry.num_pages), mode), mode_(mode) {
  KVTWIN_CHECK(geometry.page_size == 1 && geometry.direction == GrowDirection::up,
               "the state sub-pool is slot-granular and grows up");
  // SPEC 11: its own FIFO queue of virtual slot ids, min_slot_index .. num_slots - 1 ascending.
  for (std::int64_t v = slots_.min_page(); v < slots_.num_pages(); ++v) free_queue_.push_back(v);
}

std::int64_t StateAllocator::slot_of(std::uint64_t request) const {
  auto it = requests_.find(request);
  return it == requests_.end() ? -1 : it->second;
}

std::int64_t StateAllocator::next_physical() const {
  if (free_queue_.empty() || slots_.remaining_pages() == 0) return -1;
  return slots_.pages_for(1).front();
}

std::uint64_t StateAllocator::frontier_bytes() const {
  std::uint64_t end = slots_.band_end_byte();
  if (!quarantined_.empty())
    end = std::max(end, static_cast<std::uint64_t>(*quarantined_.rbegin() + 1) * slots_.page_bytes());
  return end;
}

std::int64_t StateAllocator::alloc(std::uint64_t request) {
  KVTWIN_CHECK(!free_queue_.empty() && slot_of(request) < 0, "a state alloc takes a free id for a request without one");
  const std::int64_t v = free_queue_.front();
  free_queue_.pop_front();
  slots_.bind({v});
  requests_.emplace(request, v);
  return v;
}

CompactionPlan StateAllocator::plan_free(std::uint64_t request, const PairingRule& pairing) const {
  const std::int64_t v = slot_of(request);
  KVTWIN_CHECK(v >= 0, "a state free names a request that holds a slot");
  CompactionPlan plan;
  // SPEC 11: the ordinary end compaction of SPEC 4.1 with page size 1 (eager); lazy leaves a hole.
  if (mode_ == CompactionMode::eager) plan = slots_.plan_compaction({slots_.physical_of(v)}, pairing);
  return plan;
}

CompactionPlan StateAllocator::plan_flush(const PairingRule& pairing) const {
  const std::vector<std::int64_t> holes(slots_.holes().begin(), slots_.holes().end());
  return slots_.plan_compaction(holes, pairing);
}

void StateAllocator::commit_free(std::uint64_t request, const CompactionPlan& plan) {
  const std::int64_t v = slot_of(request);
  KVTWIN_CHECK(v >= 0, "a state free names a request that holds a slot");
  slots_.unbind(v);
  if (mode_ == CompactionMode::eager) slots_.apply_compaction(plan);
  requests_.erase(request);
  // SPEC 4: freed ids are appended to the queue's back.
  free_queue_.push_back(v);
}

void StateAllocator::commit_flush(const CompactionPlan& plan) { slots_.apply_compaction(plan); }

}  // namespace kvtwin::sim
