// A self-test switch: a real sizing bug planted in core's own arithmetic, for this thread only.
//
// Why it exists: the model, the GPU and the shadow all size a pool and address its rows through
// core (size_pool(), row_byte_address()), so a bug there is the same bug everywhere and only an
// independent derivation (props/shadow_sizing.h) can see it. `kvtwin selftest` proves that it
// does by planting such a bug for real: while a PlantedSizingHold lives (the planted model of
// traces/backends.cpp holds one for its lifetime), size_pool() and row_byte_address() on the
// holding thread compute what the bug computes.
//
//   one_sided_floor     the reserved floor from the first sub-pool of the chain only (SPEC 3 takes
//                       the largest entry and page of every sub-pool);
//   row_address_32bit   a row's byte address kept in 32 bits, so it wraps past 4 GiB (SPEC 2:
//                       all byte arithmetic is 64-bit and checked);
//   state_sink_per_page the state entry charged page_size times in the sink: the reserved floor
//                       counts page_size * E_state (SPEC 11: E_state itself; SPEC 10.23);
//   state_entry_padded  the state entry padded to 32 bytes as a token entry is (SPEC 11: no padding;
//                       SPEC 10.23): the slot stride of every state view and the budget grow.
//
// Off by default; reading it is one thread-local load. Never hold one outside a self-test.
#pragma once

#include <cstdint>

namespace kvtwin {

enum class PlantedSizingBug : std::uint8_t {
  none,
  one_sided_floor,
  row_address_32bit,
  state_sink_per_page,
  state_entry_padded,
};

// The bug planted in this thread (the first held, in the order above), or none.
PlantedSizingBug planted_sizing_bug();

// Plants `bug` in the constructing thread until destroyed (on that thread). Holds may overlap.
class PlantedSizingHold {
 public:
  explicit PlantedSizingHold(PlantedSizingBug bug);
  ~PlantedSizingHold();
  PlantedSizingHold(const PlantedSizingHold&) = delete;
  PlantedSizingHold& operator=(const PlantedSizingHold&) = delete;

 private:
  PlantedSizingBug bug_;
};

}  // namespace kvtwin
