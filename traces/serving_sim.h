// The serving simulator: turns a request trace (request_trace.h) into pool operations, the way a
// serving engine's scheduler would drive a unified KV pool, on a simulated clock.
//
// It is a producer of operations: every op goes to an OpSink (the runner, or the runner plus a
// trace writer) and the simulator sees only the results that come back, never a backend's
// internals. One forward step at a time:
//   1. arrivals: every request whose timestamp has passed joins the waiting queue (FIFO);
//   2. admission: the head of the queue is admitted while there is a running slot and its pages
//      fit the pool's free pages plus the prefix cache's evictable pages, keeping a reserve for
//      the running requests' growth; its prompt's cached prefix (hash_ids blocks) is reused from
//      the prefix cache (radix_cache.h), pages are allocated for the rest, evicting cache leaves
//      when the pool answers no_room; with `share_within_step` (the default) the new full blocks
//      enter the prefix cache at once, so a request admitted later in the same step shares the
//      blocks being prefilled;
//   3. prefill: one batch writes every layer's rows of the admitted prompts' uncached tokens;
//      without `share_within_step` their full blocks enter the prefix cache only now, after
//      every admission of the step;
//   4. decode: one token per running request: a page for each request whose last page is full
//      (alloc_many, all or nothing), evicting cache leaves and then retracting the running request
//      with the fewest generated tokens until it fits; the retracted request waits again at the
//      head of the queue and recomputes its prompt and output so far when re-admitted; then one
//      batch writes every layer's row of the new tokens;
//   5. finished requests free their private pages and release their cache path; on models with
//      sliding-window layers, private pages that left every window lose their SWA page
//      (free_swa); in lazy mode the step ends with a flush; every `checkpoint_every` steps a
//      checkpoint asks the runner to compare whole pools.
// The clock advances by a cost model of the step (decode and prefill cost per token, in unscaled
// tokens), or jumps to the next arrival when the server is idle. Token counts are divided by
// the token scale (rounded up); the scale is part of the output. The sliding window is a token
// count too: ceil(window / token scale) scaled tokens, at least 1, so the window covers the same
// share of a request's tokens at any scale (whole pages make the SWA side's share coarser).
// Prefix blocks are the trace's block_tokens (Mooncake's 512 unless the reader was given
// another) divided by the scale.
//
// The host tier (with host_bytes, SPEC 8's host arena; docs/traces.md "The host tier"): a prefix
// block evicted from the device is offloaded to host pages first unless it is there already
// (host_alloc, offload, transfer_wait, then the device free); the write policy says when else a
// block is backed up: write_through as it is filled (after its prefill), write_through_selective
// once it has been hit on the device, write_back only at eviction. Admission matches the device
// cache first, then continues the prompt's blocks on host: a host hit loads back into newly
// allocated device pages (load_back, transfer_wait) that join the device cache, the host copy
// staying. The host keeps its blocks least recently used first (a logical clock: an offload or a
// hit touches); a host_alloc that finds no room frees the oldest blocks (host_free) and tries
// again. A retracted request's private pages are backed up to host (single-sided pools) and loaded
// back on its re-admission instead of recomputed; a backup the host cannot hold is recomputed.
// Every transfer waits at once (transfers are synchronous here: no overlap is modelled).
//
// The storage tier (with storage_bytes too, SPEC 8's last bullet; docs/traces.md "The storage
// tier"): a host block the host evicts is written down first (store_pages, every side, one hash a
// page derived from the block's chain key), unless it went there before; admission continues the
// prompt's blocks past the device path on host or in storage, block by block: the blocks that may
// be stored are read (host_alloc, load_stored) into host pages, and those that come back whole
// join the host tier, which then loads them back to the device as any host hit. The store decides
// what it keeps (its own LRU by page-file bytes): a block it no longer holds misses, and the match
// stops there. An io error of the store (a full disk, a folder that cannot be written) turns the
// tier off for the rest of the run, said in the summary; nothing else changes.
// Hybrid models (SPEC 11, a state sub-pool; docs/traces.md "Hybrid models"): every admitted
// request takes a state slot (state_alloc, evicting cache pages when the pool has no room for
// it; its token cost is part of the admission's fit), its state is written after its prefill and
// at every decode step (state_write), and freed when it finishes or is retracted (state_free; a
// retracted request recomputes its state at re-admission). Prefix reuse needs the state at the
// prefix's end, so the cache keeps a state checkpoint (a state slot of its own) at the deepest
// cached block of each prompt, written after that prompt's prefill, as engines keep one per cached
// prefix; a match reuses the path only up to its deepest checkpointed block, and evicting a block
// frees its checkpoint. A checkpoint evicts other cache leaves for its room; one that still does
// not fit is not made (the prefix stays cached, not reusable). No host tier (a hybrid's state is
// staged apart from the host arena).
// Not modelled: prefix pages
// owned by the cache keep their SWA pages (only a request's private pages are SWA-evicted);
// retraction backups of full + SWA composites (they recompute, as the seeds' engines do).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/op.h"
#include "core/pool_config.h"
#include "core/result.h"
#include "traces/radix_cache.h"
#include "traces/request_trace.h"

