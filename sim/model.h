// The reference model: the oracle every other implementation is compared with. It plays every
// operation of core/op.h against a plain CPU pool (SPEC.md sections 3 to 7 and
// docs/decisions.md) and can check, after any operation, that its own state is consistent.
//
// How it works: apply(op) dispatches to one handler per operation. Every handler validates the
// whole operation first (each refusal is an Error with a message that says what and how to fix
// it) and only then mutates, so a refused operation leaves the state exactly as it was
// (state_digest() before and after is equal). The pool's pieces live in plain units:
//   page_allocator.h  tables, watermarks, holes, the free queue, compaction plans
//   pool_bytes.h      the raw byte buffer, page envelope copies, rows by the byte law
//   content_ledger.h  what the oracle expects in every written row of every bound virtual page
//   translation.h     translate / swa_translate / page tables / index remap
//   write_locs.h      batches, rebind, split, for_layer, mark and duplicate checks
//   attention.h       the reference decode attention
// verify() re-derives every table invariant from scratch and reads every remembered row back
// through translation; it names the first broken invariant.
//
// SPEC 8's host arena and transfers (a pool built with host_bytes) live in model_host.cpp:
//   host_arena.h      the host pages, their compaction and leases
//   transfers.h       transfers in flight, events, the order their copies land in
// the content oracle follows every page through offload, host compaction and load-back, and
// verify() reads the host bytes back too (docs/host_arena.md).
//
// What it does not cover: stored pages below the host arena, traces (traces/), the GPU, real
// threads (threads and streams are simulated). A tables-only pool keeps no bytes: writes, moves,
// transfers and replays are validated and update tables exactly as with bytes, reads are
// refused, and a replay's attention is empty.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/oracle.h"
#include "core/page_store.h"
#include "core/pool_config.h"
#include "core/table_check.h"
#include "sim/content_ledger.h"
#include "sim/host_arena.h"
#include "sim/page_allocator.h"
#include "sim/state_allocator.h"
#include "sim/pool_bytes.h"
#include "sim/write_locs.h"

namespace kvtwin::sim {

class StateDigest;  // sim/model_state.h

// The largest byte buffer the model allocates; larger pools run tables-only.
inline constexpr std::uint64_t kMaxModelPoolBytes = std::uint64_t{4} << 30;
// The most pages one sub-pool may have (its tables are dense vectors).
inline constexpr std::uint64_t kMaxModelPages = std::uint64_t{1} << 24;

// Where one byte of the pool belongs, and what the oracle expects there (for a differential
// checker's report on a mismatching byte).
struct ByteOwner {
  std::size_t sub_pool = 0;
  std::string sub_pool_name;
  std::int64_t physical_token = 0;
  std::int64_t physical_page = 0;
  std::int64_t virtual_page = -1;           // -1: the page is not bound
  std::optional<std::string> part;          // nullopt: the entry's padding
  std::uint32_t layer = 0;                  // inside the sub-pool
  std::uint64_t byte_in_row = 0;
  std::optional<RowIdentity> expected;      // the identity last written to this row, if any
  std::string describe() const;
};

class Model : public Backend {
 public:
  Model();
  ~Model() override;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::string_view name() const override { return "model"; }

  // Plays one operation (core/op.h). An operation before `build` is an error. An allocation that
  // fails (std::bad_alloc, real or injected by allocation_faults.h) is an ErrorKind::environment
  // refusal: a build then leaves the state as it was; any other operation poisons the model, which
  // refuses every later operation with that reason (never answering from a half-changed state).
  OpResult apply(const Op& op) override;

  // The allocator tables of every side, chain order (an error before `build`).
  Result<PoolTables> tables() const override;
  // digest_tables(tables()) kept as operations change the tables: each operation's changed rows
  // (AllocatorSide::changed_virtual, changed_physical) and the free queue's ends re-summed, so a
  // digest costs what the operation changed, not what the pool holds; the state sub-pool of a
  // hybrid chain is summed whole. verify() holds it against digest_tables(tables()).
  Result<std::uint64_t> tables_digest() const override;

  // `length` raw bytes from `offset` (an error in tables-only mode, before `build`, or out of range).
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const override;
  // bytes_digest (core/bytes_digest.h) over the buffer in place, without a copy.
  Result<std::uint64_t> bytes_digest(std::span<const ByteRange> ranges) const override;

