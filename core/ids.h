// Strong id types. A virtual token id and a physical token id are both int64 to a kernel, and
// handing one where the other is meant is the bug this project exists to catch (SPEC.md
// section 10, bug 1). In kvtwin's own code they are distinct types; conversion between them
// goes through a translation table, never through a cast.
//
//   virtual token id  vt   what schedulers and caches hold; stable for an allocation's life
//   physical token id pt   what kernels index: pt = ppage * page_size + slot
//   virtual page id        vt / page_size
//   physical page id       pt / page_size
//
// Bulk buffers that mirror what a kernel sees (a batch's out_cache_loc, a page table) stay
// plain std::vector<std::int64_t>: that is what the device holds too.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace kvtwin {

template <class Tag>
struct StrongId {
  std::int64_t value = 0;

  constexpr StrongId() = default;
  constexpr explicit StrongId(std::int64_t v) : value(v) {}
  constexpr auto operator<=>(const StrongId&) const = default;
};

using VirtualTokenId = StrongId<struct VirtualTokenTag>;
using PhysicalTokenId = StrongId<struct PhysicalTokenTag>;
using VirtualPageId = StrongId<struct VirtualPageTag>;
using PhysicalPageId = StrongId<struct PhysicalPageTag>;

// Page of a token and slot within it: the only sanctioned ways to split an id.
constexpr VirtualPageId page_of(VirtualTokenId t, std::int64_t page_size) {
  return VirtualPageId{t.value / page_size};
}
constexpr PhysicalPageId page_of(PhysicalTokenId t, std::int64_t page_size) {
  return PhysicalPageId{t.value / page_size};
}
constexpr std::int64_t slot_of(VirtualTokenId t, std::int64_t page_size) { return t.value % page_size; }
constexpr std::int64_t slot_of(PhysicalTokenId t, std::int64_t page_size) { return t.value % page_size; }
constexpr PhysicalTokenId token_at(PhysicalPageId p, std::int64_t page_size, std::int64_t slot) {
  return PhysicalTokenId{p.value * page_size + slot};
}
constexpr VirtualTokenId token_at(VirtualPageId p, std::int64_t page_size, std::int64_t slot) {
  return VirtualTokenId{p.value * page_size + slot};
}

// The sink: slot 0 / page 0 of every sub-pool. Never allocated; dead lanes land there.
inline constexpr PhysicalPageId kSinkPage{0};
inline constexpr PhysicalTokenId kSinkToken{0};

// A byte count. Arithmetic on it goes through checked.h.
struct ByteCount {
  std::uint64_t bytes = 0;
  constexpr auto operator<=>(const ByteCount&) const = default;
};

}  // namespace kvtwin

template <class Tag>
struct std::hash<kvtwin::StrongId<Tag>> {
  std::size_t operator()(const kvtwin::StrongId<Tag>& id) const noexcept {
    return std::hash<std::int64_t>{}(id.value);
  }
};