namespace kvtwin::traces {

// When the host tier backs up a device prefix block (besides its eviction, which always does).
enum class WritePolicy : std::uint8_t {
  write_through,            // as it is filled: after the prefill that wrote it
  write_through_selective,  // once it has been hit on the device
  write_back,               // only when it is evicted from the device
};
std::string_view write_policy_name(WritePolicy policy);
// "write_through", "write_through_selective", "write_back"; false for another name.
bool parse_write_policy(std::string_view name, WritePolicy& policy);

struct ServingParams {
  std::string model = "llama-3.1-8b";  // catalogue name (or a shape, see `shape`)
  std::optional<ModelShape> shape;     // when set, used instead of the catalogue entry
  std::uint32_t tp = 1;
  std::uint64_t page_size = 16;
  std::uint64_t pool_bytes = 0;
  std::uint64_t host_bytes = 0;  // the host arena's bytes; 0: no host tier
  WritePolicy write_policy = WritePolicy::write_through;
  // The storage tier's capacity in page-file bytes (core/page_store.h), below the host arena;
  // 0: none. Needs host_bytes. Where its folder lives is the backends' (BackendOptions).
  std::uint64_t storage_bytes = 0;
  std::uint64_t token_scale = 1;
  std::uint32_t max_running = 64;
  CompactionMode mode = CompactionMode::eager;
  bool tables_only = false;
  std::uint64_t seed = 1;  // the content oracle's seed
  // The clock: a step costs decode_step_us (when any request decodes) plus prefill_ns_per_token
  // per prefilled token, both for unscaled tokens (so multiplied by the token scale).
  std::uint64_t decode_step_us = 20000;
  std::uint64_t prefill_ns_per_token = 10000;
  // Admission keeps reserve_permille/1000 of the running requests' remaining output in reserve.
  std::uint64_t reserve_permille = 300;
  // Scaled prompt tokens one step may prefill (chunked-prefill budgets of serving engines are of
  // this order); at least one request is admitted per step whatever its size.
  std::uint64_t prefill_budget_tokens = 16384;
  std::uint64_t checkpoint_every = 0;  // steps between checkpoints; 0 = none (the runner checks at the end)
  // Stop admitting after this many requests (0 = all): a slice.
  std::uint64_t max_requests = 0;
  // Shrunk entries (shrink_entries): the pool keeps every sub-pool's page and slot counts, but each
  // entry holds only a few of the model's layers and one KV head per rank, and the pool's bytes
  // shrink with it (shrunk_pool_shape). Tables, pages, compaction and the prefix cache are the full
  // model's; the bytes written, moved and checked are those of the shrunk entry (2 layers of each
  // kind at least, so layer strides still show), a fraction of the full model's. Off: real entries.
  bool shrink_entries = false;
  // Requests admitted in the same step share each other's prefix blocks (the blocks enter the
  // cache at admission, as engines insert a prefix being prefilled); false: a step's requests
  // see only the blocks of earlier steps.
  bool share_within_step = true;
  // Self-test only (tests, never the CLI): a simulator bug to plant, to show that the simulator's
  // own accounting check (check_accounting) fails the run. "keep_dead_window_page": the sliding
  // window never frees the SWA pages of the first running request.
  std::string planted_fault;
};

// Checks the parameters against the trace and the model, and derives the pool configuration.
Result<PoolConfig> serving_pool_config(const ServingParams& params);

// The shrunk pool of `shrink_entries` for a full-size configuration: per layer kind the first
// max(2, share) layers (the kinds keep their proportions: counts divided by their gcd, times the
// least factor that gives every kind 2 layers, never more than the model has), one KV head per
// rank (MLA rows unchanged), and total_bytes scaled by the entries' ratio so that every sub-pool
// keeps its slot and page counts (on a composite whose sides shrink by different ratios, within a
// page). A hybrid model's state (SPEC 11) shrinks by the same ratio, so that its slots and the
// shared byte budget keep their counts too: one state layer with the model's conv blocks and a
// temporal block of fp32 making up the rest (when the ratio gives whole, aligned bytes; else the
// state stays whole and the pool may not build). The shape's name says what was kept.
PoolConfig shrunk_pool_config(const PoolConfig& full);

// The parameters and the result counters, as recorded in a trace header's "origin" and in --json.
nlohmann::json serving_params_json(const ServingParams& params, const RequestTrace& trace);

struct SideOccupancy {
  std::string name;
  std::uint64_t usable_pages = 0;  // the most pages this side can hold (on a composite: with the other side empty)
  std::uint64_t peak_pages = 0;
  std::uint64_t page_bytes = 0;
};

struct ServingSummary {
  std::uint64_t requests_in_trace = 0;
  std::uint64_t requests_served = 0;
  std::uint64_t requests_rejected = 0;  // prompt larger than the whole pool
  std::uint64_t requests_dropped = 0;   // retracted, then too large for the whole pool at re-admission
                                        // (its prompt plus the output generated so far)
  std::uint64_t admissions = 0;         // first admissions and re-admissions
  std::uint64_t retractions = 0;
  std::uint64_t prompt_tokens = 0;   // scaled, over admissions
  std::uint64_t cached_tokens = 0;   // of those, reused from the prefix cache
  std::uint64_t prefill_tokens = 0;  // computed (written) by prefills
  std::uint64_t decode_tokens = 0;
  std::uint64_t steps = 0;
  std::uint64_t simulated_us = 0;
  std::uint64_t ops = 0;
  std::uint64_t compaction_moves = 0;
  std::uint64_t cache_evicted_pages = 0;  // evicted to make room (not the final drain)
  std::uint64_t swa_freed_pages = 0;
  // The host tier (all 0 without host_bytes). Hits per tier: of cached_tokens, the tokens (and
  // pages) found on the device and those loaded back from host; cached_tokens is their sum.
  std::uint64_t device_hit_pages = 0;
  std::uint64_t device_hit_tokens = 0;
  std::uint64_t host_hit_pages = 0;
  std::uint64_t host_hit_tokens = 0;
  std::uint64_t offloads = 0;    // offload transfers (one per side of a block batch or a backup)
  std::uint64_t load_backs = 0;  // load_back transfers
  std::uint64_t pages_offloaded = 0;  // device pages copied to host (every side)
  std::uint64_t pages_loaded_back = 0;
  std::uint64_t bytes_offloaded = 0;
  std::uint64_t bytes_loaded_back = 0;
  std::uint64_t host_evicted_blocks = 0;   // host blocks freed to make room (not the final drain)
  std::uint64_t retractions_backed_up = 0;  // retractions whose private pages went to host
  std::uint64_t retraction_restored_tokens = 0;  // tokens loaded back at re-admission, not recomputed
  // The storage tier (all 0 without storage_bytes). Hits: of cached_tokens, those read back from
  // storage (to host, then to the device); cached_tokens = device + host + storage hits.
  std::uint64_t storage_hit_pages = 0;
  std::uint64_t storage_hit_tokens = 0;
  std::uint64_t stores = 0;              // store_pages operations (one per side of a block written down)
  std::uint64_t storage_reads = 0;       // load_stored operations
  std::uint64_t pages_stored = 0;        // host pages written down (every side)
  std::uint64_t bytes_stored = 0;
  std::uint64_t pages_read_from_storage = 0;  // pages load_stored found (every side)
  std::uint64_t bytes_read_from_storage = 0;
  std::uint64_t storage_missed_pages = 0;  // pages asked for that the store no longer held
  std::string storage_error;  // why the tier went off during the run ("": it did not)
  // Hybrid models (SPEC 11; all 0 otherwise): state slots allocated, the most held at once, state
  // writes, and allocations answered no_room before they fit.
  std::uint64_t state_allocs = 0;
  std::uint64_t peak_state_slots = 0;
  std::uint64_t state_writes = 0;
  std::uint64_t state_no_room = 0;
  std::uint64_t state_checkpoints = 0;       // checkpoints made (a state slot each)
  std::uint64_t peak_state_checkpoints = 0;  // the most held at once
  std::uint64_t host_pages = 0;        // pages the host arena holds on every side at once (0: no host tier)
  std::uint64_t peak_host_pages = 0;   // the most host pages in use at once (the first side's)
  std::uint64_t peak_host_bytes = 0;   // the same in bytes, every side
  // Bytes here are the full model's page bytes, also when the pool's entries are shrunk.
  std::vector<SideOccupancy> sides;
  // A full + SWA composite: both sides take their pages from the same bytes (SPEC 4.3), so their
  // usable pages are not additive. shared_bytes is what they share (the up side's first usable
  // page to the down side's top); peak_shared_bytes the most of it in use at once. 0 otherwise.
  std::uint64_t shared_bytes = 0;
  std::uint64_t peak_shared_bytes = 0;

