// The state sub-pool's allocator (SPEC.md section 11): one slot per request, page size 1, at the
// low end of a hybrid chain.
//
// How it works: the slots are an ordinary grow-up AllocatorSide (sim/page_allocator.h) whose
// pages are single slots of E_state bytes, so binding, unbinding, holes and end compaction are
// exactly SPEC 4's with page size 1. Around it: its own FIFO queue of free virtual slot ids
// (min_slot_index .. num_slots - 1, taken from the front, freed ids appended in ascending order),
// the request -> virtual slot table, and the quarantine of SPEC 10.22: a slot that compaction
// moved away while a reader (the forward that read it) still held it keeps its old bytes for that
// reader, so its physical slot is not reused (not bound, not covered by another sub-pool's
// growth) until every such reader is done.
//
// What it does not cover: bytes (the model copies the envelopes), the float middle and the
// owner's pages (sim/page_allocator.h), argument validation with user-facing messages (model.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "core/pool_config.h"
#include "sim/page_allocator.h"

namespace kvtwin::sim {

class StateAllocator {
 public:
  StateAllocator(const SubPoolGeometry& geometry, CompactionMode mode);

  const AllocatorSide& slots() const { return slots_; }
  AllocatorSide& slots_for_test() { return slots_; }
  const std::deque<std::int64_t>& free_queue() const { return free_queue_; }
  std::deque<std::int64_t>& free_queue_for_test() { return free_queue_; }
  const std::map<std::uint64_t, std::int64_t>& requests() const { return requests_; }
  std::map<std::uint64_t, std::int64_t>& requests_for_test() { return requests_; }
  // Physical slots moved away from while a reader held them (SPEC 10.22), ascending.
  const std::set<std::int64_t>& quarantined() const { return quarantined_; }
  std::uint64_t entry_bytes() const { return slots_.page_bytes(); }

  // The virtual slot of a request, or -1.
  std::int64_t slot_of(std::uint64_t request) const;

  // The physical slot the next allocation takes (SPEC 4 with page size 1: the lowest hole, else
  // the watermark), or -1 when no virtual id is free or no usable slot is left.
  std::int64_t next_physical() const;
  // One past the highest byte this sub-pool may not give away: its band's end, or past its
  // highest quarantined slot (SPEC 10.22: those bytes still hold what a reader reads).
  std::uint64_t frontier_bytes() const;

  // Binds the front virtual id to next_physical() for `request` (the caller checked the room and
  // the quarantine). Returns the virtual slot.
  std::int64_t alloc(std::uint64_t request);
  // Unbinds the request's slot and forgets the request; eager mode compacts (returns the plan the
  // caller moves bytes by), lazy mode leaves a hole. `plan_free` is pure; `commit_free` applies.
  CompactionPlan plan_free(std::uint64_t request, const PairingRule& pairing) const;
  CompactionPlan plan_flush(const PairingRule& pairing) const;
  void commit_free(std::uint64_t request, const CompactionPlan& plan);
  void commit_flush(const CompactionPlan& plan);

  // SPEC 10.22: `held(slot)` says whether an open reader holds a physical slot; a move's source
  // that is held enters the quarantine. Called with each committed plan.
  template <class Held>
  void quarantine_moved(const CompactionPlan& plan, Held&& held) {
    for (const PagePair& m : plan.moves)
      if (held(m.src)) quarantined_.insert(m.src);
  }
  // A reader ended: slots no reader holds any more leave the quarantine.
  template <class Held>
  void release_quarantine(Held&& held) {
    for (auto it = quarantined_.begin(); it != quarantined_.end();) it = held(*it) ? std::next(it) : quarantined_.erase(it);
  }

  void clear_changes() { slots_.clear_changes(); }

 private:
  AllocatorSide slots_;
  CompactionMode mode_;
  std::deque<std::int64_t> free_queue_;
  std::map<std::uint64_t, std::int64_t> requests_;  // request -> virtual slot
  std::set<std::int64_t> quarantined_;
};

}  // namespace kvtwin::sim
