// The model's host arena and transfers (SPEC 8, docs/host_arena.md): offload and load-back carry
// a page's bytes unchanged through device frees and host compaction; transfers in flight hold
// their pages against moves, frees, writes and host compaction; races between transfers are
// refused unless ordered (stream or event); every refusal leaves the state digest unchanged.
#include <gtest/gtest.h>

#include "core/reasons.h"
#include "sim/model.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::must;

// One full layer (E = 64 bytes), page size 4: 256-byte pages; 12 device pages, a host arena of 6.
PoolConfig host_pool(CompactionMode mode = CompactionMode::eager) {
  PoolConfig c = testing::one_layer_pool(12, mode);
  c.host_bytes = 6 * 256;
  return c;
}

// Full + SWA composite (side 1 grows down), page size 4.
PoolConfig composite_host_pool() {
  PoolConfig c = testing::config_with_pages(testing::mha_shape({LayerKind::full, LayerKind::swa}), 4, 16);
  c.host_bytes = 8 * 256;
  return c;
}

void write_pages(Model& m, const std::vector<std::int64_t>& pages, std::uint64_t write_number, std::uint32_t layers = 1) {
  std::vector<std::int64_t> tokens;
  for (std::int64_t v : pages)
    for (std::int64_t s = 0; s < 4; ++s) tokens.push_back(v * 4 + s);
  must(m, Op(MakeBatch{90, tokens, {}}));
  must(m, Op(Rebind{90, 0}));
  for (std::uint32_t l = 0; l < layers; ++l) must(m, Op(Write{l, write_number, 90u, {}, false, {}, false}));
  must(m, Op(DropBatch{90}));
}

Error refused(Model& m, const Op& op, ErrorKind kind, std::string_view why = {}) {
  const std::uint64_t before = m.state_digest();
  OpResult r = m.apply(op);
  EXPECT_FALSE(r.ok()) << to_string(op) << " -> " << to_string(r);
  if (r.ok()) return Error{};
  EXPECT_EQ(r.error().kind, kind) << r.error().message;
  EXPECT_EQ(r.error().reason, std::string(why)) << r.error().message;
  EXPECT_EQ(m.state_digest(), before) << "a refusal changed the state: " << to_string(op);
  EXPECT_TRUE(m.verify().ok());
  return r.error();
}

Bytes read_rows(Model& m, const std::vector<std::int64_t>& virtual_pages) {
  std::vector<std::int64_t> ids;
  for (std::int64_t v : virtual_pages)
    for (std::int64_t s = 0; s < 4; ++s)
      ids.push_back(std::get<Ids>(must(m, Op(Translate{{v * 4 + s}, {1}}))).values[0]);
  return std::get<Bytes>(must(m, Op(Read{0, "k", ids})));
}

