// The GPU's host arena (gpu/host_arena.h) against the model's (sim/host_arena.h), which defines
// SPEC 8's policy: two independent implementations played side by side over seeded random
// sequences of allocations (fills that compact included), frees with stray ids, leases and
// transfers that hand their lease to a finish event. Every answer must agree (outcome, logical
// ids, physical pages, compaction moves; errors by kind), and both verify() after every step.
//
// Tables only: the GPU arena allocates no pinned memory then and its events are only keys (the
// refusing mode never synchronizes one), so this runs without a device, in CI.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "gpu/host_arena.h"
#include "sim/host_arena.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

struct Pair {
  sim::HostArena model;
  PinnedHostArena gpu;
};

std::string describe(const std::vector<std::string>& played) {
  std::string out;
  for (const std::string& p : played) out += "  " + p + "\n";
  return out;
}

// An event handle that is only a key (never synchronized in HostWait::refuse).
cudaEvent_t fake_event(std::uint64_t n) { return reinterpret_cast<cudaEvent_t>(static_cast<std::uintptr_t>(0x1000 + n)); }

TEST(GpuHostArena, AgreesWithTheModelsArenaStepByStep) {
  const std::uint64_t seed = testing::test_seed(2026);
  std::uint64_t compactions = 0, refusals = 0, no_rooms = 0, frees_refused = 0;
  for (std::uint64_t run = 0; run < 200; ++run) {
    Rng rng(seed + run);
    const bool composite = rng.below(3) != 0;
    const std::uint64_t ps = 1 + rng.below(4);
    const std::uint64_t entry_full = 16 * (1 + rng.below(3));
    const std::uint64_t entry_swa = 16 * (1 + rng.below(3));
    const std::uint64_t pages = 4 + rng.below(24);
    const std::uint64_t total = pages * ps * std::max(entry_full, composite ? entry_swa : 0) + rng.below(64);
    std::vector<sim::HostSideConfig> sides = {{"full", ps, entry_full}};
    std::vector<HostArenaSide> gpu_sides = {{"full", ps * entry_full}};
    if (composite) {
      sides.push_back({"swa", ps, entry_swa});
      gpu_sides.push_back({"swa", ps * entry_swa});
    }
    Result<sim::HostArena> model = sim::HostArena::create(sim::HostArenaConfig{total, sides, false});
    ASSERT_TRUE(model.ok()) << model.error().message;
    PinnedHostArena gpu;
    ASSERT_TRUE(gpu.init(total, gpu_sides, false).ok());
    ASSERT_EQ(gpu.page_num(), model->page_num());
    std::vector<std::string> played;
    std::vector<std::uint64_t> transfers;  // fake events in flight
    std::uint64_t next_event = 0;
    const Faults no_faults;
    for (int step = 0; step < 120; ++step) {
      const std::uint64_t what = rng.below(20);  // 0-7 alloc (0-1 fills), 8-13 free, 14-16 leases, 17-19 transfers
      const HostThread thread = static_cast<HostThread>(rng.below(3));
      if (what < 8) {
        // Mostly small requests, now and then one side's free pages in one go (a fill, which
        // often fits only once packed).
        std::vector<std::uint64_t> k;
        const std::size_t fill_side = rng.below(sides.size());
        for (std::size_t s = 0; s < sides.size(); ++s)
          k.push_back(what < 2 && s == fill_side ? rng.below(pages / 2 + 1) : rng.below(3));
        std::string line = "host_alloc thread " + std::to_string(thread) + " pages";
        for (std::uint64_t n : k) line += " " + std::to_string(n);
        played.push_back(line);
        const Result<sim::HostAllocOutcome> m = model->alloc_many(thread, k);
        const Result<Outcome> g = gpu.alloc_many(thread, k, HostWait::refuse, no_faults);
        ASSERT_EQ(m.ok(), g.ok()) << describe(played) << (m.ok() ? g.error().message : m.error().message);
        if (!m.ok()) {
          EXPECT_EQ(m.error().kind, g.error().kind) << describe(played) << m.error().message << " / " << g.error().message;
          ++refusals;
          continue;
        }
        if (std::holds_alternative<sim::HostNoRoom>(*m)) {
          EXPECT_TRUE(std::holds_alternative<NoRoom>(*g)) << describe(played);
          ++no_rooms;
          continue;
        }
        ASSERT_TRUE(std::holds_alternative<HostAllocated>(*g)) << describe(played);
        const sim::HostAllocated& ma = std::get<sim::HostAllocated>(*m);
        const HostAllocated& ga = std::get<HostAllocated>(*g);
        compactions += ma.compacted ? 1 : 0;
        EXPECT_EQ(ma.logical, ga.logical) << describe(played);
        EXPECT_EQ(ma.physical, ga.physical) << describe(played);
        ASSERT_EQ(ma.moves.size(), ga.moves.size()) << describe(played);
        for (std::size_t i = 0; i < ma.moves.size(); ++i) {
          EXPECT_EQ(sides[ma.moves[i].side].name, ga.moves[i].sub_pool) << describe(played);
          EXPECT_EQ(ma.moves[i].src, ga.moves[i].src) << describe(played);
          EXPECT_EQ(ma.moves[i].dst, ga.moves[i].dst) << describe(played);
        }
      } else if (what < 14) {
        const std::size_t side = rng.below(sides.size());
        // Mostly live ids (from the model's table), sometimes stray ones.
        std::vector<std::int64_t> live;
        const std::vector<std::int64_t>& map = model->side(side).logical_to_physical;
        for (std::size_t l = 0; l < map.size(); ++l)
          if (map[l] >= 0) live.push_back(static_cast<std::int64_t>(l));
        std::vector<std::int64_t> ids;
        const std::uint64_t n = 1 + rng.below(4);
        for (std::uint64_t i = 0; i < n; ++i) {
          if (!live.empty() && rng.below(8) != 0) {
            ids.push_back(live[rng.below(live.size())]);
          } else {
            ids.push_back(static_cast<std::int64_t>(rng.below(pages + 2)) - (rng.below(4) == 0 ? 3 : 0));
          }
        }
        std::string line = "host_free side " + sides[side].name + " pages";
        for (std::int64_t id : ids) line += " " + std::to_string(id);
        played.push_back(line);
        const Status m = model->free(side, ids);
        const Status g = gpu.free(side, ids);
        ASSERT_EQ(m.ok(), g.ok()) << describe(played) << (m.ok() ? g.error().message : m.error().message);
        if (!m.ok()) {
          EXPECT_EQ(m.error().kind, g.error().kind) << describe(played);
          EXPECT_EQ(m.error().reason, g.error().reason) << describe(played);
          ++frees_refused;
        }
      } else if (what == 14) {
        played.push_back("lease_acquire thread " + std::to_string(thread));
        model->acquire(thread);
        gpu.acquire(thread);
      } else if (what < 17) {
        played.push_back("lease_release thread " + std::to_string(thread));
        const Status m = model->release(thread);
        const Status g = gpu.release(thread);
        ASSERT_EQ(m.ok(), g.ok()) << describe(played);
      } else if (transfers.empty() || what == 17) {
        // A transfer starts: it takes a lease on its thread and hands it to its finish event.
        played.push_back("transfer on thread " + std::to_string(thread));
        gpu.acquire(thread);
        ASSERT_TRUE(gpu.hand_lease_to_event(thread, fake_event(next_event)).ok());
        model->record_pending_transfer();
        transfers.push_back(next_event++);
      } else {
        played.push_back("transfer_wait");
        ASSERT_TRUE(gpu.settle(fake_event(transfers.back())).ok());
        ASSERT_TRUE(model->complete_transfer().ok());
        transfers.pop_back();
      }
      ASSERT_TRUE(model->verify().ok()) << describe(played) << model->verify().error().message;
      ASSERT_TRUE(gpu.verify().ok()) << describe(played) << gpu.verify().error().message;
      EXPECT_EQ(gpu.events_in_flight(), model->pending_transfers()) << describe(played);
    }
  }
  // The sequences reach what they compare: compactions, gated refusals, no room, refused frees.
  std::printf("[ compared ] %llu compactions, %llu refused allocations, %llu no room, %llu refused frees\n",
              static_cast<unsigned long long>(compactions), static_cast<unsigned long long>(refusals),
              static_cast<unsigned long long>(no_rooms), static_cast<unsigned long long>(frees_refused));
  EXPECT_GT(compactions, 0u);
  EXPECT_GT(refusals, 0u);
  EXPECT_GT(no_rooms, 0u);
  EXPECT_GT(frees_refused, 0u);
}

}  // namespace
}  // namespace kvtwin::gpu
