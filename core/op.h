// The operation vocabulary: one type for everything a pool can be asked to do, and one type for
// what it answers. The reference model, the CUDA implementation, the RapidCheck commands, the
// trace reader and writer, the serving simulator and the runner all speak it.
//
// An Op is a std::variant of small structs; an Outcome is a std::variant of small result
// structs. Operating errors (a double free, an unmarked loc, a malformed operation) are Error
// values: apply(op) returns Result<Outcome>. "No room" is an Outcome, not an error.
//
// Both convert to and from JSON in trace syntax (docs/traces.md), e.g.
//   {"op":"alloc","tokens":128}                       -> {"pages":[5,6]}
//   {"op":"free","pages":[5]}                         -> {"moves":[["full",6,5]]}
//   {"op":"write","layer":3,"write_number":7,"batch":0} -> {"ok":true}
// and print in that syntax (to_string), so a shrunk counterexample reads as a trace.
//
// Ids: `tokens`/`ids`/`loc` are token ids, `pages` are page ids. Which space (virtual or
// physical) each field is in is stated on the field; SPEC.md sections 4-7 give the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/pool_config.h"
#include "core/result.h"

namespace kvtwin {

// ---------------------------------------------------------------- pool and allocator (SPEC 3, 4)

// Builds (or rebuilds) the pool; every other op needs one first.
struct BuildPool {
  PoolConfig config;
  bool operator==(const BuildPool&) const = default;
};

// Allocates `tokens` tokens (a whole number of pages) on the owner side (and, on a composite,
// the same virtual pages on the SWA side). Outcome: Allocated (virtual pages) or NoRoom.
struct Alloc {
  std::uint64_t tokens = 0;
  bool operator==(const Alloc&) const = default;
};

// Several allocations, all or nothing. Outcome: AllocatedMany or NoRoom.
struct AllocMany {
  std::vector<std::uint64_t> tokens;
  bool operator==(const AllocMany&) const = default;
};

enum class IdUnit : std::uint8_t { tokens, pages };

// Frees virtual ids (tokens: v = sorted unique(t // page_size); pages: as given, sorted unique).
// Outcome: Compaction (the page moves eager compaction made; empty in lazy mode).
struct Free {
  IdUnit unit = IdUnit::pages;
  std::vector<std::int64_t> ids;  // virtual
  bool operator==(const Free&) const = default;
};

// Composite pools: the pages left the sliding window; their SWA pages are freed (tombstoned).
struct FreeSwa {
  IdUnit unit = IdUnit::pages;
  std::vector<std::int64_t> ids;  // virtual
  bool operator==(const FreeSwa&) const = default;
};

// Lazy mode: compacts every side (SPEC 4.2). Outcome: Compaction.
struct Flush {
  bool operator==(const Flush&) const = default;
};

// Copies whole page envelopes src[i] -> dst[i] of one sub-pool. dst pages must be unbound, the
// lists disjoint and free of repeats, and no open reader may hold any of them (SPEC 7).
struct MovePages {
  std::string sub_pool;
  std::vector<std::int64_t> dst;  // physical pages
  std::vector<std::int64_t> src;  // physical pages
  bool operator==(const MovePages&) const = default;
};

// A reader (an attention read, a host transfer) starts holding physical pages of a sub-pool.
struct BeginRead {
  std::uint32_t reader = 0;
  std::string sub_pool;
  std::vector<std::int64_t> pages;  // physical
  bool operator==(const BeginRead&) const = default;
};

struct EndRead {
  std::uint32_t reader = 0;
  bool operator==(const EndRead&) const = default;
};

// ---------------------------------------------------------------- write locs (SPEC 6)

// Declares a forward batch: out_cache_loc starts as `tokens` (virtual ids, unmarked; -1 is a
// padding lane). encoder_tokens, when given, is the encoder_out_cache_loc cross-attention layers
// write through (one per lane; never translated, so never marked).
struct MakeBatch {
  std::uint32_t batch = 0;
  std::vector<std::int64_t> tokens;          // virtual
  std::vector<std::int64_t> encoder_tokens;  // virtual; empty or tokens.size()
  bool operator==(const MakeBatch&) const = default;
};

// rebind(batch): translates out_cache_loc (SPEC 5) and marks it physical; with out_width W the
// loc becomes W lanes, lanes past the batch set to the sink. Outcome: Ids (the new loc).
struct Rebind {
  std::uint32_t batch = 0;
  std::uint64_t out_width = 0;  // 0: the batch's own width
  bool operator==(const Rebind&) const = default;
};

// Two-batch overlap: lanes [0, at) go to `left`, [at, n) to `right`; both copy the parent's
// mark. Outcome: Marks {left, right}.
struct Split {
  std::uint32_t batch = 0;
  std::uint64_t at = 0;
  std::uint32_t left = 0;
  std::uint32_t right = 0;
  bool operator==(const Split&) const = default;
};

struct DropBatch {
  std::uint32_t batch = 0;
  bool operator==(const DropBatch&) const = default;
};

// The write door for one model layer: scatters the oracle rows of every part (K and V, or the
// MLA latent) for write number `write_number`.
//  - batch form: the loc is for_layer(batch, layer): the batch's out_cache_loc with its mark, or
//    for a cross-attention layer the encoder loc (never marked);
//  - explicit form: `loc` with its own `physical` mark, and `tokens`, the virtual tokens whose
//    rows are written (one per lane).
// On a composite, an SWA layer writes at the SWA loc derived from the full physical loc
// (SPEC 4.3). Lanes at the sink are discarded. A unified pool refuses an unmarked loc; two lanes
// with one non-sink loc are refused (`checked` asks the GPU door to detect them itself).
struct Write {
  std::uint32_t layer = 0;  // model layer
  std::uint64_t write_number = 0;
  std::optional<std::uint32_t> batch;
  std::vector<std::int64_t> loc;     // explicit form: full-side token ids
  bool physical = false;             // explicit form: the loc's mark
  std::vector<std::int64_t> tokens;  // explicit form: virtual tokens whose rows these are
  bool checked = false;
  bool operator==(const Write&) const = default;
};

// The read door: gathers one part's rows of one model layer at physical ids of its sub-pool.
// Outcome: Bytes.
struct Read {
  std::uint32_t layer = 0;
  std::string part;                 // "k", "v" or "kv"
  std::vector<std::int64_t> ids;    // physical token ids
  bool operator==(const Read&) const = default;
};

// ---------------------------------------------------------------- translation (SPEC 5)

enum class IndexDtype : std::uint8_t { int32, int64 };
enum class OutPlacement : std::uint8_t { fresh, alias, strided };

// Virtual token ids -> physical token ids through the owner side's v2p. The input buffer is
// int32 or int64, one- or two-dimensional, with an element stride (1-D) or row stride (2-D);
// the output is fresh, aliases the input, or is a strided slice; it must be int64 of the same
// shape. out_width W >= N (1-D) zero-fills lanes N..W-1. Outcome: Ids (logical output values).
struct Translate {
  std::vector<std::int64_t> ids;      // logical values, row-major
  std::vector<std::int64_t> shape;    // [n] or [rows, cols]
  IndexDtype index_dtype = IndexDtype::int64;
  std::int64_t input_stride = 0;      // 0: contiguous
  OutPlacement out = OutPlacement::fresh;
  std::int64_t out_stride = 0;        // strided output; 0: contiguous
  IndexDtype out_dtype = IndexDtype::int64;
  std::uint64_t out_width = 0;        // 1-D only; 0: N
  bool operator==(const Translate&) const = default;
};

// Full physical token ids -> SWA token ids (tombstoned pages go to the sink). Outcome: Ids.
struct SwaTranslate {
  std::vector<std::int64_t> ids;  // full physical
  bool operator==(const SwaTranslate&) const = default;
};

// Block table from a request-to-token table: out[b, c] = max(v2p[rt[req[b], c*ps] // ps], 0)
// for c < ceil(seq_len[b] / ps); everything else keeps `prior`. Outcome: Table.
struct PageTable {
  std::vector<std::vector<std::int64_t>> req_to_token;  // virtual token ids per request slot
  std::vector<std::int64_t> req;                        // request slot of each batch row
  std::vector<std::int64_t> seq_len;                    // tokens of each batch row
  std::vector<std::vector<std::int64_t>> prior;         // the capture-stable table's contents
  bool operator==(const PageTable&) const = default;
};

// In-place remap of token-level indices (virtual -> physical), bounded to [0, kv_indptr[bs]).
// Outcome: Ids (the whole buffer afterwards; the stale tail unchanged).
struct RemapIndices {
  std::vector<std::int64_t> kv_indptr;   // bs + 1 entries
  std::vector<std::int64_t> kv_indices;  // buffer, at least kv_indptr[bs] long
  std::uint64_t bs = 0;
  bool operator==(const RemapIndices&) const = default;
};

// ---------------------------------------------------------------- decode step (SPEC 7)

// Captures a decode step (translate the batch's new tokens, write every layer, page table,
// reference attention at `layer`) at batch size max_batch with capture-stable buffers.
struct Capture {
  std::uint32_t graph = 0;
  std::uint32_t max_batch = 0;
  std::uint32_t max_pages = 0;    // page-table width (pages per request)
  std::uint32_t layer = 0;        // model layer attention reads (not an SWA layer)
  std::uint32_t query_heads = 0;  // multiple of the layer's KV heads per rank
  bool operator==(const Capture&) const = default;
};

// Replays a captured step for requests[b] = the request's virtual tokens in order, its new
// token last (already allocated). Before the replay every lane past the batch is the sink and
// every bound comes from this batch. Outcome: Decode.
struct Replay {
  std::uint32_t graph = 0;
  std::vector<std::vector<std::int64_t>> requests;
  std::uint64_t write_number = 0;
  std::uint64_t query_seed = 0;
  bool operator==(const Replay&) const = default;
};

// A point where the runner compares whole pools (page digests). Backends answer Done. Every
// in-flight transfer's copy lands first (a device synchronizes its copy streams); the transfers
// stay in flight (leases, held pages) until their transfer_wait.
struct Checkpoint {
  bool operator==(const Checkpoint&) const = default;
};

// ---------------------------------------------------------------- host arena and transfers (SPEC 8)
//
// docs/host_arena.md states the rules; in short:
//  - The pool's host arena (PoolConfig::host_bytes) has one side per device sub-pool, in chain
//    order ("full" then "swa", or "mla"); host pages are that side's device page envelope.
//  - Threads are simulated: `thread` names the caller (leases are per thread and reentrant).
//    Streams: 0 is the compute stream, where every other op runs, synchronously; transfers run on
//    copy streams 1 and up, in submission order per stream (FIFO).
//  - A transfer starts (offload, load_back) and completes later (transfer_wait). It resolves its
//    ids at start, inside a lease it takes itself and hands to its finish event; its copy lands at
//    the latest at its transfer_wait, after every earlier transfer of its stream and every transfer
//    its wait_event captured. While it is in flight its device pages may not move, be freed or be
//    written, its host pages may not be freed, and no host compaction runs.

// Allocates host pages, all or nothing: pages[s] on side s (one count per side, chain order).
// Compacts the arena first when the request fits only once packed (refused while a lease is held
// or a transfer is in flight). Outcome: HostAllocated or NoRoom.
struct HostAlloc {
  std::uint32_t thread = 0;
  std::vector<std::uint64_t> pages;  // per side
  bool operator==(const HostAlloc&) const = default;
};

// Frees host logical pages of one side. Outcome: Done.
struct HostFree {
  std::string side;                 // "full", "swa" or "mla"
  std::vector<std::int64_t> pages;  // host logical
  bool operator==(const HostFree&) const = default;
};

// A thread takes (deepens) or lets go of its lease on the host arena's layout (synchronous
// storage access; nesting). Outcome: Done.
struct LeaseAcquire {
  std::uint32_t thread = 0;
  bool operator==(const LeaseAcquire&) const = default;
};
struct LeaseRelease {
  std::uint32_t thread = 0;
  bool operator==(const LeaseRelease&) const = default;
};

// Records event `event` on `stream` (cudaEventRecord): it captures every transfer submitted on
// that stream so far and not yet complete (on stream 0, the synchronous compute stream, nothing).
// Recording an event id again replaces what it captured. Outcome: Done.
struct RecordEvent {
  std::uint32_t event = 0;
  std::uint32_t stream = 0;
  bool operator==(const RecordEvent&) const = default;
};

// Starts copying device pages of one side to host pages (device -> host). The selection: the
// whole pages the ids cover (tokens: a page counts only when every one of its tokens is listed)
// that are bound on the side; a page partly listed, or tombstoned on the SWA side, is skipped as
// a whole page. `host` names one host logical page of the same side per selected page, in
// ascending virtual page order. Outcome: TransferStarted (the selected virtual pages).
struct Offload {
  std::uint32_t transfer = 0;              // a new transfer id
  std::uint32_t thread = 0;
  std::uint32_t stream = 1;                // a copy stream, >= 1
  std::optional<std::uint32_t> wait_event; // the producer's event, waited on before ids resolve
  std::string side;                        // "full", "swa" or "mla"
  IdUnit unit = IdUnit::pages;
  std::vector<std::int64_t> ids;           // virtual
  std::vector<std::int64_t> host;          // host logical, one per selected page
  bool operator==(const Offload&) const = default;
};

// Starts copying host pages to newly allocated device pages (host -> device): allocates
// k = host[0].size() virtual pages as alloc does (on a composite the same virtual pages on the SWA
// side), and copies host[s][i] into side s of virtual page i; host[1] (composite) is empty or has
// k entries, -1 where that page's SWA half is bound but not loaded. The pages are visible (free,
// write, read, replay, offload) only after the transfer's wait. Outcome: TransferStarted (the new
// virtual pages) or NoRoom (nothing changed).
struct LoadBack {
  std::uint32_t transfer = 0;
  std::uint32_t thread = 0;
  std::uint32_t stream = 1;
  std::optional<std::uint32_t> wait_event;
  std::vector<std::vector<std::int64_t>> host;  // per side, host logical
  bool operator==(const LoadBack&) const = default;
};

// Waits for a transfer's finish event: its copy has landed, its lease is released, its pages are
// let go (a load-back's become visible). Outcome: Done.
struct TransferWait {
  std::uint32_t transfer = 0;
  bool operator==(const TransferWait&) const = default;
};

// ---------------------------------------------------------------- the storage tier (SPEC 8)
// docs/storage.md: one page store a pool (PoolConfig::storage_bytes), below the host arena. Both
// operations are synchronous storage access: they run under `thread`'s lease (taken and let go
// inside), on host pages no transfer in flight writes.

// Stores the last `page_count` of the host pages `host` of one side (a chunk's trailing pages; a
// count of 0 stores none, SPEC 10.15) under the pool's storage space and the pages' hashes (one a
// host page). `layout` "" stores as this pool does; "page_major" as an older page-major build
// would (its byte order and format tag), "untagged" as a pool without a format tag would (its
// space is the model name alone): the migration reproducers of SPEC 10.16. Outcome: Ids (the
// positions in `host` of the pages stored, ascending).
struct StorePages {
  std::uint32_t thread = 0;
  std::string side;                   // "full", "swa" or "mla"
  std::vector<std::int64_t> host;     // host logical
  std::vector<std::uint64_t> hashes;  // the pages' hashes, one a host page
  std::uint64_t page_count = 0;
  std::string layout;                 // "", "page_major" or "untagged"
  bool operator==(const StorePages&) const = default;
};

// Reads the pages stored under `hashes` (the pool's space) into the host pages `host`, one a hash;
// a miss leaves its host page as it was. Outcome: Ids (1 a hit, 0 a miss, one a page).
struct LoadStored {
  std::uint32_t thread = 0;
  std::string side;
  std::vector<std::int64_t> host;
  std::vector<std::uint64_t> hashes;
  bool operator==(const LoadStored&) const = default;
};

// ---------------------------------------------------------------- the state sub-pool (SPEC 11)
// Hybrid chains only. One slot per request (page size 1); the request table maps a request to
// its virtual state slot, kernels take physical slots (state_slots).

// Gives `request` a fresh state slot (not zeroed). Outcome: Allocated {pages: [virtual slot],
// moves: the float's relocation when the slot needed its bytes} or NoRoom (also while the slot it
// would take still holds what a reader reads, SPEC 10.22).
struct StateAlloc {
  std::uint64_t request = 0;
  bool operator==(const StateAlloc&) const = default;
};

// Frees the request's slot. Outcome: Compaction (eager: the slot moves of SPEC 4.1 with page
// size 1; lazy: none).
struct StateFree {
  std::uint64_t request = 0;
  bool operator==(const StateFree&) const = default;
};

// Writes the request's whole state (every block of every state layer) with the oracle's bytes
// for `write_number`, at its physical slot. Outcome: Done.
struct StateWrite {
  std::uint64_t request = 0;
  std::uint64_t write_number = 0;
  bool operator==(const StateWrite&) const = default;
};

// Gathers one block of one state layer at physical slots (slot 0 and the sink's slots read as
// zeros). Outcome: Bytes.
struct StateRead {
  std::vector<std::int64_t> slots;  // physical
  std::string block;                // "conv_0", ..., "temporal"
  std::uint32_t layer = 0;          // state layer
  bool operator==(const StateRead&) const = default;
};

// The physical slot of each request (0, the sink, for a request without one). Outcome: Ids.
struct StateSlots {
  std::vector<std::uint64_t> requests;
  bool operator==(const StateSlots&) const = default;
};

using Op = std::variant<BuildPool, Alloc, AllocMany, Free, FreeSwa, Flush, MovePages, BeginRead, EndRead, MakeBatch,
                        Rebind, Split, DropBatch, Write, Read, Translate, SwaTranslate, PageTable, RemapIndices,
                        Capture, Replay, Checkpoint, HostAlloc, HostFree, LeaseAcquire, LeaseRelease, RecordEvent,
                        Offload, LoadBack, TransferWait, StorePages, LoadStored,
                        // the state sub-pool (SPEC 11)
                        StateAlloc, StateFree, StateWrite, StateRead, StateSlots>;

// Whether an op belongs to the host arena, its transfers or the storage tier below it (backends
// without one refuse them).
bool is_host_op(const Op& op);

// The trace name of an op ("alloc", "free_swa", ...).
std::string_view op_name(const Op& op);

// ---------------------------------------------------------------- outcomes

struct Done {
  bool operator==(const Done&) const = default;
};
struct NoRoom {
  bool operator==(const NoRoom&) const = default;
};
struct PageMove {
  std::string sub_pool;
  std::int64_t src = 0;  // physical page
  std::int64_t dst = 0;
  bool operator==(const PageMove&) const = default;
};
struct Allocated {
  std::vector<std::int64_t> pages;  // virtual, in binding order
  // Hybrid chains (SPEC 11): the float's relocation (make_room) this allocation made first.
  std::vector<PageMove> moves = {};
  bool operator==(const Allocated&) const = default;
};
struct AllocatedMany {
  std::vector<std::vector<std::int64_t>> pages;
  bool operator==(const AllocatedMany&) const = default;
};
struct Compaction {
  std::vector<PageMove> moves;  // in the order they were made
  bool operator==(const Compaction&) const = default;
};

struct Ids {
  std::vector<std::int64_t> values;
  bool operator==(const Ids&) const = default;
};
struct Table {
  std::vector<std::vector<std::int64_t>> rows;
  bool operator==(const Table&) const = default;
};
// Bytes compare by size and digest (a trace stores only those).
struct Bytes {
  std::vector<std::uint8_t> bytes;  // may be empty when read from a trace
  std::uint64_t size = 0;
  std::uint64_t digest = 0;
  static Bytes of(std::vector<std::uint8_t> data);
  bool operator==(const Bytes& o) const { return size == o.size && digest == o.digest; }
};
struct Marks {
  bool left_physical = false;
  bool right_physical = false;
  bool operator==(const Marks&) const = default;
};
struct Decode {
  std::vector<std::int64_t> loc;                 // the capture-stable loc buffer (max_batch lanes)
  std::vector<std::vector<std::int64_t>> table;  // the capture-stable page table (max_batch rows)
  Bytes attention;                               // fp32 [batch, query_heads, v_head_dim]
  bool operator==(const Decode&) const = default;
};

// A fitting host_alloc: per side, the logical ids taken (ascending) and the physical host page
// each was bound to; `moves` the compaction's page moves (side name, src, dst physical host
// pages) in the order they ran, empty when it did not compact.
struct HostAllocated {
  std::vector<std::vector<std::int64_t>> logical;
  std::vector<std::vector<std::int64_t>> physical;
  std::vector<PageMove> moves;
  bool operator==(const HostAllocated&) const = default;
};
// A transfer that started: its id and its device virtual pages (an offload's selection, a
// load-back's new pages), ascending for an offload, in binding order for a load-back.
struct TransferStarted {
  std::uint32_t transfer = 0;
  std::vector<std::int64_t> pages;
  bool operator==(const TransferStarted&) const = default;
};

using Outcome = std::variant<Done, NoRoom, Allocated, AllocatedMany, Compaction, Ids, Table, Bytes, Marks, Decode,
                             HostAllocated, TransferStarted>;
using OpResult = Result<Outcome>;

// Equality of results: same outcome, or errors of the same kind and reason code (messages may
// differ; core/reasons.h).
bool same_result(const OpResult& a, const OpResult& b);

// Whether `actual` is what a trace line's expectation says: same_result, except that an expected
// error without a reason code (traces written before codes existed) matches any reason.
bool meets_expectation(const OpResult& actual, const OpResult& expected);

// ---------------------------------------------------------------- JSON (trace syntax)

nlohmann::json op_to_json(const Op& op);
// `where` prefixes errors ("trace.jsonl:7"); unknown ops and fields are errors.
Result<Op> op_from_json(const nlohmann::json& j, std::string_view where);

nlohmann::json result_to_json(const OpResult& r);
Result<OpResult> result_from_json(const nlohmann::json& j, std::string_view where);

// One-line trace syntax.
std::string to_string(const Op& op);
std::string to_string(const OpResult& r);

}  // namespace kvtwin
