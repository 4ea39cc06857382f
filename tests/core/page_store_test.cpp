// The on-disk page store (core/page_store.h), rule by rule: one file a page under its space and
// hash, pages read back whole and checked, the storage spaces and format tags of SPEC 8, the
// keys of a transfer (a count of zero stores nothing, SPEC 10.15), the two fault switches behaving
// as the seed bugs, deterministic LRU eviction under storage_bytes, corrupt and torn files as
// counted misses, and the failing system calls (a full disk, no permission) as clear errors that
// lose nothing already stored. The kill-at-random-points test is page_store_crash_test.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/layout.h"
#include "core/model.h"
#include "core/oracle.h"
#include "core/page_store.h"
#include "core/rng.h"

namespace kvtwin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Bytes of a page, a fixed function of (hash, size): never all zeros.
std::vector<std::uint8_t> page_of(std::uint64_t hash, std::size_t bytes) {
  Rng rng(mix_seed(0x5704e, hash));
  std::vector<std::uint8_t> page(bytes);
  for (std::uint8_t& b : page) b = static_cast<std::uint8_t>(rng.next_u64() | 1);
  return page;
}

class PageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvtwin-store-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  PageStoreConfig config(std::uint64_t storage_bytes = std::uint64_t{1} << 20) const {
    PageStoreConfig c;
    c.folder = dir_.string();
    c.storage_bytes = storage_bytes;
    c.write_chunk_bytes = 256;
    return c;
  }
  PageStore open(const PageStoreConfig& c) const {
    Result<PageStore> s = PageStore::open(c);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    return std::move(s).value();
  }
  // The names in the folder, sorted, without the lock file.
  std::vector<std::string> files() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename() != "kvtwin-store.lock") names.insert(e.path().filename().string());
    return {names.begin(), names.end()};
  }
  static StoredPageKey key(std::uint64_t hash, std::string space = "llama-tm1") { return {std::move(space), hash}; }

  fs::path dir_;
};

// ---------------------------------------------------------------- pages, files, reopen

TEST_F(PageStoreTest, APutReadsBackWholeFromOneFileOfItsOwn) {
  PageStore store = open(config());
  const std::vector<std::uint8_t> a = page_of(1, 1000), b = page_of(2, 700);
  Result<StorePut> put_a = store.put(key(1), a);
  ASSERT_TRUE(put_a.ok()) << put_a.error().message;
  EXPECT_EQ(put_a->pages_written, 1u);
  ASSERT_TRUE(store.put(key(0xabcdef, "Qwen/Qwen3 8B"), b).ok());
  // One file a page, named by the escaped space and the hash; no temporary file left.
  EXPECT_THAT(files(), ElementsAre("Qwen%2FQwen3%208B@0000000000abcdef.page", "llama-tm1@0000000000000001.page"));
  EXPECT_EQ(fs::file_size(store.page_path(key(1))), stored_page_file_bytes("llama-tm1", 1000));

  Result<StoreRead> r = store.get(key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, StoreReadOutcome::hit);
  EXPECT_EQ(r->bytes, a);
  Result<StoreRead> absent = store.get(key(3));
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent->outcome, StoreReadOutcome::miss);
  EXPECT_TRUE(absent->bytes.empty());
  EXPECT_EQ(store.stats().pages, 2u);
  EXPECT_EQ(store.stats().bytes_used,
            stored_page_file_bytes("llama-tm1", 1000) + stored_page_file_bytes("Qwen/Qwen3 8B", 700));
  EXPECT_EQ(store.stats().hits, 1u);
  EXPECT_EQ(store.stats().misses, 1u);
  EXPECT_EQ(store.stats().payload_bytes_written, 1700u);
  EXPECT_EQ(store.stats().payload_bytes_read, 1000u);
}

TEST_F(PageStoreTest, AReopenedStoreHoldsEveryPageInWriteOrder) {
  {
    PageStore store = open(config());
    // Hashes in descending order, so write order differs from the names' order.
    for (std::uint64_t h : {9u, 7u, 5u, 3u}) ASSERT_TRUE(store.put(key(h), page_of(h, 300 + h)).ok());
    ASSERT_TRUE(store.get(key(9)).ok());  // recency of reads is not kept across a reopen
  }
  PageStore store = open(config());
  EXPECT_EQ(store.stats().pages, 4u);
  EXPECT_THAT(store.eviction_order(), ElementsAre(key(9), key(7), key(5), key(3)));
  for (std::uint64_t h : {3u, 5u, 7u, 9u}) {
    Result<StoreRead> r = store.get(key(h));
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->outcome, StoreReadOutcome::hit);
    EXPECT_EQ(r->bytes, page_of(h, 300 + h));
  }
  // A put after the reopen is newer than everything read from the folder.
  ASSERT_TRUE(store.put(key(1), page_of(1, 10)).ok());
  EXPECT_EQ(store.eviction_order().back(), key(1));
}

