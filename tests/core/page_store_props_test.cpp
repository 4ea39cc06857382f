// A RapidCheck property of the page store (core/page_store.h) against a plain model: random
// sequences of puts, batches, gets, reopens (some with a smaller capacity), files corrupted on
// disk and puts that meet a full disk, over a few keys in two spaces. After every step the store
// must agree with the model: the same answer (hit with the same bytes, miss, corrupt, error), the
// same pages in the same eviction order, the same bytes used.
//
// The model is a map and a logical clock, written from docs/storage.md's rules: a put or a hit
// takes the next tick; a put of the bytes already stored only touches; a put evicts the least
// recently used pages outside its batch until its files fit; a reopen orders pages by write
// sequence and evicts down to the capacity; a page whose file was altered reads as corrupt once,
// then misses; a truncated file is dropped at the next open. Syncs are skipped (kStoreIoSkip):
// durability is the crash test's business, this one is about the rules.
//
// RapidCheck prints its seed and, on a failure, the RC_PARAMS="reproduce=..." that replays it.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/page_store.h"
#include "core/rng.h"

namespace kvtwin {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> page_bytes(std::uint64_t hash, std::uint64_t version) {
  Rng rng(mix_seed(hash, version));
  std::vector<std::uint8_t> page(1 + rng.below(300));
  for (std::uint8_t& b : page) b = static_cast<std::uint8_t>(rng.next_u64());
  return page;
}

struct ModelPage {
  std::vector<std::uint8_t> bytes;
  std::uint64_t file_bytes = 0;
  std::uint64_t sequence = 0;
  std::uint64_t recency = 0;
  bool altered = false;    // a payload byte changed on disk: the next read is corrupt
  bool truncated = false;  // cut short on disk: corrupt at the next read or open
};

struct StoreModel {
  std::map<StoredPageKey, ModelPage> pages;
  std::uint64_t clock = 0;
  std::uint64_t capacity = 0;
  std::uint64_t corruptions = 0;

  std::uint64_t used() const {
    std::uint64_t u = 0;
    for (const auto& [k, p] : pages) u += p.file_bytes;
    return u;
  }
  std::vector<StoredPageKey> order() const {
    std::vector<std::pair<std::uint64_t, StoredPageKey>> by;
    for (const auto& [k, p] : pages) by.push_back({p.recency, k});
    std::sort(by.begin(), by.end());
    std::vector<StoredPageKey> keys;
    for (const auto& [r, k] : by) keys.push_back(k);
    return keys;
  }
  // A batch's answer: false when the model expects an invalid_argument refusal (nothing changes).
  bool batch_fits(const std::vector<std::pair<StoredPageKey, std::vector<std::uint8_t>>>& batch) const {
    std::uint64_t bytes = 0;
    for (const auto& [k, b] : batch) bytes += stored_page_file_bytes(k.space, b.size());
    return bytes <= capacity;
  }
  // Pass one of a put: pages already stored with these bytes are touched. Returns the others.
  std::vector<std::size_t> touch_stored(const std::vector<std::pair<StoredPageKey, std::vector<std::uint8_t>>>& batch) {
    std::vector<std::size_t> pending;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto it = pages.find(batch[i].first);
      if (it != pages.end() && it->second.bytes == batch[i].second)
        it->second.recency = clock++;
      else
        pending.push_back(i);
    }
    return pending;
  }
  void put(const std::vector<std::pair<StoredPageKey, std::vector<std::uint8_t>>>& batch,
           const std::vector<std::size_t>& pending, std::vector<StoredPageKey>& evicted) {
    std::vector<std::uint64_t> sequences;
    for (std::size_t i = 0; i < pending.size(); ++i) sequences.push_back(clock++);
    std::uint64_t replaced = 0, incoming = 0;
    for (std::size_t i : pending) {
      const auto& [k, b] = batch[i];
      incoming += stored_page_file_bytes(k.space, b.size());
      if (auto it = pages.find(k); it != pages.end()) replaced += it->second.file_bytes;
    }
    for (const StoredPageKey& victim : order()) {
      if (used() - replaced + incoming <= capacity) break;
      bool in_batch = false;
      for (const auto& [k, b] : batch) in_batch = in_batch || k == victim;
      if (in_batch) continue;
      pages.erase(victim);
      evicted.push_back(victim);
    }
    for (std::size_t n = 0; n < pending.size(); ++n) {
      const auto& [k, b] = batch[pending[n]];
      pages[k] = ModelPage{b, stored_page_file_bytes(k.space, b.size()), sequences[n], sequences[n]};
    }
  }
  void reopen(std::uint64_t new_capacity) {
    capacity = new_capacity;
    corruptions = 0;  // a fresh store counts from zero
    for (auto it = pages.begin(); it != pages.end();) {
      if (it->second.truncated) {
        ++corruptions;
        it = pages.erase(it);
      } else {
        ++it;
      }
    }
    clock = 0;
    for (auto& [k, p] : pages) {
      p.recency = p.sequence;
      clock = std::max(clock, p.sequence + 1);
    }
    for (const StoredPageKey& victim : order()) {
      if (used() <= capacity) break;
      pages.erase(victim);
    }
  }
};

struct Injected {
  bool fail_next_write = false;
};

void check_agrees(const PageStore& store, const StoreModel& model) {
  RC_ASSERT(store.eviction_order() == model.order());
  RC_ASSERT(store.stats().pages == model.pages.size());
  RC_ASSERT(store.stats().bytes_used == model.used());
  RC_ASSERT(store.stats().bytes_used <= model.capacity);
  RC_ASSERT(store.stats().corruptions == model.corruptions);
}