  double prefix_hit_rate() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens);
  }
};

// The serving simulator's decisions, told to an observer after
// the fact. The observer only reads; the run is the same with or without one.
struct ServingEvent {
  enum class Kind : std::uint8_t {
    admitted,   // `request` was admitted (again, after a retraction); `pages`: the pages allocated for it
    grew,       // `request` got one more page for decode: `pages` = {that page}
    retracted,  // `request` left the pool to wait at the head of the queue
    finished,   // `request` was served and released its private pages
    step_done,  // the end of a forward step (the clock has not advanced yet)
  };
  Kind kind = Kind::step_done;
  std::uint64_t step = 0;
  std::uint64_t now_us = 0;       // the simulated clock
  std::uint64_t request = 0;      // index in the trace (not for step_done)
  std::uint64_t arrival_us = 0;   // the request's arrival (not for step_done)
  std::vector<std::int64_t> pages;  // virtual pages
  std::uint64_t waiting = 0;        // requests in the queue
  std::uint64_t running = 0;        // requests holding pages
  std::uint64_t full_pages_held = 0;  // pages the simulator holds (running requests' and the cache's)
  std::uint64_t swa_pages_held = 0;   // of those, pages still holding their SWA page (composite only)
  const ServingSummary* totals = nullptr;  // the running totals so far
};
class ServingObserver {
 public:
  virtual ~ServingObserver() = default;
  virtual void on_serving_event(const ServingEvent& event) = 0;
};


