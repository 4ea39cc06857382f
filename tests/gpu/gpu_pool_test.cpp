// GpuPool's operations on small pools, with every expectation worked out here from SPEC.md and
// docs/decisions.md (the geometry from core's sizing, the rows from the content oracle): the
// allocator and its compaction, the doors and their mark, readers, lazy mode, the composite's
// SWA side, and the captured decode step replayed at changing batch sizes.
//
// The reference model is not used here; the differential property compares the two.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <span>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/bytes_digest.h"
#include "core/det_math.h"
#include "core/oracle.h"
#include "core/tables_digest.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_pool.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

// 2 KV heads of dim 8 in bf16: K and V rows of 32 bytes.
ModelShape tiny_shape(std::vector<LayerKind> layers) {
  ModelShape s;
  s.name = "tiny";
  s.attention = AttentionKind::mha;
  s.layers = std::move(layers);
  s.num_kv_heads = 2;
  s.k_head_dim = 8;
  s.v_head_dim = 8;
  // A window only where there are sliding-window layers (core refuses one without them).
  s.sliding_window_tokens = std::find(s.layers.begin(), s.layers.end(), LayerKind::swa) != s.layers.end() ? 4 : 0;
  s.dtype = DType::bf16;
  return s;
}

PoolConfig tiny_config(std::vector<LayerKind> layers, std::uint64_t page_size, std::uint64_t pages,
                       CompactionMode mode = CompactionMode::eager) {
  PoolConfig c;
  c.shape = tiny_shape(std::move(layers));
  c.page_size = page_size;
  c.mode = mode;
  c.seed = 77;
  const PoolDerived d = derive_pool(PoolConfig{c.shape, 1, page_size, 1 << 20, mode, false, 0}).value();
  c.total_bytes = d.geometry.sub_pools[0].page_bytes * pages;
  return c;
}

template <class T>
const T& as(const OpResult& r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) throw std::runtime_error(r.error().message);
  EXPECT_TRUE(std::holds_alternative<T>(r.value())) << to_string(r);
  return std::get<T>(r.value());
}

ErrorKind error_of(const OpResult& r) {
  EXPECT_FALSE(r.ok()) << "expected an error, got " << to_string(r);
  return r.ok() ? ErrorKind::internal : r.error().kind;
}

std::vector<std::int64_t> tokens_of(const std::vector<std::int64_t>& pages, std::int64_t ps) {
  std::vector<std::int64_t> out;
  for (std::int64_t v : pages)
    for (std::int64_t s = 0; s < ps; ++s) out.push_back(v * ps + s);
  return out;
}

std::vector<std::uint8_t> oracle_row(std::uint64_t seed, std::int64_t token, std::uint32_t sub_pool, std::uint32_t layer,
                                     std::uint32_t part, std::uint64_t write, std::size_t bytes) {
  std::vector<std::uint8_t> row(bytes);
  fill_oracle_row(seed, RowIdentity{token, sub_pool, layer, part, write}, DType::bf16, row);
  return row;
}

std::uint64_t pool_digest(const GpuPool& pool, std::uint64_t total) {
  return digest_bytes(pool.raw_bytes(0, total).value());
}

class GpuPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { KVTWIN_REQUIRE_CUDA(); }
  GpuPool pool;
};

TEST_F(GpuPoolTest, EagerFreePairsSurvivorsWithHolesInOrder) {
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, 2, 20);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::int64_t m = static_cast<std::int64_t>(derive_pool(c).value().geometry.sub_pools[0].min_page_index);
  // SPEC 4: virtual pages from the queue front (m, m+1, ...) bound in order to [wm, wm+k).
  EXPECT_EQ(as<Allocated>(pool.apply(Alloc{4})).pages, (std::vector<std::int64_t>{m, m + 1}));
  EXPECT_EQ(as<Allocated>(pool.apply(Alloc{6})).pages, (std::vector<std::int64_t>{m + 2, m + 3, m + 4}));
  EXPECT_EQ(error_of(pool.apply(Alloc{3})), ErrorKind::invalid_argument) << "3 tokens is not a whole page";
  // Free virtual pages m+1 and m+2 (physical m+1, m+2): new_wm = wm - 2 = m+3; the survivors
  // [m+3, m+5) move into the holes m+1, m+2 in order.
  const Compaction moves = as<Compaction>(pool.apply(Free{IdUnit::pages, {m + 2, m + 1, m + 2}}));
  EXPECT_EQ(moves.moves, (std::vector<PageMove>{{"full", m + 3, m + 1}, {"full", m + 4, m + 2}}));
  const PoolTables t = pool.tables().value();
  ASSERT_EQ(t.sides.size(), 1u);
  const SideTables& s = t.sides[0];
  EXPECT_EQ(s.watermark, m + 3);
  EXPECT_EQ(s.allocated_pages, 3u);
  EXPECT_EQ(s.v2p[static_cast<std::size_t>(m)], m);
  EXPECT_EQ(s.v2p[static_cast<std::size_t>(m + 3)], m + 1);
  EXPECT_EQ(s.v2p[static_cast<std::size_t>(m + 4)], m + 2);
  EXPECT_EQ(s.v2p[static_cast<std::size_t>(m + 1)], -1);
  EXPECT_EQ(s.p2v[static_cast<std::size_t>(m + 3)], -1);
  EXPECT_EQ(s.v2p.front(), 0);
  EXPECT_EQ(s.v2p.back(), -1);
  // The queue: untouched ids first, then the freed ones appended ascending.
  ASSERT_GE(s.free_queue.size(), 2u);
  EXPECT_EQ(s.free_queue.front(), m + 5);
  EXPECT_EQ(*(s.free_queue.end() - 2), m + 1);
  EXPECT_EQ(s.free_queue.back(), m + 2);
  EXPECT_EQ(error_of(pool.apply(Free{IdUnit::pages, {m + 1}})), ErrorKind::double_free);
  EXPECT_EQ(error_of(pool.apply(Free{IdUnit::pages, {0}})), ErrorKind::out_of_range) << "the sink is never freed";
  EXPECT_EQ(pool.tables().value(), t) << "refused frees change nothing";
}

