// Units for the model as a whole: building (SPEC 3) and its refusals, verify() passing through
// moves, frees and re-allocations and failing, precisely, when the state is corrupted, the
// tables-only mode taking the same decisions as the byte mode, and what a differential checker
// reads (locate_byte, expected_row).
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "core/oracle.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::config_with_pages;
using testing::mha_shape;
using testing::mla_shape;
using testing::must;
using testing::must_as;
using testing::refused;

// A test-only model that can corrupt its own state.
class CorruptibleModel : public Model {
 public:
  using Model::allocator_for_test;
  using Model::bytes_for_test;
};

TEST(Build, DerivesTheGeometryOfSpecSection3) {
  // One full layer, E = 64; page size 4 -> epp 256; total 2600 bytes: max_slots 40, num_pages 10,
  // floor max(64, 256) = 256 -> min_slot 4, min_page 1.
  PoolConfig c = config_with_pages(mha_shape({LayerKind::full}), 4, 10);
  c.total_bytes = 2600;
  Model m;
  must(m, BuildPool{c});
  const SubPoolGeometry& g = m.derived().geometry.sub_pools[0];
  EXPECT_EQ(g.max_slots, 40u);
  EXPECT_EQ(g.num_pages, 10u);
  EXPECT_EQ(g.min_slot_index, 4u);
  EXPECT_EQ(g.min_page_index, 1u);
  EXPECT_EQ(m.raw_bytes(0, 2600)->size(), 2600u);  // exactly total_bytes, zero-filled
  EXPECT_EQ(*m.raw_bytes(0, 2600), std::vector<std::uint8_t>(2600, 0));
  EXPECT_FALSE(m.raw_bytes(2600, 1).ok());
}

TEST(Build, RefusesPoolsThatCannotBeBuiltAndKeepsTheOldOne) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10)});
  must(m, Alloc{4});
  PoolConfig tiny = config_with_pages(mha_shape({LayerKind::full}), 4, 10);
  tiny.total_bytes = 300;  // one page past the floor only partly fits
  refused(m, BuildPool{tiny}, ErrorKind::sizing);
  PoolConfig misaligned = tiny;
  misaligned.shape = mha_shape({LayerKind::full}, 1, 4, 4);  // 8-byte rows
  misaligned.total_bytes = 1 << 20;
  refused(m, BuildPool{misaligned}, ErrorKind::layout);
  PoolConfig huge = tiny;
  huge.total_bytes = std::uint64_t{8} << 30;
  refused(m, BuildPool{huge}, ErrorKind::unsupported);
  huge.tables_only = true;
  huge.page_size = 1;
  refused(m, BuildPool{huge}, ErrorKind::unsupported);  // 2^27 pages of dense tables
}

TEST(Build, RebuildingReplacesEverything) {
  Model m;
  const PoolConfig c = config_with_pages(mha_shape({LayerKind::full}), 4, 10);
  must(m, BuildPool{c});
  const std::uint64_t fresh = m.state_digest();
  must(m, Alloc{8});
  must(m, MakeBatch{0, {4}, {}});
  must(m, BeginRead{0, "full", {1}});
  must(m, BuildPool{c});
  EXPECT_EQ(m.state_digest(), fresh);
}

TEST(Verify, RowsReadBackThroughAnyNumberOfMovesFreesAndReallocations) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full, LayerKind::full}, 2, 16, 32), 2, 40)});
  std::uint64_t write = 1;
  for (int round = 0; round < 6; ++round) {
    const Allocated a = must_as<Allocated>(m, Alloc{6 * 2});
    std::vector<std::int64_t> tokens;
    for (std::int64_t v : a.pages) tokens.insert(tokens.end(), {v * 2, v * 2 + 1});
    must(m, MakeBatch{static_cast<std::uint32_t>(round), tokens, {}});
    must(m, Rebind{static_cast<std::uint32_t>(round), 0});
    for (std::uint32_t l = 0; l < 3; ++l) must(m, Write{l, write++, static_cast<std::uint32_t>(round), {}, false, {}, false});
    // Free every other page of this allocation and one SWA page of the previous one; `must`
    // runs verify() after every step.
    must(m, Free{IdUnit::pages, {a.pages[0], a.pages[2], a.pages[4]}});
    must(m, FreeSwa{IdUnit::pages, {a.pages[1]}});
  }
  EXPECT_TRUE(m.verify().ok());
}

