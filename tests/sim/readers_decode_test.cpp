// Units for moves and readers (SPEC.md section 7) and the decode step (capture / replay and the
// reference attention, docs/decisions.md "The decode step"): a move under an open reader is
// refused with nothing changed, raw moves copy envelopes, the capture-stable loc buffer has no
// stale tail, the page table is refilled from this batch's lengths only, and the attention
// matches an independent double-precision computation from the oracle.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "core/oracle.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::config_with_pages;
using testing::mha_shape;
using testing::mla_shape;
using testing::must;
using testing::one_layer_pool;
using testing::must_as;
using testing::refused;

TEST(Readers, ACompactionThatWouldMoveAHeldPageIsRefused) {
  Model m;
  must(m, BuildPool{one_layer_pool(12)});
  must(m, Alloc{5 * 4});  // v1..5 -> p1..5
  must(m, BeginRead{7, "full", {5}});
  // Freeing v2 moves p5 -> p2: refused, and nothing changes (not even the free).
  refused(m, Free{IdUnit::pages, {2}}, ErrorKind::reader_conflict);
  OpResult r = m.apply(Free{IdUnit::pages, {2}});
  EXPECT_NE(r.error().message.find("end_read 7"), std::string::npos) << r.error().message;
  // A free that moves nothing held is allowed, even of a held page: freeing v5 moves nothing.
  EXPECT_TRUE(must_as<Compaction>(m, Free{IdUnit::pages, {5}}).moves.empty());
  must(m, EndRead{7});
  refused(m, EndRead{7}, ErrorKind::invalid_argument);
  EXPECT_EQ(must_as<Compaction>(m, Free{IdUnit::pages, {2}}).moves, (std::vector<PageMove>{{"full", 4, 2}}));
}

TEST(Readers, AHeldHoleCannotBeFilledByAFlush) {
  Model m;
  must(m, BuildPool{one_layer_pool(12, CompactionMode::lazy)});
  must(m, Alloc{5 * 4});
  must(m, Free{IdUnit::pages, {1}});  // hole at p1
  must(m, BeginRead{1, "full", {1}});  // a reader still holds the old address
  refused(m, Flush{}, ErrorKind::reader_conflict);
  must(m, EndRead{1});
  EXPECT_EQ(must_as<Compaction>(m, Flush{}).moves, (std::vector<PageMove>{{"full", 5, 1}}));
}

TEST(Readers, BeginReadRefusesBadInput) {
  Model m;
  must(m, BuildPool{one_layer_pool(8)});
  must(m, BeginRead{1, "full", {1, 2}});
  refused(m, BeginRead{1, "full", {3}}, ErrorKind::invalid_argument);  // id in use
  refused(m, BeginRead{2, "swa", {3}}, ErrorKind::invalid_argument);   // no such sub-pool
  refused(m, BeginRead{2, "full", {8}}, ErrorKind::out_of_range);
  refused(m, BeginRead{2, "full", {-1}}, ErrorKind::out_of_range);
}

TEST(MovePages, CopiesWholeEnvelopesAndChangesNoTable) {
  Model m;
  must(m, BuildPool{one_layer_pool(10)});
  must(m, Alloc{2 * 4});
  must(m, Write{0, 5, std::nullopt, {4, 7}, true, {4, 7}, false});
  const PoolTables before = *m.tables();
  const std::uint64_t page = 4 * 64;  // 4 slots of E 64
  const std::vector<std::uint8_t> src = *m.raw_bytes(1 * page, page);
  must(m, MovePages{"full", {6}, {1}});
  EXPECT_EQ(*m.raw_bytes(6 * page, page), src);
  EXPECT_EQ(*m.tables(), before);
  refused(m, MovePages{"full", {2}, {1}}, ErrorKind::invalid_argument);     // dst bound
  refused(m, MovePages{"full", {6}, {6}}, ErrorKind::invalid_argument);     // not disjoint
  refused(m, MovePages{"full", {6, 7}, {1}}, ErrorKind::invalid_argument);  // lengths differ
  refused(m, MovePages{"full", {0}, {1}}, ErrorKind::out_of_range);         // the sink
  refused(m, MovePages{"full", {10}, {1}}, ErrorKind::out_of_range);
  refused(m, MovePages{"mla", {6}, {1}}, ErrorKind::invalid_argument);
  must(m, BeginRead{3, "full", {7}});
  refused(m, MovePages{"full", {7}, {1}}, ErrorKind::reader_conflict);
}