  // The byte ranges the last apply() wrote (whole entries of written rows, whole page envelopes
  // of moves), in the order written, adjacent repeats merged; empty for tables-only pools. The
  // runner compares exactly these bytes between two backends after every operation.
  const std::vector<ByteRange>& touched_bytes() const;
  // bytes_digest(touched_bytes()) of the rows the last apply() wrote (summed over them at the
  // first question; from then on each row is digested as it is written, in cache), when that is
  // exactly the digest of those ranges now: every range noted was
  // a row written once, whole 8-byte words at 8-byte offsets, and nothing else was written since
  // (PoolBytes::writes). nullopt otherwise (a page moved, a state slot written, a row written
  // twice): the caller digests the ranges. Ranges that overlap or lie below the reserved floor
  // are the caller's to rule out (it sorts them anyway).
  std::optional<std::uint64_t> touched_digest() const;
  // The whole raw pool buffer, read-only and without a copy (the Python binding hands it out as a
  // numpy view). The same errors as raw_bytes before `build` and in tables-only mode. The span
  // stays valid until the next `build` replaces the pool, or the model is destroyed.
  Result<std::span<const std::uint8_t>> bytes_view() const;

  // Whether a pool has been built.
  bool built() const { return pool_ != nullptr; }
  // Where a pool's storage tier (docs/storage.md) makes its folder: a fresh `kvtwin-store-XXXXXX`
  // under `parent` (empty: the system's temporary folder), removed with the pool. Stored pages never
  // outlive the pool: a replay's answers do not depend on an earlier run. Takes effect at the next
  // store_pages or load_stored that opens the store.
  void set_storage_parent(std::string parent) { storage_parent_ = std::move(parent); }
  // The configuration and everything derived from it (plan, layouts, geometry). Require built().
  const PoolConfig& config() const;
  const PoolDerived& derived() const;

  // Checks every invariant of the state (see model.cpp): v2p and p2v mutual inverses over bound
  // pages, free and bound virtual ids partitioning the id range, eager sides without holes,
  // bands inside their frontiers and not overlapping, the sink never allocated, counters equal
  // to a recount, readers and batches well-formed, and every remembered row reading back,
  // through translation, exactly the oracle's bytes. Names the first broken invariant.
  Status verify() const;

  // The same invariants over what the last operation changed (core/table_check.h's incremental
  // check on the rows it bound, unbound or moved; the reader counts when a reader opened or
  // closed; every remembered row of a page it wrote, forgot or moved, read back against the
  // oracle), plus the O(1) counts that tie the rest together. O(what changed), not O(pool): the
  // runner calls it after every operation and verify() at checkpoints and at the end. After a
  // build it is verify().
  Status verify_changed() const;

  // A digest of everything observable: configuration, tables, queue, holes, batches, readers,
  // graphs, remembered rows and (with_bytes) the raw bytes. Equal before and after a refused
  // operation. Without the bytes it costs what the tables hold, not the pool: a checker then
  // asks touched_bytes() whether the refused operation wrote anything.
  std::uint64_t state_digest(bool with_bytes = true) const;

  // The identity the oracle expects in row (physical token, layer, part) of a sub-pool: the
  // identity last written to that row of the virtual page bound there; nullopt when the page is
  // unbound or the row was never written.
  std::optional<RowIdentity> expected_row(std::size_t sub_pool, std::int64_t physical_token, std::uint32_t layer,
                                          std::size_t part) const;

  // The host arena's tables (SPEC 8): an error before `build` or when the pool has none.
  Result<HostArenaTables> host_tables() const;

  // Which sub-pool, token, page, part and layer a byte offset belongs to (the bound band that
  // holds it first, else the first sub-pool), and what the oracle expects there.
  Result<ByteOwner> locate_byte(std::uint64_t offset) const;

 protected:
  // SPEC 10.22: the state slot a fresh allocation would take is quarantined (it still holds
  // what a reader reads). Virtual so that the self-test can plant a model that reuses it.
  virtual bool state_slot_quarantined(std::int64_t physical_slot) const;
  // SPEC 11's make_room: the order the float's page envelopes are copied in (the plan's, in which
  // every destination is free when written). Virtual so that the self-test can plant a relocation
  // that copies in source order and overwrites a page before it has left.
  virtual std::vector<PagePair> float_copy_order(const std::vector<PagePair>& moves) const { return moves; }

  // SPEC 4.1: survivors and holes, both ascending, paired in order. Virtual so that a test-only
  // subclass can plant a wrong policy and show that the properties catch it.
  virtual std::vector<PagePair> pair_for_compaction(const std::vector<std::int64_t>& survivors,
                                                    const std::vector<std::int64_t>& holes) const;

