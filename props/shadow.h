// The shadow: an independent, abstract model of a pool's tables that predicts what every
// operation must answer. The stateful properties compare the reference model with it after
// every command, and generators read it to produce mostly valid operations (ids of live
// allocations, existing batches, open readers).
//
// How it works: written apart from sim/ and in another style, from SPEC.md and
// docs/decisions.md directly. A side is a pair of maps (virtual <-> physical) and a set of
// holes; its occupied band is not tracked but derived from its size (bound + holes) and its
// end, and compaction is stated as "the band shrinks by K at its inner end: the still-bound
// pages past the new end move, ascending, onto the freed pages inside it, ascending". Batches,
// readers and graphs are plain records. apply(op) validates in the model's documented order,
// returns the expected result, and takes the step.
//
// Content: the shadow also remembers, per bound virtual page, slot, layer and part of each side,
// which write last put a row there (the source token and the write number), and from that and
// the content oracle's row function (core/oracle.h) predicts the exact bytes of every row a read
// returns that holds data, and the exact attention of a decode step whose rows are all known
// (its own transcription of the reference attention's formulas). Rows that hold no data (the
// sink, unbound pages, rows never written since their page was bound) are not predicted: a read
// of them is checked by size only, and a decode step over one by size only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "core/result.h"
#include "props/shadow_hybrid.h"

namespace kvtwin::props {

// The rows of a read the shadow can predict: row i of the answer is bytes[i*row_bytes ..] where
// known[i]; other rows are checked by size only.
struct PredictedRows {
  std::uint64_t row_bytes = 0;
  std::vector<std::uint8_t> bytes;
  std::vector<bool> known;
};

// What an operation must answer. Errors compare by kind. A read compares its predicted rows
// exactly (`rows`) and the rest by size; a decode step's attention compares exactly when every
// row it reads is known, else by size (`bytes_by_size`).
struct Expectation {
  OpResult result = OpResult(Outcome(Done{}));
  bool bytes_by_size = false;
  std::optional<PredictedRows> rows;
  bool predicted = true;  // false: the shadow does not predict this operation (any answer passes)
};

// nullopt when `actual` is what `expected` says; otherwise what differs, in words.
std::optional<std::string> mismatch(const Expectation& expected, const OpResult& actual);

struct ShadowSide {
  std::string name;
  bool grows_up = true;
  std::int64_t min_page = 1;
  std::int64_t num_pages = 0;
  std::uint64_t page_bytes = 0;
  std::map<std::int64_t, std::int64_t> v2p;  // bound virtual page -> physical page
  std::map<std::int64_t, std::int64_t> p2v;
  std::set<std::int64_t> holes;

  std::int64_t band_size() const { return static_cast<std::int64_t>(v2p.size() + holes.size()); }
  std::int64_t band_begin() const { return grows_up ? min_page : num_pages - band_size(); }
  std::int64_t band_end() const { return grows_up ? min_page + band_size() : num_pages; }
  std::int64_t physical(std::int64_t vpage) const {
    auto it = v2p.find(vpage);
    return it == v2p.end() ? -1 : it->second;
  }
};

struct ShadowBatch {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> loc;
  bool physical = false;
  std::vector<std::int64_t> encoder;
};

struct ShadowReader {
  std::size_t side = 0;
  std::set<std::int64_t> pages;
};

struct ShadowGraph {
  Capture shape;
  std::vector<std::int64_t> loc;
  std::vector<std::vector<std::int64_t>> table;
};

// SPEC 8, as the shadow sees it (props/shadow_host.cpp): one side of the host arena. Its band is
// derived: live pages plus holes, against its end (up: from page 0; down: from page_num - 1).
struct ShadowHostSide {
  std::string name;
  bool grows_up = true;
  std::uint64_t page_bytes = 0;
  std::map<std::int64_t, std::int64_t> l2p;  // logical -> physical host page
  std::map<std::int64_t, std::int64_t> p2l;
  std::set<std::int64_t> holes;
  std::int64_t band_size() const { return static_cast<std::int64_t>(l2p.size() + holes.size()); }
};

struct ShadowCopy {
  std::size_t side = 0;
  std::int64_t vpage = 0;
  std::int64_t device_page = 0;  // physical
  std::int64_t host = -1;        // host logical; -1: a load-back's SWA half not loaded
};

struct ShadowTransfer {
  bool offload = true;
  std::uint32_t thread = 0;
  std::uint32_t stream = 1;
  std::uint64_t sequence = 0;
  std::vector<std::uint64_t> after;  // sequences it lands after, closed at its start (sim/transfers.h)
  std::vector<ShadowCopy> copies;
  std::vector<std::int64_t> pages;   // device virtual
};

class PoolShadow {
 public:
  // The pool of a configuration that builds (an invariant failure otherwise).
  explicit PoolShadow(const PoolConfig& config);

  // Predicts what `op` must answer and takes the step (nothing changes on an error).
  Expectation apply(const Op& op);

  // The tables in the Backend's form, to compare with a backend's tables() exactly.
  PoolTables tables() const;

