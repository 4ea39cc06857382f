// The planted sizing switch (planted_sizing.h): a count of holds per bug, per thread.
#include "core/planted_sizing.h"

#include "core/check.h"

namespace kvtwin {
namespace {
thread_local std::uint32_t held_one_sided_floor = 0;
thread_local std::uint32_t held_row_address_32bit = 0;
thread_local std::uint32_t held_state_sink_per_page = 0;
thread_local std::uint32_t held_state_entry_padded = 0;

std::uint32_t& holds_of(PlantedSizingBug bug) {
  KVTWIN_CHECK(bug != PlantedSizingBug::none, "a planted sizing bug names a bug");
  if (bug == PlantedSizingBug::state_sink_per_page) return held_state_sink_per_page;
  if (bug == PlantedSizingBug::state_entry_padded) return held_state_entry_padded;
  return bug == PlantedSizingBug::one_sided_floor ? held_one_sided_floor : held_row_address_32bit;
}
}  // namespace

PlantedSizingBug planted_sizing_bug() {
  if (held_one_sided_floor != 0) return PlantedSizingBug::one_sided_floor;
  if (held_row_address_32bit != 0) return PlantedSizingBug::row_address_32bit;
  if (held_state_sink_per_page != 0) return PlantedSizingBug::state_sink_per_page;
  if (held_state_entry_padded != 0) return PlantedSizingBug::state_entry_padded;
  return PlantedSizingBug::none;
}

PlantedSizingHold::PlantedSizingHold(PlantedSizingBug bug) : bug_(bug) { ++holds_of(bug_); }

PlantedSizingHold::~PlantedSizingHold() {
  std::uint32_t& holds = holds_of(bug_);
  if (holds != 0) --holds;  // (destroyed on another thread, it finds nothing of its own to release)
}

}  // namespace kvtwin
