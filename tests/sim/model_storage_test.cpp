// The model's storage tier (docs/storage.md): store_pages and load_stored carry a host page's
// bytes and its oracle rows through a real page store; a store of zero pages stores nothing; a
// page stored under another layout or without the format tag misses; host pages in flight are
// refused; every refusal leaves the state digest unchanged.
#include <gtest/gtest.h>

#include "core/reasons.h"
#include "sim/model.h"
#include "tests/sim/test_pools.h"

namespace kvtwin::sim {
namespace {

using testing::must;

// One full layer (E = 64 bytes), page size 4: 256-byte pages; 12 device pages, 6 host pages.
PoolConfig storage_pool(bool tables_only = false) {
  PoolConfig c = testing::one_layer_pool(12);
  c.tables_only = tables_only;
  c.host_bytes = 6 * 256;
  c.storage_bytes = 1 << 16;
  return c;
}

void refused(Model& m, const Op& op, ErrorKind kind, std::string_view why = {}) {
  const std::uint64_t before = m.state_digest();
  OpResult r = m.apply(op);
  ASSERT_FALSE(r.ok()) << to_string(op) << " -> " << to_string(r);
  EXPECT_EQ(r.error().kind, kind) << r.error().message;
  EXPECT_EQ(r.error().reason, std::string(why)) << r.error().message;
  EXPECT_EQ(m.state_digest(), before) << "a refusal changed the state: " << to_string(op);
}

// Device page 1 written, offloaded to host page 0 and landed; host pages 0 and 1 allocated.
void offloaded_page(Model& m) {
  must(m, Op(Alloc{4}));
  must(m, Op(MakeBatch{90, {4, 5, 6, 7}, {}}));
  must(m, Op(Rebind{90, 0}));
  must(m, Op(Write{0, 3, 90u, {}, false, {}, false}));
  must(m, Op(DropBatch{90}));
  must(m, Op(HostAlloc{0, {2}}));
  must(m, Op(Offload{1, 0, 1, std::nullopt, "full", IdUnit::pages, {1}, {0}}));
  must(m, Op(TransferWait{1}));
}

std::vector<std::int64_t> ids_of(const Outcome& o) { return std::get<Ids>(o).values; }

TEST(ModelStorage, APageStoredComesBackWithItsBytesAndRows) {
  for (const bool tables_only : {false, true}) {
    SCOPED_TRACE(tables_only ? "tables only" : "bytes");
    Model m;
    must(m, Op(BuildPool{storage_pool(tables_only)}));
    offloaded_page(m);
    EXPECT_EQ(ids_of(must(m, Op(StorePages{0, "full", {0}, {77}, 1, ""}))), (std::vector<std::int64_t>{0}));
    EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {77}}))), (std::vector<std::int64_t>{1}));
    EXPECT_TRUE(m.verify().ok()) << m.verify().error().message;
    // Host page 1 now holds page 1's rows: loaded back, the device reads them.
    const auto back = std::get<TransferStarted>(must(m, Op(LoadBack{2, 0, 1, std::nullopt, {{1}}})));
    must(m, Op(TransferWait{2}));
    if (!tables_only) {
      const auto at = [&](std::int64_t v) {
        std::vector<std::int64_t> ids;
        for (std::int64_t s = 0; s < 4; ++s) ids.push_back(std::get<Ids>(must(m, Op(Translate{{v * 4 + s}, {1}}))).values[0]);
        return std::get<Bytes>(must(m, Op(Read{0, "v", ids})));
      };
      EXPECT_EQ(at(back.pages[0]), at(1));
    }
    EXPECT_TRUE(m.verify().ok()) << m.verify().error().message;
  }
}

TEST(ModelStorage, ZeroPagesStoreNothingAndTheTrailingPagesAreStored) {
  Model m;
  must(m, Op(BuildPool{storage_pool()}));
  offloaded_page(m);
  EXPECT_TRUE(ids_of(must(m, Op(StorePages{0, "full", {1, 0}, {5, 6}, 0, ""}))).empty());
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {5}}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {6}}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(StorePages{0, "full", {1, 0}, {5, 6}, 1, ""}))), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {5}}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {6}}))), (std::vector<std::int64_t>{1}));
  refused(m, Op(StorePages{0, "full", {1, 0}, {5, 6}, 3, ""}), ErrorKind::invalid_argument);
}

TEST(ModelStorage, APageOfAnotherLayoutOrWithoutTheTagMisses) {
  Model m;
  must(m, Op(BuildPool{storage_pool()}));
  offloaded_page(m);
  EXPECT_EQ(ids_of(must(m, Op(StorePages{0, "full", {0}, {8}, 1, "page_major"}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(StorePages{0, "full", {0}, {9}, 1, "untagged"}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {8}}))), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ids_of(must(m, Op(LoadStored{0, "full", {1}, {9}}))), (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(m.verify().ok());
}

TEST(ModelStorage, RefusalsChangeNothing) {
  Model m;
  PoolConfig no_storage = storage_pool();
  no_storage.storage_bytes = 0;
  must(m, Op(BuildPool{no_storage}));
  refused(m, Op(LoadStored{0, "full", {0}, {1}}), ErrorKind::invalid_argument);
  must(m, Op(BuildPool{storage_pool()}));
  offloaded_page(m);
  refused(m, Op(StorePages{0, "swa", {0}, {1}, 1, ""}), ErrorKind::invalid_argument);       // no such side
  refused(m, Op(StorePages{0, "full", {0, 1}, {1}, 1, ""}), ErrorKind::invalid_argument);   // a hash short
  refused(m, Op(StorePages{0, "full", {4}, {1}, 1, ""}), ErrorKind::invalid_argument);      // not allocated
  refused(m, Op(LoadStored{0, "full", {9}, {1}}), ErrorKind::out_of_range);                 // outside the ids
  refused(m, Op(LoadStored{0, "full", {0, 0}, {1, 2}}), ErrorKind::invalid_argument);       // twice
  // A host page a transfer in flight fills is neither stored nor overwritten until it lands.
  must(m, Op(Offload{3, 0, 1, std::nullopt, "full", IdUnit::pages, {1}, {1}}));
  refused(m, Op(StorePages{0, "full", {1}, {1}, 1, ""}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  refused(m, Op(LoadStored{0, "full", {1}, {1}}), ErrorKind::reader_conflict, reason::transfer_in_flight);
  must(m, Op(TransferWait{3}));
  EXPECT_EQ(ids_of(must(m, Op(StorePages{0, "full", {1}, {1}, 1, ""}))), (std::vector<std::int64_t>{0}));
}

}  // namespace
}  // namespace kvtwin::sim
