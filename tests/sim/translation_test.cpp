// Units for translation (SPEC.md section 5 and 4.3): the token rule at its edges, the translate
// operation's buffers (int32/int64, 1-D/2-D, strided, aliasing, out_width), page tables bounded
// to the live prefix, the remap bounded by kv_indptr[bs], the SWA loc with tombstones, and a
// rebind's lanes against the token rule.
#include <gtest/gtest.h>

#include "sim/translation.h"
#include "sim/write_locs.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::config_with_pages;
using testing::mha_shape;
using testing::must;
using testing::must_as;
using testing::refused;

// v2p of 6 virtual pages (num_virtual 6 + sentinel): sink, v1 -> 4, v2 unbound, v3 -> 2,
// v4 -> 5, v5 unbound; page size 4.
const std::vector<std::int64_t> kV2p = {0, 4, -1, 2, 5, -1, -1};
constexpr std::int64_t kPs = 4;

TEST(TranslateToken, FollowsTheSpecRuleAtEveryEdge) {
  EXPECT_EQ(translate_token(kV2p, kPs, 5), 4 * 4 + 1);   // v1 slot 1
  EXPECT_EQ(translate_token(kV2p, kPs, 15), 2 * 4 + 3);  // v3 slot 3
  EXPECT_EQ(translate_token(kV2p, kPs, 0), 0);           // the sink maps to itself
  EXPECT_EQ(translate_token(kV2p, kPs, 3), 3);           // sink page slot 3: v2p[0] * 4 + 3
  EXPECT_EQ(translate_token(kV2p, kPs, -1), 0);          // negative -> sink, never wrap-around
  EXPECT_EQ(translate_token(kV2p, kPs, -4), 0);
  EXPECT_EQ(translate_token(kV2p, kPs, 9), 0);           // unbound (-1 * 4 + 1 < 0) -> sink
  EXPECT_EQ(translate_token(kV2p, kPs, 24), 0);          // the -1 sentinel row
  EXPECT_EQ(translate_token(kV2p, kPs, 28), 0);          // past the table
  EXPECT_EQ(translate_token(kV2p, kPs, INT64_MAX), 0);
}

TEST(TranslateToken, RebindTranslatesEveryLaneAsTranslateToken) {
  // Runs of one page, page changes, tombstones, the sink, negative and past-the-table tokens, in
  // and out of order: rebind keeps a page's entry for the lanes after it, with the same values.
  MakeBatch op;
  op.batch = 1;
  for (std::int64_t t = -6; t < 34; ++t) op.tokens.push_back(t);
  for (std::int64_t t : std::initializer_list<std::int64_t>{5, 6, 4, 9, 10, 8, 3, 0, -1, 27, 28, 7, 7, 13, 12, 11, 23, 22,
                                                          INT64_MAX, 19})
    op.tokens.push_back(t);
  Batch b;
  ASSERT_TRUE(make_batch(op, b).ok());
  ASSERT_TRUE(rebind_batch(b, op.tokens.size() + 3, kV2p, kPs).ok());
  ASSERT_EQ(b.loc.size(), op.tokens.size() + 3);
  for (std::size_t i = 0; i < op.tokens.size(); ++i)
    EXPECT_EQ(b.loc[i], translate_token(kV2p, kPs, op.tokens[i])) << "lane " << i << ", token " << op.tokens[i];
  for (std::size_t i = op.tokens.size(); i < b.loc.size(); ++i) EXPECT_EQ(b.loc[i], 0) << "padding lane " << i;
  EXPECT_TRUE(b.physical);
}

TEST(TranslateToken, PageOfTokenClampsAtTheSink) {
  EXPECT_EQ(translate_page_of_token(kV2p, kPs, 13), 2);
  EXPECT_EQ(translate_page_of_token(kV2p, kPs, 9), 0);
  EXPECT_EQ(translate_page_of_token(kV2p, kPs, -3), 0);
  EXPECT_EQ(translate_page_of_token(kV2p, kPs, 400), 0);
}

TEST(SwaToken, TombstonesAndUnboundPagesGoToTheSink) {
  // Full p2v over 6 pages: p1 -> v3, p2 -> v1, p3 unbound. SWA v2p: v1 -> 5, v3 tombstone.
  const std::vector<std::int64_t> full_p2v = {0, 3, 1, -1, -1, -1, -1};
  const std::vector<std::int64_t> swa_v2p = {0, 5, -1, -1, -1, -1, -1};
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, 2 * 4 + 1), 5 * 4 + 1);  // p2 -> v1 -> swa 5
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, 1 * 4 + 2), 0);          // p1 -> v3 tombstone -> sink
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, 3 * 4 + 2), 2);          // unbound -> vpage 0 -> sink slot 2
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, 0), 0);
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, -7), 0);
  EXPECT_EQ(swa_token(full_p2v, swa_v2p, kPs, 1000), 1000 % 4);       // past p2v: the sentinel
}