  // A hybrid chain (SPEC 11): its allocation, frees, state operations, readers and tables are
  // predicted by props/shadow_hybrid.h; the rest is not predicted (Expectation::predicted false).
  bool hybrid() const { return hybrid_; }
  // On a hybrid chain: what the reference answered, learnt (live allocations, state requests,
  // batches, readers) so that generators still name live things (the hybrid shadow predicts).
  void learn(const Op& op, const OpResult& result);
  const std::set<std::uint64_t>& state_requests() const { return state_requests_; }

  // ---- what generators read
  const PoolConfig& config() const { return config_; }
  const PoolDerived& derived() const { return derived_; }
  std::int64_t page_size() const { return page_size_; }
  std::int64_t num_virtual() const { return sides_.front().num_pages; }
  bool is_composite() const { return sides_.size() == 2; }
  const std::vector<ShadowSide>& sides() const { return sides_; }
  const std::deque<std::int64_t>& free_queue() const { return free_queue_; }
  // Live allocations in the order they were made: each the virtual pages still bound of one
  // alloc (or one alloc_many request), in binding order.
  const std::vector<std::vector<std::int64_t>>& allocations() const { return allocations_; }
  const std::map<std::uint32_t, ShadowBatch>& batches() const { return batches_; }
  const std::map<std::uint32_t, ShadowReader>& readers() const { return readers_; }
  const std::map<std::uint32_t, ShadowGraph>& graphs() const { return graphs_; }
  // SPEC 8: the host arena (empty without host_bytes), leases, transfers in flight, events.
  bool has_host() const { return !host_sides_.empty(); }
  bool has_storage() const { return storage_; }  // the pool has a storage tier (storage_bytes)
  std::int64_t host_page_num() const { return host_page_num_; }
  const std::vector<ShadowHostSide>& host_sides() const { return host_sides_; }
  const std::map<std::uint32_t, std::uint64_t>& leases() const { return leases_; }
  const std::map<std::uint32_t, ShadowTransfer>& transfers() const { return transfers_; }
  const std::map<std::uint32_t, std::vector<std::uint64_t>>& events() const { return events_; }
  // Whether a host page (side, logical) has rows the shadow knows (an offload put them there).
  bool host_page_has_rows(std::size_t side, std::int64_t logical) const;
  // Whether the shadow knows rows of a device virtual page (a write put them there).
  bool page_has_rows(std::size_t side, std::int64_t vpage) const;
  // Whether an in-flight transfer uses a host page.
  bool host_page_in_use(std::size_t side, std::int64_t logical) const;
  // Whether a virtual page is being loaded back.
  bool loading(std::int64_t vpage) const;
  // The sequences a transfer submitted now on `stream` waiting for `waits` lands after: the
  // stream's transfers in flight and what each lands after, and `waits` (closed when recorded).
  std::vector<std::uint64_t> lands_after(std::uint32_t stream, const std::vector<std::uint64_t>& waits) const;
  // The whole pages an offload of `side` selects from `ids` (the documented selection), or the
  // error it must be refused with.
  Result<std::vector<std::int64_t>> offload_pages(std::size_t side, IdUnit unit, const std::vector<std::int64_t>& ids) const;

  // SPEC 5 translate of a virtual token through the owner's table.
  std::int64_t translate(std::int64_t token) const;
  // SPEC 4.3 SWA id of a full physical token id.
  std::int64_t swa_of(std::int64_t full_token) const;

 private:
  Expectation on(const BuildPool& op);
  Expectation on(const Alloc& op);
  Expectation on(const AllocMany& op);
  Expectation on(const Free& op);
  Expectation on(const FreeSwa& op);
  Expectation on(const Flush& op);
  Expectation on(const MovePages& op);
  Expectation on(const BeginRead& op);
  Expectation on(const EndRead& op);
  Expectation on(const MakeBatch& op);
  Expectation on(const Rebind& op);
  Expectation on(const Split& op);
  Expectation on(const DropBatch& op);
  Expectation on(const Write& op);
  Expectation on(const Read& op);
  Expectation on(const Translate& op);
  Expectation on(const SwaTranslate& op);
  Expectation on(const PageTable& op);
  Expectation on(const RemapIndices& op);
  Expectation on(const Capture& op);
  Expectation on(const Replay& op);
  Expectation on(const Checkpoint& op);
  Expectation on(const HostAlloc& op);
  Expectation on(const HostFree& op);
  Expectation on(const LeaseAcquire& op);
  Expectation on(const LeaseRelease& op);
  Expectation on(const RecordEvent& op);
  Expectation on(const Offload& op);
  Expectation on(const LoadBack& op);
  Expectation on(const TransferWait& op);
  // The storage tier (docs/storage.md): not predicted yet (any answer passes; no table changes).
  Expectation on(const StorePages& op);
  Expectation on(const LoadStored& op);
  // The state sub-pool's operations (SPEC 11): on a token chain they are refused.
  Expectation on(const StateAlloc& op);
  Expectation on(const StateFree& op);
  Expectation on(const StateWrite& op);
  Expectation on(const StateRead& op);
  Expectation on(const StateSlots& op);

  struct SideMoves {
    std::size_t side = 0;
    std::set<std::int64_t> freed_virtual;
    std::set<std::int64_t> freed_physical;
    std::vector<std::pair<std::int64_t, std::int64_t>> moves;  // (src, dst)
    bool compact = false;
  };
  // SPEC 8 helpers (props/shadow_host.cpp).
  bool transfer_holds(std::size_t side, std::int64_t physical, bool load_backs_only) const;
  // Whether a copy in flight (one that copies: host >= 0) covers a byte of page `physical` of
  // `side`, in any side's pages (sim/model.h transfer_covering_page), or transfer_holds.
  bool transfer_touches(std::size_t side, std::int64_t physical, bool load_backs_only) const;
  std::optional<Error> transfer_start_error(std::uint32_t transfer, std::uint32_t stream,
                                            const std::optional<std::uint32_t>& wait_event) const;
  std::optional<Error> host_ids_error(std::size_t side, const std::vector<std::int64_t>& ids, bool allow_unloaded) const;
  bool host_race(std::size_t side, const std::vector<std::int64_t>& ids, bool writes, std::uint32_t stream,
                 const std::vector<std::uint64_t>& waits) const;
  std::vector<std::uint64_t> captured(const std::optional<std::uint32_t>& wait_event) const;
  std::int64_t host_physical(std::size_t side, std::int64_t logical) const;
  void forget_host_allocation_rows(std::size_t side, std::int64_t logical);

  bool fits(std::int64_t pages) const;
  std::vector<std::int64_t> take(std::int64_t pages);
  SideMoves plan(std::size_t side, std::set<std::int64_t> freed_virtual, bool flush) const;
  bool held(std::size_t side, std::int64_t page) const;
  Expectation free_steps(const std::vector<SideMoves>& steps, bool release_ids);
  std::optional<Error> virtual_pages(IdUnit unit, const std::vector<std::int64_t>& ids,
                                         std::set<std::int64_t>& out) const;
  std::optional<Error> check_write(std::uint32_t model_layer, const std::vector<std::int64_t>& loc) const;
  std::int64_t slots(std::size_t side) const;

  // ---- content (see the header comment)
  struct RowKey {
    std::int64_t slot = 0;
    std::uint32_t layer = 0;  // inside the sub-pool
    std::size_t part = 0;
    auto operator<=>(const RowKey&) const = default;
  };
  struct RowSource {
    std::int64_t token = 0;
    std::uint64_t write_number = 0;
  };
  using PageRows = std::map<RowKey, RowSource>;
  // Records the rows of one layer's write at final locs `loc` (of the layer's sub-pool) from
  // `tokens`; lanes at the sink are discarded.
  void record_write(std::uint32_t model_layer, const std::vector<std::int64_t>& loc,
                    const std::vector<std::int64_t>& tokens, std::uint64_t write_number);
  // Forgets every known row of another side whose bytes overlap [begin, end).
  void forget_overlaps(std::size_t written_side, std::uint64_t begin, std::uint64_t end);
  // The row's bytes when known (nullopt otherwise): physical token `pt` of side `side`.
  std::optional<std::vector<std::uint8_t>> known_row(std::size_t side, std::int64_t pt, std::uint32_t layer,
                                                     std::size_t part) const;
  std::uint64_t row_offset(std::size_t side, std::int64_t pt, std::uint32_t layer, std::size_t part) const;
  std::optional<std::vector<std::uint8_t>> predict_attention(const ShadowGraph& g, std::size_t bs,
                                                             const std::vector<std::int64_t>& lengths,
                                                             std::uint64_t query_seed) const;
  std::vector<std::map<std::int64_t, PageRows>> rows_;  // per side: virtual page -> its known rows

  PoolConfig config_;
  PoolDerived derived_;
  std::int64_t page_size_ = 1;
  bool lazy_ = false;
  bool hybrid_ = false;
  std::optional<HybridShadow> hybrid_shadow_;
  std::set<std::uint64_t> state_requests_;  // hybrid: requests holding a state slot (learnt)
  std::vector<ShadowSide> sides_;
  std::deque<std::int64_t> free_queue_;
  std::vector<std::vector<std::int64_t>> allocations_;
  std::map<std::uint32_t, ShadowBatch> batches_;
  std::map<std::uint32_t, ShadowReader> readers_;
  std::map<std::uint32_t, ShadowGraph> graphs_;

  std::int64_t host_page_num_ = 0;
  bool storage_ = false;
  // Per host side: every hash a store_pages of this pool's own layout named among its trailing
  // page_count pages (refused or not). A load of hashes none of which is here must miss all.
  std::vector<std::set<std::uint64_t>> maybe_stored_;
  std::vector<ShadowHostSide> host_sides_;
  std::vector<std::map<std::int64_t, PageRows>> host_rows_;  // per side: host logical page -> its rows
  std::map<std::uint32_t, std::uint64_t> leases_;            // thread -> depth > 0
  std::map<std::uint32_t, ShadowTransfer> transfers_;
  std::map<std::uint32_t, std::vector<std::uint64_t>> events_;
  std::uint64_t next_sequence_ = 1;
};

}  // namespace kvtwin::props
