// The GPU's host plans of the float middle (gpu/float_span.h) against the model's float
// (sim/page_allocator.h), without a device: the same seeded walk of allocations between moving
// limits, frees, absorptions and make_room relocations, compared after every step. The GPU's
// device half is held to this host copy by DeviceAllocator::verify() on the H200.
#include "gpu/float_span.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "sim/page_allocator.h"

namespace kvtwin::gpu {
namespace {

SubPoolGeometry float_geometry(std::uint64_t pages, std::uint64_t page_bytes) {
  SubPoolGeometry g;
  g.name = "swa";
  g.direction = GrowDirection::float_middle;
  g.entry_bytes = page_bytes;
  g.page_size = 1;
  g.num_pages = pages;
  g.max_slots = pages;
  g.min_page_index = 1;
  g.min_slot_index = 1;
  g.page_bytes = page_bytes;
  return g;
}

void expect_same(const FloatSpan& gpu, const sim::AllocatorSide& model, const std::string& at) {
  ASSERT_EQ(gpu.low(), model.band_begin()) << at;
  ASSERT_EQ(gpu.high(), model.band_end()) << at;
  ASSERT_EQ(gpu.allocated(), static_cast<std::int64_t>(model.allocated_pages())) << at;
  ASSERT_EQ(std::vector<std::int64_t>(gpu.holes().begin(), gpu.holes().end()),
            std::vector<std::int64_t>(model.holes().begin(), model.holes().end()))
      << at;
  for (std::size_t v = 0; v < gpu.v2p().size(); ++v)
    ASSERT_EQ(gpu.v2p()[v], model.physical_of(static_cast<std::int64_t>(v))) << at << ", v2p row " << v;
}

TEST(FloatSpan, PlansWhatTheModelsFloatPlansOverASeededWalk) {
  constexpr std::int64_t kPages = 48, kVirtual = 64;
  constexpr std::uint64_t kPageBytes = 96;
  std::uint64_t relocations = 0, moved = 0, extensions_down = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const SubPoolGeometry g = float_geometry(kPages, kPageBytes);
    const std::int64_t start = kPages / 2;
    FloatSpan gpu;
    gpu.init(g, kVirtual, start);
    sim::AllocatorSide model(g, kVirtual, CompactionMode::lazy, start);
    Rng rng(seed);
    std::vector<std::int64_t> free_ids, bound;
    for (std::int64_t v = 1; v < kVirtual; ++v) free_ids.push_back(v);
    for (int step = 0; step < 300; ++step) {
      const std::string at = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      // Limits that wander as the two ends would: the state below, the owner above.
      const std::uint64_t low_limit = rng.below(kPages / 3) * kPageBytes + rng.below(kPageBytes);
      const std::uint64_t high_limit = (kPages - rng.below(kPages / 3)) * kPageBytes - rng.below(kPageBytes);
      const std::uint64_t what = rng.below(10);
      if (what < 5 && !free_ids.empty()) {
        const std::uint64_t k = 1 + rng.below(std::min<std::uint64_t>(4, free_ids.size()));
        std::vector<std::int64_t> pages = gpu.pages_for(k, low_limit, high_limit);
        ASSERT_EQ(pages, model.float_pages_for(k, low_limit, high_limit)) << at;
        std::vector<std::int64_t> vpages(free_ids.begin(), free_ids.begin() + static_cast<std::ptrdiff_t>(k));
        if (pages.empty() && gpu.live()) {
          // make_room: the GPU's packed span, and the model's relocation to the same place.
          const std::optional<FloatRelocation> r = gpu.plan_make_room(low_limit, high_limit, k);
          if (!r) continue;
          const sim::CompactionPlan m = model.plan_relocation(r->new_low);
          ASSERT_EQ(r->new_high, m.new_watermark) << at;
          ASSERT_EQ(r->sources.size(), m.moves.size()) << at;
          for (std::size_t i = 0; i < m.moves.size(); ++i) {
            ASSERT_EQ(r->sources[i], m.moves[i].src) << at << ", move " << i;
            ASSERT_EQ(r->destinations[i], m.moves[i].dst) << at << ", move " << i;
          }
          const std::int64_t lo = std::max<std::int64_t>(1, static_cast<std::int64_t>((low_limit + kPageBytes - 1) / kPageBytes));
          const std::int64_t hi = std::min<std::int64_t>(kPages, static_cast<std::int64_t>(high_limit / kPageBytes));
          ASSERT_GE(r->new_low, lo) << at;
          ASSERT_LE(r->new_high + static_cast<std::int64_t>(k), hi) << at;
          gpu.relocate(*r);
          model.apply_relocation(m);
          ++relocations;
          moved += m.moves.size();
          expect_same(gpu, model, at + " (relocated)");
          pages = gpu.extension(r->new_low, r->new_high, k, low_limit, high_limit);
          std::vector<std::int64_t> model_pages = model.float_extension(r->new_low, r->new_high, k, low_limit, high_limit);
          std::sort(model_pages.begin(), model_pages.end());
          ASSERT_EQ(pages, model_pages) << at;
        }
        if (pages.empty()) continue;
        if (pages.front() < gpu.low()) ++extensions_down;
        gpu.bind(vpages, pages);
        model.bind_pages(vpages, pages);
        free_ids.erase(free_ids.begin(), free_ids.begin() + static_cast<std::ptrdiff_t>(k));
        bound.insert(bound.end(), vpages.begin(), vpages.end());
      } else if (what < 8 && !bound.empty()) {
        const std::size_t i = static_cast<std::size_t>(rng.below(bound.size()));
        ASSERT_EQ(gpu.unbind(bound[i]), model.unbind(bound[i])) << at;
        free_ids.push_back(bound[i]);
        bound.erase(bound.begin() + static_cast<std::ptrdiff_t>(i));
        if (!gpu.live()) {
          gpu.absorb();
          model.absorb_boundary_holes();
        }
      } else {
        gpu.absorb();
        model.absorb_boundary_holes();
      }
      expect_same(gpu, model, at);
    }
  }
  // The walk reached what it is about.
  EXPECT_GT(relocations, 20u);
  EXPECT_GT(moved, 100u);
  EXPECT_GT(extensions_down, 20u);
}

TEST(FloatSpan, ARelocationCopiesDownwardMovesAscendingThenUpwardOnesDescending) {
  FloatSpan span;
  span.init(float_geometry(32, 64), 16, 16);
  // Live pages 16, 18, 19, 21 (holes 17, 20) packed from page 17: 16 -> 17 moves up, 18 and 19
  // stay, 21 -> 20 moves down.
  span.bind({1, 2, 3, 4, 5, 6}, {16, 17, 18, 19, 20, 21});
  span.unbind(2);
  span.unbind(5);
  const std::optional<FloatRelocation> r = span.plan_make_room(17 * 64, 32 * 64, 11);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->new_low, 17);
  EXPECT_EQ(r->new_high, 21);
  EXPECT_EQ(r->sources, (std::vector<std::int64_t>{21, 16}));
  EXPECT_EQ(r->destinations, (std::vector<std::int64_t>{20, 17}));
  EXPECT_FALSE(span.plan_make_room(17 * 64, 32 * 64, 12).has_value()) << "no room: nothing planned";
  span.relocate(*r);
  EXPECT_TRUE(span.holes().empty());
  EXPECT_EQ(span.physical_of(1), 17);
  EXPECT_EQ(span.physical_of(6), 20);
}

}  // namespace
}  // namespace kvtwin::gpu