TEST_F(GpuPoolTest, RowsReadBackThroughTranslationBeforeAndAfterCompaction) {
  const std::int64_t ps = 4;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, ps, 24);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> first = as<Allocated>(pool.apply(Alloc{2 * ps})).pages;
  const std::vector<std::int64_t> second = as<Allocated>(pool.apply(Alloc{3 * ps})).pages;
  const std::vector<std::int64_t> tokens = tokens_of(second, ps);
  ASSERT_TRUE(pool.apply(MakeBatch{1, tokens, {}}).ok());
  const std::vector<std::int64_t> loc = as<Ids>(pool.apply(Rebind{1, 0})).values;
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    ASSERT_TRUE(pool.apply(Write{layer, 5, 1u, {}, false, {}, false}).ok());
  auto expect_rows = [&](const std::vector<std::int64_t>& ids) {
    for (std::uint32_t layer = 0; layer < 2; ++layer)
      for (std::uint32_t part = 0; part < 2; ++part) {
        std::vector<std::uint8_t> want;
        for (std::int64_t t : tokens) {
          const std::vector<std::uint8_t> row = oracle_row(c.seed, t, 0, layer, part, 5, 32);
          want.insert(want.end(), row.begin(), row.end());
        }
        const Bytes got = as<Bytes>(pool.apply(Read{layer, part == 0 ? "k" : "v", ids}));
        ASSERT_EQ(got.bytes, want) << "layer " << layer << " part " << part;
      }
  };
  expect_rows(loc);
  // Freeing the first allocation compacts: the second's pages move down; translation follows.
  const Compaction moved = as<Compaction>(pool.apply(Free{IdUnit::tokens, tokens_of(first, ps)}));
  EXPECT_EQ(moved.moves.size(), 2u);
  Translate tr;
  tr.ids = tokens;
  tr.shape = {static_cast<std::int64_t>(tokens.size())};
  const std::vector<std::int64_t> moved_loc = as<Ids>(pool.apply(tr)).values;
  EXPECT_NE(moved_loc, loc);
  expect_rows(moved_loc);
  // A sink lane reads as zeros.
  EXPECT_EQ(as<Bytes>(pool.apply(Read{0, "k", {0}})).bytes, std::vector<std::uint8_t>(32, 0));
  EXPECT_EQ(error_of(pool.apply(Read{0, "q", {0}})), ErrorKind::invalid_argument);
}

