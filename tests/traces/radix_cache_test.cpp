// The prefix cache: matching shared prefixes, reference counts, LRU eviction of unreferenced
// leaves (parents become leaves in turn), and counters that agree with a recount after random
// sequences of calls.
#include "traces/radix_cache.h"

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace kvtwin::traces {
namespace {

TEST(RadixCache, SharedPrefixIsMatchedAndReused) {
  RadixCache c(2);
  const RadixCache::NodeId a = c.insert(RadixCache::kRoot, 10, {4, 5}, 1);
  const RadixCache::NodeId b = c.insert(a, 11, {6, 7}, 1);
  ASSERT_NE(a, RadixCache::kRoot);
  ASSERT_NE(b, RadixCache::kRoot);
  EXPECT_EQ(c.cached_pages(), 4u);
  EXPECT_EQ(c.evictable_pages(), 0u) << "inserted nodes are held by their inserter";
  EXPECT_EQ(c.match({10, 11, 12}, 2), (std::vector<RadixCache::NodeId>{a, b}));
  EXPECT_EQ(c.match({10, 99}, 2), (std::vector<RadixCache::NodeId>{a}));
  EXPECT_TRUE(c.match({99, 10}, 2).empty()) << "a prefix must start at the first block";
  EXPECT_EQ(c.insert(a, 11, {8, 9}, 3), RadixCache::kRoot) << "a second block with the same hash is refused";
  EXPECT_TRUE(c.consistent());
}

TEST(RadixCache, EvictsLeastRecentlyUsedUnreferencedLeavesFirst) {
  RadixCache c(1);
  const auto a = c.insert(RadixCache::kRoot, 1, {10}, 1);
  const auto b = c.insert(a, 2, {11}, 2);
  const auto x = c.insert(RadixCache::kRoot, 3, {12}, 3);
  c.unlock({a, b});  // the request that inserted a and b finished
  c.unlock({x});
  EXPECT_EQ(c.evictable_pages(), 3u);
  // x (used at 3) is newer than b (used at 2): b goes first, then a becomes a leaf (used at 1).
  EXPECT_EQ(c.evict(1), (std::vector<std::int64_t>{11}));
  EXPECT_EQ(c.evict(1), (std::vector<std::int64_t>{10}));
  EXPECT_EQ(c.evict(5), (std::vector<std::int64_t>{12}));
  EXPECT_EQ(c.cached_pages(), 0u);
  EXPECT_TRUE(c.consistent());
}

TEST(RadixCache, ReferencedPathsAreNeverEvictedAndMatchRefreshesRecency) {
  RadixCache c(1);
  const auto a = c.insert(RadixCache::kRoot, 1, {10}, 1);
  const auto x = c.insert(RadixCache::kRoot, 2, {11}, 2);
  c.unlock({a});
  c.unlock({x});
  const auto path = c.match({1}, 5);  // a is now the most recently used
  c.lock(path);
  EXPECT_EQ(c.evict(10), (std::vector<std::int64_t>{11})) << "only x is unreferenced";
  c.unlock(path);
  EXPECT_EQ(c.evict(10), (std::vector<std::int64_t>{10}));
  EXPECT_TRUE(c.consistent());
}

TEST(RadixCache, RandomSequencesKeepCountersSound) {
  const std::uint64_t seed = 77;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  RadixCache c(2);
  std::vector<std::vector<RadixCache::NodeId>> held;  // paths held by simulated requests
  std::int64_t next_page = 1;
  std::vector<std::int64_t> live_pages;
  for (std::uint64_t step = 1; step < 3000; ++step) {
    const std::uint64_t what = rng.below(4);
    if (what == 0 || held.empty()) {
      // A request: match a random prompt of small hashes, hold the path, insert the rest.
      std::vector<std::int64_t> prompt(1 + rng.below(5));
      for (auto& h : prompt) h = static_cast<std::int64_t>(rng.below(3));
      std::vector<RadixCache::NodeId> path = c.match(prompt, step);
      c.lock(path);
      for (std::size_t b = path.size(); b < prompt.size(); ++b) {
        const auto node =
            c.insert(path.empty() ? RadixCache::kRoot : path.back(), prompt[b], {next_page, next_page + 1}, step);
        if (node == RadixCache::kRoot) break;
        live_pages.push_back(next_page);
        live_pages.push_back(next_page + 1);
        next_page += 2;
        path.push_back(node);
      }
      held.push_back(path);
    } else if (what == 1) {
      const std::size_t i = rng.below(held.size());
      c.unlock(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const std::uint64_t evictable = c.evictable_pages();
      const std::vector<std::int64_t> out = c.evict(rng.below(5));
      EXPECT_LE(out.size(), evictable);
      for (std::int64_t p : out) {
        auto it = std::find(live_pages.begin(), live_pages.end(), p);
        ASSERT_NE(it, live_pages.end()) << "evicted a page twice or one never cached: " << p << " (seed " << seed
                                        << ")";
        live_pages.erase(it);
      }
    }
    ASSERT_TRUE(c.consistent()) << "step " << step << " (seed " << seed << ")";
    ASSERT_EQ(c.cached_pages(), live_pages.size());
  }
  for (const auto& p : held) c.unlock(p);
  EXPECT_EQ(c.evict(UINT64_MAX).size() + 0u, live_pages.size());
  EXPECT_EQ(c.cached_pages(), 0u);
}

}  // namespace
}  // namespace kvtwin::traces