TEST(MovePages, RefusesADestinationInsideTheOtherSidesBand) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}), 4, 12)});
  must(m, Alloc{2 * 4});  // SWA band: pages 10, 11
  refused(m, MovePages{"full", {10}, {1}}, ErrorKind::invalid_argument);
  must(m, MovePages{"full", {5}, {1}});
  refused(m, MovePages{"swa", {1}, {10}}, ErrorKind::invalid_argument);  // full band: 1, 2
  must(m, MovePages{"swa", {6}, {10}});
}

// ---------------------------------------------------------------- the decode step

// Two full layers, 2 KV heads of 16 (E = 2 * (64 + 64) = 256 bytes), page size 4.
PoolConfig decode_pool() {
  return config_with_pages(mha_shape({LayerKind::full, LayerKind::full}, 2), 4, 16);
}

// fp32 little-endian bytes -> floats.
std::vector<float> floats_of(const std::vector<std::uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// A bf16 row of the oracle, as doubles.
std::vector<double> oracle_values(std::uint64_t seed, const RowIdentity& id, std::uint32_t elements) {
  std::vector<std::uint8_t> row(elements * 2);
  fill_oracle_row(seed, id, DType::bf16, row);
  std::vector<double> out(elements);
  for (std::uint32_t i = 0; i < elements; ++i) {
    std::uint16_t v = 0;
    std::memcpy(&v, row.data() + 2 * i, 2);
    const std::uint32_t bits = std::uint32_t{v} << 16;
    float f = 0;
    std::memcpy(&f, &bits, 4);
    out[i] = f;
  }
  return out;
}

TEST(Decode, ReplayRefillsBuffersFromThisBatchAndAttentionMatchesTheOracle) {
  Model m;
  const PoolConfig config = decode_pool();
  must(m, BuildPool{config});
  must(m, Alloc{3 * 4});                // v1..3: tokens 4..15
  must(m, Free{IdUnit::pages, {1}});    // v3 moves to p1: translation is not the identity
  must(m, Alloc{4});                    // v4 on p3
  // Context rows (write 1) for request 0 = tokens 8..14 (v2, v3), request 1 = tokens 16..18 (v4).
  must(m, MakeBatch{0, {8, 9, 10, 11, 12, 13, 16, 17}, {}});
  must(m, Rebind{0, 0});
  for (std::uint32_t l = 0; l < 2; ++l) must(m, Write{l, 1, std::uint32_t{0}, {}, false, {}, false});
  must(m, Capture{5, 4, 3, 1, 4});  // max_batch 4, max_pages 3, layer 1, 4 query heads over 2 KV heads
  const std::vector<std::vector<std::int64_t>> requests = {{8, 9, 10, 11, 12, 13, 14}, {16, 17, 18}};
  const Decode d = must_as<Decode>(m, Replay{5, requests, 2, 99});
  // 1. The loc buffer: translate(new token) per request, the sink for every lane past the batch.
  const PoolTables t = *m.tables();
  auto translate = [&](std::int64_t tok) { return t.sides[0].v2p[tok / 4] * 4 + tok % 4; };
  EXPECT_EQ(d.loc, (std::vector<std::int64_t>{translate(14), translate(18), 0, 0}));
  // 3. The page table: live prefix of each request, everything else as captured (0).
  EXPECT_EQ(d.table, (std::vector<std::vector<std::int64_t>>{
                         {t.sides[0].v2p[2], t.sides[0].v2p[3], 0}, {t.sides[0].v2p[4], 0, 0}, {0, 0, 0}, {0, 0, 0}}));
  // 2. The new tokens' rows were written at write 2 on every layer.
  EXPECT_EQ(m.expected_row(0, translate(14), 0, 1), (RowIdentity{14, 0, 0, 1, 2}));
  EXPECT_EQ(m.expected_row(0, translate(18), 1, 0), (RowIdentity{18, 0, 1, 0, 2}));
  // 4. The attention, recomputed here in double from the oracle's rows and queries.
  ASSERT_EQ(d.attention.size, 2u * 4 * 16 * 4);
  const std::vector<float> got = floats_of(d.attention.bytes);
  for (std::size_t b = 0; b < requests.size(); ++b) {
    for (std::uint32_t h = 0; h < 4; ++h) {
      const std::uint32_t g = h / 2;
      std::vector<double> scores;
      std::vector<std::vector<double>> values;
      for (std::size_t j = 0; j < requests[b].size(); ++j) {
        const std::int64_t tok = requests[b][j];
        const std::uint64_t wn = j + 1 == requests[b].size() ? 2 : 1;
        const auto k = oracle_values(config.seed, RowIdentity{tok, 0, 1, 0, wn}, 32);
        const auto v = oracle_values(config.seed, RowIdentity{tok, 0, 1, 1, wn}, 32);
        double s = 0;
        for (std::uint32_t e = 0; e < 16; ++e)
          s += static_cast<double>(oracle_query_value(99, static_cast<std::uint32_t>(b), h, e)) * k[g * 16 + e];
        scores.push_back(s / std::sqrt(16.0));
        values.emplace_back(v.begin() + g * 16, v.begin() + g * 16 + 16);
      }
      double mx = scores[0];
      for (double s : scores) mx = std::max(mx, s);
      double l = 0;
      for (double& s : scores) l += (s = std::exp(s - mx));
      for (std::uint32_t e = 0; e < 16; ++e) {
        double acc = 0;
        for (std::size_t j = 0; j < scores.size(); ++j) acc += scores[j] * values[j][e];
        const double want = acc / l;
        const float have = got[(b * 4 + h) * 16 + e];
        EXPECT_NEAR(have, want, 1e-4 * std::max(1.0, std::fabs(want))) << "b " << b << " h " << h << " e " << e;
      }
    }
  }
  // A smaller second replay: the loc tail is the sink again, table rows past the batch keep
  // what they held (capture-stable), and the attention of the same inputs is the same bytes.
  must(m, MakeBatch{1, {19}, {}});
  const Decode again = must_as<Decode>(m, Replay{5, {{16, 17, 18, 19}}, 3, 99});
  EXPECT_EQ(again.loc, (std::vector<std::int64_t>{translate(19), 0, 0, 0}));
  EXPECT_EQ(again.table[1], d.table[1]);
  EXPECT_EQ(again.attention.size, 1u * 4 * 16 * 4);
}

TEST(Decode, ReplayIsDeterministicAndMlaReadsTheLatentRow) {
  auto run = [] {
    Model m;
    must(m, BuildPool{config_with_pages(mla_shape(2), 4, 8)});
    must(m, Alloc{2 * 4});
    must(m, Capture{0, 2, 2, 1, 3});
    must(m, Write{1, 1, std::nullopt, {4, 5, 6}, true, {4, 5, 6}, false});
    return must_as<Decode>(m, Replay{0, {{4, 5, 6, 7}}, 2, 11});
  };
  const Decode a = run(), b = run();
  EXPECT_EQ(a.attention.bytes, b.attention.bytes);
  EXPECT_EQ(a.attention.size, 1u * 3 * 32 * 4);  // v_head_dim = kv_lora_rank = 32
  for (float f : floats_of(a.attention.bytes)) {
    EXPECT_TRUE(std::isfinite(f));
    EXPECT_NE(f, 0.0f);
  }
}

TEST(Decode, CaptureAndReplayRefuseBadInputAndChangeNothing) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}, 2), 4, 16)});
  must(m, Alloc{2 * 4});
  refused(m, Capture{0, 2, 2, 0, 2}, ErrorKind::invalid_argument);  // an SWA layer
  refused(m, Capture{0, 2, 2, 2, 2}, ErrorKind::out_of_range);      // past the model
  refused(m, Capture{0, 2, 2, 1, 3}, ErrorKind::invalid_argument);  // 3 query heads over 2 KV heads
  refused(m, Capture{0, 0, 2, 1, 2}, ErrorKind::invalid_argument);
  must(m, Capture{0, 2, 2, 1, 2});
  refused(m, Capture{0, 2, 2, 1, 2}, ErrorKind::invalid_argument);  // id in use
  refused(m, Replay{1, {{4}}, 1, 0}, ErrorKind::invalid_argument);  // never captured
  refused(m, Replay{0, {{4}, {5}, {6}}, 1, 0}, ErrorKind::out_of_range);
  refused(m, Replay{0, {{}}, 1, 0}, ErrorKind::invalid_argument);
  refused(m, Replay{0, {{4, 5, 6, 7, 8, 9, 10, 11, 12}}, 1, 0}, ErrorKind::out_of_range);  // 3 pages > 2
  refused(m, Replay{0, {{4, 20}}, 1, 0}, ErrorKind::invalid_argument);                     // 20 not allocated
  refused(m, Replay{0, {{4, 5}, {6, 5}}, 1, 0}, ErrorKind::duplicate_loc);
  // With the SWA half of v1 gone, SWA layers discard its lane; the full layers still write.
  must(m, FreeSwa{IdUnit::pages, {1}});
  const Decode d = must_as<Decode>(m, Replay{0, {{4, 5}}, 1, 0});
  EXPECT_EQ(d.loc[0], 5);
}

}  // namespace
}  // namespace kvtwin::sim