// Where the simulator's operations go: the pool's answer, or nullopt to stop (a check failed).
using OpSink = std::function<std::optional<OpResult>(const Op&)>;
// Progress: requests finished (served or rejected) and the total.
using ProgressFn = std::function<void(std::uint64_t done, std::uint64_t total)>;

class ServingSimulator {
 public:
  static Result<ServingSimulator> create(const ServingParams& params, const RequestTrace& trace);

  const PoolConfig& pool_config() const { return config_; }

  // Runs the whole trace (build first, drain at the end: the cache is emptied, so a pool that
  // accounts correctly ends empty). Returns an error when the pool refused an operation the
  // simulator considers valid, or the sink stopped the run (then `stopped()` is true).
  Status run(const OpSink& sink, const ProgressFn& progress = {});

  bool stopped() const { return stopped_; }
  // `observer` (not owned, may be null) is told every decision of run().
  void set_observer(ServingObserver* observer) { observer_ = observer; }
  const ServingSummary& summary() const { return summary_; }

 private:
  struct Running {
    std::uint64_t request = 0;             // index into requests_
    std::uint64_t admitted_seq = 0;        // admission order
    std::uint64_t seq_len = 0;             // tokens held (prompt, then decode)
    std::uint64_t generated = 0;           // output tokens produced so far (survives retraction)
    std::uint64_t prompt_len = 0;          // tokens to prefill at this admission
    std::uint64_t cached_len = 0;          // of which reused
    std::uint64_t prefill_end = 0;         // tokens [cached_len, prefill_end) are written; beyond: restored
    std::vector<std::int64_t> pages;       // virtual pages in token order
    std::uint64_t shared_pages = 0;        // pages[0 .. shared_pages) belong to the cache
    std::vector<RadixCache::NodeId> path;  // cache nodes held
    std::uint64_t swa_freed_pages = 0;     // pages[shared .. shared + this) lost their SWA page
  };
  struct Pending {
    std::uint64_t request = 0;
    std::uint64_t generated = 0;  // kept across a retraction
    // A retraction's backup on host (single-sided pools): the request's pages from `backup_from`
    // (page index in token order) to its end, one host page each.
    std::uint64_t backup_from = 0;
    std::vector<std::int64_t> backup;
  };
  // A prefix block on host: its host pages per side, and when it was last touched.
  struct HostBlock {
    std::vector<std::vector<std::int64_t>> pages;  // per side
    std::uint64_t last_used = 0;
    bool from_storage = false;  // read back from storage, not yet hit by an admission
  };