Translate translate_of(std::vector<std::int64_t> ids) {
  Translate t;
  t.shape = {static_cast<std::int64_t>(ids.size())};
  t.ids = std::move(ids);
  return t;
}

std::vector<std::int64_t> expected_of(const std::vector<std::int64_t>& ids) {
  std::vector<std::int64_t> out;
  for (std::int64_t t : ids) out.push_back(translate_token(kV2p, kPs, t));
  return out;
}

TEST(TranslateOp, OneDimensionalInt64AndInt32GiveTheSameIds) {
  const std::vector<std::int64_t> ids = {5, -1, 15, 9, 0, 17, 1 << 20};
  const Translate t64 = translate_of(ids);
  Translate t32 = t64;
  t32.index_dtype = IndexDtype::int32;
  auto a = run_translate(t64, kV2p, kPs);
  auto b = run_translate(t32, kV2p, kPs);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, expected_of(ids));
  EXPECT_EQ(*b, *a);
}

TEST(TranslateOp, StridedInputAndStridedOrAliasedOutputGiveTheSameIds) {
  const std::vector<std::int64_t> ids = {13, 5, 12, 9, 18};
  for (std::int64_t in_stride : {0, 1, 3}) {
    for (OutPlacement out : {OutPlacement::fresh, OutPlacement::alias, OutPlacement::strided}) {
      Translate t = translate_of(ids);
      t.input_stride = in_stride;
      t.out = out;
      if (out == OutPlacement::strided) t.out_stride = 2;
      auto r = run_translate(t, kV2p, kPs);
      ASSERT_TRUE(r.ok()) << to_string(Op(t)) << ": " << r.error().message;
      EXPECT_EQ(*r, expected_of(ids)) << to_string(Op(t));
    }
  }
}

TEST(TranslateOp, TwoDimensionalRowStridedInput) {
  Translate t;
  t.ids = {5, 6, 7, 13, 14, 15};
  t.shape = {2, 3};
  t.input_stride = 8;  // row stride: each row of 3 sits at the start of 8 elements
  t.out = OutPlacement::strided;
  t.out_stride = 4;
  auto r = run_translate(t, kV2p, kPs);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, expected_of(t.ids));
}

TEST(TranslateOp, OutWidthZeroFillsThePaddedLanes) {
  Translate t = translate_of({5, 13});
  t.out_width = 5;
  auto r = run_translate(t, kV2p, kPs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::int64_t>{17, 9, 0, 0, 0}));
  // Aliased: the capture-stable buffer's stale tail comes back as the sink too.
  t.out = OutPlacement::alias;
  t.input_stride = 2;
  auto a = run_translate(t, kV2p, kPs);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::int64_t>{17, 9, 0, 0, 0}));
}

TEST(TranslateOp, RefusesWhatItCannotDo) {
  auto kind_of = [](const Translate& t) {
    auto r = run_translate(t, kV2p, kPs);
    EXPECT_FALSE(r.ok()) << to_string(Op(t));
    return r.ok() ? ErrorKind::internal : r.error().kind;
  };
  Translate t = translate_of({5, 6});
  t.out_dtype = IndexDtype::int32;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // output must be int64
  t = translate_of({5, 6});
  t.index_dtype = IndexDtype::int32;
  t.out = OutPlacement::alias;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // int64 cannot alias int32
  t = translate_of({5, 6});
  t.index_dtype = IndexDtype::int32;
  t.ids = {5, std::int64_t{1} << 40};
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // id does not fit int32
  t = translate_of({5, 6});
  t.shape = {3};
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // shape does not match
  t = translate_of({5, 6});
  t.out_width = 1;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // width below N
  t.ids = {1, 2, 3, 4};
  t.shape = {2, 2};
  t.out_width = 4;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // out_width on 2-D
  t = translate_of({1, 2, 3, 4});
  t.shape = {2, 2};
  t.input_stride = 1;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // rows would overlap
  t = translate_of({1});
  t.out_stride = 3;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // out_stride with a fresh output
  t = translate_of({1, 2});
  t.input_stride = std::int64_t{1} << 40;
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);  // a buffer too large to lay out
  t = translate_of({1});
  t.shape = {1, 1, 1};
  EXPECT_EQ(kind_of(t), ErrorKind::invalid_argument);
}

