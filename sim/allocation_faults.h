// BUGGIFY for the model's memory: a failing allocation, on demand.
//
// The model's allocations that a trace's numbers size (the pool's bytes and tables at build, the
// content ledger's rows of a page, a batch's lanes, a captured graph's buffers) each pass an
// allocation point first. Armed by a test, the injector counts those points on the calling thread
// and makes the n-th throw std::bad_alloc, as a failed allocation there would. Model::apply turns
// a std::bad_alloc, injected or real, into an ErrorKind::environment refusal (sim/model.h says
// which operations stay as they were and which poison the model). Disarmed (always, outside
// tests), a point costs one thread-local load.
#pragma once

#include <cstdint>

namespace kvtwin::sim {

// Arms the injector on this thread: point number `fail_at` (1-based) throws; 0 only counts.
void arm_allocation_faults(std::uint64_t fail_at);
void disarm_allocation_faults();
// Points passed on this thread since arming.
std::uint64_t allocation_points_counted();

namespace detail {
extern thread_local bool allocation_faults_armed;
void allocation_point_slow();
}  // namespace detail

// Called before an allocation the input sizes; throws std::bad_alloc when the injector says so.
inline void allocation_point() {
  if (detail::allocation_faults_armed) detail::allocation_point_slow();
}

}  // namespace kvtwin::sim
