// The model's allocation-failure injector (allocation_faults.h).
#include "sim/allocation_faults.h"

#include <new>

namespace kvtwin::sim {
namespace {

thread_local std::uint64_t t_fail_at = 0;
thread_local std::uint64_t t_counted = 0;

}  // namespace

namespace detail {
thread_local bool allocation_faults_armed = false;

void allocation_point_slow() {
  if (++t_counted == t_fail_at) throw std::bad_alloc();
}
}  // namespace detail

void arm_allocation_faults(std::uint64_t fail_at) {
  t_fail_at = fail_at;
  t_counted = 0;
  detail::allocation_faults_armed = true;
}

void disarm_allocation_faults() { detail::allocation_faults_armed = false; }

std::uint64_t allocation_points_counted() { return t_counted; }

}  // namespace kvtwin::sim