  // One layer's write (a write op, or every layer of a decode step): validated lane locs, then
  // the rows. A lane whose loc is below the side's first usable page is the sink's (discarded).
  struct LayerWrite {
    std::size_t side = 0;
    std::uint32_t local_layer = 0;
    std::vector<std::int64_t> derived_locs;   // an SWA layer's locs, derived from the full ones
    bool derived = false;                     // locs() are derived_locs, else the given loc
    std::span<const std::int64_t> given_locs;
    std::span<const std::int64_t> tokens;     // per lane: whose rows (borrowed, as WriteLoc)
    // Final per-lane locs in the layer's sub-pool.
    std::span<const std::int64_t> locs() const { return derived ? std::span<const std::int64_t>(derived_locs) : given_locs; }
  };
  // Puts down the rows of a validated write (bytes and ledger) and nothing else. Virtual so that
  // the harness's self-test (traces/backends.cpp) can plant a write door that skips a lane.
  virtual void commit_layer_write(const LayerWrite& w, std::uint64_t write_number);

  // SPEC 8 decisions, virtual so that the harness's self-test (traces/backends.cpp) can plant the
  // bugs of SPEC 10.13, 19, 20 and 21 (docs/host_arena.md):
  //  - moves (eager compaction, flush, move_pages) and host compaction wait for in-flight
  //    transfers (refuse while one holds a page, or any is in flight for the host arena);
  virtual bool compaction_waits_for_transfers() const { return true; }
  //  - a transfer's copy lands after what its wait_event (the producer's event) captured;
  virtual bool transfer_waits_for_producer() const { return true; }
  // The storage tier's fault switches (SPEC 10.15, 10.16; core/page_store.h): none in the model.
  virtual PageStoreFaults page_store_faults() const { return {}; }
  //  - the physical host page a transfer copies for a host logical id, resolved inside the lease
  //    it holds on `thread` (HostArena::resolve);
  virtual std::int64_t transfer_host_page(std::uint32_t thread, std::size_t side, std::int64_t logical);
  //  - the virtual pages an offload of `side` copies: the whole pages the ids cover, bound on
  //    the side (a page partly listed, or an SWA tombstone, skipped whole), ascending. Errors as
  //    on(Offload) documents.
  virtual Result<std::vector<std::int64_t>> offload_selection(std::size_t side, IdUnit unit,
                                                              const std::vector<std::int64_t>& ids) const;

  // Test seams: a test-only subclass corrupts the state through these to show that verify()
  // catches it. Require built(); the byte buffer is empty in tables-only mode.
  std::span<std::uint8_t> bytes_for_test();
  PageAllocator& allocator_for_test();
  // The state sub-pool's allocator of a hybrid chain (SPEC 11). Requires built() and a state.
  StateAllocator& state_for_test();
  // The allocator, read-only (a planted offload selection reads the tables). Requires built().
  const PageAllocator& allocator_view() const;
  // Changes one element of the named piece of state ("v2p", "p2v", "watermark", "holes",
  // "allocated", "free_queue", "held", "ledger", "batch", "reader", "graph", "bytes", and with a
  // host arena "host_tables", "host_rows", "host_bytes", "transfer", "transfer_held") on side
  // `pick % sides` (element `pick % size`); false when that piece is empty in this state, so
  // there is nothing to change. For the property that state_digest() covers what it claims.
  bool perturb_for_test(std::string_view what, std::uint64_t pick);

 private:
  struct Reader {
    std::size_t side = 0;
    std::vector<std::int64_t> pages;  // sorted unique physical pages
  };
  struct Graph {
    Capture shape;
    std::vector<std::int64_t> loc;                 // max_batch lanes
    std::vector<std::vector<std::int64_t>> table;  // max_batch x max_pages
  };
  struct Pool;

  // The kept tables digest (tables_digest()): per token side the rows it last summed, and the sum
  // of their terms. Stale after a build or a test seam: then summed again from the tables.
  struct DigestedSide {
    std::vector<std::int64_t> v2p, p2v;
    std::vector<std::uint8_t> hole;  // 1: the page was a hole
  };
  mutable std::vector<DigestedSide> digested_;
  mutable std::uint64_t digested_rows_ = 0;
  mutable bool digest_stale_ = true;
  void recount_tables_digest() const;
  // After each operation: the rows it changed, re-summed (O(changes)).
  void absorb_table_changes();
  // The state sub-pool's tables (SPEC 11) into `out` (tables() and the digest share it).
  void add_state_tables(PoolTables& out) const;
  Status verify_tables_digest(const PoolTables& tables) const;

