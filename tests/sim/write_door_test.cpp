// Units for write locs, marks and the write door (SPEC.md section 6, docs/decisions.md "Write
// locs" and "Batches and the write door"): rebind, split copying the mark, for_layer's encoder
// loc, unmarked and duplicate locs refused with nothing written, rows landing at the byte law's
// address, SWA layers through the SWA loc, sink lanes discarded, and the read door.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/oracle.h"
#include "sim/write_locs.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::config_with_pages;
using testing::mha_shape;
using testing::must;
using testing::must_as;
using testing::refused;

// Two full layers of 1 head, head dim 16, bf16: k_row = v_row = 32 bytes, layer stride 64,
// E = 128 bytes; page size 4 -> 512-byte pages, floor 512, min_page_index 1.
constexpr std::uint64_t kEntry = 128, kRow = 32, kStride = 64;
constexpr std::uint64_t kSeed = 7;

PoolConfig two_layer_pool(std::uint64_t pages = 10) {
  return config_with_pages(mha_shape({LayerKind::full, LayerKind::full}), 4, pages);
}

// The bytes the oracle puts in a row, computed here from the row's identity.
std::vector<std::uint8_t> oracle_row(std::int64_t token, std::uint32_t sub_pool, std::uint32_t layer,
                                     std::uint32_t part, std::uint64_t write_number, std::uint64_t row_bytes = kRow) {
  std::vector<std::uint8_t> row(row_bytes);
  fill_oracle_row(kSeed, RowIdentity{token, sub_pool, layer, part, write_number}, DType::bf16, row);
  return row;
}

std::vector<std::uint8_t> bytes_at(const Model& m, std::uint64_t offset, std::uint64_t length = kRow) {
  auto r = m.raw_bytes(offset, length);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<std::uint8_t>{};
}

TEST(Batches, RebindTranslatesAndMarksPhysicalWithPaddedLanesAtTheSink) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{2 * 4});  // v1 -> p1, v2 -> p2
  must(m, MakeBatch{0, {4, 9, -1}, {}});
  const Ids loc = must_as<Ids>(m, Rebind{0, 6});
  EXPECT_EQ(loc.values, (std::vector<std::int64_t>{4, 9, 0, 0, 0, 0}));
  refused(m, Rebind{0, 2}, ErrorKind::invalid_argument);  // narrower than the batch's 6 lanes
  refused(m, Rebind{9, 0}, ErrorKind::invalid_argument);  // no such batch
}

TEST(Batches, RebindAgainRefreshesALocMadeStaleByCompaction) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{3 * 4});
  must(m, MakeBatch{0, {12, 13}, {}});
  EXPECT_EQ(must_as<Ids>(m, Rebind{0, 0}).values, (std::vector<std::int64_t>{12, 13}));
  must(m, Free{IdUnit::pages, {1}});  // v3 moves from p3 to p1
  EXPECT_EQ(must_as<Ids>(m, Rebind{0, 0}).values, (std::vector<std::int64_t>{4, 5}));
}

TEST(Batches, SplitCopiesTheParentsMarkToBothChildren) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, MakeBatch{0, {4, 5, 6}, {}});
  EXPECT_EQ(must_as<Marks>(m, Split{0, 1, 1, 2}), (Marks{false, false}));
  must(m, Rebind{0, 0});
  EXPECT_EQ(must_as<Marks>(m, Split{0, 2, 3, 4}), (Marks{true, true}));
  refused(m, Split{0, 1, 5, 5}, ErrorKind::invalid_argument);  // same child twice
  refused(m, Split{0, 1, 3, 6}, ErrorKind::invalid_argument);  // child id in use
  refused(m, Split{0, 4, 5, 6}, ErrorKind::out_of_range);      // past the lanes
  refused(m, Split{8, 1, 5, 6}, ErrorKind::invalid_argument);  // no such batch
  refused(m, MakeBatch{0, {1}, {}}, ErrorKind::invalid_argument);
  refused(m, MakeBatch{7, {1, 2}, {3}}, ErrorKind::invalid_argument);  // encoder lanes mismatch
  must(m, DropBatch{3});
  refused(m, DropBatch{3}, ErrorKind::invalid_argument);
}