TEST_F(GpuPoolTest, TheBytesDigestOnTheDeviceIsTheHostsOverAnyRanges) {
  // A pool of 40 pages of 4 tokens (256-byte entries), every row of 3 pages written: the device's
  // digest of ranges aligned or not, one byte long, inside one word, adjacent, and longer than the
  // 64 KiB chunks it cuts them into, against core's host reference over the downloaded bytes.
  const std::int64_t ps = 4;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, ps, 400);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> pages = as<Allocated>(pool.apply(Alloc{300 * ps})).pages;
  ASSERT_TRUE(pool.apply(MakeBatch{1, tokens_of(pages, ps), {}}).ok());
  ASSERT_TRUE(pool.apply(Rebind{1, 0}).ok());
  for (std::uint32_t layer = 0; layer < 2; ++layer) ASSERT_TRUE(pool.apply(Write{layer, 9, 1u, {}, false, {}, false}).ok());
  const std::vector<std::uint8_t> all = pool.raw_bytes(0, c.total_bytes).value();
  ASSERT_GT(c.total_bytes, 200'000u);
  const std::vector<std::vector<ByteRange>> cases = {
      {{0, c.total_bytes}},
      {{4096, 8}, {4104, 8}},
      {{4097, 1}},
      {{4099, 3}, {4102, 9}, {5000, 77}},
      {{12345, 150'001}},
      {{8, 65536}, {65544, 65536 + 3}, {c.total_bytes - 5, 5}},
      {}};
  for (const std::vector<ByteRange>& ranges : cases) {
    SCOPED_TRACE(std::to_string(ranges.size()) + " ranges");
    const Result<std::uint64_t> device = pool.bytes_digest(ranges);
    ASSERT_TRUE(device.ok()) << device.error().message;
    EXPECT_EQ(*device, bytes_digest(all, ranges));
  }
  EXPECT_EQ(pool.bytes_digest(std::vector<ByteRange>{{c.total_bytes - 4, 5}}).error().kind, ErrorKind::out_of_range);
}

// Deferred digests (queue_*_digest, collect_digests): each one is the digest the pool would have
// answered at once at that moment, in queue order, across more than one slot array (1024 slots:
// landed once in between) and more chunks than the ranges ring holds at first (64 Ki chunks: it
// synchronizes and starts over), with tables changing and rows written between them; a tables
// digest launched with the bytes digest after it (small ranges: one kernel), before a large one,
// before an op, before another tables digest, and before a collect.
TEST_F(GpuPoolTest, DeferredDigestsAnswerWhatTheDigestsWereWhenQueued) {
  const std::int64_t ps = 4;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, ps, 400);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> written = as<Allocated>(pool.apply(Alloc{20 * ps})).pages;
  ASSERT_TRUE(pool.apply(MakeBatch{1, tokens_of(written, ps), {}}).ok());
  ASSERT_TRUE(pool.apply(Rebind{1, 0}).ok());
  std::vector<std::uint64_t> expected;
  const std::vector<ByteRange> whole{{0, c.total_bytes}};  // many 64 KiB chunks a digest
  for (int round = 0; round < 700; ++round) {
    if (round % 25 == 0) {  // the rows change under the queued digests
      ASSERT_TRUE(pool.apply(Write{0, static_cast<std::uint64_t>(round), 1u, {}, false, {}, false}).ok());
    }
    if (round % 7 == 0) {
      const OpResult r = pool.apply(Alloc{ps});
      ASSERT_TRUE(r.ok());
      const auto* a = std::get_if<Allocated>(&r.value());
      if (a != nullptr && round % 14 == 0) {
        ASSERT_TRUE(pool.apply(Free{IdUnit::pages, a->pages}).ok());
      }
    }
    expected.push_back(pool.tables_digest().value());
    ASSERT_TRUE(pool.queue_tables_digest().ok());
    if (round % 3 == 0) {  // a tables digest no bytes digest follows: launched alone by the next ask
      expected.push_back(pool.tables_digest().value());
      ASSERT_TRUE(pool.queue_tables_digest().ok());
    }
    if (round % 50 == 0) {
      expected.push_back(pool.bytes_digest(whole).value());
      ASSERT_TRUE(pool.queue_bytes_digest(whole).ok());
    }
    std::vector<ByteRange> small;  // 100 chunks a digest: 70,000 in all, past the ring's first size
    for (std::uint64_t j = 0; j < 100; ++j) small.push_back(ByteRange{4096 + static_cast<std::uint64_t>(round) + 24 * j, 13});
    expected.push_back(pool.bytes_digest(small).value());
    ASSERT_TRUE(pool.queue_bytes_digest(small).ok());
  }
  ASSERT_GT(expected.size(), 1024u);
  const Result<std::vector<std::uint64_t>> answered = pool.collect_digests();
  ASSERT_TRUE(answered.ok()) << answered.error().message;
  EXPECT_EQ(*answered, expected);
  EXPECT_TRUE(pool.collect_digests().value().empty()) << "a collect answers each digest once";
  EXPECT_EQ(pool.queue_bytes_digest(std::vector<ByteRange>{{c.total_bytes - 4, 5}}).error().kind, ErrorKind::out_of_range);
}

// GpuPool::SummedTables: a tables digest asked for when nothing reached the device since the last
// one was summed (a write judged on the host, on a tables-only pool) repeats its device part with
// no launch; each answer is still the digest of the tables as they were (a twin pool digests them
// at once after every op), across ops that change them, a collect, and windows that land.
TEST_F(GpuPoolTest, ATablesDigestOfUnchangedTablesRepeatsTheLastWithNoDeviceWork) {
  pool.set_sync_each_op(false);
  const std::int64_t ps = 2;
  PoolConfig c = tiny_config({LayerKind::full, LayerKind::swa, LayerKind::full, LayerKind::swa}, ps, 300);
  c.tables_only = true;
  // The pool queues a tables digest after every op; the ops are kept, and a twin replays them
  // afterwards, digesting its tables at once after each (the count of CUDA calls is this
  // thread's: the twin's calls must not come between).
  std::vector<Op> played;
  const auto play = [&](const Op& op) {
    const OpResult r = pool.apply(op);
    EXPECT_TRUE(r.ok()) << to_string(op);
    EXPECT_TRUE(pool.queue_tables_digest().ok());
    played.push_back(op);
    return r;
  };
  (void)play(BuildPool{c});
  const std::vector<std::int64_t> pages = as<Allocated>(play(Alloc{8 * ps})).pages;
  (void)play(MakeBatch{1, tokens_of(pages, ps), {}});
  (void)play(Rebind{1, 0});
  std::vector<std::uint64_t> answered;
  std::uint64_t quiet = 0, writes = 0;
  for (int round = 0; round < 400; ++round) {
    for (std::uint32_t layer = 0; layer < 4; ++layer) {
      const std::uint64_t calls_before = checked_calls_on_this_thread();
      (void)play(Write{layer, static_cast<std::uint64_t>(round), 1u, {}, false, {}, false});
      quiet += checked_calls_on_this_thread() == calls_before ? 1 : 0;
      ++writes;
    }
    if (round % 9 == 0) {  // the tables change between repeats
      const std::vector<std::int64_t> more = as<Allocated>(play(Alloc{static_cast<std::uint64_t>(ps)})).pages;
      (void)play(FreeSwa{IdUnit::pages, more});
      (void)play(Free{IdUnit::pages, more});
    }
    if (round == 100) {  // a collect between a digest and its repeats
      const std::vector<std::uint64_t> part = pool.collect_digests().value();
      answered.insert(answered.end(), part.begin(), part.end());
    }
  }
  const std::vector<std::uint64_t> rest = pool.collect_digests().value();
  answered.insert(answered.end(), rest.begin(), rest.end());
  GpuPool twin;
  twin.set_sync_each_op(false);
  std::vector<std::uint64_t> expected;
  for (const Op& op : played) {
    ASSERT_TRUE(twin.apply(op).ok()) << to_string(op);
    expected.push_back(twin.tables_digest().value());
  }
  ASSERT_GT(expected.size(), 1024u) << "windows landed between repeats";
  EXPECT_EQ(answered, expected);
  // All but the writes right after a change (the SWA loc derived again, the digest summed again:
  // three after each of the 45 changes); a window's opening makes none (its slots
  // are not zeroed: each keeps the value it landed with, DeferredDigests).
  EXPECT_GT(quiet, writes * 4 / 5) << quiet << " of " << writes << " writes with their digest made no CUDA call";
  EXPECT_TRUE(pool.verify().ok());
}

TEST_F(GpuPoolTest, UnmarkedLocIsRefusedAndWritesNothing) {
  const PoolConfig c = tiny_config({LayerKind::full}, 2, 16);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> pages = as<Allocated>(pool.apply(Alloc{4})).pages;
  ASSERT_TRUE(pool.apply(MakeBatch{3, tokens_of(pages, 2), {}}).ok());
  const std::uint64_t before = pool_digest(pool, c.total_bytes);
  EXPECT_EQ(error_of(pool.apply(Write{0, 1, 3u, {}, false, {}, false})), ErrorKind::unmarked_loc);
  EXPECT_EQ(error_of(pool.apply(Write{0, 1, std::nullopt, {5, 6}, false, {5, 6}, false})), ErrorKind::unmarked_loc);
  EXPECT_EQ(pool_digest(pool, c.total_bytes), before);
  // Split children copy the parent's mark, both before and after the rebind.
  EXPECT_EQ(as<Marks>(pool.apply(Split{3, 1, 4, 5})), (Marks{false, false}));
  ASSERT_TRUE(pool.apply(Rebind{3, 6}).ok());
  EXPECT_EQ(as<Marks>(pool.apply(Split{3, 2, 6, 7})), (Marks{true, true}));
  ASSERT_TRUE(pool.apply(Write{0, 1, 6u, {}, false, {}, false}).ok());
  EXPECT_NE(pool_digest(pool, c.total_bytes), before);
}

TEST_F(GpuPoolTest, CheckedWriteRefusesTwoLanesOnOneSlot) {
  const PoolConfig c = tiny_config({LayerKind::full}, 1, 32);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> pages = as<Allocated>(pool.apply(Alloc{4})).pages;
  Translate tr;
  tr.ids = pages;
  tr.shape = {4};
  const std::vector<std::int64_t> phys = as<Ids>(pool.apply(tr)).values;
  const std::uint64_t before = pool_digest(pool, c.total_bytes);
  Write w{0, 2, std::nullopt, {phys[0], phys[1], phys[0], 0}, true, {pages[0], pages[1], pages[2], -1}, true};
  EXPECT_EQ(error_of(pool.apply(w)), ErrorKind::duplicate_loc);
  EXPECT_EQ(pool_digest(pool, c.total_bytes), before);
  w.loc = {phys[0], phys[1], 0, 0};  // two sink lanes are no duplicate
  EXPECT_TRUE(pool.apply(w).ok());
  w.loc = {phys[0], -3, 0, 0};
  EXPECT_EQ(error_of(pool.apply(w)), ErrorKind::out_of_range);
}

TEST_F(GpuPoolTest, OpenReaderBlocksTheMoveThatWouldTouchItsPage) {
  const PoolConfig c = tiny_config({LayerKind::full}, 2, 16);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::int64_t m = static_cast<std::int64_t>(derive_pool(c).value().geometry.sub_pools[0].min_page_index);
  ASSERT_TRUE(pool.apply(Alloc{6}).ok());  // virtual m..m+2 on physical m..m+2
  ASSERT_TRUE(pool.apply(BeginRead{9, "full", {m + 2}}).ok());
  const PoolTables before = pool.tables().value();
  // Freeing m moves the survivor m+2 into m: the reader holds m+2.
  EXPECT_EQ(error_of(pool.apply(Free{IdUnit::pages, {m}})), ErrorKind::reader_conflict);
  EXPECT_EQ(pool.tables().value(), before);
  EXPECT_EQ(error_of(pool.apply(MovePages{"full", {m + 5}, {m + 2}})), ErrorKind::reader_conflict);
  EXPECT_EQ(error_of(pool.apply(BeginRead{9, "full", {m}})), ErrorKind::invalid_argument);
  ASSERT_TRUE(pool.apply(EndRead{9}).ok());
  EXPECT_EQ(as<Compaction>(pool.apply(Free{IdUnit::pages, {m}})).moves, (std::vector<PageMove>{{"full", m + 2, m}}));
}

TEST_F(GpuPoolTest, LazyModeUsesHolesFirstAndFlushCompacts) {
  const PoolConfig c = tiny_config({LayerKind::full}, 2, 20, CompactionMode::lazy);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::int64_t m = static_cast<std::int64_t>(derive_pool(c).value().geometry.sub_pools[0].min_page_index);
  ASSERT_TRUE(pool.apply(Alloc{8}).ok());  // physical m..m+3
  EXPECT_TRUE(as<Compaction>(pool.apply(Free{IdUnit::pages, {m + 1, m + 2}})).moves.empty());
  SideTables s = pool.tables().value().sides[0];
  EXPECT_EQ(s.holes, (std::vector<std::int64_t>{m + 1, m + 2}));
  EXPECT_EQ(s.watermark, m + 4) << "lazy free leaves the watermark";
  // The next virtual page (m+4, the queue front) lands in the lowest hole.
  EXPECT_EQ(as<Allocated>(pool.apply(Alloc{2})).pages, (std::vector<std::int64_t>{m + 4}));
  s = pool.tables().value().sides[0];
  EXPECT_EQ(s.v2p[static_cast<std::size_t>(m + 4)], m + 1);
  EXPECT_EQ(s.holes, (std::vector<std::int64_t>{m + 2}));
  // Flush: new_wm = m+3, the survivor m+3 moves into the hole m+2.
  EXPECT_EQ(as<Compaction>(pool.apply(Flush{})).moves, (std::vector<PageMove>{{"full", m + 3, m + 2}}));
  s = pool.tables().value().sides[0];
  EXPECT_TRUE(s.holes.empty());
  EXPECT_EQ(s.watermark, m + 3);
}

// GpuPool::verify holds the host counters against the device tables after every operation of a
// lazy composite (holes on both sides, tombstones, refusals, a flush), and after a rebuild.
TEST_F(GpuPoolTest, VerifyHoldsCountersAgainstTablesThroughLazyCompositeOperations) {
  EXPECT_TRUE(pool.verify().ok()) << "nothing built, nothing to break";
  const std::int64_t ps = 2;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::swa}, ps, 30, CompactionMode::lazy);
  const auto verified = [&](const Op& op) {
    const OpResult r = pool.apply(op);
    const Status v = pool.verify();
    EXPECT_TRUE(v.ok()) << "after " << to_string(op) << ": " << v.error().message;
    // The device digest equals core's digest of the downloaded tables (holes, queue, both sides).
    const Result<PoolTables> t = pool.tables();
    const Result<std::uint64_t> d = pool.tables_digest();
    EXPECT_TRUE(t.ok() && d.ok() && *d == digest_tables(*t)) << "after " << to_string(op) << ": the device digest differs";
    // The tables the check read are tables()'s (a checkpoint compares them instead of a download).
    std::optional<PoolTables> read;
    EXPECT_TRUE(pool.verify(&read).ok());
    EXPECT_TRUE(read && t.ok() && *read == *t) << "after " << to_string(op) << ": verify read other tables";
    return r;
  };
  ASSERT_TRUE(verified(BuildPool{c}).ok());
  const std::vector<std::int64_t> a = as<Allocated>(verified(Alloc{3 * ps})).pages;
  const std::vector<std::int64_t> b = as<Allocated>(verified(Alloc{2 * ps})).pages;
  (void)verified(FreeSwa{IdUnit::pages, {a[0]}});         // a tombstone and an SWA hole
  (void)verified(Free{IdUnit::pages, {a[1], b[0]}});       // holes on both sides
  EXPECT_FALSE(verified(Free{IdUnit::pages, {a[1]}}).ok());  // a double free changes nothing
  EXPECT_TRUE(std::holds_alternative<NoRoom>(verified(Alloc{1000 * ps}).value()));  // nor does no room
  (void)verified(Alloc{ps});                               // into the lowest holes
  (void)verified(AllocMany{{2 * ps, 0, ps}});
  (void)verified(Flush{});
  (void)verified(Free{IdUnit::pages, {a[0], a[2]}});       // a[0] is left on the full side only
  (void)verified(BuildPool{c});                            // a rebuild starts over
  (void)verified(Alloc{4 * ps});
}