// A host arena compacts only with two sides (one side alone fits whenever it has the ids).
TEST(ModelHost, OffloadThenLoadBackCarriesTheBytesThroughAFreeAndAHostCompaction) {
  Model m;
  must(m, Op(BuildPool{composite_host_pool()}));
  const auto pages = std::get<Allocated>(must(m, Op(Alloc{8}))).pages;  // 2 pages, both sides
  write_pages(m, pages, 5, 2);
  const Bytes before = read_rows(m, pages);
  // Host pages: full 0-2 on physical 0-2, swa 0-2 on physical 7, 6, 5.
  const auto h = std::get<kvtwin::HostAllocated>(must(m, Op(HostAlloc{0, {3, 3}})));
  ASSERT_EQ(h.logical[0], (std::vector<std::int64_t>{0, 1, 2}));
  ASSERT_EQ(h.physical[1], (std::vector<std::int64_t>{7, 6, 5}));
  must(m, Op(Offload{1, 0, 1, std::nullopt, "full", IdUnit::pages, pages, {1, 2}}));
  must(m, Op(TransferWait{1}));
  must(m, Op(Free{IdUnit::pages, pages}));
  must(m, Op(HostFree{"full", {0}}));
  // Three more SWA pages fit only once packed: full 1 and 2 move to physical 0 and 1.
  const auto packed = std::get<kvtwin::HostAllocated>(must(m, Op(HostAlloc{0, {0, 3}})));
  EXPECT_EQ(packed.moves, (std::vector<PageMove>{PageMove{"full", 1, 0}, PageMove{"full", 2, 1}}));
  // Back into two new device pages; visible once waited for, with the same rows.
  const auto started = std::get<TransferStarted>(must(m, Op(LoadBack{2, 1, 2, std::nullopt, {{1, 2}}})));
  ASSERT_EQ(started.pages.size(), 2u);
  refused(m, Op(Free{IdUnit::pages, started.pages}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  must(m, Op(TransferWait{2}));
  EXPECT_EQ(read_rows(m, started.pages), before);
}

TEST(ModelHost, PagesInFlightDoNotMoveAndAreNotFreedOrWritten) {
  Model m;
  must(m, Op(BuildPool{host_pool()}));
  const auto a = std::get<Allocated>(must(m, Op(Alloc{4}))).pages;
  const auto b = std::get<Allocated>(must(m, Op(Alloc{4}))).pages;
  write_pages(m, b, 1);
  must(m, Op(HostAlloc{0, {1}}));
  must(m, Op(Offload{3, 0, 1, std::nullopt, "full", IdUnit::pages, b, {0}}));
  // Freeing a would move b (the survivor) onto a's page: refused while b is copied.
  refused(m, Op(Free{IdUnit::pages, a}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  refused(m, Op(Free{IdUnit::pages, b}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  refused(m, Op(Write{0, 2, std::nullopt, {b[0] * 4}, true, {b[0] * 4}, false}), ErrorKind::reader_conflict,
          reason::transfer_in_flight);
  refused(m, Op(MovePages{"full", {5}, {b[0]}}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  refused(m, Op(HostFree{"full", {0}}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  // A read of it is fine (both only read).
  must(m, Op(Read{0, "k", {b[0] * 4}}));
  must(m, Op(TransferWait{3}));
  must(m, Op(Free{IdUnit::pages, a}));
}

TEST(ModelHost, HostCompactionWaitsForLeasesAndTransfers) {
  Model m;
  must(m, Op(BuildPool{composite_host_pool()}));
  const auto v = std::get<Allocated>(must(m, Op(Alloc{4}))).pages;
  must(m, Op(HostAlloc{0, {3, 3}}));
  must(m, Op(HostFree{"full", {0}}));
  // {0, 3} fits only once packed.
  must(m, Op(LeaseAcquire{1}));
  must(m, Op(LeaseAcquire{1}));  // reentrant
  refused(m, Op(HostAlloc{1, {0, 3}}), ErrorKind::invalid_argument);
  refused(m, Op(HostAlloc{2, {0, 3}}), ErrorKind::reader_conflict, reason::lease_held);
  must(m, Op(LeaseRelease{1}));
  refused(m, Op(HostAlloc{2, {0, 3}}), ErrorKind::reader_conflict, reason::lease_held);
  must(m, Op(LeaseRelease{1}));
  must(m, Op(Offload{4, 0, 1, std::nullopt, "full", IdUnit::pages, v, {1}}));
  refused(m, Op(HostAlloc{2, {0, 3}}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  // An allocation that needs no compaction is not gated.
  must(m, Op(HostAlloc{2, {0, 1}}));
  must(m, Op(TransferWait{4}));
  const auto packed = std::get<kvtwin::HostAllocated>(must(m, Op(HostAlloc{2, {0, 2}})));
  EXPECT_FALSE(packed.moves.empty());
  refused(m, Op(LeaseRelease{1}), ErrorKind::invalid_argument);
}

TEST(ModelHost, ATransferThatReadsAHostPageAnotherFillsMustLandAfterIt) {
  Model m;
  must(m, Op(BuildPool{host_pool()}));
  const auto pages = std::get<Allocated>(must(m, Op(Alloc{4}))).pages;
  write_pages(m, pages, 9);
  const Bytes before = read_rows(m, pages);
  must(m, Op(HostAlloc{0, {1}}));
  must(m, Op(Offload{1, 0, 1, std::nullopt, "full", IdUnit::pages, pages, {0}}));
  // On another stream without an event: a race, refused.
  refused(m, Op(LoadBack{2, 1, 2, std::nullopt, {{0}}}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  // An event recorded on stream 1 after the offload orders it: the load-back lands after it, even
  // when waited for first.
  must(m, Op(RecordEvent{7, 1}));
  const auto back = std::get<TransferStarted>(must(m, Op(LoadBack{2, 1, 2, 7, {{0}}})));
  must(m, Op(TransferWait{2}));
  EXPECT_EQ(read_rows(m, back.pages), before);
  must(m, Op(TransferWait{1}));
}

TEST(ModelHost, ASlidingWindowOffloadSelectsWholeBoundPages) {
  Model m;
  must(m, Op(BuildPool{composite_host_pool()}));
  const auto pages = std::get<Allocated>(must(m, Op(Alloc{12}))).pages;  // 3 pages
  must(m, Op(FreeSwa{IdUnit::pages, {pages[0]}}));                        // the first left the window
  // Tokens from the middle of the first page to the end: the first page is partly listed and a
  // tombstone; the other two are whole and bound.
  std::vector<std::int64_t> tokens;
  for (std::int64_t t = pages[0] * 4 + 2; t < (pages[2] + 1) * 4; ++t) tokens.push_back(t);
  must(m, Op(HostAlloc{0, {0, 2}}));
  const auto started = std::get<TransferStarted>(must(m, Op(Offload{1, 0, 1, std::nullopt, "swa", IdUnit::tokens, tokens, {0, 1}})));
  EXPECT_EQ(started.pages, (std::vector<std::int64_t>{pages[1], pages[2]}));
  must(m, Op(TransferWait{1}));
  // One host page for two selected pages is refused.
  refused(m, Op(Offload{2, 0, 1, std::nullopt, "swa", IdUnit::tokens, tokens, {0}}), ErrorKind::invalid_argument);
}

TEST(ModelHost, ALoadBackWithoutRoomChangesNothing) {
  Model m;
  must(m, Op(BuildPool{host_pool()}));
  must(m, Op(HostAlloc{0, {2}}));
  must(m, Op(Alloc{4 * 11}));  // every usable device page
  const std::uint64_t before = m.state_digest();
  OpResult r = m.apply(Op(LoadBack{1, 0, 1, std::nullopt, {{0, 1}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::holds_alternative<NoRoom>(r.value()));
  EXPECT_EQ(m.state_digest(), before);
}

TEST(ModelHost, AHostOpOnAPoolWithoutAHostArenaIsRefused) {
  Model m;
  must(m, Op(BuildPool{testing::one_layer_pool(8)}));
  refused(m, Op(HostAlloc{0, {1}}), ErrorKind::invalid_argument);
  refused(m, Op(TransferWait{0}), ErrorKind::invalid_argument);
  PoolConfig tiny = host_pool();
  tiny.host_bytes = 100;  // less than one page
  OpResult r = m.apply(Op(BuildPool{tiny}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::sizing);
}

}  // namespace
}  // namespace kvtwin::sim