TEST(Batches, ForLayerHandsACrossLayerTheUnmarkedEncoderLoc) {
  Batch b;
  b.tokens = {4, 5};
  b.loc = {12, 13};
  b.physical = true;
  b.encoder_loc = {40, 41};
  auto self = for_layer(b, LayerKind::full, 0);
  ASSERT_TRUE(self.ok());
  EXPECT_EQ(std::vector<std::int64_t>(self->loc.begin(), self->loc.end()), b.loc);
  EXPECT_TRUE(self->physical);
  auto cross = for_layer(b, LayerKind::cross, 1);
  ASSERT_TRUE(cross.ok());
  EXPECT_EQ(std::vector<std::int64_t>(cross->loc.begin(), cross->loc.end()), b.encoder_loc);
  EXPECT_FALSE(cross->physical);
  b.encoder_loc.clear();
  EXPECT_EQ(for_layer(b, LayerKind::cross, 1).error().kind, ErrorKind::invalid_argument);
}

// The digest of what a write wrote (Model::touched_digest: summed over the rows when first asked,
// made as each row is written from then on) is the digest of its touched ranges read back; an op that moved a page instead, or a write through one loc
// twice the same row, leaves it to the caller.
TEST(WriteDoor, TheDigestMadeWhileWritingIsTheDigestOfTheRowsWritten) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{2 * 4});
  must(m, MakeBatch{0, {4, 5, 6, 9}, {}});
  must(m, Rebind{0, 0});
  must(m, Write{1, 3, std::uint32_t{0}, {}, false, {}, false});
  ASSERT_FALSE(m.touched_bytes().empty());
  const std::optional<std::uint64_t> made = m.touched_digest();
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(*made, m.bytes_digest(m.touched_bytes()).value());
  EXPECT_NE(*made, 0u);
  must(m, MovePages{"full", {5}, {2}});  // p2 onto the unbound p5
  EXPECT_FALSE(m.touched_bytes().empty());
  EXPECT_FALSE(m.touched_digest().has_value()) << "a page copy is no row the model digested";
  must(m, Alloc{4});
  EXPECT_TRUE(m.touched_bytes().empty());
  // Once asked, the model digests each row as it writes it: the same digest.
  must(m, Rebind{0, 0});
  must(m, Write{0, 3, std::uint32_t{0}, {}, false, {}, false});
  const std::optional<std::uint64_t> as_written = m.touched_digest();
  ASSERT_TRUE(as_written.has_value());
  EXPECT_EQ(*as_written, m.bytes_digest(m.touched_bytes()).value());
  EXPECT_NE(*as_written, *made);
}

TEST(WriteDoor, ScattersOracleRowsToTheByteLawAddress) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{2 * 4});
  must(m, Free{IdUnit::pages, {1}});  // v2 now on p1
  must(m, MakeBatch{0, {9, 10}, {}});
  must(m, Rebind{0, 0});  // tokens 9, 10 -> physical 5, 6
  must(m, Write{1, 3, std::uint32_t{0}, {}, false, {}, false});
  for (std::int64_t lane = 0; lane < 2; ++lane) {
    const std::int64_t token = 9 + lane, pt = 5 + lane;
    for (std::uint32_t part = 0; part < 2; ++part) {
      // byte(pt, part, l) = pt * E + part.offset + l * stride, with part v at offset k_row.
      const std::uint64_t address = static_cast<std::uint64_t>(pt) * kEntry + part * kRow + 1 * kStride;
      EXPECT_EQ(bytes_at(m, address), oracle_row(token, 0, 1, part, 3)) << "lane " << lane << " part " << part;
      EXPECT_EQ(m.expected_row(0, pt, 1, part), (RowIdentity{token, 0, 1, part, 3}));
    }
    // Layer 0 of the same token was not written: still zeros.
    EXPECT_EQ(bytes_at(m, static_cast<std::uint64_t>(pt) * kEntry), std::vector<std::uint8_t>(kRow, 0));
  }
  // The read door gathers the same rows.
  const Bytes read = must_as<Bytes>(m, Read{1, "v", {6, 5}});
  std::vector<std::uint8_t> expected = oracle_row(10, 0, 1, 1, 3);
  const std::vector<std::uint8_t> second = oracle_row(9, 0, 1, 1, 3);
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_EQ(read.bytes, expected);
}

TEST(WriteDoor, RefusesAnUnmarkedLocAndWritesNothing) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{4});
  must(m, MakeBatch{0, {4, 5}, {}});
  refused(m, Write{0, 1, std::uint32_t{0}, {}, false, {}, false}, ErrorKind::unmarked_loc);
  // A loc translated elsewhere states its own mark.
  refused(m, Write{0, 1, std::nullopt, {4, 5}, false, {4, 5}, false}, ErrorKind::unmarked_loc);
  must(m, Write{0, 1, std::nullopt, {4, 5}, true, {4, 5}, false});
  OpResult r = m.apply(Write{1, 1, std::uint32_t{0}, {}, false, {}, false});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("rebind"), std::string::npos) << r.error().message;
}