TEST(Verify, NamesACorruptedRow) {
  CorruptibleModel m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10)});
  must(m, Alloc{2 * 4});
  must(m, Write{0, 4, std::nullopt, {5}, true, {5}, false});
  must(m, Free{IdUnit::pages, {1}});  // frees token 5's page (v1); v2 moves from p2 to p1
  must(m, Write{0, 5, std::nullopt, {5}, true, {9}, false});  // token 9 now at physical 5 (v2 on p1)
  ASSERT_TRUE(m.verify().ok());
  m.bytes_for_test()[5 * 64 + 32 + 3] ^= 0x01;  // one bit of token 9's V row
  const Status v = m.verify();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().kind, ErrorKind::internal);
  EXPECT_NE(v.error().message.find("virtual token 9 (physical 5) part 'v'"), std::string::npos) << v.error().message;
  EXPECT_NE(v.error().message.find("byte 3"), std::string::npos) << v.error().message;
}

TEST(Verify, NamesABrokenTableInvariant) {
  CorruptibleModel m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10)});
  must(m, Alloc{3 * 4});
  // Commit a compaction plan whose watermark disagrees with what it frees: the band then holds
  // an unbound page that is not a hole.
  PageAllocator& a = m.allocator_for_test();
  FreePlan plan = a.plan_free({2}, pair_in_order);
  plan.steps[0].compaction.new_watermark += 1;
  a.commit(plan);
  const Status v = m.verify();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("inside the band"), std::string::npos) << v.error().message;
  // The incremental check sees it too: the band's width no longer equals bound pages + holes.
  const Status c = m.verify_changed();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("do not fill the band"), std::string::npos) << c.error().message;
}

// The incremental verify checks what the last operation changed with verify()'s rules, and the
// counts that tie the rest together; what it cannot see (a corruption of a row no operation
// touched) the full verify() at the next checkpoint finds.
TEST(VerifyChanged, FindsACorruptionOfWhatTheOperationChanged) {
  const PoolConfig c = config_with_pages(mha_shape({LayerKind::full}), 4, 10, CompactionMode::lazy);
  {
    CorruptibleModel m;  // a just-bound page whose p2v no longer points back
    must(m, BuildPool{c});
    const Allocated a = must_as<Allocated>(m, Alloc{2 * 4});
    m.allocator_for_test().side_for_test(0).tables_for_test().p2v[static_cast<std::size_t>(a.pages.back())] = 1;
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("mutual inverses"), std::string::npos) << s.error().message;
  }
  {
    CorruptibleModel m;  // the allocated counter off by one: the counts no longer add up
    must(m, BuildPool{c});
    must(m, Alloc{4});
    ++m.allocator_for_test().side_for_test(0).tables_for_test().allocated;
    EXPECT_FALSE(m.verify_changed().ok());
  }
  {
    CorruptibleModel m;  // a lazy free whose hole went missing
    must(m, BuildPool{c});
    must(m, Alloc{3 * 4});
    must(m, Free{IdUnit::pages, {2}});
    m.allocator_for_test().side_for_test(0).tables_for_test().holes.clear();
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("do not fill the band"), std::string::npos) << s.error().message;
  }
  {
    CorruptibleModel m;  // one bit of a row the last write put down; then one of an older row
    must(m, BuildPool{c});
    must(m, Alloc{2 * 4});
    must(m, Write{0, 4, std::nullopt, {5}, true, {5}, false});
    m.bytes_for_test()[5 * 64 + 32 + 3] ^= 0x01;  // token 5's V row
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("virtual token 5"), std::string::npos) << s.error().message;
    m.bytes_for_test()[5 * 64 + 32 + 3] ^= 0x01;
    must(m, Alloc{4});
    m.bytes_for_test()[5 * 64 + 32 + 3] ^= 0x01;
    EXPECT_TRUE(m.verify_changed().ok()) << "the alloc changed nothing of token 5's page";
    EXPECT_FALSE(m.verify().ok()) << "the full verify at a checkpoint finds it";
  }
}

TEST(Verify, AMovedTwiceCompactionStopsLoudly) {
  // A pairing that moves one survivor into two holes breaks an invariant inside the allocator:
  // the run stops (KVTWIN_CHECK), it does not carry on with inconsistent tables.
  EXPECT_DEATH(
      {
        Model m;
        must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10)});
        must(m, Alloc{4 * 4});
        PageAllocator probe(m.derived().geometry, CompactionMode::eager);
        probe.alloc(4);
        const FreePlan plan = probe.plan_free({1, 2}, [](const auto& survivors, const auto& holes) {
          return std::vector<PagePair>{{survivors[0], holes[0]}, {survivors[0], holes[1]}};
        });
        probe.commit(plan);
      },
      "invariant");
}

