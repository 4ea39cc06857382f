// The state sub-pool and the float middle (SPEC.md section 11), rule by rule, with numbers worked
// out by hand from two small hybrid shapes:
//
//   [state up | full down]: 2 full layers of 1 head x 16 (bf16): E_full = 2 * (32 + 32) = 128,
//     page size 2: 256-byte pages; state 1 layer, conv (8, 2) bf16 = 32 + temporal (2, 4, 4)
//     fp32 = 128: E_state = 160. total 4096: floor max(128, 256, 160) = 256; state slots 25,
//     first usable 2 (ceil(256 / 160)); full 16 pages, first usable 1.
//   [state up | swa float | full down]: 1 full + 1 swa layer of 1 head x 16: E = 64 each, page
//     size 2: 128-byte pages; the same state (E_state 160). total 4096: floor max(64, 128, 160) =
//     160; state first usable slot 1; full and swa 32 pages, first usable 2; the float starts at
//     page 4096 / 2 / 128 = 16.
//
// Every refusal compares the model's state digest before and after; every step runs verify().
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::mha_shape;

StateShape small_state() {
  StateShape s;
  s.layers = 1;
  s.conv.push_back(StateTensor{{8, 2}, DType::bf16});
  s.temporal = StateTensor{{2, 4, 4}, DType::fp32};
  return s;
}

PoolConfig hybrid_config(bool tri, CompactionMode mode = CompactionMode::eager) {
  PoolConfig c;
  c.shape = tri ? mha_shape({LayerKind::full, LayerKind::swa}) : mha_shape({LayerKind::full, LayerKind::full});
  c.shape.name = tri ? "test-tripool" : "test-hybrid";
  c.shape.state = small_state();
  c.page_size = 2;
  c.total_bytes = 4096;
  c.mode = mode;
  c.seed = 11;
  return c;
}

class StatePool : public ::testing::Test {
 protected:
  OpResult play(const Op& op) {
    OpResult r = model.apply(op);
    Status v = model.verify();
    EXPECT_TRUE(v.ok()) << to_string(op) << ": " << v.error().message;
    return r;
  }
  // A refusal (an error or no room) that must change nothing.
  OpResult refused(const Op& op) {
    const std::uint64_t before = model.state_digest();
    OpResult r = play(op);
    EXPECT_EQ(model.state_digest(), before) << to_string(op) << " changed the state: " << to_string(r);
    return r;
  }
  std::vector<std::int64_t> pages(const OpResult& r) {
    EXPECT_TRUE(r.ok() && std::holds_alternative<Allocated>(r.value())) << to_string(r);
    return r.ok() && std::holds_alternative<Allocated>(r.value()) ? std::get<Allocated>(r.value()).pages
                                                                    : std::vector<std::int64_t>{};
  }
  std::vector<PageMove> moves(const OpResult& r) {
    EXPECT_TRUE(r.ok()) << to_string(r);
    if (!r.ok()) return {};
    if (const auto* a = std::get_if<Allocated>(&r.value())) return a->moves;
    if (const auto* c = std::get_if<Compaction>(&r.value())) return c->moves;
    return {};
  }
  std::vector<std::int64_t> slots_of(std::vector<std::uint64_t> requests) {
    OpResult r = play(Op(StateSlots{std::move(requests)}));
    return std::get<Ids>(r.value()).values;
  }
  const SideTables& state_tables() {
    tables = *model.tables();
    return *tables.state;
  }
  const SideTables& swa_tables() {
    tables = *model.tables();
    return tables.sides[1];
  }
  Model model;
  PoolTables tables;
};