TEST(WriteDoor, ACrossLayerIsRefusedOnTheUnifiedPool) {
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::full, LayerKind::cross}), 4, 10)});
  must(m, Alloc{4});
  must(m, MakeBatch{0, {4, 5}, {6, 7}});
  must(m, Rebind{0, 0});
  must(m, Write{0, 1, std::uint32_t{0}, {}, false, {}, false});
  refused(m, Write{1, 1, std::uint32_t{0}, {}, false, {}, false}, ErrorKind::unmarked_loc);
  must(m, MakeBatch{1, {4, 5}, {}});
  must(m, Rebind{1, 0});
  refused(m, Write{1, 1, std::uint32_t{1}, {}, false, {}, false}, ErrorKind::invalid_argument);
  // The cross layer may be written through an explicit, marked loc.
  must(m, Write{1, 1, std::nullopt, {4}, true, {6}, false});
  EXPECT_EQ(m.expected_row(0, 4, 1, 0), (RowIdentity{6, 0, 1, 0, 1}));
}

TEST(WriteDoor, RefusesDuplicateNonSinkLocsButNotSinkLanes) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{4});
  refused(m, Write{0, 1, std::nullopt, {4, 5, 4}, true, {4, 5, 6}, false}, ErrorKind::duplicate_loc);
  // Several lanes at the sink (page 0) are padding and write nothing.
  const std::uint64_t before_bytes = digest_bytes(*m.raw_bytes(0, 512));
  must(m, Write{0, 1, std::nullopt, {0, 4, 0, 3}, true, {-1, 4, -1, 9}, false});
  EXPECT_EQ(digest_bytes(*m.raw_bytes(0, 512)), before_bytes);
  EXPECT_EQ(bytes_at(m, 4 * kEntry), oracle_row(4, 0, 0, 0, 1));
}

// The duplicate check with stamps (sim/write_locs.h LocStamps, zeroed by the system) names the
// same pair as the sort it replaces, forgets every earlier check, and starts afresh when its
// epochs run out.
TEST(WriteDoor, TheDuplicateStampsNameTheSortsPairAndForgetEarlierChecks) {
  const std::vector<std::int64_t> locs = {9, 4, 7, 4, 9, 2};  // lanes 1 and 3 share 4; 0 and 4 share 9
  LocStamps stamps;
  const Status sorted = check_duplicates(locs, 3, 0, "full");
  const Status stamped = check_duplicates(locs, 3, 0, "full", &stamps, 16);
  ASSERT_FALSE(sorted.ok());
  ASSERT_FALSE(stamped.ok());
  EXPECT_EQ(stamped.error().message, sorted.error().message);
  EXPECT_NE(stamped.error().message.find("lanes 1 and 3"), std::string::npos) << stamped.error().message;
  // The next write may use those slots again; a lane at the sink (below 3) is never a duplicate.
  EXPECT_TRUE(check_duplicates(std::vector<std::int64_t>{4, 9, 2, 2}, 3, 0, "full", &stamps, 16).ok());
  // Every epoch used: the stamps start afresh, and the last check's slots are not taken.
  stamps.current = UINT32_MAX;
  EXPECT_TRUE(check_duplicates(std::vector<std::int64_t>{4, 9}, 3, 0, "full", &stamps, 16).ok());
  EXPECT_EQ(stamps.current, 1u);
  EXPECT_TRUE(check_duplicates(std::vector<std::int64_t>{9, 4}, 3, 0, "full", &stamps, 16).ok());
  EXPECT_FALSE(check_duplicates(std::vector<std::int64_t>{5, 5}, 3, 0, "full", &stamps, 16).ok());
}

TEST(WriteDoor, RefusesLocsOutsideTheSlotsAndLayersOutsideTheModel) {
  Model m;
  must(m, BuildPool{two_layer_pool(10)});  // 40 slots
  must(m, Alloc{4});
  refused(m, Write{0, 1, std::nullopt, {40}, true, {4}, false}, ErrorKind::out_of_range);
  refused(m, Write{0, 1, std::nullopt, {-1}, true, {4}, false}, ErrorKind::out_of_range);
  refused(m, Write{2, 1, std::nullopt, {4}, true, {4}, false}, ErrorKind::out_of_range);
  refused(m, Write{0, 1, std::nullopt, {4, 5}, true, {4}, false}, ErrorKind::invalid_argument);
  refused(m, Write{0, 1, std::uint32_t{3}, {}, false, {}, false}, ErrorKind::invalid_argument);
  refused(m, Write{0, 1, std::uint32_t{3}, {4}, true, {4}, false}, ErrorKind::invalid_argument);
  refused(m, Read{0, "q", {4}}, ErrorKind::invalid_argument);
  refused(m, Read{0, "k", {40}}, ErrorKind::out_of_range);
  refused(m, Read{5, "k", {4}}, ErrorKind::out_of_range);
}

