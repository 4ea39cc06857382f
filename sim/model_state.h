// The reference model's state (sim/model.h), shared by its two source files: model.cpp (the
// device pool, SPEC 3 to 7) and model_host.cpp (the host arena and transfers, SPEC 8). Internal to
// sim/: nothing outside the model includes it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "core/page_store.h"
#include "core/rng.h"

#include "sim/state_allocator.h"
#include "sim/content_ledger.h"
#include "sim/host_arena.h"
#include "sim/model.h"
#include "sim/page_allocator.h"
#include "sim/pool_bytes.h"
#include "sim/transfers.h"
#include "sim/write_locs.h"

namespace kvtwin::sim {

// A running digest of the state (not cryptographic; only equality matters).
class StateDigest {
 public:
  void add(std::uint64_t v) { h_ = splitmix64_mix(h_ ^ (v + 0x9e3779b97f4a7c15ULL)); }
  void add(std::int64_t v) { add(static_cast<std::uint64_t>(v)); }
  void add(bool v) { add(std::uint64_t{v ? 1u : 0u}); }
  void add(const std::string& s) {
    add(std::uint64_t{s.size()});
    add(fnv1a64(s));
  }
  void add(const std::vector<std::int64_t>& v) {
    add(std::uint64_t{v.size()});
    for (std::int64_t x : v) add(x);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0x243f6a8885a308d3ULL;
};


struct Model::Pool {
  Pool(PoolConfig c, PoolDerived d, std::optional<HostArena> arena)
      : config(std::move(c)),
        derived(std::move(d)),
        allocator(derived.geometry, config.mode),
        page_size(static_cast<std::int64_t>(config.page_size)),
        host(std::move(arena)) {
    if (!config.tables_only) {
      bytes.emplace(config.total_bytes);
      ledger = ContentLedger(derived.layouts, page_size, allocator.num_virtual());
      for (const DenseEntryLayout& layout : derived.layouts) {
        oracle_families.emplace_back();
        for (const DensePart& part : layout.parts) oracle_families.back().emplace_back(part.layer_num);
      }
    }
    for (std::size_t i = 0; i < allocator.side_count(); ++i) {
      held.emplace_back(static_cast<std::size_t>(allocator.side(i).num_pages()), 0u);
      offload_held.emplace_back(static_cast<std::size_t>(allocator.side(i).num_pages()), 0u);
      load_back_held.emplace_back(static_cast<std::size_t>(allocator.side(i).num_pages()), 0u);
    }
    if (host) {
      host_rows.resize(host->side_count());
      host_held.resize(host->side_count());
    }
    // SPEC 11: the state sub-pool's slots, with their readers' holds after the token sides'.
    if (derived.geometry.state) {
      state.emplace(*derived.geometry.state, config.mode);
      held.emplace_back(static_cast<std::size_t>(derived.geometry.state->num_pages), 0u);
    }
  }

  PoolConfig config;
  PoolDerived derived;
  PageAllocator allocator;
  std::int64_t page_size;
  std::optional<PoolBytes> bytes;  // nullopt in tables-only mode
  ContentLedger ledger;            // empty in tables-only mode
  std::map<std::uint32_t, Batch> batches;
  // The last dropped batch: not a batch of the pool (nothing reads its lanes), only the storage
  // the next make_batch fills, so that a batch a step allocates nothing.
  Batch dropped_batch;
  std::map<std::uint32_t, Reader> readers;
  std::vector<std::vector<std::uint32_t>> held;  // per side, per physical page: open readers holding it
  std::map<std::uint32_t, Graph> graphs;
  // Hybrid chains (SPEC 11): the state slots, and what the oracle last wrote in each bound
  // virtual slot (the whole entry at once): request and write number.
  std::optional<StateAllocator> state;
  std::map<std::int64_t, std::pair<std::uint64_t, std::uint64_t>> state_rows;

  // ---- SPEC 8 (model_host.cpp; docs/host_arena.md)
  std::optional<HostArena> host;  // nullopt when the configuration has no host_bytes
  // The content oracle of the host pages, per side: host logical page -> its rows (indexed as a
  // device page's, ContentLedger::row_position), what the correct copies put there.
  std::vector<std::map<std::int64_t, std::vector<WrittenRow>>> host_rows;
  TransferBook transfers;
  // Per side, per physical device page: in-flight offloads reading it, load-backs writing it.
  std::vector<std::vector<std::uint32_t>> offload_held;
  std::vector<std::vector<std::uint32_t>> load_back_held;
  // Per side: host logical page -> in-flight transfers using it.
  std::vector<std::map<std::int64_t, std::uint32_t>> host_held;
  // Virtual pages of in-flight load-backs: not visible until their transfer_wait.
  std::set<std::int64_t> loading;
  // (side, page) whose rows the oracle knows but whose copy has not landed yet: device virtual
  // pages of load-backs, host logical pages of offloads. verify() reads them once it has.
  // (A multiset: two offloads on one stream may fill one host page, one after the other.)
  std::multiset<std::pair<std::size_t, std::int64_t>> device_pending;
  std::multiset<std::pair<std::size_t, std::int64_t>> host_pending;
  // Host byte writes so far (landed copies, compaction moves): a digest without the bytes still
  // sees that a refusal wrote some.
  std::uint64_t host_writes = 0;

  // ---- the storage tier (model_storage.cpp; docs/storage.md): opened at its first operation in
  // a fresh folder (core/page_store.h ScratchPageStore), removed with the pool.
  std::unique_ptr<ScratchPageStore> store;  // null until the first store_pages / load_stored
  // The oracle identities of the rows of each page the store was last given (the model's own
  // bookkeeping, kept beside the store and not in its files: a stored page is what a server
  // stores, its bytes, so that the store's decisions, an unchanged page touched rather than
  // rewritten, follow the bytes alone, as on the GPU, which keeps no identities).
  std::map<StoredPageKey, std::vector<WrittenRow>> stored_rows;

  // The oracle's row families of the token sides (Model::oracle_family), [side][part][layer], each
  // made on first use: its pattern taken once for every row written or checked there.
  std::vector<std::vector<std::vector<std::unique_ptr<OracleRowFamily>>>> oracle_families;
};

}  // namespace kvtwin::sim