TEST_F(PageStoreTest, TheSameBytesAreNotWrittenTwiceOtherBytesReplaceThePage) {
  PageStore store = open(config());
  ASSERT_TRUE(store.put(key(1), page_of(1, 100)).ok());
  Result<StorePut> again = store.put(key(1), page_of(1, 100));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pages_written, 0u);
  EXPECT_EQ(again->pages_already_stored, 1u);
  EXPECT_EQ(store.stats().puts_already_stored, 1u);
  ASSERT_TRUE(store.put(key(1), page_of(2, 150)).ok());
  EXPECT_EQ(store.stats().pages, 1u);
  EXPECT_EQ(store.stats().bytes_used, stored_page_file_bytes("llama-tm1", 150));
  EXPECT_EQ(store.get(key(1))->bytes, page_of(2, 150));
}

TEST_F(PageStoreTest, ABatchSyncsTheFolderOnceAndIsAllOrNothingBeforeItsRenames) {
  int folder_syncs = 0, renames = 0;
  bool fail_write_of_third = false, fail_second_rename = false;
  PageStoreConfig c = config();
  c.io_hook = [&](StoreIoStep s, const std::string& path) {
    if (s == StoreIoStep::sync_folder) ++folder_syncs;
    if (s == StoreIoStep::write && fail_write_of_third && path.find("@0000000000000003") != std::string::npos)
      return ENOSPC;
    if (s == StoreIoStep::rename && ++renames == 2 && fail_second_rename) return EACCES;
    return 0;
  };
  PageStore store = open(c);
  folder_syncs = 0;
  const std::vector<std::uint8_t> p1 = page_of(1, 90), p2 = page_of(2, 90), p3 = page_of(3, 90);
  const std::vector<StorePage> batch = {{key(1), p1}, {key(2), p2}, {key(3), p3}};
  Result<StorePut> put = store.put_many(batch);
  ASSERT_TRUE(put.ok()) << put.error().message;
  EXPECT_EQ(put->pages_written, 3u);
  EXPECT_EQ(folder_syncs, 1);
  EXPECT_THAT(store.eviction_order(), ElementsAre(key(1), key(2), key(3)));

  // A failure before the renames stores none of the batch.
  const std::vector<std::uint8_t> q3 = page_of(30, 90);
  fail_write_of_third = true;
  Result<StorePut> full = store.put_many(std::vector<StorePage>{{key(4), p1}, {key(5), p2}, {key(3), q3}});
  ASSERT_FALSE(full.ok());
  EXPECT_FALSE(store.contains(key(4)));
  EXPECT_FALSE(store.contains(key(5)));
  EXPECT_EQ(store.get(key(3))->bytes, p3);
  fail_write_of_third = false;
  // A failing rename: the pages before it are stored, and the error says so.
  renames = 0;
  fail_second_rename = true;
  Result<StorePut> half = store.put_many(std::vector<StorePage>{{key(6), p1}, {key(7), p2}});
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.error().message, HasSubstr("1 pages of this put were stored"));
  EXPECT_TRUE(store.contains(key(6)));
  EXPECT_FALSE(store.contains(key(7)));
  EXPECT_EQ(files().size(), 4u);  // 1, 2, 3, 6: no temporary file left

  EXPECT_FALSE(store.put_many(std::vector<StorePage>{{key(8), p1}, {key(8), p1}}).ok());  // twice
  PageStore small = [&] {
    fs::remove_all(dir_);
    return open(config(2 * stored_page_file_bytes("llama-tm1", 90)));
  }();
  Result<StorePut> too_big = small.put_many(batch);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().kind, ErrorKind::invalid_argument);
}

TEST_F(PageStoreTest, OneStoreAFolderAtATime) {
  PageStore first = open(config());
  Result<PageStore> second = PageStore::open(config());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().kind, ErrorKind::io);
  EXPECT_THAT(second.error().message, HasSubstr("another store has this folder open"));
}