TEST_F(GpuPoolTest, CompositeSwaSideTombstonesAndDiscardsItsLanes) {
  const std::int64_t ps = 2;
  const PoolConfig c = tiny_config({LayerKind::swa, LayerKind::full, LayerKind::swa, LayerKind::full}, ps, 30);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const PoolDerived d = derive_pool(c).value();
  ASSERT_EQ(d.geometry.sub_pools.size(), 2u);
  const std::int64_t swa_top = static_cast<std::int64_t>(d.geometry.sub_pools[1].num_pages) - 1;
  const std::vector<std::int64_t> pages = as<Allocated>(pool.apply(Alloc{2 * ps})).pages;
  // SPEC 4: the down side takes [wm-k+1, wm] ascending, bound in order.
  PoolTables t = pool.tables().value();
  EXPECT_EQ(t.sides[1].v2p[static_cast<std::size_t>(pages[0])], swa_top - 1);
  EXPECT_EQ(t.sides[1].v2p[static_cast<std::size_t>(pages[1])], swa_top);
  // The second page leaves the window: its SWA page (the top) is tombstoned, and the survivor
  // below it moves up into the hole (SPEC 4.1, grow-down: survivors in (wm, new_wm]).
  EXPECT_EQ(as<Compaction>(pool.apply(FreeSwa{IdUnit::pages, {pages[1]}})).moves,
            (std::vector<PageMove>{{"swa", swa_top - 1, swa_top}}));
  t = pool.tables().value();
  EXPECT_EQ(t.sides[1].v2p[static_cast<std::size_t>(pages[1])], -1);
  EXPECT_EQ(t.sides[1].v2p[static_cast<std::size_t>(pages[0])], swa_top);
  EXPECT_EQ(t.sides[0].v2p[static_cast<std::size_t>(pages[1])], t.sides[0].v2p[static_cast<std::size_t>(pages[0])] + 1)
      << "the full page stays";
  EXPECT_EQ(error_of(pool.apply(FreeSwa{IdUnit::pages, {pages[1]}})), ErrorKind::double_free);
  // An SWA layer writes at the SWA loc derived from the full physical loc; tombstoned lanes go
  // to the sink and write nothing.
  const std::vector<std::int64_t> tokens = tokens_of(pages, ps);
  ASSERT_TRUE(pool.apply(MakeBatch{1, tokens, {}}).ok());
  const std::vector<std::int64_t> loc = as<Ids>(pool.apply(Rebind{1, 0})).values;
  const std::vector<std::int64_t> swa_loc = as<Ids>(pool.apply(SwaTranslate{loc})).values;
  ASSERT_EQ(swa_loc.size(), tokens.size());
  for (std::int64_t i = 0; i < ps; ++i) {
    EXPECT_EQ(swa_loc[static_cast<std::size_t>(i)], swa_top * ps + i);
    EXPECT_EQ(swa_loc[static_cast<std::size_t>(ps + i)], 0) << "tombstoned page -> the sink";
  }
  ASSERT_TRUE(pool.apply(Write{2, 4, 1u, {}, false, {}, false}).ok());  // model layer 2: SWA layer 1
  const Bytes got = as<Bytes>(pool.apply(Read{2, "k", {swa_loc[0], swa_loc[1]}}));
  std::vector<std::uint8_t> want = oracle_row(c.seed, tokens[0], 1, 1, 0, 4, 32);
  const std::vector<std::uint8_t> second = oracle_row(c.seed, tokens[1], 1, 1, 0, 4, 32);
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(got.bytes, want);
  // A full free frees the SWA side only where it is still live, then the full side.
  const Compaction both = as<Compaction>(pool.apply(Free{IdUnit::pages, pages}));
  EXPECT_TRUE(both.moves.empty());
  t = pool.tables().value();
  EXPECT_EQ(t.sides[0].allocated_pages, 0u);
  EXPECT_EQ(t.sides[1].allocated_pages, 0u);
}