TEST(WriteDoor, SwaLayersWriteThroughTheSwaLocAndTombstonesAreDiscarded) {
  // Layer 0 is SWA (sub-pool 1, local layer 0), layer 1 full. One head of 16: E = 64 each side.
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}), 4, 12)});
  must(m, Alloc{2 * 4});  // full v1 -> 1, v2 -> 2; SWA v1 -> 10, v2 -> 11
  must(m, MakeBatch{0, {5, 9}, {}});
  must(m, Rebind{0, 0});  // full physical 5, 9
  must(m, Write{0, 2, std::uint32_t{0}, {}, false, {}, false});
  // SWA rows: token 5 -> SWA 41, token 9 -> SWA 45. Entry 64: k at 0, v at 32.
  EXPECT_EQ(bytes_at(m, 41 * 64), oracle_row(5, 1, 0, 0, 2));
  EXPECT_EQ(bytes_at(m, 45 * 64 + 32), oracle_row(9, 1, 0, 1, 2));
  must(m, FreeSwa{IdUnit::pages, {2}});  // v2 left the window: its SWA loc is the sink
  const std::uint64_t before = m.state_digest();
  must(m, Write{0, 3, std::nullopt, {9}, true, {9}, false});
  EXPECT_EQ(m.state_digest(), before);  // discarded: nothing written, nothing remembered
}

TEST(WriteDoor, AWriteLandingOnTheOtherSidesBandForgetsTheRowsThere) {
  // A full-side loc above the full band lands on bytes of the SWA band: the SWA rows there are
  // no longer what was written to them, and verify() must not expect them.
  Model m;
  must(m, BuildPool{config_with_pages(mha_shape({LayerKind::swa, LayerKind::full}), 4, 12)});
  must(m, Alloc{2 * 4});  // SWA v1 -> p10 (tokens 40..43)
  must(m, Write{0, 1, std::nullopt, {4}, true, {4}, false});  // SWA layer: full 4 -> SWA 40
  ASSERT_TRUE(m.expected_row(1, 40, 0, 0).has_value());
  must(m, Write{1, 2, std::nullopt, {40}, true, {77}, false});  // full layer at full token 40: bytes 2560.. = SWA 40
  EXPECT_FALSE(m.expected_row(1, 40, 0, 0).has_value());
  EXPECT_TRUE(m.verify().ok());
}

TEST(ReadDoor, SinkLanesReadAsZerosAndTablesOnlyPoolsRefuseReads) {
  Model m;
  must(m, BuildPool{two_layer_pool()});
  must(m, Alloc{4});
  must(m, Write{0, 1, std::nullopt, {4}, true, {4}, false});
  const Bytes b = must_as<Bytes>(m, Read{0, "k", {0, 3, 4}});
  std::vector<std::uint8_t> expected(2 * kRow, 0);
  const std::vector<std::uint8_t> row = oracle_row(4, 0, 0, 0, 1);
  expected.insert(expected.end(), row.begin(), row.end());
  EXPECT_EQ(b.bytes, expected);
  EXPECT_EQ(b.size, 3 * kRow);
  // The view without a copy (the Python binding's raw_bytes) shows the same row where the byte
  // law puts it: physical token 4, layer 0, part k at 4 * E.
  const std::span<const std::uint8_t> view = *m.bytes_view();
  EXPECT_EQ(view.size(), m.config().total_bytes);
  EXPECT_EQ(std::vector<std::uint8_t>(view.begin() + 4 * kEntry, view.begin() + 4 * kEntry + kRow), row);
  Model t;
  must(t, BuildPool{config_with_pages(mha_shape({LayerKind::full}), 4, 10, CompactionMode::eager, true)});
  refused(t, Read{0, "k", {4}}, ErrorKind::unsupported);
  EXPECT_EQ(t.raw_bytes(0, 1).error().kind, ErrorKind::unsupported);
  EXPECT_EQ(t.bytes_view().error().kind, ErrorKind::unsupported);
  EXPECT_FALSE(Model().bytes_view().ok());  // nothing built yet
}

}  // namespace
}  // namespace kvtwin::sim