  // Handlers, one per operation.
  OpResult on(const BuildPool& op);
  OpResult on(const Alloc& op);
  OpResult on(const AllocMany& op);
  OpResult on(const Free& op);
  OpResult on(const FreeSwa& op);
  OpResult on(const Flush& op);
  OpResult on(const MovePages& op);
  OpResult on(const BeginRead& op);
  OpResult on(const EndRead& op);
  OpResult on(const MakeBatch& op);
  OpResult on(const Rebind& op);
  OpResult on(const Split& op);
  OpResult on(const DropBatch& op);
  OpResult on(const Write& op);
  OpResult on(const Read& op);
  OpResult on(const Translate& op);
  OpResult on(const SwaTranslate& op);
  OpResult on(const PageTable& op);
  OpResult on(const RemapIndices& op);
  OpResult on(const Capture& op);
  OpResult on(const Replay& op);
  OpResult on(const Checkpoint& op);
  OpResult on(const HostAlloc& op);
  OpResult on(const HostFree& op);
  OpResult on(const LeaseAcquire& op);
  OpResult on(const LeaseRelease& op);
  OpResult on(const RecordEvent& op);
  OpResult on(const Offload& op);
  OpResult on(const LoadBack& op);
  OpResult on(const TransferWait& op);
  // The storage tier below the host arena (model_storage.cpp; docs/storage.md).
  OpResult on(const StorePages& op);
  OpResult on(const LoadStored& op);
  Result<PageStore*> page_store(std::string_view op);
  Status check_storage_pages(std::string_view op, std::size_t side, const std::vector<std::int64_t>& host,
                             const std::vector<std::uint64_t>& hashes);
  // The state sub-pool and the float middle (SPEC 11; model_state.cpp's block of model.cpp).
  OpResult on(const StateAlloc& op);
  OpResult on(const StateFree& op);
  OpResult on(const StateWrite& op);
  OpResult on(const StateRead& op);
  OpResult on(const StateSlots& op);
  OpResult alloc_hybrid(std::uint64_t k, const std::vector<std::uint64_t>* split);
  Status check_relocation_readers(const CompactionPlan& relocation) const;
  void copy_relocation(const CompactionPlan& relocation, std::vector<PageMove>& moves);
  Status check_state_moves(const CompactionPlan& plan) const;
  void commit_state_moves(const CompactionPlan& plan, std::vector<PageMove>& moves);
  std::size_t state_side() const;
  void write_state_slot(std::int64_t vslot, std::uint64_t request, std::uint64_t write_number);
  void forget_state_overlapped(std::uint64_t begin, std::uint64_t end);
  Status verify_state() const;
  // verify_state over what the last operation changed: the slots it moved, bound or wrote (their
  // remembered states against the oracle), the quarantine (a few slots), the readers' holds when
  // readers changed.
  Status verify_state_changed() const;
  Status verify_quarantine_held() const;  // SPEC 10.22: every quarantined slot a reader still holds
  Status verify_state_row(std::int64_t vslot, const std::pair<std::uint64_t, std::uint64_t>& row,
                          std::vector<std::uint8_t>& expected) const;

  // Shared steps.
  PairingRule pairing() const;
  Result<std::vector<std::int64_t>> virtual_pages_of(IdUnit unit, const std::vector<std::int64_t>& ids,
                                                     const char* op_name) const;
  Status check_readers(const FreePlan& plan) const;
  Compaction commit_free(const FreePlan& plan);
  Result<std::size_t> side_named(const std::string& name) const;
  std::int64_t sink_end(std::size_t side) const;
  std::int64_t slot_count(std::size_t side) const;

  Result<LayerWrite> plan_layer_write(std::uint32_t model_layer, const WriteLoc& loc) const;
  void write_row(std::size_t side, std::int64_t pt, std::uint32_t layer, std::size_t part, std::int64_t token,
                 std::uint64_t write_number);
  void forget_overlapped_rows(std::size_t written_side, std::uint64_t begin, std::uint64_t end);

  // SPEC 8 (model_host.cpp).
  Result<HostArena*> host_arena(std::string_view op_name);
  Status check_transfer_start(std::string_view op_name, std::uint32_t transfer, std::uint32_t stream,
                              const std::optional<std::uint32_t>& wait_event) const;
  Result<std::vector<std::int64_t>> checked_host_ids(std::string_view op_name, std::size_t side,
                                                     const std::vector<std::int64_t>& ids, bool allow_unloaded) const;
  Status check_host_race(std::string_view op_name, std::size_t side, const std::vector<std::int64_t>& host_ids,
                         bool writes, std::uint32_t stream, const std::vector<std::uint64_t>& waits_for) const;
  Status check_pages_not_in_flight(std::string_view op_name, std::size_t side, const std::vector<std::int64_t>& pages,
                                   bool reading) const;
  std::vector<std::uint64_t> captured_by(const std::optional<std::uint32_t>& wait_event) const;
  // Whether an in-flight transfer (a load-back only, with load_backs_only) holds a physical page;
  // false for a page outside the side (a slot past the last whole page).
  bool transfer_holds_page(std::size_t side, std::int64_t page, bool load_backs_only) const;
  // The in-flight transfer whose copy covers some byte of page `page` of sub-pool `side`, seen in
  // any sub-pool's pages: the pool is one buffer, so a page of one sub-pool (unbound, outside its
  // band) overlaps pages of the other. Reads ask for load-backs only (an offload only reads its
  // pages); writes and moves for any copy. A side a load-back does not load is not covered.
  std::optional<std::uint32_t> transfer_covering_page(std::size_t side, std::int64_t page, bool load_backs_only) const;
  void land(std::uint32_t transfer);
  void land_everything();
  bool device_rows_pending(std::size_t side, std::int64_t vpage) const;
  bool host_rows_pending(std::size_t side, std::int64_t logical) const;
  Status verify_host(bool tables_too) const;
  Status verify_host_page(std::size_t side, std::int64_t logical) const;
  void digest_host(StateDigest& d, bool with_bytes) const;

  OpResult out_of_memory(const Op& op);
  Status verify_tables(const PoolTables& tables) const;
  Status verify_side(std::size_t i) const;
  Status verify_rows() const;
  Status verify_row(std::size_t side, std::int64_t v, const RowSlot& at, const WrittenRow& row) const;
  // The oracle's rows of (token side, layer, part) of this pool (made on first use, kept with it).
  const OracleRowFamily& oracle_family(std::size_t side, std::uint32_t layer, std::size_t part) const;
  Status verify_batches_and_graphs() const;

  // Records bytes the current operation wrote (touched_bytes()); such an op has no
  // touched_digest().
  void note_touched(std::uint64_t offset, std::uint64_t length);
  // The same for a row just written through PoolBytes::row (touched_digest() vouches for it).
  void note_written_row(std::uint64_t offset, std::uint64_t length);
  // Adds a range to touched_; false when it lay inside the last one (written again).
  bool add_touched(std::uint64_t offset, std::uint64_t length);

  std::unique_ptr<Pool> pool_;
  std::string storage_parent_;  // set_storage_parent
  std::vector<ByteRange> touched_;
  // touched_digest(): whether the ranges noted are exactly what was written, PoolBytes::writes()
  // at the last row noted, and, once someone asked for the digest, the sum of the rows noted.
  bool touched_sum_holds_ = false;
  mutable bool touched_digest_asked_ = false;
  std::uint64_t touched_sum_ = 0;
  std::uint64_t touched_sum_writes_ = 0;
  bool built_this_op_ = false;    // the last operation built a pool: verify_changed() checks it all
  bool readers_changed_ = false;  // the last operation opened or closed a reader
  bool host_tables_changed_ = false;  // the last operation changed the host arena's tables or transfers
  std::vector<std::pair<std::size_t, std::int64_t>> host_pages_changed_;  // (side, logical) whose rows or bytes changed
  // Per sub-pool, the last loc found inside its slots and the last found free of duplicate locs
  // (plan_layer_write): both verdicts depend only on the lanes and the pool, so they hold until
  // the pool is rebuilt (cleared on a build).
  mutable RememberedLocs locs_in_range_;
  std::uint64_t batches_epoch_ = 0;  // ops that could change a batch's lanes so far (WriteLoc::Source)
  mutable RememberedLocs duplicate_free_locs_;
  bool state_changed_ = false;    // the last operation changed the state sub-pool (verify_changed checks what it changed)
  std::vector<std::int64_t> state_slots_written_;     // the last operation's state writes (virtual slots)
  std::vector<std::uint64_t> state_requests_changed_;  // the requests the last operation gave or took a slot
  // check_duplicates' scratch (sim/write_locs.h), one per token side: the sides' slot counts
  // differ, and one shared scratch was resized (O(slots)) at every write that changed sides.
  mutable std::array<LocStamps, 2> loc_stamps_;
  // verify_changed's scratch, kept between operations: the check runs after every one and
  // allocated its views and lists anew each time (a third of its cost on a tables-only replay).
  mutable PoolTablesView changed_view_;
  mutable TableChanges changed_tables_;
  mutable std::vector<std::int64_t> changed_pages_;
  std::string poisoned_;  // why every operation is refused (an allocation failed); empty: healthy
};

}  // namespace kvtwin::sim