// The decode step's reference attention worked out on the host from the oracle rows.
std::vector<float> expected_attention(const PoolConfig& c, const std::vector<std::vector<std::int64_t>>& requests,
                                      const std::map<std::int64_t, std::uint64_t>& write_of, std::uint32_t layer,
                                      std::uint32_t query_heads, std::uint64_t query_seed) {
  const std::uint32_t kv_heads = 2, dim = 8;
  std::vector<float> out;
  const float scale = det::div(1.0f, det::sqrt(static_cast<float>(dim)));
  auto value = [&](std::int64_t token, std::uint32_t part, std::uint32_t head, std::uint32_t d) {
    const std::vector<std::uint8_t> row = oracle_row(c.seed, token, 0, layer, part, write_of.at(token), 32);
    std::uint16_t bits;
    std::memcpy(&bits, row.data() + (head * dim + d) * 2, 2);
    return det::bf16_to_float(bits);
  };
  for (std::size_t b = 0; b < requests.size(); ++b)
    for (std::uint32_t h = 0; h < query_heads; ++h) {
      const std::uint32_t g = h / (query_heads / kv_heads);
      std::vector<float> s;
      for (std::int64_t t : requests[b]) {
        float acc = 0.0f;
        for (std::uint32_t d = 0; d < dim; ++d)
          acc = det::add(acc, det::mul(oracle_query_value(query_seed, static_cast<std::uint32_t>(b), h, d), value(t, 0, g, d)));
        s.push_back(det::mul(acc, scale));
      }
      float m = s[0], l = 0.0f;
      for (float x : s) m = x > m ? x : m;
      for (float& x : s) {
        x = det::exp_nonpositive(det::sub(x, m));
        l = det::add(l, x);
      }
      for (std::uint32_t e = 0; e < dim; ++e) {
        float acc = 0.0f;
        for (std::size_t j = 0; j < s.size(); ++j) acc = det::add(acc, det::mul(s[j], value(requests[b][j], 1, g, e)));
        out.push_back(det::div(acc, l));
      }
    }
  return out;
}