RC_GTEST_PROP(PageStoreProps, TheStoreAgreesWithAPlainModel, ()) {
  static int case_number = 0;
  const fs::path dir = fs::temp_directory_path() /
                       ("kvtwin-store-props-" + std::to_string(::getpid()) + "-" + std::to_string(case_number++));
  fs::remove_all(dir);
  const std::uint64_t one_page = stored_page_file_bytes("m-tm1", 300);
  StoreModel model;
  model.capacity = one_page * *rc::gen::inRange<std::uint64_t>(1, 7);
  Injected injected;
  auto config = [&] {
    PageStoreConfig c;
    c.folder = dir.string();
    c.storage_bytes = model.capacity;
    c.write_chunk_bytes = 64;
    c.io_hook = [&injected](StoreIoStep step, const std::string&) {
      if (step == StoreIoStep::sync_file || step == StoreIoStep::sync_folder) return kStoreIoSkip;
      if (step == StoreIoStep::write && injected.fail_next_write) {
        injected.fail_next_write = false;
        return ENOSPC;
      }
      return 0;
    };
    return c;
  };
  std::optional<PageStore> store;
  {
    Result<PageStore> opened = PageStore::open(config());
    RC_ASSERT(opened.ok());
    store.emplace(std::move(opened).value());
  }
  auto draw_key = [] {
    return StoredPageKey{*rc::gen::element(std::string("m-tm1"), std::string("m")), *rc::gen::inRange<std::uint64_t>(0, 6)};
  };
  auto draw_page = [](const StoredPageKey& key) {
    return page_bytes(key.page_hash * 2 + (key.space == "m" ? 1 : 0), *rc::gen::inRange<std::uint64_t>(0, 2));
  };

  const int steps = *rc::gen::inRange(1, 50);
  for (int step = 0; step < steps; ++step) {
    const int what = *rc::gen::inRange(0, 100);
    if (what < 45) {
      // A put or a batch of distinct keys; sometimes the disk is full for it.
      std::vector<std::pair<StoredPageKey, std::vector<std::uint8_t>>> batch;
      const int size = what < 30 ? 1 : *rc::gen::inRange(2, 5);
      for (int i = 0; i < size; ++i) {
        const StoredPageKey k = draw_key();
        bool seen = false;
        for (const auto& [bk, b] : batch) seen = seen || bk == k;
        if (!seen) batch.push_back({k, draw_page(k)});
      }
      const bool disk_full = *rc::gen::inRange(0, 8) == 0;
      std::vector<StorePage> pages;
      for (const auto& [k, b] : batch) pages.push_back(StorePage{k, b});
      injected.fail_next_write = disk_full;
      Result<StorePut> got = store->put_many(pages);
      injected.fail_next_write = false;
      if (!model.batch_fits(batch)) {
        RC_ASSERT(!got.ok());
        RC_ASSERT(got.error().kind == ErrorKind::invalid_argument);
      } else {
        const std::vector<std::size_t> pending = model.touch_stored(batch);
        if (disk_full && !pending.empty()) {
          // Refused before anything is evicted: only the touches of pass one happened.
          RC_ASSERT(!got.ok());
          RC_ASSERT(got.error().kind == ErrorKind::io);
          model.clock += 1;  // the sequence number taken by the page whose write failed
        } else {
          RC_ASSERT(got.ok());
          std::vector<StoredPageKey> evicted;
          model.put(batch, pending, evicted);
          RC_ASSERT(got->pages_written == pending.size());
          RC_ASSERT(got->pages_already_stored == batch.size() - pending.size());
          RC_ASSERT(got->evicted == evicted);
        }
      }
    } else if (what < 75) {
      const StoredPageKey k = draw_key();
      Result<StoreRead> got = store->get(k);
      RC_ASSERT(got.ok());
      auto it = model.pages.find(k);
      if (it == model.pages.end()) {
        RC_ASSERT(got->outcome == StoreReadOutcome::miss);
      } else if (it->second.altered || it->second.truncated) {
        RC_ASSERT(got->outcome == StoreReadOutcome::corrupt);
        RC_ASSERT(got->bytes.empty());
        ++model.corruptions;
        model.pages.erase(it);
      } else {
        RC_ASSERT(got->outcome == StoreReadOutcome::hit);
        RC_ASSERT(got->bytes == it->second.bytes);
        it->second.recency = model.clock++;
      }
    } else if (what < 88) {
      // A reopen, sometimes with a smaller capacity.
      store.reset();
      std::uint64_t capacity = model.capacity;
      if (*rc::gen::inRange(0, 3) == 0) capacity = one_page * *rc::gen::inRange<std::uint64_t>(1, 7);
      model.reopen(capacity);
      Result<PageStore> opened = PageStore::open(config());
      RC_ASSERT(opened.ok());
      store.emplace(std::move(opened).value());
    } else if (!model.pages.empty()) {
      // A stored file altered on disk: one payload byte, or cut short.
      const std::vector<StoredPageKey> keys = model.order();
      const StoredPageKey k = keys[*rc::gen::inRange<std::size_t>(0, keys.size())];
      ModelPage& p = model.pages.at(k);
      const std::string path = store->page_path(k);
      if (*rc::gen::inRange(0, 2) == 0) {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        const auto at = static_cast<std::streamoff>(p.file_bytes - 1 - *rc::gen::inRange<std::uint64_t>(0, p.bytes.size()));
        f.seekg(at);
        const int byte = f.get();
        f.seekp(at);
        f.put(static_cast<char>(byte ^ 0x10));
        p.altered = true;
      } else {
        fs::resize_file(path, p.file_bytes - 1);
        p.truncated = true;
      }
    }
    check_agrees(*store, model);
  }
  store.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvtwin
