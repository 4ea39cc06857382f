// The GPU allocator's host copy of a side (gpu/side_copy.h) against the model's allocator side
// (sim/page_allocator.h), without a device: the same seeded walk of allocations, frees and
// flushes on grow-up and grow-down sides, eager and lazy, compared after every step (every
// table, and every compaction's moves). The copy plans what the device applies; on the H200,
// DeviceAllocator::verify() holds it against the device tables (check_side_copy).
#include "gpu/side_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "core/rng.h"
#include "sim/page_allocator.h"

namespace kvtwin::gpu {
namespace {

SubPoolGeometry side_geometry(GrowDirection direction, std::uint64_t pages) {
  SubPoolGeometry g;
  g.name = direction == GrowDirection::up ? "full" : "swa";
  g.direction = direction;
  g.entry_bytes = 64;
  g.page_size = 1;
  g.num_pages = pages;
  g.max_slots = pages;
  g.min_page_index = 1;
  g.min_slot_index = 1;
  g.page_bytes = 64;
  return g;
}

void expect_same(const SideCopy& copy, const sim::AllocatorSide& model, const std::string& at) {
  ASSERT_EQ(copy.v2p(), model.v2p()) << at;
  ASSERT_EQ(copy.p2v(), model.p2v()) << at;
  ASSERT_EQ(copy.watermark(), model.watermark()) << at;
  ASSERT_EQ(copy.allocated(), static_cast<std::int64_t>(model.allocated_pages())) << at;
  ASSERT_EQ(copy.holes(), model.holes()) << at;
}

void expect_same_moves(const SideMoves& copy, const sim::CompactionPlan& model, const std::string& at) {
  ASSERT_EQ(copy.new_watermark, model.new_watermark) << at;
  ASSERT_EQ(copy.sources.size(), model.moves.size()) << at;
  for (std::size_t i = 0; i < model.moves.size(); ++i) {
    ASSERT_EQ(copy.sources[i], model.moves[i].src) << at << ", move " << i;
    ASSERT_EQ(copy.destinations[i], model.moves[i].dst) << at << ", move " << i;
  }
}

TEST(SideCopy, PlaysAsTheModelsSideOnEverySideAndMode) {
  constexpr std::int64_t kPages = 40, kVirtual = 48;
  for (const GrowDirection direction : {GrowDirection::up, GrowDirection::down}) {
    for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy}) {
      std::uint64_t moved = 0, hole_binds = 0, flushes = 0;
      for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        const SubPoolGeometry g = side_geometry(direction, kPages);
        SideCopy copy;
        copy.init(g, kVirtual, true);
        sim::AllocatorSide model(g, kVirtual, mode);
        std::deque<std::int64_t> queue;  // the free queue as SPEC 4 keeps it
        for (std::int64_t v = 1; v < kVirtual; ++v) queue.push_back(v);
        std::vector<std::int64_t> bound;
        Rng rng(seed);
        for (int step = 0; step < 400; ++step) {
          const std::string at = std::string(direction == GrowDirection::up ? "up" : "down") + " " +
                                 (mode == CompactionMode::eager ? "eager" : "lazy") + " seed " + std::to_string(seed) +
                                 " step " + std::to_string(step);
          const std::uint64_t what = rng.below(10);
          if (what < 5) {
            const auto k = static_cast<std::int64_t>(1 + rng.below(4));
            // Room: free ids, and band pages past the holes before the side's end.
            const std::int64_t holes = static_cast<std::int64_t>(model.holes().size());
            const std::int64_t band = std::max<std::int64_t>(k - holes, 0);
            const bool room = k <= static_cast<std::int64_t>(queue.size()) &&
                              (direction == GrowDirection::up ? model.watermark() + band <= kPages
                                                              : model.watermark() - band + 1 >= 1);
            if (!room) continue;
            const std::vector<std::int64_t> vpages = copy.queue_front(k);
            ASSERT_EQ(vpages, std::vector<std::int64_t>(queue.begin(), queue.begin() + k)) << at;
            const std::vector<std::int64_t> pages = copy.pages_for(k);
            ASSERT_EQ(pages, model.bind(vpages)) << at;
            hole_binds += static_cast<std::uint64_t>(std::min(k, holes));
            copy.bind(vpages, pages);
            copy.take_virtual(k);
            queue.erase(queue.begin(), queue.begin() + k);
            bound.insert(bound.end(), vpages.begin(), vpages.end());
          } else if (what < 9 && !bound.empty()) {
            // Free 1 to 3 bound pages, ascending (as virtual_pages_of leaves them).
            std::vector<std::int64_t> vpages;
            const std::uint64_t n = 1 + rng.below(std::min<std::uint64_t>(3, bound.size()));
            for (std::uint64_t i = 0; i < n; ++i) {
              const std::size_t at_index = static_cast<std::size_t>(rng.below(bound.size()));
              vpages.push_back(bound[at_index]);
              bound.erase(bound.begin() + static_cast<std::ptrdiff_t>(at_index));
            }
            std::sort(vpages.begin(), vpages.end());
            std::vector<std::int64_t> physical;
            for (std::int64_t v : vpages) physical.push_back(copy.physical_of(v));
            SideMoves moves;
            sim::CompactionPlan plan;
            if (mode == CompactionMode::eager) {
              moves = copy.plan_compaction(physical);  // planned while the pages are still bound
              std::vector<std::int64_t> sorted = physical;
              std::sort(sorted.begin(), sorted.end());
              plan = model.plan_compaction(sorted, sim::pair_in_order);
              expect_same_moves(moves, plan, at);
            }
            for (std::int64_t v : vpages) model.unbind(v);
            const std::vector<std::int64_t> released = copy.unbind(vpages, false);
            ASSERT_EQ(released, physical) << at;
            if (mode == CompactionMode::eager) {
              model.apply_compaction(plan);
              copy.apply(moves, false);
              moved += moves.sources.size();
            } else {
              copy.add_holes(released);
            }
            copy.put_virtual(vpages);
            queue.insert(queue.end(), vpages.begin(), vpages.end());
          } else if (mode == CompactionMode::lazy) {
            const SideMoves moves = copy.plan_flush();
            const sim::CompactionPlan plan =
                model.plan_compaction({model.holes().begin(), model.holes().end()}, sim::pair_in_order);
            expect_same_moves(moves, plan, at + " (flush)");
            model.apply_compaction(plan);
            copy.apply(moves, true);
            moved += moves.sources.size();
            ++flushes;
          }
          expect_same(copy, model, at);
          ASSERT_EQ(std::vector<std::int64_t>(copy.queue().begin(), copy.queue().end()),
                    std::vector<std::int64_t>(queue.begin(), queue.end()))
              << at;
        }
      }
      // The walk reached what it is about.
      EXPECT_GT(moved, 200u);
      if (mode == CompactionMode::lazy) {
        EXPECT_GT(hole_binds, 200u);
        EXPECT_GT(flushes, 100u);
      }
    }
  }
}

TEST(SideCopy, ACompactionPairsTheSurvivorsWithTheFreedPagesInOrder) {
  // Up: pages 1..8 bound to virtual pages 1..8 (watermark 9); freeing pages 2 and 5 leaves the
  // band [1, 7): its last two pages, 7 and 8, move into 2 and 5, in that order.
  SideCopy up;
  up.init(side_geometry(GrowDirection::up, 12), 12, true);
  const std::vector<std::int64_t> eight = up.queue_front(8);
  up.bind(eight, up.pages_for(8));
  up.take_virtual(8);
  ASSERT_EQ(up.watermark(), 9);
  const SideMoves moves = up.plan_compaction({5, 2});
  EXPECT_EQ(moves.new_watermark, 7);
  EXPECT_EQ(moves.sources, (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(moves.destinations, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(up.unbind({2, 5}, false), (std::vector<std::int64_t>{2, 5}));
  up.apply(moves, false);
  EXPECT_EQ(up.physical_of(7), 2);
  EXPECT_EQ(up.physical_of(8), 5);
  EXPECT_EQ(up.virtual_of(7), -1);
  EXPECT_EQ(up.watermark(), 7);

  // Down: a side of pages 1..9 binds four pages as [6, 9] ascending (watermark 5); freeing the
  // page of virtual page 2 (page 7) moves page 6, the band's lowest, into it.
  SideCopy down;
  down.init(side_geometry(GrowDirection::down, 10), 12, false);
  EXPECT_TRUE(down.queue().empty()) << "only the owner keeps the free queue";
  down.bind({1, 2, 3, 4}, down.pages_for(4));
  EXPECT_EQ(down.v2p()[1], 6);
  EXPECT_EQ(down.watermark(), 5);
  const SideMoves down_moves = down.plan_compaction({down.physical_of(2)});
  EXPECT_EQ(down_moves.new_watermark, 6);
  EXPECT_EQ(down_moves.sources, (std::vector<std::int64_t>{6}));
  EXPECT_EQ(down_moves.destinations, (std::vector<std::int64_t>{7}));

  // Lazy: a freed page is a hole, and the next bind takes the lowest hole first.
  EXPECT_EQ(down.unbind({2, 3}, false), (std::vector<std::int64_t>{7, 8}));
  down.add_holes({7, 8});
  EXPECT_EQ(down.pages_for(3), (std::vector<std::int64_t>{7, 8, 5}));
  // only_positive leaves tombstones (-1) alone: nothing is released twice.
  EXPECT_TRUE(down.unbind({2, 3}, true).empty());
}

}  // namespace
}  // namespace kvtwin::gpu