TEST_F(GpuPoolTest, DecodeGraphReplaysAtChangingBatchSizes) {
  const std::int64_t ps = 2;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, ps, 40);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  // Three requests of 3 pages each; history tokens written at write number 1.
  std::vector<std::vector<std::int64_t>> all;
  std::map<std::int64_t, std::uint64_t> write_of;
  for (int r = 0; r < 3; ++r) {
    all.push_back(tokens_of(as<Allocated>(pool.apply(Alloc{3 * ps})).pages, ps));
    Translate tr;
    tr.ids = all.back();
    tr.shape = {static_cast<std::int64_t>(tr.ids.size())};
    const std::vector<std::int64_t> loc = as<Ids>(pool.apply(tr)).values;
    for (std::uint32_t layer = 0; layer < 2; ++layer)
      ASSERT_TRUE(pool.apply(Write{layer, 1, std::nullopt, loc, true, all.back(), true}).ok());
    for (std::int64_t t : all.back()) write_of[t] = 1;
  }
  ASSERT_TRUE(pool.apply(Capture{7, 4, 3, 1, 4}).ok());
  EXPECT_EQ(error_of(pool.apply(Capture{7, 4, 3, 1, 4})), ErrorKind::invalid_argument) << "graph 7 exists";
  EXPECT_EQ(error_of(pool.apply(Capture{8, 4, 3, 1, 3})), ErrorKind::invalid_argument) << "3 is no multiple of 2";
  // Replays at 3, then 1 (the tail must return to the sink), then 2, with histories that grow
  // and shrink; each replay writes the new token at its own write number.
  const std::vector<std::vector<std::size_t>> lengths = {{3, 5, 2}, {6}, {4, 1}};
  std::uint64_t write = 10;
  for (const std::vector<std::size_t>& lens : lengths) {
    ++write;
    Replay r;
    r.graph = 7;
    r.write_number = write;
    r.query_seed = 1000 + write;
    for (std::size_t b = 0; b < lens.size(); ++b)
      r.requests.emplace_back(all[b].begin(), all[b].begin() + static_cast<std::ptrdiff_t>(lens[b]));
    for (const auto& req : r.requests) write_of[req.back()] = write;
    const Decode d = as<Decode>(pool.apply(r));
    SCOPED_TRACE("replay at batch " + std::to_string(lens.size()));
    ASSERT_EQ(d.loc.size(), 4u);
    for (std::size_t b = 0; b < 4; ++b) {
      if (b < lens.size()) {
        Translate tr;
        tr.ids = {r.requests[b].back()};
        tr.shape = {1};
        EXPECT_EQ(d.loc[b], as<Ids>(pool.apply(tr)).values[0]);
      } else {
        EXPECT_EQ(d.loc[b], 0) << "lane " << b << " past the batch is the sink";
      }
    }
    for (std::size_t b = 0; b < lens.size(); ++b)
      for (std::size_t col = 0; col < (lens[b] + ps - 1) / ps; ++col) {
        Translate tr;
        tr.ids = {r.requests[b][col * ps]};
        tr.shape = {1};
        EXPECT_EQ(d.table[b][col], as<Ids>(pool.apply(tr)).values[0] / ps) << "row " << b << " col " << col;
      }
    const std::vector<float> want = expected_attention(c, r.requests, write_of, 1, 4, r.query_seed);
    ASSERT_EQ(d.attention.size, want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(d.attention.bytes.data(), want.data(), d.attention.size), 0);
  }
  // Refusals: too many requests, an unallocated token, a shared new token.
  Replay bad;
  bad.graph = 7;
  bad.requests = {all[0], all[1], all[2], all[0], all[1]};
  EXPECT_EQ(error_of(pool.apply(bad)), ErrorKind::out_of_range);
  bad.requests = {{all[0][0], 0}};
  EXPECT_EQ(error_of(pool.apply(bad)), ErrorKind::invalid_argument);
  bad.requests = {{all[0][0]}, {all[0][0]}};
  EXPECT_EQ(error_of(pool.apply(bad)), ErrorKind::duplicate_loc);
}