TEST_F(StatePool, SlotsAreGranularPerRequestFromTheirOwnQueue) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(false)})).ok());
  EXPECT_EQ(state_tables().free_queue.front(), 2);  // min_slot_index = ceil(256 / 160)
  EXPECT_EQ(tables.state->v2p.size(), 26u);          // 25 slots + the -1 sentinel
  EXPECT_EQ(pages(play(Op(StateAlloc{10}))), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(pages(play(Op(StateAlloc{11}))), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(slots_of({10, 11, 99}), (std::vector<std::int64_t>{2, 3, 0}));  // no slot: the sink
  EXPECT_EQ(state_tables().watermark, 4);
  EXPECT_EQ(tables.state_requests, (std::vector<std::pair<std::uint64_t, std::int64_t>>{{10, 2}, {11, 3}}));
  // One slot per request; a second alloc for it is refused, and so is a free of none.
  EXPECT_EQ(refused(Op(StateAlloc{10})).error().kind, ErrorKind::invalid_argument);
  EXPECT_EQ(refused(Op(StateFree{12})).error().kind, ErrorKind::double_free);
  // The token side's pages are untouched by state slots (own v2p / p2v).
  EXPECT_EQ(tables.sides[0].allocated_pages, 0u);
}

TEST_F(StatePool, EagerEndCompactionWithPageSizeOneCarriesTheBytes) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(false)})).ok());
  for (std::uint64_t r : {1, 2, 3}) {
    ASSERT_TRUE(play(Op(StateAlloc{r})).ok());
    ASSERT_TRUE(play(Op(StateWrite{r, 100 + r})).ok());
  }
  // Slots 2, 3, 4; freeing slot 2 moves the last slot (4) into it (SPEC 4.1, page size 1).
  EXPECT_EQ(moves(play(Op(StateFree{1}))), (std::vector<PageMove>{{"state", 4, 2}}));
  EXPECT_EQ(slots_of({2, 3}), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(state_tables().watermark, 4);
  EXPECT_EQ(tables.state->free_queue.back(), 2);  // the freed virtual id goes to the back
  // Request 3's state reads back at its new slot: verify() compares every remembered state, and
  // a direct read gives its temporal block.
  OpResult read = play(Op(StateRead{{2}, "temporal", 0}));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(std::get<Bytes>(read.value()).size, 128u);
  EXPECT_EQ(refused(Op(StateRead{{2}, "ssm", 0})).error().kind, ErrorKind::invalid_argument);
}

TEST_F(StatePool, LazyModeLeavesAHoleThatTheNextSlotReusesAndFlushPacks) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(false, CompactionMode::lazy)})).ok());
  for (std::uint64_t r : {1, 2, 3}) ASSERT_TRUE(play(Op(StateAlloc{r})).ok());
  EXPECT_TRUE(moves(play(Op(StateFree{2}))).empty());
  EXPECT_EQ(state_tables().holes, (std::vector<std::int64_t>{3}));
  ASSERT_TRUE(play(Op(StateFree{3})).ok());
  EXPECT_EQ(moves(play(Op(Flush{}))), std::vector<PageMove>{});  // survivors none: slots 3, 4 were freed
  EXPECT_EQ(state_tables().watermark, 3);
  ASSERT_TRUE(play(Op(StateAlloc{4})).ok());
  EXPECT_EQ(slots_of({4}), (std::vector<std::int64_t>{3}));
}

TEST_F(StatePool, AMovedSlotIsNotReusedBeforeItsReadersAreDone) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(false)})).ok());
  ASSERT_TRUE(play(Op(StateAlloc{1})).ok());  // slot 2
  ASSERT_TRUE(play(Op(StateAlloc{2})).ok());  // slot 3
  ASSERT_TRUE(play(Op(StateWrite{2, 5})).ok());
  // The forward reads request 2's state at slot 3.
  ASSERT_TRUE(play(Op(BeginRead{1, "state", {3}})).ok());
  // Freeing request 1 moves slot 3 to slot 2 (the reader keeps reading slot 3's old bytes).
  EXPECT_EQ(moves(play(Op(StateFree{1}))), (std::vector<PageMove>{{"state", 3, 2}}));
  EXPECT_EQ(model.tables()->state_quarantine, (std::vector<std::int64_t>{3}));
  // SPEC 10.22: slot 3 may not be reused until the reader is done: no room, nothing changed.
  EXPECT_TRUE(std::holds_alternative<NoRoom>(refused(Op(StateAlloc{3})).value()));
  ASSERT_TRUE(play(Op(EndRead{1})).ok());
  EXPECT_TRUE(model.tables()->state_quarantine.empty());
  EXPECT_EQ(pages(play(Op(StateAlloc{3}))).size(), 1u);
  EXPECT_EQ(slots_of({3}), (std::vector<std::int64_t>{3}));
  // A move onto a slot a reader holds is refused: the reader would read another request's state.
  ASSERT_TRUE(play(Op(BeginRead{2, "state", {2}})).ok());
  EXPECT_EQ(refused(Op(StateFree{2})).error().kind, ErrorKind::reader_conflict);
}