  ServingSimulator() = default;

  // Plays one op; an error result or a stopped sink becomes an Error.
  Status send(const Op& op, std::optional<OpResult>& out);
  Result<Outcome> send_expect_ok(const Op& op);
  // Writes every layer's rows of `tokens` (virtual ids) at write number step_, through a batch
  // `batch` that is declared, rebound and dropped around the writes.
  Status write_all_layers(std::uint32_t batch, std::vector<std::int64_t> tokens);

  std::uint64_t pages_free_with(std::uint64_t full_held, std::uint64_t swa_held) const;
  std::uint64_t free_pages_estimate() const;
  std::uint64_t reserve_pages() const;
  Status admit(std::vector<Running>& admitted);
  Status prefill(std::vector<Running>& admitted);
  // Puts the request's full prompt blocks past its matched path into the prefix cache (its pages
  // are allocated; the prefill writes them this step). A block another request inserted first
  // stops the insertion: the rest stays private.
  void insert_blocks(Running& r);
  Status grow_for_decode();
  Status decode();
  Status finish_and_window();
  Status release(Running& r);
  Status free_pages(std::vector<std::int64_t> pages);
  // Frees least recently used cache leaves; `draining` (the end of the run) is not counted as eviction.
  Status evict(std::uint64_t pages_wanted, bool draining = false);
  Status retract_one();
  // The host tier. host_alloc takes `pages` host pages on every side, freeing the least recently
  // used host blocks while it finds no room; nullopt when the host cannot hold them at all.
  Result<std::optional<std::vector<std::vector<std::int64_t>>>> host_alloc(std::uint64_t pages);
  Status host_free(const std::vector<std::vector<std::int64_t>>& pages);
  // Offloads device pages to host pages (sides[s] gets pages on side s; on a composite every
  // page is bound on both sides) and waits for the copies.
  Status offload(const std::vector<std::int64_t>& device_pages, const std::vector<std::vector<std::int64_t>>& host);
  // Loads host pages back into new device pages and waits; nullopt: no room on the device.
  Result<std::optional<std::vector<std::int64_t>>> load_back(const std::vector<std::vector<std::int64_t>>& host);
  // Backs up cache blocks to host (those not there yet), in order, as far as the host holds them.
  Status back_up_blocks(const std::vector<RadixCache::NodeId>& nodes);
  // Offloads blocks (chain key, device pages) that are not on host, as a batch when it fits.
  Status offload_blocks(const std::vector<std::pair<std::uint64_t, std::vector<std::int64_t>>>& blocks);
  Status evict_host_block();
  void touch_host(std::uint64_t key);
  // The storage tier. store_block writes a host block down (every side); fetch_from_storage reads
  // the blocks `keys` (not on host) into host pages, and those that come back whole join the host
  // tier. An io error of the store turns the tier off (storage_off), the run goes on.
  bool storage_tier() const { return params_.storage_bytes != 0 && summary_.storage_error.empty(); }
  Status store_block(std::uint64_t key);
  Status fetch_from_storage(const std::vector<std::uint64_t>& keys);
  // Sends a storage op: its Ids, or nullopt when the store failed with an io error (the tier is
  // off then).
  Result<std::optional<Ids>> send_storage(const Op& op);
  // The hash a block's page is stored under (per side, each side in its own space).
  static std::uint64_t page_hash(std::uint64_t key, std::uint64_t page);
  // The chain key of a prompt's block b: its hash and every earlier block's, mixed (a host block
  // is keyed by its whole prefix, as the device cache keys a node by its path).
  std::vector<std::uint64_t> block_keys(const Request& req, std::uint64_t blocks) const;
  bool host_tier() const { return params_.host_bytes != 0; }
  // Hybrid models: a state slot for `id` (a request, or a checkpoint) (true), evicting cache
  // pages while the pool has no room; false when it cannot fit. state_free_of frees it; write_states writes the states of
  // `requests` at write number step_.
  bool hybrid() const { return derived_.has_state(); }
  Result<bool> state_alloc(std::uint64_t id);
  Status state_free_of(std::uint64_t request);
  Status write_states(const std::vector<std::uint64_t>& requests);
  void note_host_occupancy();
  void note_occupancy();
  // The simulator's own accounting, checked after every step (a simulator bug is a failure, not
  // a quieter replay): every running request holds exactly the pages its tokens imply, its cached
  // prefix first; once the window has been applied (`window_settled`), no page of a running
  // request that lies wholly behind the sliding window keeps its SWA page; the prefix cache
  // holds exactly its blocks' pages; the pages held add up to the running requests' private pages
  // and the cache's; every arrived request is waiting, running, or settled (a finished one holds
  // nothing). O(running requests) per step. An internal Error naming the step and the request.
  Status check_accounting(bool window_settled) const;
  // tells the observer, when there is one.
  void tell(ServingEvent::Kind kind, std::uint64_t request, std::span<const std::int64_t> pages = {});
  std::uint64_t scaled(std::uint64_t tokens) const;