// Synchronizations (stream syncs) the operation makes, counted by the failure injector armed to
// count synchronization calls only and to fail none.
std::uint64_t syncs_and_answer(GpuPool& pool, const Op& op, OpResult& answer) {
  CudaFaultPlan plan;
  plan.kinds = 1u << static_cast<unsigned>(CudaCallKind::synchronization);
  arm_cuda_faults(plan);
  answer = pool.apply(op);
  const std::uint64_t n = cuda_calls_counted();
  disarm_cuda_faults();
  return n;
}

// The synchronizations of an operation the pool carries out.
std::uint64_t syncs_of(GpuPool& pool, const Op& op) {
  OpResult r = make_error(ErrorKind::internal, "not applied");
  const std::uint64_t n = syncs_and_answer(pool, op, r);
  EXPECT_TRUE(r.ok()) << to_string(op) << ": " << (r.ok() ? "" : r.error().message);
  return n;
}

// The synchronizations of an operation the pool must refuse with `kind`.
std::uint64_t syncs_of_refusal(GpuPool& pool, const Op& op, ErrorKind kind) {
  OpResult r = OpResult(Outcome(Done{}));
  const std::uint64_t n = syncs_and_answer(pool, op, r);
  EXPECT_FALSE(r.ok()) << to_string(op) << " was carried out; it must be refused";
  if (!r.ok()) {
    EXPECT_EQ(r.error().kind, kind) << to_string(op) << ": " << r.error().message;
  }
  return n;
}

// docs/gpu.md "Synchronization": an operation waits for the device only where its answer needs
// it; the rest is left running on the stream, and what later operations read back is the same.
TEST_F(GpuPoolTest, OperationsSynchronizeOnlyWhereTheirAnswerNeedsTheDevice) {
  pool.set_sync_each_op(false);
  const std::int64_t ps = 2;
  const PoolConfig c = tiny_config({LayerKind::full, LayerKind::full}, ps, 24);
  EXPECT_EQ(syncs_of(pool, BuildPool{c}), 0u);
  const std::int64_t m = static_cast<std::int64_t>(derive_pool(c).value().geometry.sub_pools[0].min_page_index);
  EXPECT_EQ(syncs_of(pool, Alloc{4 * ps}), 0u) << "the virtual pages are the host copy's queue front";
  const std::vector<std::int64_t> tokens = tokens_of({m, m + 1, m + 2, m + 3}, ps);
  EXPECT_EQ(syncs_of(pool, MakeBatch{1, tokens, {}}), 0u);
  EXPECT_EQ(syncs_of(pool, Rebind{1, 0}), 1u) << "the loc comes back";
  EXPECT_EQ(syncs_of(pool, Split{1, 4, 2, 3}), 0u);
  // A batch's loc is judged from the ids its rebind brought back (or, split, its parent's):
  // no read-back; the scatter is left running.
  EXPECT_EQ(syncs_of(pool, Write{0, 9, 1u, {}, false, {}, false}), 0u) << "the loc's ids are on the host";
  EXPECT_EQ(syncs_of(pool, Write{1, 9, 2u, {}, false, {}, false}), 0u);
  EXPECT_EQ(syncs_of(pool, DropBatch{3}), 0u);
  EXPECT_EQ(syncs_of(pool, BeginRead{4, "full", {m + 3}}), 0u);
  EXPECT_EQ(syncs_of(pool, EndRead{4}), 0u);
  EXPECT_EQ(syncs_of(pool, MovePages{"full", {m + 6}, {m + 3}}), 0u) << "the destination's owner is the host copy's";
  // The scatters left running landed: the rows read back are the oracle's.
  const std::vector<std::int64_t> loc = tokens_of({m, m + 1, m + 2, m + 3}, ps);  // bound in order from m
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    // Layer 1 was written through batch 2, the first four lanes.
    const std::vector<std::int64_t> lanes = layer == 0 ? loc : std::vector<std::int64_t>(loc.begin(), loc.begin() + 4);
    const std::vector<std::int64_t> rows_of = layer == 0 ? tokens : std::vector<std::int64_t>(tokens.begin(), tokens.begin() + 4);
    std::vector<std::uint8_t> want;
    for (std::int64_t t : rows_of) {
      const std::vector<std::uint8_t> row = oracle_row(c.seed, t, 0, layer, 0, 9, 32);
      want.insert(want.end(), row.begin(), row.end());
    }
    EXPECT_EQ(as<Bytes>(pool.apply(Read{layer, "k", lanes})).bytes, want) << "layer " << layer;
  }
  EXPECT_TRUE(pool.verify().ok());
  // An eager free: the not-allocated check and the compaction's plan are the host copy's; the
  // moves go up in one copy and the commit is left running.
  EXPECT_EQ(syncs_of(pool, Free{IdUnit::pages, {m}}), 0u) << "checked and planned on the host";
  EXPECT_TRUE(pool.verify().ok());
  EXPECT_EQ(syncs_of(pool, Alloc{ps}), 0u);
  EXPECT_EQ(syncs_of(pool, Flush{}), 0u);
  // Freed again: refused on the host, and nothing changed.
  const PoolTables before = pool.tables().value();
  EXPECT_EQ(syncs_of_refusal(pool, Free{IdUnit::pages, {m, m + 1}}, ErrorKind::double_free), 0u)
      << "the refusal is the host copy's";
  const OpResult again = pool.apply(Free{IdUnit::pages, {m, m + 1}});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().kind, ErrorKind::double_free);
  EXPECT_NE(again.error().message.find("virtual pages " + std::to_string(m) + " are not allocated"), std::string::npos)
      << again.error().message;
  EXPECT_EQ(pool.tables().value(), before);
  EXPECT_TRUE(pool.verify().ok());
}