TEST_F(StatePool, TheOwnerGrowsDownToTheStateFrontierAndNoFurther) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(false)})).ok());
  // The state frontier starts at slot 2: byte 320. Full pages of 256 bytes grow down from page
  // 15; page p is allowed while p * 256 >= 320, so pages 15 .. 2: 14 pages, 28 tokens.
  EXPECT_EQ(pages(play(Op(Alloc{28}))).size(), 14u);
  EXPECT_EQ(model.tables()->sides[0].watermark, 1);  // band (1, 16)
  EXPECT_TRUE(std::holds_alternative<NoRoom>(refused(Op(Alloc{2})).value()));
  // The state end fits one slot [320, 480) below the owner's band at byte 512, not a second.
  EXPECT_TRUE(play(Op(StateAlloc{1})).ok());
  EXPECT_TRUE(std::holds_alternative<NoRoom>(refused(Op(StateAlloc{2})).value()));
}

TEST_F(StatePool, TheFloatStartsInTheMiddleAndExtendsTowardTheLargerGap) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(true)})).ok());
  const PoolDerived& d = model.derived();
  ASSERT_TRUE(d.has_float());
  EXPECT_EQ(d.geometry.float_start_page, 16u);
  EXPECT_EQ(swa_tables().span_low, 16);
  EXPECT_EQ(tables.sides[1].watermark, 16);  // empty span [16, 16)
  // 1st: owner page 31 (F' = 3968); gaps below 16 * 128 - 160 = 1888, above 3968 - 2048 = 1920:
  // up, page 16.
  ASSERT_TRUE(play(Op(Alloc{2})).ok());
  EXPECT_EQ(swa_tables().span_low, 16);
  EXPECT_EQ(tables.sides[1].watermark, 17);
  // 2nd: owner page 30 (F' = 3840); below 1888, above 3840 - 2176 = 1664: down, page 15.
  ASSERT_TRUE(play(Op(Alloc{2})).ok());
  EXPECT_EQ(swa_tables().span_low, 15);
  // 3rd: owner page 29 (F' = 3712); below 1760, above 1536: down, page 14.
  ASSERT_TRUE(play(Op(Alloc{2})).ok());
  EXPECT_EQ(swa_tables().span_low, 14);
  EXPECT_EQ(tables.sides[1].p2v[14], 4);  // virtual pages 2, 3, 4 on float pages 16, 15, 14
  EXPECT_EQ(tables.sides[1].p2v[15], 3);
  EXPECT_EQ(tables.sides[1].p2v[16], 2);
}

TEST_F(StatePool, TheFloatReusesItsHolesFirstAndAbsorbsItsBoundaries) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(true)})).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(play(Op(Alloc{2})).ok());  // float pages 16, 15, 14
  // An interior free leaves a hole (the float never compacts on a free)...
  EXPECT_TRUE(moves(play(Op(FreeSwa{IdUnit::pages, {3}}))).empty());
  EXPECT_EQ(swa_tables().holes, (std::vector<std::int64_t>{15}));
  // ... which the next allocation takes, with no copy.
  ASSERT_TRUE(play(Op(Alloc{2})).ok());
  EXPECT_TRUE(swa_tables().holes.empty());
  EXPECT_EQ(tables.sides[1].p2v[15], 5);
  // A free at the span's boundary is absorbed at once in eager mode: [14, 17) -> [14, 16).
  ASSERT_TRUE(play(Op(FreeSwa{IdUnit::pages, {2}})).ok());
  EXPECT_EQ(swa_tables().watermark, 16);
  EXPECT_TRUE(tables.sides[1].holes.empty());
}