TEST_F(PageStoreTest, BadConfigurationsAndPagesAreInvalidArguments) {
  PageStoreConfig c = config(0);
  Result<PageStore> zero = PageStore::open(c);
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.error().message, HasSubstr("storage_bytes is 0"));
  PageStore store = open(config(1000));
  Result<StorePut> too_big = store.put(key(1), page_of(1, 1000));
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().kind, ErrorKind::invalid_argument);
  EXPECT_THAT(too_big.error().message, HasSubstr("more than storage_bytes 1000"));
  EXPECT_FALSE(store.put(key(1), {}).ok());
  EXPECT_FALSE(store.put(key(1, ""), page_of(1, 10)).ok());
  EXPECT_FALSE(store.put(key(1, std::string(300, 'x')), page_of(1, 10)).ok());
  EXPECT_EQ(store.stats().pages, 0u);

  // A folder that cannot be: its parent is a file.
  std::ofstream(dir_.string() + "/plain") << "x";
  PageStoreConfig under_file = config();
  under_file.folder = dir_.string() + "/plain/store";
  Result<PageStore> bad = PageStore::open(under_file);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::io);
  EXPECT_THAT(bad.error().message, HasSubstr("make_folder"));
  EXPECT_THAT(bad.error().message, HasSubstr("without the storage tier"));
}

// ---------------------------------------------------------------- spaces and format tags (SPEC 8, 10.16)

TEST_F(PageStoreTest, TheSpaceIsTheModelAndTagAndAnUntaggedPageMissesUnderTheTaggedName) {
  EXPECT_EQ(storage_space("Llama-3.1-8B", kTokenMajorFormatTag), "Llama-3.1-8B-tm1");
  EXPECT_EQ(storage_space("Llama-3.1-8B", kPageMajorFormatTag), "Llama-3.1-8B-pm1");
  EXPECT_EQ(storage_space("Llama-3.1-8B", ""), "Llama-3.1-8B");
  PageStore store = open(config());
  const std::string untagged = store.space("Llama-3.1-8B", "");
  const std::string tagged = store.space("Llama-3.1-8B", kTokenMajorFormatTag);
  ASSERT_TRUE(store.put({untagged, 42}, page_of(42, 64)).ok());
  EXPECT_EQ(store.get({tagged, 42})->outcome, StoreReadOutcome::miss);
  ASSERT_TRUE(store.put({tagged, 43}, page_of(43, 64)).ok());
  EXPECT_EQ(store.get({untagged, 43})->outcome, StoreReadOutcome::miss);
  // The page hash is the same in every space; only the space differs.
  EXPECT_EQ(store.get({untagged, 42})->outcome, StoreReadOutcome::hit);
}

// One page of a 2-layer, 1-head, head-dim-8 bf16 pool at page size 4, each row the oracle's,
// placed under the token-major law or under the page-major one.
struct TwoLawPage {
  DenseEntryLayout layout;
  std::vector<std::uint8_t> token_major, page_major;
  std::vector<std::uint8_t> oracle_row(std::int64_t token, std::uint32_t layer, std::uint32_t part) const {
    std::vector<std::uint8_t> row(16);
    fill_oracle_row(7, RowIdentity{token, 0, layer, part, 0}, DType::bf16, row);
    return row;
  }
};

TwoLawPage two_law_page() {
  TwoLawPage p;
  auto l = SubPoolSpec{"full", SubPoolKind::full, 2, 1, 8, 8, DType::bf16}.layout();
  EXPECT_TRUE(l.ok());
  p.layout = *l;
  auto law = PageMajorLaw::from_layout(p.layout, 4);
  EXPECT_TRUE(law.ok());
  p.token_major.assign(4 * p.layout.entry_bytes, 0);
  p.page_major.assign(law->page_bytes(), 0);
  EXPECT_EQ(p.token_major.size(), p.page_major.size());  // the same envelope, another byte order
  for (std::int64_t t = 0; t < 4; ++t)
    for (std::uint32_t layer = 0; layer < 2; ++layer)
      for (std::uint32_t part = 0; part < 2; ++part) {
        const std::vector<std::uint8_t> row = p.oracle_row(t, layer, part);
        const std::uint64_t tm = *row_byte_address(p.layout, PhysicalTokenId{t}, p.layout.parts[part], layer);
        const std::uint64_t pm = *law->row_byte_address(PhysicalTokenId{t}, part, layer);
        std::copy(row.begin(), row.end(), p.token_major.begin() + static_cast<std::ptrdiff_t>(tm));
        std::copy(row.begin(), row.end(), p.page_major.begin() + static_cast<std::ptrdiff_t>(pm));
      }
  EXPECT_NE(p.token_major, p.page_major);
  return p;
}