// Doors' SwaLocMemo: a batch's second SWA layer takes the first's derived loc and verdict (no
// synchronization); any other op may change the tables, so the next SWA write derives again. Here
// the op between moves the batch's SWA page (a free_swa's compaction): a write through the loc
// kept would land on the page's old place, and the rows read back at its new one would be stale.
TEST_F(GpuPoolTest, ABatchDerivesItsSwaLocOnceUntilTheTablesMayChange) {
  pool.set_sync_each_op(false);
  const std::int64_t ps = 2;
  const PoolConfig c = tiny_config({LayerKind::swa, LayerKind::full, LayerKind::swa, LayerKind::full}, ps, 30);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> pages = as<Allocated>(pool.apply(Alloc{2 * ps})).pages;
  const std::vector<std::int64_t> tokens = tokens_of(pages, ps);
  ASSERT_TRUE(pool.apply(MakeBatch{1, tokens, {}}).ok());
  const std::vector<std::int64_t> loc = as<Ids>(pool.apply(Rebind{1, 0})).values;
  EXPECT_EQ(syncs_of(pool, Write{0, 4, 1u, {}, false, {}, false}), 1u) << "the SWA loc derived and checked";
  EXPECT_EQ(syncs_of(pool, Write{2, 4, 1u, {}, false, {}, false}), 0u) << "the second SWA layer takes it";
  EXPECT_EQ(syncs_of(pool, Write{1, 4, 1u, {}, false, {}, false}), 0u) << "a full layer judges on the host";
  const std::vector<std::int64_t> before = as<Ids>(pool.apply(SwaTranslate{loc})).values;
  // The second page leaves the window: the first's SWA page moves up into its place.
  ASSERT_FALSE(as<Compaction>(pool.apply(FreeSwa{IdUnit::pages, {pages[1]}})).moves.empty());
  EXPECT_EQ(syncs_of(pool, Write{2, 5, 1u, {}, false, {}, false}), 1u) << "derived again after the free_swa";
  const std::vector<std::int64_t> swa_loc = as<Ids>(pool.apply(SwaTranslate{loc})).values;
  ASSERT_NE(swa_loc[0], before[0]) << "the page moved";
  std::vector<std::uint8_t> want = oracle_row(c.seed, tokens[0], 1, 1, 0, 5, 32);
  const std::vector<std::uint8_t> second = oracle_row(c.seed, tokens[1], 1, 1, 0, 5, 32);
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(as<Bytes>(pool.apply(Read{2, "k", {swa_loc[0], swa_loc[1]}})).bytes, want);
  EXPECT_TRUE(pool.verify().ok());
}

// A failure of work left running surfaces at a later synchronization; the error names every
// operation whose work had not been synchronized, and KVTWIN_GPU_SYNC_EACH_OP's mode names one.
TEST_F(GpuPoolTest, AFailureThatSurfacesLaterNamesTheOperationsLeftRunning) {
  for (const bool each_op : {false, true}) {
    SCOPED_TRACE(each_op ? "synchronizing after every operation" : "synchronizing where needed");
    GpuPool gpu;
    gpu.set_sync_each_op(each_op);
    const PoolConfig c = tiny_config({LayerKind::full}, 2, 16);
    ASSERT_TRUE(gpu.apply(BuildPool{c}).ok());                                // #0
    const std::vector<std::int64_t> pages = as<Allocated>(gpu.apply(Alloc{4})).pages;  // #1
    ASSERT_TRUE(gpu.apply(MakeBatch{1, tokens_of(pages, 2), {}}).ok());      // #2
    ASSERT_TRUE(gpu.apply(Rebind{1, 0}).ok());                               // #3
    ASSERT_TRUE(gpu.apply(Write{0, 1, 1u, {}, false, {}, false}).ok());      // #4: its scatter left running
    ASSERT_TRUE(gpu.apply(DropBatch{1}).ok());                               // #5
    CudaFaultPlan plan;
    plan.kinds = 1u << static_cast<unsigned>(CudaCallKind::synchronization);
    plan.fail_at = 1;  // the next synchronization fails, as one reporting an earlier kernel's fault would
    arm_cuda_faults(plan);
    Translate tr;
    tr.ids = {pages[0] * 2};
    tr.shape = {1};
    const OpResult r = gpu.apply(tr);  // #6
    disarm_cuda_faults();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::environment);
    EXPECT_THAT(r.error().message, ::testing::HasSubstr("injected"));
    if (each_op) {
      EXPECT_THAT(r.error().message, ::testing::Not(::testing::HasSubstr("had not been synchronized")));
    } else {
      // The write judged its loc on the host and synchronized nothing: the rebind's work after its
      // last synchronization is still listed.
      EXPECT_THAT(r.error().message, ::testing::HasSubstr("operations #3 rebind, #4 write, #5 drop_batch, #6 translate "
                                                          "had not been synchronized"));
    }
    EXPECT_FALSE(gpu.apply(Alloc{2}).ok()) << "poisoned";
  }
}

}  // namespace
}  // namespace kvtwin::gpu