TEST_F(StatePool, LazyBoundaryHolesAreAbsorbedAtTheFlushAndAnEmptyFloatIsTransparent) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(true, CompactionMode::lazy)})).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(play(Op(Alloc{2})).ok());  // float pages 16, 15, 14
  ASSERT_TRUE(play(Op(FreeSwa{IdUnit::pages, {2}})).ok());          // page 16: a boundary hole
  EXPECT_EQ(swa_tables().holes, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(tables.sides[1].watermark, 17);
  EXPECT_TRUE(moves(play(Op(Flush{}))).empty());  // absorbed, nothing moves
  EXPECT_EQ(swa_tables().watermark, 16);
  EXPECT_TRUE(tables.sides[1].holes.empty());
  // Emptied, the float keeps no hole and blocks nothing.
  ASSERT_TRUE(play(Op(FreeSwa{IdUnit::pages, {3, 4}})).ok());
  EXPECT_EQ(swa_tables().allocated_pages, 0u);
  EXPECT_TRUE(tables.sides[1].holes.empty());
  EXPECT_EQ(tables.sides[1].span_low, tables.sides[1].watermark);
  // The state end now grows through the float's old span: slots 1 .. up to the owner's band.
  std::uint64_t got = 0;
  for (std::uint64_t r = 1; r < 30; ++r) {
    OpResult a = play(Op(StateAlloc{r}));
    if (!std::holds_alternative<Allocated>(a.value())) break;
    ++got;
  }
  // The owner's band starts at page 29 (byte 3712); slot s is allowed while (s + 1) * 160 <=
  // 3712: slots 1 .. 22, 22 slots (the state's last slot is 24: not the limit here).
  EXPECT_EQ(got, 22u);
}

TEST_F(StatePool, MakeRoomRelocatesTheFloatMovingOnlyItsLivePagesOrChangesNothing) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(true)})).ok());
  // Fill the float with three pages, written, then grow the owner until it meets the float.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(play(Op(Alloc{2})).ok());  // float 14..16, owner 29..31
  for (std::int64_t v : {2, 3, 4})
    ASSERT_TRUE(play(Op(Write{1, 7, std::nullopt, {model.tables()->sides[0].v2p[static_cast<std::size_t>(v)] * 2},
                              true, {v * 2}})).ok());  // layer 1 is the swa layer: its row follows the float
  // Owner pages 28 .. 17, each allocation's float page leaving the window at once (a boundary
  // page, absorbed): the float stays [14, 17) while the owner's band comes down to page 17.
  for (std::int64_t i = 0; i < 12; ++i) {
    const std::vector<std::int64_t> got = pages(play(Op(Alloc{2})));
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(play(Op(FreeSwa{IdUnit::pages, got})).ok());
  }
  EXPECT_EQ(swa_tables().span_low, 14);
  EXPECT_EQ(tables.sides[1].watermark, 17);
  EXPECT_EQ(tables.sides[0].watermark, 16);  // owner band (16, 32): pages 17 .. 31
  // The next owner page is 16 (F' = 2048): the float is cut. Its 3 live pages are laid side by
  // side away from the owner, in the middle of the room [2, 16) left once they and the new page
  // fit: from 2 + (14 - 3 - 1) / 2 = 7, each moved once (down: ascending). The new page then
  // extends them toward the larger gap: below 7 * 128 - 160 = 736, above 2048 - 10 * 128 = 768:
  // up, page 10.
  OpResult cut = play(Op(Alloc{2}));
  ASSERT_TRUE(cut.ok()) << to_string(cut);
  EXPECT_EQ(moves(cut), (std::vector<PageMove>{{"swa", 14, 7}, {"swa", 15, 8}, {"swa", 16, 9}}));
  EXPECT_EQ(swa_tables().span_low, 7);
  EXPECT_EQ(tables.sides[1].watermark, 11);
  // verify() read every remembered swa row back through the moved pages.
  // State slots 1 .. 4 end at byte 800 at most, below the float's 896: no move.
  for (std::uint64_t r = 1; r <= 4; ++r) EXPECT_TRUE(moves(play(Op(StateAlloc{r}))).empty());
  // Slot 5 ends at 960: the float is laid away from the state end, in the middle of [8, 16):
  // from 8 + (8 - 4) / 2 = 10, moving up (descending).
  EXPECT_EQ(moves(play(Op(StateAlloc{5}))),
            (std::vector<PageMove>{{"swa", 10, 13}, {"swa", 9, 12}, {"swa", 8, 11}, {"swa", 7, 10}}));
  EXPECT_EQ(swa_tables().span_low, 10);
  // Slots 6, 7 end below 10 * 128 = 1280; slot 8 (1440) moves the float to [12, 16); slot 9 (1600)
  // would need it from page 13: 3 pages for 4 live ones. No room, nothing changed.
  EXPECT_TRUE(moves(play(Op(StateAlloc{6}))).empty());
  EXPECT_TRUE(moves(play(Op(StateAlloc{7}))).empty());
  EXPECT_EQ(moves(play(Op(StateAlloc{8}))).size(), 4u);
  EXPECT_EQ(swa_tables().span_low, 12);
  EXPECT_TRUE(std::holds_alternative<NoRoom>(refused(Op(StateAlloc{9})).value()));
}

