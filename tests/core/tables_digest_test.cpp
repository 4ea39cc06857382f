// digest_tables (core/tables_digest.h): equal tables digest equally, and a change to any one
// field that diff_tables compares changes the digest (so a digest match between two backends
// stands for a table comparison).
#include <gtest/gtest.h>

#include "core/tables_digest.h"

namespace kvtwin {
namespace {

PoolTables two_sides() {
  PoolTables t;
  SideTables full;
  full.name = "full";
  full.v2p = {0, 3, -1, 1, -1};
  full.p2v = {0, 3, -1, 1, -1};
  full.free_queue = {2, 4};
  full.watermark = 4;
  full.holes = {2};
  full.allocated_pages = 2;
  SideTables swa = full;
  swa.name = "swa";
  swa.free_queue.clear();
  swa.holes.clear();
  swa.watermark = 3;
  t.sides = {full, swa};
  return t;
}

TEST(TablesDigest, EqualTablesDigestEquallyAndEveryFieldCounts) {
  const PoolTables base = two_sides();
  const std::uint64_t d = digest_tables(base);
  EXPECT_EQ(d, digest_tables(two_sides()));

  std::vector<std::pair<const char*, PoolTables>> changed;
  auto with = [&](const char* what, auto change) {
    PoolTables t = two_sides();
    change(t);
    changed.emplace_back(what, t);
  };
  with("a v2p row", [](PoolTables& t) { t.sides[0].v2p[2] = 2; });
  with("a p2v row", [](PoolTables& t) { t.sides[1].p2v[3] = -1; });
  with("two v2p rows swapped", [](PoolTables& t) { std::swap(t.sides[0].v2p[1], t.sides[0].v2p[3]); });
  with("the queue's order", [](PoolTables& t) { std::swap(t.sides[0].free_queue[0], t.sides[0].free_queue[1]); });
  with("a queue entry dropped", [](PoolTables& t) { t.sides[0].free_queue.pop_back(); });
  with("a hole", [](PoolTables& t) { t.sides[0].holes = {4}; });
  with("a hole added", [](PoolTables& t) { t.sides[1].holes = {2}; });
  with("the watermark", [](PoolTables& t) { t.sides[1].watermark = 2; });
  with("the allocated count", [](PoolTables& t) { t.sides[0].allocated_pages = 3; });
  with("the sides' rows exchanged", [](PoolTables& t) { std::swap(t.sides[0].v2p, t.sides[1].p2v); t.sides[0].v2p[1] = 1; });
  with("a side dropped", [](PoolTables& t) { t.sides.pop_back(); });
  for (const auto& [what, t] : changed) {
    ASSERT_NE(t, base) << what;
    EXPECT_NE(digest_tables(t), d) << "changing " << what << " left the digest as it was";
  }
}

TEST(TablesDigest, TheSumOfTermsIsTheDigestWhateverTheOrder) {
  // What a device reduction relies on: the digest is the plain sum of its row terms.
  const PoolTables t = two_sides();
  std::uint64_t forward = 0, backward = 0;
  for (std::uint64_t s = 0; s < t.sides.size(); ++s) {
    const SideTables& side = t.sides[s];
    for (std::uint64_t r = 0; r < side.v2p.size(); ++r) forward += tables_digest_term(s, TablesDigestPart::v2p, r, side.v2p[r]);
    for (std::uint64_t r = 0; r < side.p2v.size(); ++r) forward += tables_digest_term(s, TablesDigestPart::p2v, r, side.p2v[r]);
    for (std::uint64_t j = 0; j < side.free_queue.size(); ++j)
      forward += j == 0 ? free_queue_front_term(s, side.free_queue[0])
                        : free_queue_link_term(s, side.free_queue[j - 1], side.free_queue[j]);
    for (std::int64_t h : side.holes) forward += tables_digest_term(s, TablesDigestPart::hole, static_cast<std::uint64_t>(h), 1);
    forward += tables_digest_counters(s, side.watermark, side.allocated_pages, side.free_queue.size(), side.holes.size());
  }
  for (std::uint64_t s = t.sides.size(); s-- > 0;) {
    const SideTables& side = t.sides[s];
    backward += tables_digest_counters(s, side.watermark, side.allocated_pages, side.free_queue.size(), side.holes.size());
    for (std::uint64_t r = side.p2v.size(); r-- > 0;) backward += tables_digest_term(s, TablesDigestPart::p2v, r, side.p2v[r]);
    for (std::int64_t h : side.holes) backward += tables_digest_term(s, TablesDigestPart::hole, static_cast<std::uint64_t>(h), 1);
    for (std::uint64_t j = side.free_queue.size(); j-- > 0;)
      backward += j == 0 ? free_queue_front_term(s, side.free_queue[0])
                         : free_queue_link_term(s, side.free_queue[j - 1], side.free_queue[j]);
    for (std::uint64_t r = side.v2p.size(); r-- > 0;) backward += tables_digest_term(s, TablesDigestPart::v2p, r, side.v2p[r]);
  }
  EXPECT_EQ(forward, digest_tables(t));
  EXPECT_EQ(backward, digest_tables(t));
}

TEST(TablesDigest, TheQueueDigestsItsOrderAndChangesAtItsEndsOnly) {
  PoolTables t = two_sides();
  ASSERT_GE(t.sides[0].free_queue.size(), 2u);
  const std::uint64_t before = digest_tables(t);
  // Two ids swapped: the same ids, another order, another digest.
  PoolTables swapped = t;
  std::swap(swapped.sides[0].free_queue[0], swapped.sides[0].free_queue[1]);
  EXPECT_NE(digest_tables(swapped), before);
  // Taking the front id changes its two terms, the front of the next, and the length: nothing else.
  PoolTables taken = t;
  const std::vector<std::int64_t>& q = t.sides[0].free_queue;
  taken.sides[0].free_queue.erase(taken.sides[0].free_queue.begin());
  const std::uint64_t expected = before - free_queue_front_term(0, q[0]) - free_queue_link_term(0, q[0], q[1]) +
                                 free_queue_front_term(0, q[1]) -
                                 tables_digest_term(0, TablesDigestPart::free_queue_length, 0, static_cast<std::int64_t>(q.size())) +
                                 tables_digest_term(0, TablesDigestPart::free_queue_length, 0, static_cast<std::int64_t>(q.size() - 1));
  EXPECT_EQ(digest_tables(taken), expected);
}

}  // namespace
}  // namespace kvtwin