TEST(TablesOnly, TakesTheSameDecisionsAsTheByteMode) {
  const ModelShape shape = mha_shape({LayerKind::swa, LayerKind::full}, 2);
  for (CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy}) {
    Model bytes, tables;
    must(bytes, BuildPool{config_with_pages(shape, 4, 30, mode, false)});
    must(tables, BuildPool{config_with_pages(shape, 4, 30, mode, true)});
    const std::vector<Op> ops = {Alloc{3 * 4},
                                 Alloc{2 * 4},
                                 MakeBatch{0, {4, 5, 20}, {}},
                                 Rebind{0, 4},
                                 Write{0, 1, std::uint32_t{0}, {}, false, {}, false},
                                 Write{1, 1, std::uint32_t{0}, {}, false, {}, false},
                                 Free{IdUnit::pages, {2, 4}},
                                 FreeSwa{IdUnit::pages, {1}},
                                 Flush{},
                                 Alloc{6 * 4},
                                 Capture{0, 2, 2, 1, 2},
                                 Replay{0, {{4, 5}}, 2, 3},
                                 Free{IdUnit::tokens, {4, 12}},
                                 Write{1, 2, std::nullopt, {4, 4}, true, {1, 2}, false}};
    for (const Op& op : ops) {
      const OpResult a = bytes.apply(op), b = tables.apply(op);
      if (std::holds_alternative<Replay>(op)) {
        ASSERT_TRUE(a.ok() && b.ok());
        const Decode& da = std::get<Decode>(a.value());
        const Decode& db = std::get<Decode>(b.value());
        EXPECT_EQ(da.loc, db.loc);
        EXPECT_EQ(da.table, db.table);
        EXPECT_GT(da.attention.size, 0u);
        EXPECT_EQ(db.attention.size, 0u);
      } else {
        EXPECT_TRUE(same_result(a, b)) << to_string(op) << ": " << to_string(a) << " vs " << to_string(b);
      }
      EXPECT_EQ(*bytes.tables(), *tables.tables()) << "after " << to_string(op);
      EXPECT_TRUE(tables.verify().ok());
    }
  }
}

TEST(Checker, LocateByteNamesTheRowAndItsExpectedIdentity) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full, LayerKind::full}), 4, 10)});
  must(m, Alloc{2 * 4});
  must(m, Free{IdUnit::pages, {1}});  // v2 on p1
  must(m, Write{1, 6, std::nullopt, {6}, true, {10}, false});
  // E = 128: token 6, part v (offset 32), layer 1 (stride 64): byte 6 * 128 + 32 + 64 + 5.
  const Result<ByteOwner> o = m.locate_byte(6 * 128 + 96 + 5);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->sub_pool_name, "full");
  EXPECT_EQ(o->physical_token, 6);
  EXPECT_EQ(o->physical_page, 1);
  EXPECT_EQ(o->virtual_page, 2);
  EXPECT_EQ(o->part, std::optional<std::string>("v"));
  EXPECT_EQ(o->layer, 1u);
  EXPECT_EQ(o->byte_in_row, 5u);
  EXPECT_EQ(o->expected, (RowIdentity{10, 0, 1, 1, 6}));
  EXPECT_NE(o->describe().find("token 10 at write 6"), std::string::npos) << o->describe();
  EXPECT_FALSE(m.locate_byte(10 * 512).ok());
  EXPECT_EQ(m.expected_row(0, 7, 1, 1), std::nullopt);  // never written
  EXPECT_EQ(m.expected_row(0, 12, 1, 1), std::nullopt);  // unbound page
}

TEST(Checkpoint, AnswersDone) {
  Model m;
  must(m, BuildPool{config_with_pages(mla_shape(1), 2, 8)});
  EXPECT_TRUE(std::holds_alternative<Done>(must(m, Checkpoint{})));
}

TEST(Catalogue, RealShapesBuildTablesOnlyAtRealScale) {
  for (const char* name : {"llama-3.1-8b", "gpt-oss-20b", "deepseek-v3", "mimo-v2-flash"}) {
    PoolConfig c;
    c.shape = *find_model(name);
    c.page_size = 16;
    c.total_bytes = std::uint64_t{40} << 30;
    c.tables_only = true;
    Model m;
    must(m, BuildPool{c});
    EXPECT_TRUE(std::holds_alternative<Allocated>(must(m, Alloc{16 * 64}))) << name;
  }
}

}  // namespace
}  // namespace kvtwin::sim