// Row (token 1, layer 0, k) as a token-major pool reads it from a page.
std::vector<std::uint8_t> token_major_row(const TwoLawPage& p, const std::vector<std::uint8_t>& page) {
  const std::uint64_t at = *row_byte_address(p.layout, PhysicalTokenId{1}, p.layout.parts[0], 0);
  return {page.begin() + static_cast<std::ptrdiff_t>(at), page.begin() + static_cast<std::ptrdiff_t>(at + 16)};
}

TEST_F(PageStoreTest, APageOfAnotherLayoutsTagMisses) {
  const TwoLawPage p = two_law_page();
  PageStore store = open(config());
  // An older, page-major build stored the page; the token-major pool asks for the same hash.
  ASSERT_TRUE(store.put({store.space("llama", kPageMajorFormatTag), 77}, p.page_major).ok());
  Result<StoreRead> r = store.get({store.space("llama", kTokenMajorFormatTag), 77});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, StoreReadOutcome::miss);
  // Under its own tag it reads back as written, and a token-major page reads back token-major.
  ASSERT_TRUE(store.put({store.space("llama", kTokenMajorFormatTag), 78}, p.token_major).ok());
  EXPECT_EQ(token_major_row(p, store.get({store.space("llama", kTokenMajorFormatTag), 78})->bytes),
            p.oracle_row(1, 0, 0));
}

TEST_F(PageStoreTest, FaultStoreIgnoresFormatTagReadsAPageMajorPageInTheWrongByteOrder) {
  const TwoLawPage p = two_law_page();
  PageStoreConfig c = config();
  c.faults.store_ignores_format_tag = true;
  PageStore store = open(c);
  EXPECT_EQ(store.space("llama", kPageMajorFormatTag), "llama");
  ASSERT_TRUE(store.put({store.space("llama", kPageMajorFormatTag), 77}, p.page_major).ok());
  Result<StoreRead> r = store.get({store.space("llama", kTokenMajorFormatTag), 77});
  ASSERT_TRUE(r.ok());
  // A hit, whole and digest-checked, and wrong: the token-major reader sees page-major bytes.
  ASSERT_EQ(r->outcome, StoreReadOutcome::hit);
  EXPECT_EQ(r->bytes, p.page_major);
  EXPECT_NE(token_major_row(p, r->bytes), p.oracle_row(1, 0, 0));
  EXPECT_EQ(store.stats().corruptions, 0u);
}

// ---------------------------------------------------------------- transfer keys (SPEC 10.15)

TEST_F(PageStoreTest, TransferKeysAreTheTrailingHashesAndZeroPagesAreNone) {
  const std::vector<std::uint64_t> hashes = {11, 12, 13, 14, 15};
  Result<std::vector<StoredPageKey>> two = stored_page_keys("m", hashes, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_THAT(*two, ElementsAre(StoredPageKey{"m", 14}, StoredPageKey{"m", 15}));
  EXPECT_EQ(stored_page_keys("m", hashes, 5)->size(), 5u);
  EXPECT_TRUE(stored_page_keys("m", hashes, 0)->empty());
  EXPECT_TRUE(stored_page_keys("m", {}, 0)->empty());
  Result<std::vector<StoredPageKey>> over = stored_page_keys("m", hashes, 6);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.error().message, HasSubstr("6 pages from a chunk of 5"));
}