TEST(PageTableOp, FillsOnlyTheLivePrefixAndKeepsTheRest) {
  PageTable op;
  op.req_to_token = {{4, 5, 6, 7, 12, 13, 14}, {16, 17, 18, 19, 20}};
  op.req = {1, 0};
  op.seq_len = {3, 6};
  op.prior = {{77, 77, 77}, {88, 88, 88}};
  auto r = run_page_table(op, kV2p, kPs);
  ASSERT_TRUE(r.ok()) << r.error().message;
  // Row 0 = request 1, 3 tokens: one page, v2p[16 // 4 = 4] = 5. Row 1 = request 0, 6 tokens:
  // two pages, v2p[1] = 4 and v2p[12 // 4 = 3] = 2. Past the live prefix: as they were.
  EXPECT_EQ(r->rows, (std::vector<std::vector<std::int64_t>>{{5, 77, 77}, {4, 2, 88}}));
}

TEST(PageTableOp, RefusesMismatchedOrShortInput) {
  PageTable op;
  op.req_to_token = {{4, 5, 6, 7, 8}};
  op.req = {0};
  op.seq_len = {5};
  op.prior = {{0}};  // 5 tokens need 2 columns
  EXPECT_EQ(run_page_table(op, kV2p, kPs).error().kind, ErrorKind::out_of_range);
  op.prior = {{0, 0}};
  op.req = {1};
  EXPECT_EQ(run_page_table(op, kV2p, kPs).error().kind, ErrorKind::out_of_range);
  op.req = {0};
  op.seq_len = {9};
  op.prior = {{0, 0, 0}};
  EXPECT_EQ(run_page_table(op, kV2p, kPs).error().kind, ErrorKind::out_of_range);  // row too short
  op.seq_len = {-1};
  EXPECT_EQ(run_page_table(op, kV2p, kPs).error().kind, ErrorKind::invalid_argument);
  op.seq_len = {1, 1};
  EXPECT_EQ(run_page_table(op, kV2p, kPs).error().kind, ErrorKind::invalid_argument);
}

TEST(RemapIndicesOp, RemapsInPlaceUpToKvIndptrOfBsOnly) {
  RemapIndices op;
  op.kv_indptr = {0, 2, 3, 99};  // a capture-stable indptr: entry 3 is stale
  op.kv_indices = {5, 13, 16, 6, 7};
  op.bs = 2;
  auto r = run_remap_indices(op, kV2p, kPs);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (std::vector<std::int64_t>{17, 9, 20, 6, 7}));  // the stale tail 6, 7 untouched
}

TEST(RemapIndicesOp, RefusesBadBounds) {
  RemapIndices op;
  op.kv_indices = {5, 13};
  op.kv_indptr = {0, 3};
  op.bs = 1;
  EXPECT_EQ(run_remap_indices(op, kV2p, kPs).error().kind, ErrorKind::out_of_range);
  op.kv_indptr = {2, 1};
  EXPECT_EQ(run_remap_indices(op, kV2p, kPs).error().kind, ErrorKind::invalid_argument);
  op.kv_indptr = {0};
  EXPECT_EQ(run_remap_indices(op, kV2p, kPs).error().kind, ErrorKind::invalid_argument);
}

// Through the model: translation reads the live tables, and refusals change nothing.
TEST(ModelTranslation, TranslateFollowsCompaction) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10)});
  must(m, Alloc{4 * 4});  // v1..4 -> p1..4
  must(m, Free{IdUnit::pages, {2}});  // p4 (v4) moves to p2
  const Ids ids = must_as<Ids>(m, translate_of({16, 19, 8, 4, -5}));
  EXPECT_EQ(ids.values, (std::vector<std::int64_t>{8, 11, 0, 4, 0}));
  refused(m, [] { Translate t = translate_of({1}); t.out_dtype = IndexDtype::int32; return t; }(),
          ErrorKind::invalid_argument);
  refused(m, SwaTranslate{{1}}, ErrorKind::invalid_argument);  // not a composite
}

TEST(ModelTranslation, SwaTranslateOfATombstoneGoesToTheSink) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}), 4, 12)});
  must(m, Alloc{2 * 4});  // full v1 -> 1, v2 -> 2; SWA v1 -> 10, v2 -> 11
  const Ids before = must_as<Ids>(m, SwaTranslate{{4 + 1, 8 + 3}});
  EXPECT_EQ(before.values, (std::vector<std::int64_t>{40 + 1, 44 + 3}));
  must(m, FreeSwa{IdUnit::pages, {1}});  // v1's SWA page is a tombstone now
  const Ids after = must_as<Ids>(m, SwaTranslate{{4 + 1, 8 + 3}});
  EXPECT_EQ(after.values[0], 0);
  EXPECT_EQ(after.values[1], m.tables()->sides[1].v2p[2] * 4 + 3);
}

}  // namespace
}  // namespace kvtwin::sim