  ServingParams params_;
  PoolConfig config_;
  PoolDerived derived_;
  const RequestTrace* trace_ = nullptr;
  std::uint64_t request_count_ = 0;
  std::uint64_t block_tokens_ = 0;  // scaled tokens per prefix block; 0 when the trace has no hashes
  std::uint64_t window_tokens_ = 0;  // scaled tokens of the sliding window; 0 when the model has none
  std::optional<RadixCache> cache_;
  const OpSink* sink_ = nullptr;
  ServingObserver* observer_ = nullptr;
  bool stopped_ = false;

  std::uint64_t next_arrival_ = 0;  // index of the next request to arrive
  std::deque<Pending> waiting_;
  std::vector<Running> running_;
  std::uint64_t admitted_seq_ = 0;
  std::uint64_t now_us_ = 0;
  std::uint64_t step_ = 0;
  std::uint64_t full_pages_held_ = 0;  // owner-side pages this simulator holds
  std::uint64_t state_slots_held_ = 0;  // hybrid models: the running requests' state slots
  std::uint64_t state_pages_each_ = 0;  // hybrid models: owner-side pages a state slot's bytes take
  std::map<RadixCache::NodeId, std::uint64_t> checkpoints_;  // hybrid: cache node -> its checkpoint's state id
  static std::uint64_t checkpoint_id(RadixCache::NodeId node) { return (std::uint64_t{1} << 40) + node; }
  // Hybrid: the path up to its deepest checkpointed node.
  void truncate_to_checkpoint(std::vector<RadixCache::NodeId>& path) const;
  Status make_checkpoints(const std::vector<Running>& admitted);
  std::uint64_t swa_pages_held_ = 0;   // SWA pages still bound (composite only)
  bool freed_this_step_ = false;
  ServingSummary summary_;
  // The host tier.
  std::map<std::uint64_t, HostBlock> host_blocks_;                 // by chain key
  std::set<std::pair<std::uint64_t, std::uint64_t>> host_lru_;     // (last_used, key)
  std::map<RadixCache::NodeId, std::uint64_t> node_keys_;          // device cache node -> chain key
  std::set<RadixCache::NodeId> filled_this_step_;                  // nodes inserted this step (write_through)
  std::set<std::uint64_t> host_pinned_;  // host blocks an admission is about to load: not evicted
  // What each page holds, as the simulator means it (first side): (a block's chain key, or a
  // request's private tag; the page's index in it). Set where rows are placed, carried by every
  // offload and load-back exactly as the ops say, and checked at admission: a transfer that puts
  // a page's rows anywhere but where the simulator meant is an accounting error, not a quiet run.
  using PageContent = std::pair<std::uint64_t, std::uint64_t>;
  std::map<std::int64_t, PageContent> device_content_;
  std::map<std::int64_t, PageContent> host_content_;
  PageContent private_content(std::uint64_t request, std::uint64_t page_index) const;
  Status check_content(const Running& r, const std::vector<std::uint64_t>& keys) const;
  std::uint64_t host_clock_ = 0;
  // Blocks written down to storage by chain key (the store may have evicted some since: a read
  // says), and what each stored page holds, by page hash (first side).
  std::set<std::uint64_t> stored_blocks_;
  std::map<std::uint64_t, PageContent> stored_content_;
  std::uint64_t host_pages_held_ = 0;  // per side (every side holds as many)
  std::uint64_t host_block_pages_ = 0;  // of those, the host blocks' (the rest: retraction backups)
  std::uint32_t next_transfer_ = 1;
  // Page bytes per side of the full model's entries (the bytes the summary reports, also when
  // the pool's entries are shrunk).
  std::vector<std::uint64_t> reported_page_bytes_;
};

nlohmann::json summary_json(const ServingSummary& summary);

}  // namespace kvtwin::traces
