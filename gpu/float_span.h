// The float middle of a tri-pool on the GPU (SPEC.md section 11), planned on the host: the host's
// copy of the float's tables, from which its allocations, absorptions and relocations are chosen.
//
// Why a host copy: every float decision (which holes, which side the span grows toward, where
// make_room packs the live pages) needs the span's holes and live pages in order, and the device
// tables would have to come back for each one. The float has at most num_pages pages, so the copy
// is small; it changes with every device change (DeviceAllocator applies each plan to both, the
// device through DeviceSide's float methods), and DeviceAllocator::verify() holds it against the
// device tables. Pure host code (no CUDA header), so it is tested without a device.
//
// The rules (SPEC 11): the span [low, high) starts empty at the middle of the buffer; an
// allocation takes the span's holes first (ascending, no copy), then grows the span one page at a
// time toward the larger gap (in bytes; a tie goes up); a free leaves a hole; holes at the span's
// ends leave it when absorbed (a flush, or at once in eager mode); an empty float is a point and
// transparent; make_room packs the live pages side by side in the middle of the room left, each
// moved at most once, in an order in which every destination is free when it is written.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/sizing.h"

namespace kvtwin::gpu {

// A planned relocation: sources[i] -> destinations[i], in copy order (the pages moving down
// ascending, then the ones moving up descending), and the packed span it leaves.
struct FloatRelocation {
  std::int64_t new_low = 0, new_high = 0;
  std::vector<std::int64_t> sources, destinations;
};

class FloatSpan {
 public:
  void init(const SubPoolGeometry& geometry, std::int64_t num_virtual, std::int64_t start_page);

  std::int64_t low() const { return low_; }
  std::int64_t high() const { return high_; }
  std::int64_t allocated() const { return allocated_; }
  bool live() const { return allocated_ > 0; }
  std::int64_t remaining() const { return num_pages_ - min_page_ - allocated_; }
  const std::set<std::int64_t>& holes() const { return holes_; }
  std::uint64_t begin_byte() const { return static_cast<std::uint64_t>(low_) * page_bytes_; }
  std::uint64_t end_byte() const { return static_cast<std::uint64_t>(high_) * page_bytes_; }
  std::int64_t physical_of(std::int64_t vpage) const { return v2p_[static_cast<std::size_t>(vpage)]; }
  const std::vector<std::int64_t>& v2p() const { return v2p_; }
  const std::vector<std::int64_t>& p2v() const { return p2v_; }

  // The physical pages for k new pages with the span between the byte limits (the state's
  // frontier below, the owner's band above): its holes first, then the extension, ascending.
  // Empty when they do not fit without a relocation.
  std::vector<std::int64_t> pages_for(std::uint64_t k, std::uint64_t low_limit, std::uint64_t high_limit) const;
  // make_room: the live pages packed in the middle of the room the limits leave once they and
  // `extra` new pages fit; nullopt when they do not (nothing changes).
  std::optional<FloatRelocation> plan_make_room(std::uint64_t low_limit, std::uint64_t high_limit,
                                                std::uint64_t extra) const;
  // The k pages that extend the packed span [low, high) toward the larger gap, ascending.
  std::vector<std::int64_t> extension(std::int64_t low, std::int64_t high, std::uint64_t k, std::uint64_t low_limit,
                                      std::uint64_t high_limit) const;

  // The host copy's changes, each the device's too. bind: vpages[i] -> pages[i]; returns how
  // many of the pages were holes.
  std::int64_t bind(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages);
  // Unbinds a bound virtual page; its page becomes a hole, which is returned.
  std::int64_t unbind(std::int64_t vpage);
  // The holes at the span's ends leave it (every hole, when the float is empty: a point); returns them.
  std::vector<std::int64_t> absorb();
  void relocate(const FloatRelocation& plan);

 private:
  std::int64_t first_page_within(std::uint64_t low_limit) const;
  std::int64_t last_page_within(std::uint64_t high_limit) const;

  std::uint64_t page_bytes_ = 1;
  std::int64_t min_page_ = 1, num_pages_ = 0;
  std::int64_t low_ = 0, high_ = 0;  // the span [low, high)
  std::int64_t allocated_ = 0;
  std::set<std::int64_t> holes_;
  std::vector<std::int64_t> v2p_, p2v_;
};

}  // namespace kvtwin::gpu