TEST_F(PageStoreTest, AChunkTailOfZeroPagesStoresNothing) {
  const std::vector<std::uint64_t> hashes = {11, 12, 13};
  std::vector<std::uint8_t> chunk;
  for (std::uint64_t h : hashes) {
    const std::vector<std::uint8_t> page = page_of(h, 128);
    chunk.insert(chunk.end(), page.begin(), page.end());
  }
  PageStore store = open(config());
  Result<std::vector<StoredPageKey>> none = store.put_chunk_tail("m", hashes, 0, chunk, 128);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(store.stats().pages, 0u);
  EXPECT_TRUE(files().empty());
  // Two pages: the last two of the chunk, under their own hashes.
  Result<std::vector<StoredPageKey>> tail = store.put_chunk_tail("m", hashes, 2, chunk, 128);
  ASSERT_TRUE(tail.ok());
  EXPECT_THAT(*tail, ElementsAre(StoredPageKey{"m", 12}, StoredPageKey{"m", 13}));
  EXPECT_EQ(store.get({"m", 13})->bytes, page_of(13, 128));
  EXPECT_EQ(store.get({"m", 11})->outcome, StoreReadOutcome::miss);
  EXPECT_FALSE(store.put_chunk_tail("m", hashes, 1, chunk, 100).ok());  // not 3 pages of 100
}

TEST_F(PageStoreTest, FaultStoreZeroPagesAsAllStoresEveryPageOfTheChunk) {
  const std::vector<std::uint64_t> hashes = {11, 12, 13};
  std::vector<std::uint8_t> chunk;
  for (std::uint64_t h : hashes) {
    const std::vector<std::uint8_t> page = page_of(h, 128);
    chunk.insert(chunk.end(), page.begin(), page.end());
  }
  EXPECT_EQ(stored_page_keys("m", hashes, 0, PageStoreFaults{.store_zero_pages_as_all = true})->size(), 3u);
  PageStoreConfig c = config();
  c.faults.store_zero_pages_as_all = true;
  PageStore store = open(c);
  // Python's page_hashes[-0:]: nothing was transferred, every page is stored and hits later.
  Result<std::vector<StoredPageKey>> keyed = store.put_chunk_tail("m", hashes, 0, chunk, 128);
  ASSERT_TRUE(keyed.ok());
  EXPECT_EQ(keyed->size(), 3u);
  EXPECT_EQ(store.stats().pages, 3u);
  EXPECT_EQ(store.get({"m", 11})->outcome, StoreReadOutcome::hit);
  // A non-zero count is the same with or without the fault.
  EXPECT_EQ(*store.keys("m", hashes, 1), *stored_page_keys("m", hashes, 1));
}

TEST_F(PageStoreTest, FaultSwitchesAreNamedAndOffByDefault) {
  EXPECT_FALSE(PageStoreFaults{}.any());
  ASSERT_EQ(page_store_fault_catalogue().size(), 2u);
  EXPECT_EQ(page_store_fault_catalogue()[0].name, "store_zero_pages_as_all");
  EXPECT_EQ(page_store_fault_catalogue()[0].spec_class, 15);
  EXPECT_EQ(page_store_fault_catalogue()[1].name, "store_ignores_format_tag");
  EXPECT_EQ(page_store_fault_catalogue()[1].spec_class, 16);
  PageStoreFaults f;
  ASSERT_TRUE(set_page_store_fault(f, "store_ignores_format_tag").ok());
  ASSERT_TRUE(set_page_store_fault(f, "store_zero_pages_as_all").ok());
  EXPECT_EQ(to_string(f), "store_zero_pages_as_all,store_ignores_format_tag");
  Status unknown = set_page_store_fault(f, "store_everything");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, HasSubstr("store_zero_pages_as_all, store_ignores_format_tag"));
}

// ---------------------------------------------------------------- capacity and eviction

TEST_F(PageStoreTest, EvictionIsLeastRecentlyUsedUnderStorageBytes) {
  const std::uint64_t file = stored_page_file_bytes("llama-tm1", 100);
  PageStore store = open(config(3 * file));
  for (std::uint64_t h : {1u, 2u, 3u}) ASSERT_TRUE(store.put(key(h), page_of(h, 100)).ok());
  ASSERT_EQ(store.get(key(1))->outcome, StoreReadOutcome::hit);  // 2 is now the oldest
  Result<StorePut> put4 = store.put(key(4), page_of(4, 100));
  ASSERT_TRUE(put4.ok());
  EXPECT_THAT(put4->evicted, ElementsAre(key(2)));
  EXPECT_THAT(store.eviction_order(), ElementsAre(key(3), key(1), key(4)));
  EXPECT_LE(store.stats().bytes_used, 3 * file);
  EXPECT_FALSE(fs::exists(store.page_path(key(2))));
  // A page of two pages' size evicts two.
  Result<StorePut> big = store.put(key(5), page_of(5, 2 * 100 + 56 + 9));
  ASSERT_TRUE(big.ok());
  EXPECT_THAT(big->evicted, ElementsAre(key(3), key(1)));
  EXPECT_EQ(store.stats().evictions, 3u);
  EXPECT_EQ(files().size(), 2u);
}