TEST_F(StatePool, AMakeRoomUnderAReaderIsRefused) {
  ASSERT_TRUE(play(Op(BuildPool{hybrid_config(true)})).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(play(Op(Alloc{2})).ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(play(Op(FreeSwa{IdUnit::pages, pages(play(Op(Alloc{2})))})).ok());
  ASSERT_TRUE(play(Op(BeginRead{1, "swa", {15}})).ok());
  EXPECT_EQ(refused(Op(Alloc{2})).error().kind, ErrorKind::reader_conflict);
}

TEST_F(StatePool, StateOpsOnATokenChainAreRefused) {
  ASSERT_TRUE(play(Op(BuildPool{testing::config_with_pages(mha_shape({LayerKind::full}), 2, 8)})).ok());
  EXPECT_EQ(refused(Op(StateAlloc{1})).error().kind, ErrorKind::invalid_argument);
  EXPECT_THAT(refused(Op(StateSlots{{1}})).error().message, ::testing::HasSubstr("no state sub-pool"));
}

// The incremental verify (verify_changed) checks the state sub-pool over what an operation changed:
// the slots it bound, moved or wrote, the requests it named, the counts, the quarantine; the rest
// waits for the full verify() at a checkpoint (a 1 TiB pool holds tens of thousands of slots).
class CorruptibleStateModel : public Model {
 public:
  using Model::bytes_for_test;
  using Model::state_for_test;
};

TEST(StatePoolVerifyChanged, FindsACorruptionOfWhatTheOperationChanged) {
  const PoolConfig c = hybrid_config(false, CompactionMode::lazy);
  {
    CorruptibleStateModel m;  // the request the last operation served names the sink slot
    ASSERT_TRUE(m.apply(BuildPool{c}).ok());
    ASSERT_TRUE(m.apply(StateAlloc{1}).ok());
    ASSERT_TRUE(m.apply(StateAlloc{2}).ok());
    ASSERT_TRUE(m.verify_changed().ok());
    m.state_for_test().requests_for_test()[2] = 0;
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message, ::testing::HasSubstr("request 2 holds state slot 0, which is not bound"));
  }
  {
    CorruptibleStateModel m;  // a free id lost: the counts no longer add up
    ASSERT_TRUE(m.apply(BuildPool{c}).ok());
    ASSERT_TRUE(m.apply(StateAlloc{1}).ok());
    m.state_for_test().free_queue_for_test().pop_back();
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message, ::testing::HasSubstr("usable slot ids"));
  }
  {
    CorruptibleStateModel m;  // one bit of the state the last write put down; then of an older one
    ASSERT_TRUE(m.apply(BuildPool{c}).ok());
    ASSERT_TRUE(m.apply(StateAlloc{1}).ok());
    ASSERT_TRUE(m.apply(StateAlloc{2}).ok());
    const OpResult slots = m.apply(StateSlots{{2}});
    ASSERT_TRUE(slots.ok());
    const std::int64_t slot = std::get<Ids>(slots.value()).values.at(0);
    ASSERT_TRUE(m.apply(StateWrite{2, 5}).ok());
    ASSERT_TRUE(m.verify_changed().ok());
    m.bytes_for_test()[static_cast<std::size_t>(slot) * 160 + 3] ^= 0x01;  // E_state 160, the conv block first
    const Status s = m.verify_changed();
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message, ::testing::HasSubstr("does not hold the oracle's state of request 2"));
    ASSERT_TRUE(m.apply(StateWrite{1, 6}).ok());
    EXPECT_TRUE(m.verify_changed().ok()) << "the write changed nothing of request 2's slot";
    EXPECT_FALSE(m.verify().ok()) << "the full verify at a checkpoint finds it";
  }
}

}  // namespace
}  // namespace kvtwin::sim