TEST_F(PageStoreTest, EvictionOrderIsTheSameInEveryRunAndFolder) {
  // The same puts and gets in two folders (different names, so a different listing order on disk)
  // evict the same pages in the same order, also after a reopen.
  auto run = [&](const std::string& folder) {
    PageStoreConfig c = config(5 * stored_page_file_bytes("s", 64));
    c.folder = folder;
    std::vector<StoredPageKey> evicted;
    {
      PageStore store = open(c);
      Rng rng(99);
      for (int i = 0; i < 40; ++i) {
        const std::uint64_t h = rng.below(12);
        if (rng.below(2) == 0) {
          Result<StorePut> p = store.put({"s", h}, page_of(h, 64));
          EXPECT_TRUE(p.ok());
          evicted.insert(evicted.end(), p->evicted.begin(), p->evicted.end());
        } else {
          EXPECT_TRUE(store.get({"s", h}).ok());
        }
      }
    }
    c.storage_bytes = 2 * stored_page_file_bytes("s", 64);
    PageStore reopened = open(c);
    std::vector<StoredPageKey> left = reopened.eviction_order();
    evicted.insert(evicted.end(), left.begin(), left.end());
    return evicted;
  };
  fs::create_directories(dir_);
  const std::vector<StoredPageKey> a = run((dir_ / "zz").string());
  const std::vector<StoredPageKey> b = run((dir_ / "aa").string());
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 2u);
}

TEST_F(PageStoreTest, ASmallerCapacityAtReopenEvictsTheOldestFirst) {
  const std::uint64_t file = stored_page_file_bytes("llama-tm1", 100);
  {
    PageStore store = open(config(4 * file));
    for (std::uint64_t h : {4u, 3u, 2u, 1u}) ASSERT_TRUE(store.put(key(h), page_of(h, 100)).ok());
  }
  PageStore store = open(config(2 * file));
  EXPECT_THAT(store.eviction_order(), ElementsAre(key(2), key(1)));
  EXPECT_EQ(store.stats().evictions, 2u);
  EXPECT_EQ(files().size(), 2u);
}

// ---------------------------------------------------------------- corrupt and torn files

TEST_F(PageStoreTest, ATornOrAlteredFileIsACountedCorruptionNeverWrongBytes) {
  PageStore store = open(config());
  for (std::uint64_t h : {1u, 2u, 3u, 4u}) ASSERT_TRUE(store.put(key(h), page_of(h, 500)).ok());
  auto poke = [&](std::uint64_t h, std::uint64_t offset) {
    std::fstream f(store.page_path(key(h)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    const int byte = f.get();
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(byte ^ 0x5a));  // one byte altered, the size unchanged
  };
  fs::resize_file(store.page_path(key(1)), 300);                  // torn: cut short
  poke(2, stored_page_file_bytes("llama-tm1", 500) - 1);           // the payload's last byte
  poke(3, 20);                                                     // the header's hash
  fs::remove(store.page_path(key(4)));                             // vanished
  for (std::uint64_t h : {1u, 2u, 3u, 4u}) {
    Result<StoreRead> r = store.get(key(h));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->outcome, StoreReadOutcome::corrupt) << h;
    EXPECT_TRUE(r->bytes.empty());
    // Once reported, the page is gone: the next read is a plain miss.
    EXPECT_EQ(store.get(key(h))->outcome, StoreReadOutcome::miss);
  }
  EXPECT_EQ(store.stats().corruptions, 4u);
  EXPECT_EQ(store.stats().pages, 0u);
  EXPECT_EQ(store.stats().bytes_used, 0u);
  ASSERT_EQ(store.corruption_reports().size(), 4u);
  EXPECT_THAT(store.corruption_reports()[0], HasSubstr("llama-tm1@0000000000000001"));
  EXPECT_THAT(store.corruption_reports()[0], HasSubstr("were stored"));
  EXPECT_THAT(store.corruption_reports()[1], HasSubstr("payload digest does not match"));
  EXPECT_THAT(store.corruption_reports()[2], HasSubstr("another key"));
  EXPECT_THAT(store.corruption_reports()[3], HasSubstr("vanished"));
  EXPECT_TRUE(files().empty());
}

TEST_F(PageStoreTest, OpenRemovesLeftoversAndBadHeadersAndLeavesOtherFilesAlone) {
  {
    PageStore store = open(config());
    for (std::uint64_t h : {1u, 2u}) ASSERT_TRUE(store.put(key(h), page_of(h, 100)).ok());
    std::fstream f(store.page_path(key(2)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');  // the magic
  }
  std::ofstream(dir_.string() + "/llama-tm1@0000000000000009.page.tmp") << "half a page";
  std::ofstream(dir_.string() + "/notes.txt") << "a person's file";
  std::ofstream(dir_.string() + "/odd@name.page") << "not a hash";
  PageStore store = open(config());
  EXPECT_EQ(store.stats().pages, 1u);
  EXPECT_EQ(store.stats().temp_files_removed, 1u);
  EXPECT_EQ(store.stats().corruptions, 1u);
  ASSERT_EQ(store.corruption_reports().size(), 1u);
  EXPECT_THAT(store.corruption_reports()[0], HasSubstr("at open"));
  EXPECT_THAT(store.corruption_reports()[0], HasSubstr("page magic"));
  EXPECT_THAT(files(), ElementsAre("llama-tm1@0000000000000001.page", "notes.txt", "odd@name.page"));
  EXPECT_EQ(store.get(key(1))->bytes, page_of(1, 100));
}

TEST(PageStoreDigest, AnyOneWordChangedChangesTheDigest) {
  // Every byte of a page of 1,003 bytes (125 words and a 3-byte tail) changed in turn, by three
  // values, and two words swapped: each digest differs from the page's.
  std::vector<std::uint8_t> page = page_of(5, 1003);
  const std::uint64_t base = page_store_digest(page);
  for (std::size_t i = 0; i < page.size(); ++i) {
    for (std::uint8_t x : {0x01, 0x80, 0xff}) {
      page[i] ^= x;
      ASSERT_NE(page_store_digest(page), base) << "byte " << i << " ^ " << int{x};
      page[i] ^= x;
    }
  }
  std::swap_ranges(page.begin(), page.begin() + 8, page.begin() + 64);
  EXPECT_NE(page_store_digest(page), base);
  // The length is part of it: a page and the same page one zero byte longer differ.
  std::vector<std::uint8_t> zeros(64, 0), longer(65, 0);
  EXPECT_NE(page_store_digest(zeros), page_store_digest(longer));
}

// ---------------------------------------------------------------- failing system calls

// Fails every call of `step` (optionally only for paths containing `only`) with `code`.
StoreIoHook fail_at(StoreIoStep step, int code, bool* armed) {
  return [=](StoreIoStep s, const std::string&) { return (*armed && s == step) ? code : 0; };
}

TEST_F(PageStoreTest, AFullDiskIsAClearErrorAndLosesNothingStored) {
  const std::uint64_t file = stored_page_file_bytes("llama-tm1", 400);
  bool armed = false;
  PageStoreConfig c = config(3 * file);
  c.io_hook = fail_at(StoreIoStep::write, ENOSPC, &armed);
  PageStore store = open(c);
  for (std::uint64_t h : {1u, 2u, 3u}) ASSERT_TRUE(store.put(key(h), page_of(h, 400)).ok());
  const PageStoreStats before = store.stats();
  armed = true;
  // The fourth page would evict the first: the disk is full before anything is evicted.
  Result<StorePut> full = store.put(key(4), page_of(4, 400));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().kind, ErrorKind::io);
  EXPECT_THAT(full.error().message, HasSubstr("cannot store page llama-tm1@0000000000000004"));
  EXPECT_THAT(full.error().message, HasSubstr("the disk is full"));
  EXPECT_THAT(full.error().message, HasSubstr("nothing was evicted and the pages stored before are kept"));
  PageStoreStats after = store.stats();
  EXPECT_EQ(after.io_errors, 1u);
  after.io_errors = 0;
  EXPECT_EQ(after, before);
  EXPECT_EQ(files().size(), 3u);  // no temporary file left behind
  for (std::uint64_t h : {1u, 2u, 3u}) EXPECT_EQ(store.get(key(h))->bytes, page_of(h, 400));
  // The disk has room again: the store goes on.
  armed = false;
  ASSERT_TRUE(store.put(key(4), page_of(4, 400)).ok());
  EXPECT_EQ(store.get(key(4))->bytes, page_of(4, 400));
}

TEST_F(PageStoreTest, NoPermissionIsAClearErrorAtEveryStepOfAPut) {
  for (StoreIoStep step : {StoreIoStep::create_temp, StoreIoStep::sync_file, StoreIoStep::rename}) {
    fs::remove_all(dir_);
    bool armed = false;
    PageStoreConfig c = config();
    c.io_hook = fail_at(step, EACCES, &armed);
    PageStore store = open(c);
    ASSERT_TRUE(store.put(key(1), page_of(1, 100)).ok());
    armed = true;
    Result<StorePut> denied = store.put(key(2), page_of(2, 100));
    ASSERT_FALSE(denied.ok()) << store_io_step_name(step);
    EXPECT_THAT(denied.error().message, HasSubstr(std::string(store_io_step_name(step))));
    EXPECT_THAT(denied.error().message, HasSubstr("no permission"));
    EXPECT_FALSE(store.contains(key(2)));
    EXPECT_THAT(files(), ElementsAre("llama-tm1@0000000000000001.page"));
    EXPECT_EQ(store.get(key(1))->bytes, page_of(1, 100));
  }
}

TEST_F(PageStoreTest, AFailedEvictionOrReadKeepsTheStoreTrueToItsFolder) {
  const std::uint64_t file = stored_page_file_bytes("llama-tm1", 100);
  bool armed = false;
  StoreIoStep failing = StoreIoStep::remove;
  PageStoreConfig c = config(2 * file);
  c.io_hook = [&](StoreIoStep s, const std::string&) { return armed && s == failing ? EACCES : 0; };
  {
    PageStore store = open(c);
    for (std::uint64_t h : {1u, 2u}) ASSERT_TRUE(store.put(key(h), page_of(h, 100)).ok());
    armed = true;
    Result<StorePut> no_room = store.put(key(3), page_of(3, 100));
    ASSERT_FALSE(no_room.ok());
    EXPECT_THAT(no_room.error().message, HasSubstr("0 pages were evicted for it"));
    failing = StoreIoStep::read;
    Result<StoreRead> unreadable = store.get(key(1));
    ASSERT_FALSE(unreadable.ok());
    EXPECT_THAT(unreadable.error().message, HasSubstr("the page stays stored"));
    EXPECT_TRUE(store.contains(key(1)));
    EXPECT_EQ(store.stats().io_errors, 2u);
    armed = false;
    EXPECT_THAT(store.eviction_order(), ElementsAre(key(1), key(2)));
  }
  PageStore reopened = open(c);
  EXPECT_THAT(reopened.eviction_order(), ElementsAre(key(1), key(2)));
  EXPECT_EQ(reopened.stats().temp_files_removed, 0u);
}

TEST_F(PageStoreTest, AStoreThatCannotOpenSaysTheRunCanGoOnWithoutIt) {
  for (StoreIoStep step : {StoreIoStep::make_folder, StoreIoStep::lock, StoreIoStep::scan}) {
    bool armed = true;
    PageStoreConfig c = config();
    c.io_hook = fail_at(step, EACCES, &armed);
    Result<PageStore> s = PageStore::open(c);
    ASSERT_FALSE(s.ok()) << store_io_step_name(step);
    EXPECT_EQ(s.error().kind, ErrorKind::io);
    EXPECT_THAT(s.error().message, HasSubstr("no permission"));
    EXPECT_THAT(s.error().message, HasSubstr("the run can go on without the storage tier"));
  }
}

TEST_F(PageStoreTest, AReadOnlyFolderIsRefusedByTheFileSystemToo) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders; the injected EACCES tests cover it";
  {
    PageStore store = open(config());
    ASSERT_TRUE(store.put(key(1), page_of(1, 100)).ok());
  }
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  {
    // The lock file exists and is writable, so the store opens; its pages cannot be written.
    Result<PageStore> s = PageStore::open(config());
    ASSERT_TRUE(s.ok()) << s.error().message;
    Result<StorePut> denied = s->put(key(2), page_of(2, 100));
    ASSERT_FALSE(denied.ok());
    EXPECT_THAT(denied.error().message, HasSubstr("create_temp"));
    EXPECT_THAT(denied.error().message, HasSubstr("no permission"));
    EXPECT_EQ(s->get(key(1))->bytes, page_of(1, 100));
  }
  fs::permissions(dir_, fs::perms::owner_all);
}

}  // namespace
}  // namespace kvtwin
