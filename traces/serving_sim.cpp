// The serving simulator (serving_sim.h).
#include "traces/serving_sim.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <span>

#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/check.h"
#include "core/checked.h"
#include "core/rng.h"

namespace kvtwin::traces {
namespace {

// Steps in a row that neither decode nor admit anything before the simulator calls it a stall.
constexpr std::uint64_t kStallSteps = 1000;

Error bad_params(const std::string& message) { return make_error(ErrorKind::invalid_argument, message); }

}  // namespace

std::string_view write_policy_name(WritePolicy policy) {
  switch (policy) {
    case WritePolicy::write_through: return "write_through";
    case WritePolicy::write_through_selective: return "write_through_selective";
    case WritePolicy::write_back: return "write_back";
  }
  return "?";
}

bool parse_write_policy(std::string_view name, WritePolicy& policy) {
  for (WritePolicy p : {WritePolicy::write_through, WritePolicy::write_through_selective, WritePolicy::write_back})
    if (name == write_policy_name(p)) {
      policy = p;
      return true;
    }
  return false;
}

namespace {
std::uint64_t max_page_bytes(const PoolDerived& d) {
  std::uint64_t m = 0;
  for (const SubPoolGeometry& g : d.geometry.sub_pools) m = std::max(m, g.page_bytes);
  return m;
}
}  // namespace

Result<PoolConfig> serving_pool_config(const ServingParams& p) {
  PoolConfig c;
  if (p.shape) {
    c.shape = *p.shape;
  } else {
    KVTWIN_TRY(c.shape, find_model(p.model));
  }
  for (LayerKind k : c.shape.layers)
    if (k == LayerKind::cross)
      return make_error(ErrorKind::unsupported, "model '" + c.shape.name +
                                                    "' has cross-attention layers; the serving simulator drives "
                                                    "decoder-only models");
  if (p.page_size == 0) return bad_params("page size is 0; use a page size of at least 1 token");
  if (p.token_scale == 0) return bad_params("token scale is 0; use 1 for real token counts, or a larger divisor");
  if (p.max_running == 0) return bad_params("max running requests is 0; allow at least 1");
  if (p.prefill_budget_tokens == 0) return bad_params("the prefill budget is 0 tokens; allow at least 1");
  if (p.pool_bytes == 0) return bad_params("pool bytes is 0; give the pool some bytes (e.g. --pool-bytes 8GiB)");
  c.tp = p.tp;
  c.page_size = p.page_size;
  c.total_bytes = p.pool_bytes;
  c.mode = p.mode;
  c.tables_only = p.tables_only;
  c.seed = p.seed;
  Result<PoolDerived> d = derive_pool(c);
  if (!d.ok()) return d.error().with_context("the pool cannot be built: ");
  // The host tier: SPEC 8's host arena holds host_bytes // (the largest page) pages a side.
  if (p.host_bytes != 0 && p.host_bytes < max_page_bytes(*d))
    return bad_params("a host arena of " + std::to_string(p.host_bytes) + " bytes holds no page of " +
                      std::to_string(max_page_bytes(*d)) + " bytes; give --host-bytes at least one page, or 0 for none");
  c.host_bytes = p.host_bytes;
  if (p.storage_bytes != 0 && p.host_bytes == 0)
    return bad_params("a storage tier of " + std::to_string(p.storage_bytes) +
                      " bytes needs a host tier above it (pages are written down from host and read back into it); "
                      "give --host-bytes too");
  c.storage_bytes = p.storage_bytes;
  if (!p.shrink_entries || p.tables_only) return c;
  PoolConfig shrunk = shrunk_pool_config(c);
  Result<PoolDerived> ds = derive_pool(shrunk);
  if (!ds.ok()) return ds.error().with_context("the pool with shrunk entries cannot be built (use full entries): ");
  // The host keeps its page count as the device does: as many shrunk pages as full ones.
  if (c.host_bytes != 0) shrunk.host_bytes = c.host_bytes / max_page_bytes(*d) * max_page_bytes(*ds);
  // The storage tier keeps about as many pages too (its capacity counts page files, whose payload
  // shrinks with the entries; the headers do not).
  if (c.storage_bytes != 0)
    shrunk.storage_bytes = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(static_cast<unsigned __int128>(c.storage_bytes) * max_page_bytes(*ds) /
                                      max_page_bytes(*d)));
  return shrunk;
}

PoolConfig shrunk_pool_config(const PoolConfig& full) {
  PoolConfig c = full;
  ModelShape& shape = c.shape;
  // Layer counts per kind, and the layers kept: kinds in proportion, 2 of each at least.
  std::map<LayerKind, std::uint64_t> count;
  for (LayerKind k : shape.layers) ++count[k];
  std::uint64_t g = 0;
  for (const auto& [kind, n] : count) g = std::gcd(g, n);
  std::uint64_t smallest = UINT64_MAX;
  for (const auto& [kind, n] : count) smallest = std::min(smallest, n / g);
  const std::uint64_t factor = ceil_div(2, smallest);
  std::map<LayerKind, std::uint64_t> keep;
  for (const auto& [kind, n] : count) keep[kind] = std::min(n, n / g * factor);
  std::vector<LayerKind> layers;
  std::map<LayerKind, std::uint64_t> taken;
  for (LayerKind k : shape.layers)
    if (taken[k] < keep[k]) {
      layers.push_back(k);
      ++taken[k];
    }
  const std::uint64_t full_layers = shape.layers.size();
  shape.layers = std::move(layers);
  if (shape.attention == AttentionKind::mha) {
    shape.num_kv_heads = full.tp;
    if (shape.swa_num_kv_heads != 0) shape.swa_num_kv_heads = full.tp;
  }
  shape.name = full.shape.name + " (entries shrunk: " + std::to_string(shape.layers.size()) + " of " +
               std::to_string(full_layers) + " layers" + (shape.attention == AttentionKind::mha ? ", 1 KV head per rank" : "") +
               ")";
  // The bytes shrink with the owner side's entry: floor(total * E_small / E_full) holds exactly as
  // many whole shrunk entries as the full pool holds full ones (the remainder stays below one).
  const Result<PoolDerived> big = derive_pool(full);
  c.total_bytes = std::uint64_t{1} << 34;  // any size that builds, to learn the shrunk entry
  const Result<PoolDerived> small = derive_pool(c);
  c.total_bytes = full.total_bytes;  // if either fails, the caller's derive_pool names what is wrong
  if (big.ok() && small.ok()) {
    const std::uint64_t e_small = small->layouts[0].entry_bytes, e_big = big->layouts[0].entry_bytes;
    const unsigned __int128 scaled = static_cast<unsigned __int128>(full.total_bytes) * e_small / e_big;
    c.total_bytes = static_cast<std::uint64_t>(scaled);
    if (big->state_layout) {
      // SPEC 11: the state entry shrinks by the token entries' ratio exactly, or not at all.
      const StateEntryLayout& state = *big->state_layout;
      const unsigned __int128 wide = static_cast<unsigned __int128>(state.entry_bytes) * e_small;
      std::uint64_t conv_bytes = 0;  // one layer of every conv block, per rank
      for (const StateBlock& b : state.blocks)
        if (b.name != "temporal") conv_bytes += b.layer_stride_bytes;
      if (wide % e_big == 0) {
        const auto target = static_cast<std::uint64_t>(wide / e_big);
        for (const bool keep_conv : {true, false}) {
          const std::uint64_t conv = keep_conv ? conv_bytes : 0;
          if (target <= conv || (target - conv) % 4 != 0 || conv % 4 != 0) continue;
          StateShape small_state;
          small_state.layers = 1;
          if (keep_conv) small_state.conv = shape.state->conv;
          // The first dimension is divided among the ranks, as the model's is.
          small_state.temporal = StateTensor{{c.tp, static_cast<std::uint32_t>((target - conv) / 4)}, DType::fp32};
          if ((target - conv) / 4 > UINT32_MAX) continue;
          PoolConfig probe = c;
          probe.shape.state = small_state;
          const Result<PoolDerived> d = derive_pool(probe);
          if (!d.ok() || d->state_layout->entry_bytes != target) continue;
          shape.state = small_state;
          shape.name += " (state shrunk to " + std::to_string(target) + " bytes" +
                        (keep_conv ? ": one layer of its conv blocks and an fp32 rest)" : ": an fp32 block)");
          break;
        }
      }
    }
  }
  return c;
}

nlohmann::json serving_params_json(const ServingParams& p, const RequestTrace& trace) {
  nlohmann::json j;
  j["producer"] = "kvtwin serving simulator";
  j["request_trace"] = trace.name;
  j["request_format"] = std::string(format_name(trace.format));
  j["model"] = p.shape ? p.shape->name : p.model;
  j["tp"] = p.tp;
  j["page_size"] = p.page_size;
  j["pool_bytes"] = p.pool_bytes;
  j["host_bytes"] = p.host_bytes;
  j["host_tier"] = p.host_bytes != 0 ? "modelled" : "none";
  if (p.host_bytes != 0) j["write_policy"] = std::string(write_policy_name(p.write_policy));
  j["storage_bytes"] = p.storage_bytes;
  j["storage_tier"] = p.storage_bytes != 0 ? "modelled" : "none";
  j["token_scale"] = p.token_scale;
  j["shrink_entries"] = p.shrink_entries && !p.tables_only;
  if (p.shrink_entries && !p.tables_only) {
    if (Result<PoolConfig> c = serving_pool_config(p); c.ok()) {
      j["pool_model"] = c->shape.name;
      j["pool_total_bytes"] = c->total_bytes;
    }
  }
  j["max_running"] = p.max_running;
  j["mode"] = p.mode == CompactionMode::lazy ? "lazy" : "eager";
  j["tables_only"] = p.tables_only;
  j["decode_step_us"] = p.decode_step_us;
  j["prefill_ns_per_token"] = p.prefill_ns_per_token;
  j["reserve_permille"] = p.reserve_permille;
  j["prefill_budget_tokens"] = p.prefill_budget_tokens;
  j["checkpoint_every"] = p.checkpoint_every;
  j["max_requests"] = p.max_requests;
  j["block_tokens"] = trace.block_tokens;
  j["share_within_step"] = p.share_within_step;
  return j;
}

nlohmann::json summary_json(const ServingSummary& s) {
  nlohmann::json j;
  j["requests_in_trace"] = s.requests_in_trace;
  j["requests_served"] = s.requests_served;
  j["requests_rejected"] = s.requests_rejected;
  j["requests_dropped"] = s.requests_dropped;
  j["admissions"] = s.admissions;
  j["retractions"] = s.retractions;
  j["prompt_tokens"] = s.prompt_tokens;
  j["cached_tokens"] = s.cached_tokens;
  j["prefix_hit_rate"] = s.prefix_hit_rate();
  j["prefill_tokens"] = s.prefill_tokens;
  j["decode_tokens"] = s.decode_tokens;
  j["steps"] = s.steps;
  j["simulated_seconds"] = static_cast<double>(s.simulated_us) / 1e6;
  j["ops"] = s.ops;
  j["compaction_moves"] = s.compaction_moves;
  j["cache_evicted_pages"] = s.cache_evicted_pages;
  j["swa_freed_pages"] = s.swa_freed_pages;
  j["offloads"] = s.offloads;
  j["load_backs"] = s.load_backs;
  j["hits"] = {{"device", {{"pages", s.device_hit_pages}, {"tokens", s.device_hit_tokens}}},
               {"host", {{"pages", s.host_hit_pages}, {"tokens", s.host_hit_tokens}}},
               {"storage", {{"pages", s.storage_hit_pages}, {"tokens", s.storage_hit_tokens}}}};
  j["host"] = {{"pages", s.host_pages},
               {"peak_pages", s.peak_host_pages},
               {"peak_bytes", s.peak_host_bytes},
               {"pages_offloaded", s.pages_offloaded},
               {"pages_loaded_back", s.pages_loaded_back},
               {"bytes_offloaded", s.bytes_offloaded},
               {"bytes_loaded_back", s.bytes_loaded_back},
               {"evicted_blocks", s.host_evicted_blocks},
               {"retractions_backed_up", s.retractions_backed_up},
               {"retraction_restored_tokens", s.retraction_restored_tokens}};
  if (s.state_allocs != 0)
    j["state"] = {{"allocs", s.state_allocs},
                  {"peak_slots", s.peak_state_slots},
                  {"writes", s.state_writes},
                  {"no_room", s.state_no_room},
                  {"checkpoints", s.state_checkpoints},
                  {"peak_checkpoints", s.peak_state_checkpoints}};
  j["storage"] = {{"stores", s.stores},
                  {"reads", s.storage_reads},
                  {"pages_stored", s.pages_stored},
                  {"bytes_stored", s.bytes_stored},
                  {"pages_read", s.pages_read_from_storage},
                  {"bytes_read", s.bytes_read_from_storage},
                  {"missed_pages", s.storage_missed_pages}};
  if (!s.storage_error.empty()) j["storage"]["error"] = s.storage_error;
  nlohmann::json sides = nlohmann::json::array();
  for (const SideOccupancy& o : s.sides)
    sides.push_back({{"name", o.name}, {"usable_pages", o.usable_pages}, {"peak_pages", o.peak_pages}});
  j["sides"] = sides;
  if (s.shared_bytes != 0) j["shared"] = {{"bytes", s.shared_bytes}, {"peak_bytes", s.peak_shared_bytes}};
  return j;
}

Result<ServingSimulator> ServingSimulator::create(const ServingParams& params, const RequestTrace& trace) {
  ServingSimulator sim;
  sim.params_ = params;
  KVTWIN_TRY(sim.config_, serving_pool_config(params));
  KVTWIN_TRY(sim.derived_, derive_pool(sim.config_));
  sim.trace_ = &trace;
  sim.request_count_ = trace.requests.size();
  if (params.max_requests != 0) sim.request_count_ = std::min(sim.request_count_, params.max_requests);
  if (trace.block_tokens != 0) {
    const std::string blocks = std::to_string(trace.block_tokens) + "-token prefix blocks" +
                               (trace.block_tokens_given ? " (--block-tokens " + std::to_string(trace.block_tokens) + ")"
                                                         : std::string());
    if (trace.block_tokens % params.token_scale != 0)
      return bad_params("token scale " + std::to_string(params.token_scale) + " does not divide the trace's " +
                        blocks + "; use a token scale that divides " + std::to_string(trace.block_tokens));
    sim.block_tokens_ = trace.block_tokens / params.token_scale;
    if (sim.block_tokens_ % params.page_size != 0)
      return bad_params("a prefix block of " + std::to_string(trace.block_tokens) + " / " +
                        std::to_string(params.token_scale) + " = " + std::to_string(sim.block_tokens_) +
                        " tokens is not a whole number of " + std::to_string(params.page_size) +
                        "-token pages (the trace's " + blocks + "); lower the page size or the token scale");
    sim.cache_.emplace(sim.block_tokens_ / params.page_size);
  }
  if (sim.derived_.has_state()) {
    if (params.host_bytes != 0)
      return bad_params("model '" + sim.config_.shape.name +
                        "' is a hybrid (SPEC 11: a recurrent state per request, staged apart from the host arena); "
                        "the serving simulator's host tier does not model its states yet: run it with --host-bytes 0");
    const SubPoolGeometry& owner = sim.derived_.geometry.sub_pools[0];
    sim.state_pages_each_ = ceil_div(sim.derived_.geometry.state->entry_bytes, owner.page_bytes);
  }
  if (params.storage_bytes != 0) {
    // A block is written down a side at a time, in one batch: each side's pages must fit at once
    // (a page file holds the page's bytes, its rows' identities and a header).
    const std::uint64_t block_pages = sim.cache_ ? sim.cache_->block_pages() : 1;
    const std::uint64_t page_file = (params.tables_only ? 0 : max_page_bytes(sim.derived_)) + 17 * params.page_size + 1024;
    if (params.storage_bytes < block_pages * page_file)
      return bad_params("a storage tier of " + std::to_string(params.storage_bytes) + " bytes cannot hold one " +
                        std::to_string(block_pages) + "-page prefix block (about " +
                        std::to_string(block_pages * page_file) + " bytes of page files); give --storage-bytes more");
  }
  // The window is a token count like the others: divided by the scale, rounded up, at least 1.
  if (const std::uint64_t window = sim.config_.shape.sliding_window_tokens; window != 0)
    sim.window_tokens_ = std::max<std::uint64_t>(1, ceil_div(window, params.token_scale));
  sim.summary_.requests_in_trace = sim.request_count_;
  const std::vector<SubPoolGeometry>& sub_pools = sim.derived_.geometry.sub_pools;
  if (sim.derived_.is_composite()) {
    const std::uint64_t up_frontier = sub_pools[0].min_page_index * sub_pools[0].page_bytes;
    sim.summary_.shared_bytes = sub_pools[1].num_pages * sub_pools[1].page_bytes - up_frontier;
  }
  // The host's pages: on a composite every block takes a page of each side from the same bytes.
  if (sim.config_.host_bytes != 0) {
    std::uint64_t pair_bytes = 0;
    for (const SubPoolGeometry& g : sim.derived_.geometry.sub_pools) pair_bytes += g.page_bytes;
    sim.summary_.host_pages = std::min(sim.config_.host_bytes / max_page_bytes(sim.derived_),
                                       sim.config_.host_bytes / pair_bytes);
  }
  {
    ServingParams full = params;
    full.shrink_entries = false;
    KVTWIN_TRY(PoolConfig full_config, serving_pool_config(full));
    KVTWIN_TRY(PoolDerived full_derived, derive_pool(full_config));
    for (const SubPoolGeometry& g : full_derived.geometry.sub_pools) sim.reported_page_bytes_.push_back(g.page_bytes);
  }
  for (const SubPoolGeometry& g : sub_pools) {
    std::uint64_t usable = g.usable_pages();
    if (sim.summary_.shared_bytes != 0) usable = std::min(usable, sim.summary_.shared_bytes / g.page_bytes);
    sim.summary_.sides.push_back(SideOccupancy{g.name, usable, 0, g.page_bytes});
  }
  return sim;
}

std::uint64_t ServingSimulator::scaled(std::uint64_t tokens) const { return ceil_div(tokens, params_.token_scale); }

Status ServingSimulator::send(const Op& op, std::optional<OpResult>& out) {
  out = (*sink_)(op);
  ++summary_.ops;
  if (!out) {
    stopped_ = true;
    return make_error(ErrorKind::internal, "the run stopped at step " + std::to_string(step_) + " (a check failed)");
  }
  if (out->ok()) {
    if (const auto* c = std::get_if<Compaction>(&out->value())) summary_.compaction_moves += c->moves.size();
  }
  return ok_status();
}

Result<Outcome> ServingSimulator::send_expect_ok(const Op& op) {
  std::optional<OpResult> r;
  KVTWIN_TRY_STATUS(send(op, r));
  if (!r->ok())
    return make_error(ErrorKind::internal,
                      "the pool refused an operation the serving simulator considers valid, at "
                      "step " +
                          std::to_string(step_) + ": " + to_string(op).substr(0, 300) + " -> " + to_string(*r));
  return std::move(*r).value();  // moved: a rebind's answer holds every lane
}

Status ServingSimulator::write_all_layers(std::uint32_t batch, std::vector<std::int64_t> tokens) {
  KVTWIN_TRY_STATUS(send_expect_ok(Op(MakeBatch{batch, std::move(tokens), {}})));
  KVTWIN_TRY_STATUS(send_expect_ok(Op(Rebind{batch, 0})));
  // One op, its layer changed between sends (no op built and torn down a layer).
  Op write{Write{}};
  Write& w = std::get<Write>(write);
  w.write_number = step_;
  w.batch = batch;
  for (std::uint32_t l = 0; l < config_.shape.layers.size(); ++l) {
    w.layer = l;
    KVTWIN_TRY_STATUS(send_expect_ok(write));
  }
  KVTWIN_TRY_STATUS(send_expect_ok(Op(DropBatch{batch})));
  return ok_status();
}

// Pages a new allocation may take, from the geometry and the pages this simulator holds:
// a single sub-pool has its usable pages less those held; a full + SWA composite takes one page
// of each side per allocated page, from the gap between the two frontiers (SPEC 4.3). An
// estimate for admission only (lazy holes are not counted): the pool's answer is the truth.
std::uint64_t ServingSimulator::pages_free_with(std::uint64_t full_held, std::uint64_t swa_held) const {
  const SubPoolGeometry& up = derived_.geometry.sub_pools[0];
  const std::uint64_t r_up = up.usable_pages() - std::min(up.usable_pages(), full_held);
  if (!derived_.is_composite()) return r_up;
  const SubPoolGeometry& down = derived_.geometry.sub_pools[1];
  const std::uint64_t r_down = down.usable_pages() - std::min(down.usable_pages(), swa_held);
  const std::uint64_t up_frontier = (up.min_page_index + full_held) * up.page_bytes;
  const std::uint64_t down_frontier = (down.num_pages - std::min(down.num_pages, swa_held)) * down.page_bytes;
  const std::uint64_t gap = down_frontier > up_frontier ? down_frontier - up_frontier : 0;
  return std::min({gap / (up.page_bytes + down.page_bytes), r_up, r_down});
}

std::uint64_t ServingSimulator::free_pages_estimate() const {
  return pages_free_with(full_pages_held_ + (state_slots_held_ + checkpoints_.size()) * state_pages_each_, swa_pages_held_);
}

std::uint64_t ServingSimulator::reserve_pages() const {
  std::uint64_t remaining = 0;
  for (const Running& r : running_) {
    const std::uint64_t out = scaled(trace_->requests[r.request].output_tokens);
    remaining += out > r.generated ? out - r.generated : 0;
  }
  return ceil_div(remaining * params_.reserve_permille / 1000, params_.page_size);
}

void ServingSimulator::note_occupancy() {
  summary_.sides[0].peak_pages = std::max(summary_.sides[0].peak_pages, full_pages_held_);
  if (summary_.sides.size() > 1) {
    summary_.sides[1].peak_pages = std::max(summary_.sides[1].peak_pages, swa_pages_held_);
    const std::uint64_t in_use =
        full_pages_held_ * summary_.sides[0].page_bytes + swa_pages_held_ * summary_.sides[1].page_bytes;
    summary_.peak_shared_bytes = std::max(summary_.peak_shared_bytes, in_use);
  }
}

void ServingSimulator::tell(ServingEvent::Kind kind, std::uint64_t request, std::span<const std::int64_t> pages) {
  if (observer_ == nullptr) return;
  ServingEvent e;
  e.kind = kind;
  e.step = step_;
  e.now_us = now_us_;
  if (kind != ServingEvent::Kind::step_done) {
    e.request = request;
    e.arrival_us = trace_->requests[request].arrival_us;
  }
  e.pages.assign(pages.begin(), pages.end());  // copied only for an observer
  e.waiting = waiting_.size();
  e.running = running_.size();
  e.full_pages_held = full_pages_held_;
  e.swa_pages_held = swa_pages_held_;
  e.totals = &summary_;
  observer_->on_serving_event(e);
}

Status ServingSimulator::free_pages(std::vector<std::int64_t> pages) {
  if (pages.empty()) return ok_status();
  KVTWIN_TRY_STATUS(send_expect_ok(Op(Free{IdUnit::pages, std::move(pages)})));
  freed_this_step_ = true;
  return ok_status();
}

Status ServingSimulator::evict(std::uint64_t pages_wanted, bool draining) {
  if (!cache_) return ok_status();
  RadixCache::EvictedBlocks evicted;
  cache_->evict_blocks(pages_wanted, evicted);
  const std::uint64_t bp = cache_->block_pages();
  if (host_tier()) {
    // The host tier: a block leaving the device is offloaded first, unless it is on host already
    // (or the run is draining). SPEC 8's order: the copies land, then the device pages are freed.
    // One host_alloc and one offload a side for all of them when the host has the room at once,
    // else block by block as far as it holds them.
    std::vector<std::pair<std::uint64_t, std::vector<std::int64_t>>> wanted;
    std::set<std::uint64_t> keys_seen;
    for (std::size_t i = 0; i < evicted.nodes.size(); ++i) {
      const RadixCache::NodeId node = evicted.nodes[i];
      const std::uint64_t key = node_keys_.at(node);
      node_keys_.erase(node);
      filled_this_step_.erase(node);
      if (!draining && !host_blocks_.contains(key) && keys_seen.insert(key).second) {
        const std::span<const std::int64_t> pages = evicted.pages_of(i, bp);
        wanted.push_back({key, std::vector<std::int64_t>(pages.begin(), pages.end())});
      }
    }
    KVTWIN_TRY_STATUS(offload_blocks(wanted));
  }
  // Hybrid: an evicted block's state checkpoint goes with it.
  if (!checkpoints_.empty())
    for (const RadixCache::NodeId node : evicted.nodes)
      if (auto c = checkpoints_.find(node); c != checkpoints_.end()) {
        KVTWIN_TRY_STATUS(send_expect_ok(Op(StateFree{c->second})));
        checkpoints_.erase(c);
      }
  // The blocks' pages, in eviction order.
  const std::uint64_t n = evicted.pages.size();
  KVTWIN_TRY_STATUS(free_pages(std::move(evicted.pages)));
  // Cache pages are never SWA-evicted: each held a page on both sides of a composite.
  full_pages_held_ -= n;
  if (derived_.is_composite()) swa_pages_held_ -= n;
  if (!draining) summary_.cache_evicted_pages += n;
  return ok_status();
}

Status ServingSimulator::release(Running& r) {
  std::vector<std::int64_t> private_pages(r.pages.begin() + static_cast<std::ptrdiff_t>(r.shared_pages), r.pages.end());
  const std::uint64_t n = private_pages.size();
  KVTWIN_TRY_STATUS(free_pages(std::move(private_pages)));
  full_pages_held_ -= n;
  if (derived_.is_composite()) swa_pages_held_ -= n - r.swa_freed_pages;
  if (cache_) cache_->unlock(r.path);
  r.pages.clear();
  r.path.clear();
  if (hybrid()) KVTWIN_TRY_STATUS(state_free_of(r.request));
  return ok_status();
}

// ---------------------------------------------------------------- hybrid models' states

Result<bool> ServingSimulator::state_alloc(std::uint64_t id) {
  // Bounded: each round allocates or evicts at least one cache page.
  while (true) {
    KVTWIN_TRY(Outcome o, send_expect_ok(Op(StateAlloc{id})));
    if (std::holds_alternative<Allocated>(o)) return true;
    KVTWIN_CHECK(std::holds_alternative<NoRoom>(o), "state_alloc answers a slot or no_room");
    ++summary_.state_no_room;
    if (!cache_ || cache_->evictable_pages() == 0) return false;
    KVTWIN_TRY_STATUS(evict(state_pages_each_));
  }
}

void ServingSimulator::truncate_to_checkpoint(std::vector<RadixCache::NodeId>& path) const {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < path.size(); ++i)
    if (checkpoints_.contains(path[i])) keep = i + 1;
  path.resize(keep);
}

Status ServingSimulator::make_checkpoints(const std::vector<Running>& admitted) {
  if (!cache_) return ok_status();
  for (const Running& r : admitted) {
    // The deepest cached block of the prompt (the request computed the state at every block end
    // of its prompt past its reused prefix). Without room, even after evicting, the prefix stays
    // cached but not reusable.
    const Request& req = trace_->requests[r.request];
    const std::uint64_t full_blocks = req.input_tokens / trace_->block_tokens;
    const std::vector<RadixCache::NodeId> path =
        cache_->match(std::span<const std::int64_t>(req.block_hashes).first(full_blocks), step_);
    if (path.empty() || checkpoints_.contains(path.back())) continue;
    const RadixCache::NodeId node = path.back();
    const std::uint64_t id = checkpoint_id(node);
    // Room for it may come from other cache leaves (the prefix itself is locked meanwhile).
    cache_->lock(path);
    Result<bool> got = state_alloc(id);
    cache_->unlock(path);
    if (!got.ok()) return got.error();
    if (!*got) continue;
    KVTWIN_TRY_STATUS(send_expect_ok(Op(StateWrite{id, step_})));
    ++summary_.state_writes;
    checkpoints_[node] = id;
    ++summary_.state_checkpoints;
    summary_.peak_state_checkpoints = std::max<std::uint64_t>(summary_.peak_state_checkpoints, checkpoints_.size());
  }
  return ok_status();
}

Status ServingSimulator::state_free_of(std::uint64_t request) {
  KVTWIN_TRY_STATUS(send_expect_ok(Op(StateFree{request})));
  KVTWIN_CHECK(state_slots_held_ > 0, "a state slot freed is one held");
  --state_slots_held_;
  return ok_status();
}

Status ServingSimulator::write_states(const std::vector<std::uint64_t>& requests) {
  for (std::uint64_t request : requests) {
    KVTWIN_TRY_STATUS(send_expect_ok(Op(StateWrite{request, step_})));
    ++summary_.state_writes;
  }
  return ok_status();
}

Status ServingSimulator::admit(std::vector<Running>& admitted) {
  const std::uint64_t ps = params_.page_size;
  const std::uint64_t budget = params_.prefill_budget_tokens;
  std::uint64_t prefill_tokens = 0;
  while (!waiting_.empty() && running_.size() + admitted.size() < params_.max_running) {
    const Pending pending = waiting_.front();
    const Request& req = trace_->requests[pending.request];
    const std::uint64_t prompt_len = scaled(req.input_tokens) + pending.generated;
    // The prompt's full blocks may be cached (SPEC 9: prefix reuse from hash_ids): on the device,
    // then (the host tier) on host, continuing the device's path.
    std::vector<RadixCache::NodeId> path;
    std::vector<std::uint64_t> host_hits;  // chain keys of the blocks found on host
    std::uint64_t full_blocks = 0;
    std::vector<std::uint64_t> keys;
    if (cache_) {
      full_blocks = req.input_tokens / trace_->block_tokens;
      path = cache_->match(std::span<const std::int64_t>(req.block_hashes).first(full_blocks), step_);
      if (hybrid()) truncate_to_checkpoint(path);
      if (host_tier()) {
        keys = block_keys(req, full_blocks);
        // The storage tier: the blocks past the device path that are on neither the device nor
        // the host but may be stored are read into host first (the host blocks between them stay).
        if (storage_tier()) {
          std::vector<std::uint64_t> wanted;
          std::vector<std::uint64_t> pinned;
          for (std::uint64_t b = path.size(); b < full_blocks; ++b) {
            if (host_blocks_.contains(keys[b])) {
              if (host_pinned_.insert(keys[b]).second) pinned.push_back(keys[b]);
              continue;
            }
            if (!stored_blocks_.contains(keys[b])) break;
            wanted.push_back(keys[b]);
          }
          if (!wanted.empty()) KVTWIN_TRY_STATUS(fetch_from_storage(wanted));
          for (std::uint64_t k : pinned) host_pinned_.erase(k);
        }
        for (std::uint64_t b = path.size(); b < full_blocks && host_blocks_.contains(keys[b]); ++b)
          host_hits.push_back(keys[b]);
      }
    }
    const std::uint64_t bp = cache_ ? cache_->block_pages() : 0;
    const std::uint64_t device_pages = path.size() * bp;
    const std::uint64_t host_pages = host_hits.size() * bp;
    const std::uint64_t cache_pages = device_pages + host_pages;
    const std::uint64_t cached_len = cache_pages * ps;
    const std::uint64_t total_pages = ceil_div(prompt_len, ps);
    // A retraction's backup restores the pages past the cached prefix that it holds.
    const bool restoring = !pending.backup.empty();
    std::uint64_t restore_from = total_pages;
    if (restoring) {
      KVTWIN_CHECK(pending.backup_from + pending.backup.size() == total_pages,
                   "a retraction's backup ends where the re-admitted prompt ends");
      restore_from = std::max(pending.backup_from, cache_pages);
    }
    const std::uint64_t restore_pages = total_pages - restore_from;
    const std::uint64_t prefill_end = std::min(prompt_len, restore_from * ps);
    const std::uint64_t need_pages = total_pages - device_pages;  // new device pages, all told
    const std::uint64_t alloc_pages = need_pages - host_pages - restore_pages;
    const std::uint64_t out = scaled(req.output_tokens);
    const std::uint64_t own_reserve =
        ceil_div((out > pending.generated ? out - pending.generated : 0) * params_.reserve_permille / 1000, ps);
    auto drop_backup = [&]() -> Status {
      if (!restoring) return ok_status();
      KVTWIN_TRY_STATUS(host_free({pending.backup}));
      waiting_.front().backup.clear();
      return ok_status();
    };

    // A prompt that cannot fit an empty pool (with one decode page) is rejected; a retracted request
    // whose prompt plus output so far has outgrown it is dropped.
    if (total_pages + 1 + (hybrid() ? state_pages_each_ : 0) > pages_free_with(0, 0)) {
      KVTWIN_TRY_STATUS(drop_backup());
      waiting_.pop_front();
      ++(pending.generated != 0 ? summary_.requests_dropped : summary_.requests_rejected);
      continue;
    }
    const bool alone = running_.empty() && admitted.empty();
    if (!alone && prefill_tokens + (prefill_end - cached_len) > budget) break;
    if (cache_) cache_->lock(path);
    const std::uint64_t reserve = alone ? 0 : reserve_pages() + own_reserve;
    const std::uint64_t available = free_pages_estimate() + (cache_ ? cache_->evictable_pages() : 0);
    const std::uint64_t state_pages = hybrid() ? state_pages_each_ : 0;  // a fresh state slot's token cost
    if (need_pages + state_pages + reserve > available) {
      if (cache_) cache_->unlock(path);
      break;
    }
    // The host blocks it will load stay on host while the device makes room (which may offload).
    for (std::uint64_t k : host_hits) host_pinned_.insert(k);
    std::vector<std::int64_t> new_pages;  // every device page this admission takes, in token order
    bool placed = true;
    if (need_pages > 0) {
      const std::uint64_t free_now = free_pages_estimate();
      if (need_pages > free_now) KVTWIN_TRY_STATUS(evict(need_pages - free_now));
    }
    // Host hits: loaded back into new device pages, which join the device cache on the path.
    if (!host_hits.empty()) {
      std::vector<std::vector<std::int64_t>> lists(derived_.geometry.sub_pools.size());
      for (std::uint64_t k : host_hits)
        for (std::size_t side = 0; side < lists.size(); ++side)
          lists[side].insert(lists[side].end(), host_blocks_.at(k).pages[side].begin(), host_blocks_.at(k).pages[side].end());
      std::optional<std::vector<std::int64_t>> loaded;
      while (true) {
        KVTWIN_TRY(loaded, load_back(lists));
        if (loaded || !cache_ || cache_->evictable_pages() == 0) break;
        KVTWIN_TRY_STATUS(evict(host_pages));
      }
      if (!loaded) {
        placed = false;
      } else {
        RadixCache::NodeId parent = path.empty() ? RadixCache::kRoot : path.back();
        for (std::size_t i = 0; i < host_hits.size(); ++i) {
          const std::span<const std::int64_t> pages = std::span<const std::int64_t>(*loaded).subspan(i * bp, bp);
          const std::uint64_t b = path.size();
          const RadixCache::NodeId node = cache_->insert(parent, req.block_hashes[b], pages, step_);
          KVTWIN_CHECK(node != RadixCache::kRoot, "a block found on host is not on the device path it continues");
          node_keys_[node] = keys[b];
          touch_host(keys[b]);
          path.push_back(node);
          parent = node;
        }
        new_pages = *loaded;
        full_pages_held_ += host_pages;
        if (derived_.is_composite()) swa_pages_held_ += host_pages;
      }
    }
    for (std::uint64_t k : host_hits) host_pinned_.erase(k);
    // The pages between the cached prefix and a backup: allocated and prefilled.
    std::vector<std::int64_t> gap;
    if (placed && alloc_pages > 0) {
      while (true) {
        KVTWIN_TRY(Outcome o, send_expect_ok(Op(Alloc{alloc_pages * ps})));
        if (const auto* a = std::get_if<Allocated>(&o)) {
          KVTWIN_CHECK(a->pages.size() == alloc_pages, "alloc answers one page per page asked for");
          gap = a->pages;
          break;
        }
        KVTWIN_CHECK(std::holds_alternative<NoRoom>(o), "alloc answers pages or no_room");
        if (!cache_ || cache_->evictable_pages() == 0) break;
        KVTWIN_TRY_STATUS(evict(alloc_pages));
      }
      if (gap.empty()) placed = false;
      full_pages_held_ += gap.size();
      if (derived_.is_composite()) swa_pages_held_ += gap.size();
    }
    // The backup: the pages past the cached prefix loaded back, the rest of it freed.
    std::vector<std::int64_t> restored;
    if (placed && restoring) {
      const std::uint64_t skip = restore_from - pending.backup_from;
      std::vector<std::int64_t> skipped(pending.backup.begin(), pending.backup.begin() + static_cast<std::ptrdiff_t>(skip));
      std::vector<std::int64_t> kept(pending.backup.begin() + static_cast<std::ptrdiff_t>(skip), pending.backup.end());
      std::optional<std::vector<std::int64_t>> loaded = std::vector<std::int64_t>{};
      if (!kept.empty()) {
        while (true) {
          KVTWIN_TRY(loaded, load_back({kept}));
          if (loaded || !cache_ || cache_->evictable_pages() == 0) break;
          KVTWIN_TRY_STATUS(evict(kept.size()));
        }
      }
      if (!loaded) {
        placed = false;
      } else {
        KVTWIN_CHECK(!derived_.is_composite(), "retraction backups are made for single-sided pools only");
        restored = *loaded;
        full_pages_held_ += restored.size();
        KVTWIN_TRY_STATUS(host_free({pending.backup}));
        waiting_.front().backup.clear();
      }
    }
    // Hybrid models: the request's state slot, once its pages are placed.
    if (placed && hybrid()) {
      KVTWIN_TRY(const bool got, state_alloc(pending.request));
      if (got) {
        ++state_slots_held_;
        ++summary_.state_allocs;
        summary_.peak_state_slots = std::max(summary_.peak_state_slots, state_slots_held_);
      } else {
        placed = false;
      }
    }
    if (!placed) {
      // No room after all: give back what this admission took, as it was.
      std::vector<std::int64_t> taken = new_pages;
      taken.insert(taken.end(), gap.begin(), gap.end());
      if (!host_hits.empty() && new_pages.size() == host_pages) {
        // The loaded blocks joined the cache (and the path): they stay there, unreferenced.
        const std::vector<RadixCache::NodeId> loaded_nodes(path.end() - static_cast<std::ptrdiff_t>(host_hits.size()), path.end());
        if (cache_) cache_->unlock(loaded_nodes);
        path.resize(path.size() - host_hits.size());
        taken.assign(gap.begin(), gap.end());
      }
      KVTWIN_TRY_STATUS(free_pages(taken));
      full_pages_held_ -= taken.size();
      if (derived_.is_composite()) swa_pages_held_ -= taken.size();
      if (cache_) cache_->unlock(path);
      if (alone) {  // nothing else will ever free room for it
        KVTWIN_TRY_STATUS(drop_backup());
        waiting_.pop_front();
        ++(pending.generated != 0 ? summary_.requests_dropped : summary_.requests_rejected);
        continue;
      }
      break;
    }
    new_pages.insert(new_pages.end(), gap.begin(), gap.end());
    new_pages.insert(new_pages.end(), restored.begin(), restored.end());
    KVTWIN_CHECK(new_pages.size() == need_pages, "an admission takes the device pages its prompt needs");
    waiting_.pop_front();
    Running r;
    r.request = pending.request;
    r.admitted_seq = admitted_seq_++;
    r.generated = pending.generated;
    r.prompt_len = prompt_len;
    r.cached_len = cached_len;
    r.prefill_end = prefill_end;
    r.path = path;
    r.shared_pages = cache_pages;
    r.pages.reserve(total_pages);
    for (RadixCache::NodeId id : path) {
      const std::span<const std::int64_t> p = cache_->pages(id);
      r.pages.insert(r.pages.end(), p.begin(), p.end());
    }
    const std::uint64_t cached_new = host_pages;  // pages of the path that were loaded just now
    r.pages.insert(r.pages.end(), new_pages.begin() + static_cast<std::ptrdiff_t>(cached_new), new_pages.end());
    KVTWIN_CHECK(r.pages.size() == total_pages, "a request holds one page per page of its prompt");
    if (host_tier()) {
      for (std::uint64_t j = cache_pages; j < restore_from; ++j) device_content_[r.pages[j]] = private_content(r.request, j);
      KVTWIN_TRY_STATUS(check_content(r, keys));
    }
    note_occupancy();
    prefill_tokens += prefill_end - cached_len;
    ++summary_.admissions;
    summary_.prompt_tokens += prompt_len;
    summary_.cached_tokens += cached_len;
    summary_.device_hit_pages += device_pages;
    summary_.device_hit_tokens += device_pages * ps;
    for (std::uint64_t k : host_hits) {
      HostBlock& h = host_blocks_.at(k);
      std::uint64_t& pages = h.from_storage ? summary_.storage_hit_pages : summary_.host_hit_pages;
      std::uint64_t& tokens = h.from_storage ? summary_.storage_hit_tokens : summary_.host_hit_tokens;
      pages += bp;
      tokens += bp * ps;
      h.from_storage = false;
    }
    if (restoring) summary_.retraction_restored_tokens += prompt_len - prefill_end;
    tell(ServingEvent::Kind::admitted, r.request, new_pages);
    // Write-through-selective: a block is backed up once it has been hit on the device.
    if (host_tier() && params_.write_policy == WritePolicy::write_through_selective) {
      const std::vector<RadixCache::NodeId> hit(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(device_pages / std::max<std::uint64_t>(bp, 1)));
      KVTWIN_TRY_STATUS(back_up_blocks(hit));
    }
    if (params_.share_within_step) insert_blocks(r);
    admitted.push_back(std::move(r));
  }
  return ok_status();
}

Status ServingSimulator::prefill(std::vector<Running>& admitted) {
  const std::uint64_t ps = params_.page_size;
  std::size_t lanes = 0;
  for (const Running& r : admitted) lanes += r.prefill_end - r.cached_len;
  std::vector<std::int64_t> tokens;
  tokens.reserve(lanes);
  for (const Running& r : admitted) {
    // Page by page: each page's positions are consecutive tokens from its first.
    for (std::uint64_t pos = r.cached_len; pos < r.prefill_end;) {
      const std::uint64_t page = pos / ps;
      const std::uint64_t page_end = std::min(r.prefill_end, (page + 1) * ps);
      const std::int64_t first = r.pages[page] * static_cast<std::int64_t>(ps) - static_cast<std::int64_t>(page * ps);
      for (; pos < page_end; ++pos) tokens.push_back(first + static_cast<std::int64_t>(pos));
    }
  }
  if (!tokens.empty()) {
    summary_.prefill_tokens += tokens.size();
    KVTWIN_TRY_STATUS(write_all_layers(0, std::move(tokens)));
  }
  for (Running& r : admitted) {
    r.seq_len = r.prompt_len;
    if (!params_.share_within_step) insert_blocks(r);
  }
  if (hybrid()) {  // each prompt's state after its prefill
    std::vector<std::uint64_t> requests;
    for (const Running& r : admitted) requests.push_back(r.request);
    KVTWIN_TRY_STATUS(write_states(requests));
    KVTWIN_TRY_STATUS(make_checkpoints(admitted));
  }
  for (Running& r : admitted) running_.push_back(std::move(r));
  return ok_status();
}

void ServingSimulator::insert_blocks(Running& r) {
  if (!cache_) return;
  // The prompt's full blocks enter the cache, continuing the matched path. A retracted request's
  // prompt grew by its output so far, but only the trace's prompt blocks have hashes.
  const Request& req = trace_->requests[r.request];
  const std::uint64_t full_blocks = req.input_tokens / trace_->block_tokens;
  const std::uint64_t bp = cache_->block_pages();
  RadixCache::NodeId parent = r.path.empty() ? RadixCache::kRoot : r.path.back();
  const std::vector<std::uint64_t> keys = host_tier() ? block_keys(req, full_blocks) : std::vector<std::uint64_t>{};
  for (std::uint64_t b = r.path.size(); b < full_blocks; ++b) {
    KVTWIN_CHECK(r.shared_pages == b * bp, "cache pages are a prefix of the request's pages");
    KVTWIN_CHECK(r.pages.size() >= (b + 1) * bp, "a full prompt block's pages are allocated before it is cached");
    const std::span<const std::int64_t> pages = std::span<const std::int64_t>(r.pages).subspan(b * bp, bp);
    const RadixCache::NodeId node = cache_->insert(parent, req.block_hashes[b], pages, step_);
    if (node == RadixCache::kRoot) break;
    if (host_tier()) {
      node_keys_[node] = keys[b];
      filled_this_step_.insert(node);
      for (std::uint64_t j = 0; j < bp; ++j) device_content_[r.pages[b * bp + j]] = PageContent{keys[b], j};
    }
    r.path.push_back(node);
    r.shared_pages += bp;
    parent = node;
  }
}

// ---------------------------------------------------------------- the host tier

ServingSimulator::PageContent ServingSimulator::private_content(std::uint64_t request, std::uint64_t page_index) const {
  return {mix_seed(fnv1a64("kvtwin private pages"), request), page_index};
}

Status ServingSimulator::check_content(const Running& r, const std::vector<std::uint64_t>& keys) const {
  const std::uint64_t bp = cache_ ? cache_->block_pages() : 1;
  for (std::size_t j = 0; j < r.pages.size(); ++j) {
    const PageContent want = j < r.shared_pages ? PageContent{keys[j / bp], j % bp} : private_content(r.request, j);
    auto have = device_content_.find(r.pages[j]);
    if (have == device_content_.end() || have->second != want)
      return make_error(ErrorKind::internal,
                        "serving simulator accounting broken at step " + std::to_string(step_) + ": request " +
                            std::to_string(r.request) + "'s page " + std::to_string(j) + " (virtual page " +
                            std::to_string(r.pages[j]) + ") does not hold the rows the simulator placed there for it");
  }
  return ok_status();
}


std::vector<std::uint64_t> ServingSimulator::block_keys(const Request& req, std::uint64_t blocks) const {
  std::vector<std::uint64_t> keys;
  keys.reserve(blocks);
  std::uint64_t key = fnv1a64("kvtwin host block");
  for (std::uint64_t b = 0; b < blocks; ++b) {
    key = mix_seed(key, static_cast<std::uint64_t>(req.block_hashes[b]));
    keys.push_back(key);
  }
  return keys;
}

void ServingSimulator::touch_host(std::uint64_t key) {
  HostBlock& b = host_blocks_.at(key);
  host_lru_.erase({b.last_used, key});
  b.last_used = host_clock_++;
  host_lru_.insert({b.last_used, key});
}

void ServingSimulator::note_host_occupancy() {
  summary_.peak_host_pages = std::max(summary_.peak_host_pages, host_pages_held_);
  std::uint64_t bytes = 0;
  for (std::uint64_t b : reported_page_bytes_) bytes += host_pages_held_ * b;
  summary_.peak_host_bytes = std::max(summary_.peak_host_bytes, bytes);
}

Status ServingSimulator::host_free(const std::vector<std::vector<std::int64_t>>& pages) {
  for (std::size_t side = 0; side < pages.size(); ++side)
    if (!pages[side].empty())
      KVTWIN_TRY_STATUS(send_expect_ok(Op(HostFree{derived_.geometry.sub_pools[side].name, pages[side]})));
  if (!pages.empty()) {
    KVTWIN_CHECK(host_pages_held_ >= pages[0].size(), "the host tier frees only pages it holds");
    host_pages_held_ -= pages[0].size();
  }
  return ok_status();
}

Status ServingSimulator::evict_host_block() {
  auto victim = host_lru_.begin();
  while (victim != host_lru_.end() && host_pinned_.contains(victim->second)) ++victim;
  KVTWIN_CHECK(victim != host_lru_.end(), "a host block to evict");
  const std::uint64_t key = victim->second;
  host_lru_.erase(victim);
  // The storage tier: the block is written down before its host pages go (unless it was before).
  if (storage_tier() && !stored_blocks_.contains(key)) KVTWIN_TRY_STATUS(store_block(key));
  KVTWIN_TRY_STATUS(host_free(host_blocks_.at(key).pages));
  host_block_pages_ -= host_blocks_.at(key).pages[0].size();
  host_blocks_.erase(key);
  ++summary_.host_evicted_blocks;
  return ok_status();
}

// ---------------------------------------------------------------- the storage tier

std::uint64_t ServingSimulator::page_hash(std::uint64_t key, std::uint64_t page) {
  return mix_seed(mix_seed(fnv1a64("kvtwin stored page"), key), page);
}

Result<std::optional<Ids>> ServingSimulator::send_storage(const Op& op) {
  std::optional<OpResult> r;
  KVTWIN_TRY_STATUS(send(op, r));
  if (!r->ok()) {
    // A store that cannot write or read (a full disk, a folder it may not write) is not the
    // pool's bug: the run goes on without the tier, and the summary says why.
    if (r->error().kind == ErrorKind::io) {
      summary_.storage_error = "step " + std::to_string(step_) + ": " + r->error().message;
      return std::optional<Ids>();
    }
    return make_error(ErrorKind::internal, "the pool refused a storage operation the serving simulator considers valid, at step " +
                                               std::to_string(step_) + ": " + to_string(op).substr(0, 300) + " -> " +
                                               to_string(*r));
  }
  const Ids* ids = std::get_if<Ids>(&r->value());
  KVTWIN_CHECK(ids != nullptr, "a storage operation answers ids");
  return std::optional<Ids>(*ids);
}

Status ServingSimulator::store_block(std::uint64_t key) {
  const HostBlock& block = host_blocks_.at(key);
  const std::uint64_t n = block.pages[0].size();
  std::vector<std::uint64_t> hashes;
  for (std::uint64_t i = 0; i < n; ++i) hashes.push_back(page_hash(key, i));
  for (std::size_t side = 0; side < block.pages.size(); ++side) {
    KVTWIN_TRY(std::optional<Ids> stored,
               send_storage(Op(StorePages{0, derived_.geometry.sub_pools[side].name, block.pages[side], hashes, n, ""})));
    if (!stored) return ok_status();  // the tier is off
    KVTWIN_CHECK(stored->values.size() == n, "store_pages of a whole block stores every page");
    ++summary_.stores;
    summary_.pages_stored += n;
    summary_.bytes_stored += n * reported_page_bytes_[side];
  }
  stored_blocks_.insert(key);
  for (std::uint64_t i = 0; i < n; ++i) {
    auto c = host_content_.find(block.pages[0][i]);
    if (c != host_content_.end()) stored_content_[hashes[i]] = c->second;
  }
  return ok_status();
}

Status ServingSimulator::fetch_from_storage(const std::vector<std::uint64_t>& keys) {
  const std::uint64_t bp = cache_->block_pages();
  // Host pages for as many of the blocks as the host holds (a prefix of them: the match is one).
  std::vector<std::uint64_t> wanted = keys;
  std::optional<std::vector<std::vector<std::int64_t>>> host;
  while (!wanted.empty()) {
    KVTWIN_TRY(host, host_alloc(wanted.size() * bp));
    if (host || !storage_tier()) break;
    wanted.pop_back();
  }
  if (!host) return ok_status();
  if (!storage_tier()) return host_free(*host);  // a write-down while making room failed: the tier is off
  std::vector<std::uint64_t> hashes;
  for (std::uint64_t k : wanted)
    for (std::uint64_t i = 0; i < bp; ++i) hashes.push_back(page_hash(k, i));
  // One read a side; a block comes back when every page of every side did.
  std::vector<bool> whole(wanted.size(), true);
  for (std::size_t side = 0; side < host->size(); ++side) {
    KVTWIN_TRY(std::optional<Ids> hits,
               send_storage(Op(LoadStored{0, derived_.geometry.sub_pools[side].name, (*host)[side], hashes})));
    if (!hits) return host_free(*host);  // the tier is off
    KVTWIN_CHECK(hits->values.size() == hashes.size(), "load_stored answers one value a page");
    ++summary_.storage_reads;
    for (std::size_t j = 0; j < hashes.size(); ++j) {
      if (hits->values[j] == 1) {
        ++summary_.pages_read_from_storage;
        summary_.bytes_read_from_storage += reported_page_bytes_[side];
      } else {
        ++summary_.storage_missed_pages;
        whole[j / bp] = false;
      }
    }
  }
  std::vector<std::vector<std::int64_t>> unused(host->size());
  for (std::size_t b = 0; b < wanted.size(); ++b) {
    HostBlock h;
    for (std::size_t side = 0; side < host->size(); ++side)
      h.pages.emplace_back((*host)[side].begin() + static_cast<std::ptrdiff_t>(b * bp),
                           (*host)[side].begin() + static_cast<std::ptrdiff_t>((b + 1) * bp));
    if (!whole[b]) {
      // The store no longer holds all of it: its host pages go, and it counts as not stored.
      for (std::size_t side = 0; side < host->size(); ++side)
        unused[side].insert(unused[side].end(), h.pages[side].begin(), h.pages[side].end());
      stored_blocks_.erase(wanted[b]);
      continue;
    }
    for (std::uint64_t i = 0; i < bp; ++i) {
      auto c = stored_content_.find(hashes[b * bp + i]);
      if (c != stored_content_.end()) host_content_[h.pages[0][i]] = c->second;
      else host_content_.erase(h.pages[0][i]);
    }
    h.from_storage = true;
    host_block_pages_ += bp;
    host_blocks_[wanted[b]] = std::move(h);
    touch_host(wanted[b]);
  }
  if (!unused[0].empty()) KVTWIN_TRY_STATUS(host_free(unused));
  return ok_status();
}

Result<std::optional<std::vector<std::vector<std::int64_t>>>> ServingSimulator::host_alloc(std::uint64_t pages) {
  const std::size_t sides = derived_.geometry.sub_pools.size();
  using Pages = std::vector<std::vector<std::int64_t>>;
  if (pages == 0) return std::optional<Pages>(Pages(sides));
  if (pages > summary_.host_pages) return std::optional<Pages>();  // larger than the whole arena
  // Bounded: each round allocates or frees a host block.
  while (true) {
    KVTWIN_TRY(Outcome o, send_expect_ok(Op(HostAlloc{0, std::vector<std::uint64_t>(sides, pages)})));
    if (auto* a = std::get_if<HostAllocated>(&o)) {
      KVTWIN_CHECK(a->logical.size() == sides && a->logical[0].size() == pages, "host_alloc answers the pages asked for");
      host_pages_held_ += pages;
      note_host_occupancy();
      return std::optional<Pages>(std::move(a->logical));
    }
    KVTWIN_CHECK(std::holds_alternative<NoRoom>(o), "host_alloc answers pages or no_room");
    if (host_lru_.size() <= host_pinned_.size()) return std::optional<Pages>();
    KVTWIN_TRY_STATUS(evict_host_block());
  }
}

Status ServingSimulator::offload(const std::vector<std::int64_t>& device_pages,
                                 const std::vector<std::vector<std::int64_t>>& host) {
  // An offload hands host pages to the selected device pages in ascending virtual order: list the
  // host pages in that order, so host[s][i] receives device_pages[i] whatever their order.
  std::vector<std::size_t> order(device_pages.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return device_pages[a] < device_pages[b]; });
  std::vector<std::int64_t> ids;
  for (std::size_t i : order) ids.push_back(device_pages[i]);
  for (std::size_t side = 0; side < host.size(); ++side) {
    Offload o;
    o.transfer = next_transfer_++;
    o.side = derived_.geometry.sub_pools[side].name;
    o.ids = ids;
    for (std::size_t i : order) o.host.push_back(host[side][i]);
    KVTWIN_TRY(Outcome started, send_expect_ok(Op(o)));
    const auto* t = std::get_if<TransferStarted>(&started);
    KVTWIN_CHECK(t != nullptr && t->pages == ids, "an offload of bound pages selects every one of them");
    // host[i] receives selected page i (ascending): exactly what the op says.
    if (side == 0)
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto c = device_content_.find(ids[i]);
        if (c != device_content_.end()) host_content_[o.host[i]] = c->second;
        else host_content_.erase(o.host[i]);
      }
    KVTWIN_TRY_STATUS(send_expect_ok(Op(TransferWait{o.transfer})));
    ++summary_.offloads;
    summary_.pages_offloaded += ids.size();
    summary_.bytes_offloaded += ids.size() * reported_page_bytes_[side];
  }
  return ok_status();
}

Result<std::optional<std::vector<std::int64_t>>> ServingSimulator::load_back(
    const std::vector<std::vector<std::int64_t>>& host) {
  LoadBack l;
  l.transfer = next_transfer_++;
  l.host = host;
  KVTWIN_TRY(Outcome o, send_expect_ok(Op(l)));
  if (std::holds_alternative<NoRoom>(o)) return std::optional<std::vector<std::int64_t>>();
  const auto* t = std::get_if<TransferStarted>(&o);
  KVTWIN_CHECK(t != nullptr && t->pages.size() == host[0].size(), "a load-back answers one device page per host page");
  std::vector<std::int64_t> pages = t->pages;
  for (std::size_t i = 0; i < pages.size(); ++i) {  // new page i receives host[0][i]
    auto c = host_content_.find(host[0][i]);
    if (c != host_content_.end()) device_content_[pages[i]] = c->second;
    else device_content_.erase(pages[i]);
  }
  KVTWIN_TRY_STATUS(send_expect_ok(Op(TransferWait{l.transfer})));
  ++summary_.load_backs;
  for (std::size_t side = 0; side < host.size(); ++side) {
    summary_.pages_loaded_back += host[side].size();
    summary_.bytes_loaded_back += host[side].size() * reported_page_bytes_[side];
  }
  return std::optional<std::vector<std::int64_t>>(std::move(pages));
}

Status ServingSimulator::back_up_blocks(const std::vector<RadixCache::NodeId>& nodes) {
  std::vector<std::pair<std::uint64_t, std::vector<std::int64_t>>> wanted;
  for (RadixCache::NodeId node : nodes) {
    const std::uint64_t key = node_keys_.at(node);
    if (!host_blocks_.contains(key)) {
      const std::span<const std::int64_t> pages = cache_->pages(node);
      wanted.push_back({key, std::vector<std::int64_t>(pages.begin(), pages.end())});
    }
  }
  return offload_blocks(wanted);
}

Status ServingSimulator::offload_blocks(const std::vector<std::pair<std::uint64_t, std::vector<std::int64_t>>>& blocks) {
  // One host_alloc and one offload a side for all of them when the host has the room at once,
  // else block by block as far as it holds them (a block the host cannot take waits for its
  // eviction, or is dropped then).
  std::uint64_t total = 0;
  for (const auto& [key, pages] : blocks) total += pages.size();
  std::optional<std::vector<std::vector<std::int64_t>>> all;
  if (blocks.size() > 1) {
    Result<std::optional<std::vector<std::vector<std::int64_t>>>> batch = host_alloc(total);
    if (!batch.ok()) return batch.error();
    all = std::move(batch).value();
  }
  if (all) {
    std::vector<std::int64_t> device;
    for (const auto& [key, pages] : blocks) device.insert(device.end(), pages.begin(), pages.end());
    KVTWIN_TRY_STATUS(offload(device, *all));
    std::size_t at = 0;
    for (const auto& [key, pages] : blocks) {
      HostBlock h;
      for (const std::vector<std::int64_t>& side : *all)
        h.pages.emplace_back(side.begin() + static_cast<std::ptrdiff_t>(at),
                             side.begin() + static_cast<std::ptrdiff_t>(at + pages.size()));
      at += pages.size();
      host_block_pages_ += pages.size();
      host_blocks_[key] = std::move(h);
      touch_host(key);
    }
    return ok_status();
  }
  for (const auto& [key, pages] : blocks) {
    KVTWIN_TRY(std::optional<std::vector<std::vector<std::int64_t>>> host, host_alloc(pages.size()));
    if (!host) continue;
    KVTWIN_TRY_STATUS(offload(pages, *host));
    host_block_pages_ += pages.size();
    host_blocks_[key] = HostBlock{std::move(*host), 0};
    touch_host(key);
  }
  return ok_status();
}

Status ServingSimulator::retract_one() {
  KVTWIN_CHECK(!running_.empty(), "retraction with nothing running");
  // The request with the fewest generated tokens; on a tie the one admitted last.
  std::size_t victim = 0;
  for (std::size_t i = 1; i < running_.size(); ++i) {
    const Running& a = running_[i];
    const Running& b = running_[victim];
    if (a.generated < b.generated || (a.generated == b.generated && a.admitted_seq > b.admitted_seq)) victim = i;
  }
  Running r = std::move(running_[victim]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(victim));
  Pending pending{r.request, r.generated, 0, {}};
  // The host tier: the private pages go to host and come back at re-admission (single-sided
  // pools; a composite's private pages have sliding-window tombstones, and recompute).
  if (host_tier() && !derived_.is_composite() && r.pages.size() > r.shared_pages) {
    const std::vector<std::int64_t> private_pages(r.pages.begin() + static_cast<std::ptrdiff_t>(r.shared_pages),
                                                  r.pages.end());
    KVTWIN_TRY(std::optional<std::vector<std::vector<std::int64_t>>> host, host_alloc(private_pages.size()));
    if (host) {
      KVTWIN_TRY_STATUS(offload(private_pages, *host));
      pending.backup_from = r.shared_pages;
      pending.backup = (*host)[0];
      ++summary_.retractions_backed_up;
    }
  }
  KVTWIN_TRY_STATUS(release(r));
  waiting_.push_front(std::move(pending));
  ++summary_.retractions;
  tell(ServingEvent::Kind::retracted, r.request);
  return ok_status();
}

Status ServingSimulator::grow_for_decode() {
  const std::uint64_t ps = params_.page_size;
  // Bounded: each round either allocates, evicts at least one page, or retracts a request.
  for (std::uint64_t round = 0;; ++round) {
    KVTWIN_CHECK(round <= running_.size() + full_pages_held_ + 2, "decode growth makes no progress");
    std::vector<std::size_t> needers;
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (running_[i].seq_len == running_[i].pages.size() * ps) needers.push_back(i);
    if (needers.empty()) return ok_status();
    KVTWIN_TRY(Outcome o, send_expect_ok(Op(AllocMany{std::vector<std::uint64_t>(needers.size(), ps)})));
    if (const auto* a = std::get_if<AllocatedMany>(&o)) {
      KVTWIN_CHECK(a->pages.size() == needers.size(), "alloc_many answers one list per request");
      for (std::size_t k = 0; k < needers.size(); ++k) {
        KVTWIN_CHECK(a->pages[k].size() == 1, "a one-page request gets one page");
        running_[needers[k]].pages.push_back(a->pages[k][0]);
        if (host_tier())
          device_content_[a->pages[k][0]] =
              private_content(running_[needers[k]].request, running_[needers[k]].pages.size() - 1);
        tell(ServingEvent::Kind::grew, running_[needers[k]].request, a->pages[k]);  // that one page
      }
      full_pages_held_ += needers.size();
      if (derived_.is_composite()) swa_pages_held_ += needers.size();
      note_occupancy();
      return ok_status();
    }
    KVTWIN_CHECK(std::holds_alternative<NoRoom>(o), "alloc_many answers pages or no_room");
    if (cache_ && cache_->evictable_pages() > 0) {
      KVTWIN_TRY_STATUS(evict(needers.size()));
    } else {
      KVTWIN_TRY_STATUS(retract_one());
    }
  }
}

Status ServingSimulator::decode() {
  KVTWIN_TRY_STATUS(grow_for_decode());
  if (running_.empty()) return ok_status();
  const std::int64_t ps = static_cast<std::int64_t>(params_.page_size);
  std::vector<std::int64_t> tokens;
  tokens.reserve(running_.size());
  for (const Running& r : running_) {
    const std::int64_t pos = static_cast<std::int64_t>(r.seq_len);
    tokens.push_back(r.pages[static_cast<std::size_t>(pos / ps)] * ps + pos % ps);
  }
  KVTWIN_TRY_STATUS(write_all_layers(1, std::move(tokens)));
  for (Running& r : running_) {
    ++r.seq_len;
    ++r.generated;
  }
  if (hybrid()) {  // every running request's state moves one token on
    std::vector<std::uint64_t> requests;
    for (const Running& r : running_) requests.push_back(r.request);
    KVTWIN_TRY_STATUS(write_states(requests));
  }
  summary_.decode_tokens += running_.size();
  return ok_status();
}

Status ServingSimulator::finish_and_window() {
  // Finished requests leave (in running order); the others close up in place, in their order.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    if (r.generated >= scaled(trace_->requests[r.request].output_tokens)) {
      KVTWIN_TRY_STATUS(release(r));
      ++summary_.requests_served;
      tell(ServingEvent::Kind::finished, r.request);
    } else {
      if (kept != i) running_[kept] = std::move(r);
      ++kept;
    }
  }
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(kept), running_.end());
  // Sliding window (SPEC 9, free_swa): a private page whose every token is older than the
  // window of the next query loses its SWA page. The window is in scaled tokens.
  const std::uint64_t window = window_tokens_;
  if (!derived_.is_composite() || window == 0) return ok_status();
  const std::uint64_t ps = params_.page_size;
  std::vector<std::int64_t> pages;
  std::uint64_t count = 0;
  for (Running& r : running_) {
    if (r.seq_len <= window) continue;
    if (params_.planted_fault == "keep_dead_window_page" && &r == &running_.front()) continue;
    const std::uint64_t dead_pages = (r.seq_len - window) / ps;
    for (std::uint64_t j = r.shared_pages + r.swa_freed_pages; j < dead_pages; ++j) {
      pages.push_back(r.pages[j]);
      ++r.swa_freed_pages;
      ++count;
    }
  }
  if (pages.empty()) return ok_status();
  KVTWIN_TRY_STATUS(send_expect_ok(Op(FreeSwa{IdUnit::pages, std::move(pages)})));
  swa_pages_held_ -= count;
  summary_.swa_freed_pages += count;
  freed_this_step_ = true;
  return ok_status();
}

Status ServingSimulator::check_accounting(bool window_settled) const {
  const std::uint64_t ps = params_.page_size;
  const std::uint64_t window = window_tokens_;
  const bool windowed = derived_.is_composite() && window != 0;
  const auto broken = [&](const std::string& what) {
    return make_error(ErrorKind::internal, "serving simulator accounting broken at step " + std::to_string(step_) + ": " +
                                               what);
  };
  if (hybrid() && state_slots_held_ != running_.size())
    return broken(std::to_string(state_slots_held_) + " state slots held for " + std::to_string(running_.size()) +
                  " running requests (one each)");
  std::uint64_t private_pages = 0, swa_freed = 0;
  for (const Running& r : running_) {
    // Named only when something is broken (a string a request a step was a tenth of a replay).
    const auto who = [&r] { return "request " + std::to_string(r.request); };
    if (r.pages.size() != ceil_div(r.seq_len, ps))
      return broken(who() + " holds " + std::to_string(r.pages.size()) + " pages for " + std::to_string(r.seq_len) +
                    " tokens (pages of " + std::to_string(ps) + ": " + std::to_string(ceil_div(r.seq_len, ps)) + ")");
    if (r.shared_pages > r.pages.size())
      return broken(who() + " shares " + std::to_string(r.shared_pages) + " cached pages of its " +
                    std::to_string(r.pages.size()));
    if (cache_ && r.path.size() * cache_->block_pages() != r.shared_pages)
      return broken(who() + " holds " + std::to_string(r.path.size()) + " cached blocks of " +
                    std::to_string(cache_->block_pages()) + " pages but shares " + std::to_string(r.shared_pages));
    if (!windowed && r.swa_freed_pages != 0)
      return broken(who() + " freed " + std::to_string(r.swa_freed_pages) + " SWA pages in a pool without a window");
    if (windowed && window_settled) {
      const std::uint64_t dead = r.seq_len > window ? (r.seq_len - window) / ps : 0;
      const std::uint64_t dead_private = dead > r.shared_pages ? dead - r.shared_pages : 0;
      if (r.swa_freed_pages != dead_private)
        return broken(who() + " (" + std::to_string(r.seq_len) + " tokens, window " + std::to_string(window) +
                      ") has " + std::to_string(dead_private) + " private pages behind the window but freed " +
                      std::to_string(r.swa_freed_pages) + " of their SWA pages");
    }
    private_pages += r.pages.size() - r.shared_pages;
    swa_freed += r.swa_freed_pages;
  }
  const std::uint64_t cached = cache_ ? cache_->cached_pages() : 0;
  if (cache_ && cached != cache_->node_count() * cache_->block_pages())
    return broken("the prefix cache holds " + std::to_string(cached) + " pages for " +
                  std::to_string(cache_->node_count()) + " blocks of " + std::to_string(cache_->block_pages()));
  if (full_pages_held_ != private_pages + cached)
    return broken(std::to_string(full_pages_held_) + " pages held, but the running requests hold " +
                  std::to_string(private_pages) + " of their own and the cache " + std::to_string(cached));
  if (derived_.is_composite() && swa_pages_held_ != full_pages_held_ - swa_freed)
    return broken(std::to_string(swa_pages_held_) + " SWA pages held, but " + std::to_string(full_pages_held_) +
                  " pages less " + std::to_string(swa_freed) + " freed from the window is " +
                  std::to_string(full_pages_held_ - swa_freed));
  // O(waiting requests), as the rest: the host blocks' pages are a counter kept where blocks come
  // and go (recounted at the end of the run).
  std::uint64_t host_held = host_block_pages_;
  for (const Pending& w : waiting_) host_held += w.backup.size();
  if (host_held != host_pages_held_ || host_lru_.size() != host_blocks_.size())
    return broken(std::to_string(host_pages_held_) + " host pages held, but the host blocks (" +
                  std::to_string(host_blocks_.size()) + ") and the waiting requests' backups hold " +
                  std::to_string(host_held));
  if (cache_ && host_tier() && node_keys_.size() != cache_->node_count())
    return broken(std::to_string(cache_->node_count()) + " cache nodes, but " + std::to_string(node_keys_.size()) +
                  " of them have a host key");
  const std::uint64_t settled = summary_.requests_served + summary_.requests_rejected + summary_.requests_dropped;
  if (settled + waiting_.size() + running_.size() != next_arrival_)
    return broken(std::to_string(next_arrival_) + " requests arrived, but " + std::to_string(settled) + " settled, " +
                  std::to_string(waiting_.size()) + " wait and " + std::to_string(running_.size()) + " run");
  return ok_status();
}

Status ServingSimulator::run(const OpSink& sink, const ProgressFn& progress) {
  KVTWIN_CHECK(sink_ == nullptr, "a ServingSimulator runs once");
  sink_ = &sink;
  KVTWIN_TRY_STATUS(send_expect_ok(Op(BuildPool{config_})));
  const std::vector<Request>& requests = trace_->requests;
  std::uint64_t idle_steps = 0;
  while (next_arrival_ < request_count_ || !waiting_.empty() || !running_.empty()) {
    if (running_.empty() && waiting_.empty()) now_us_ = std::max(now_us_, requests[next_arrival_].arrival_us);
    while (next_arrival_ < request_count_ && requests[next_arrival_].arrival_us <= now_us_)
      waiting_.push_back(Pending{next_arrival_++, 0, 0, {}});
    freed_this_step_ = false;
    const std::uint64_t decoded_before = summary_.decode_tokens;
    const std::uint64_t settled_before = summary_.requests_served + summary_.requests_rejected + summary_.requests_dropped;
    KVTWIN_TRY_STATUS(decode());
    const bool decoded = summary_.decode_tokens != decoded_before;
    KVTWIN_TRY_STATUS(finish_and_window());
    KVTWIN_TRY_STATUS(check_accounting(/*window_settled=*/true));
    std::vector<Running> admitted;
    KVTWIN_TRY_STATUS(admit(admitted));
    std::uint64_t prefilled = 0;
    for (const Running& r : admitted) prefilled += r.prefill_end - r.cached_len;
    KVTWIN_TRY_STATUS(prefill(admitted));
    // Write-through: the blocks this step filled are backed up to host now that their rows exist.
    if (host_tier() && params_.write_policy == WritePolicy::write_through && !filled_this_step_.empty()) {
      const std::vector<RadixCache::NodeId> filled(filled_this_step_.begin(), filled_this_step_.end());
      KVTWIN_TRY_STATUS(back_up_blocks(filled));
    }
    filled_this_step_.clear();
    if (params_.mode == CompactionMode::lazy && freed_this_step_) KVTWIN_TRY_STATUS(send_expect_ok(Op(Flush{})));
    KVTWIN_TRY_STATUS(check_accounting(/*window_settled=*/false));
    tell(ServingEvent::Kind::step_done, 0);
    ++step_;
    ++summary_.steps;
    if (params_.checkpoint_every != 0 && !params_.tables_only && step_ % params_.checkpoint_every == 0)
      KVTWIN_TRY_STATUS(send_expect_ok(Op(Checkpoint{})));
    const std::uint64_t cost_us =
        ((decoded ? params_.decode_step_us : 0) + prefilled * params_.prefill_ns_per_token / 1000) *
        params_.token_scale;
    now_us_ += std::max<std::uint64_t>(cost_us, 1);
    const bool progressed =
        decoded || !admitted.empty() ||
        summary_.requests_served + summary_.requests_rejected + summary_.requests_dropped != settled_before;
    idle_steps = progressed ? 0 : idle_steps + 1;
    if (idle_steps > kStallSteps)
      return make_error(ErrorKind::internal, "the serving simulator stalled at step " + std::to_string(step_) +
                                                 " with " + std::to_string(waiting_.size()) + " waiting and " +
                                                 std::to_string(running_.size()) + " running requests");
    if (progress)
      progress(summary_.requests_served + summary_.requests_rejected + summary_.requests_dropped, request_count_);
  }
  // Drain: empty the cache, so a pool that accounts correctly ends empty.
  freed_this_step_ = false;
  if (cache_) KVTWIN_TRY_STATUS(evict(UINT64_MAX, /*draining=*/true));
  while (!host_lru_.empty()) {  // the host tier drains too (not counted as eviction)
    const std::uint64_t key = host_lru_.begin()->second;
    host_lru_.erase(host_lru_.begin());
    KVTWIN_TRY_STATUS(host_free(host_blocks_.at(key).pages));
    host_block_pages_ -= host_blocks_.at(key).pages[0].size();
    host_blocks_.erase(key);
  }
  if (params_.mode == CompactionMode::lazy && freed_this_step_) KVTWIN_TRY_STATUS(send_expect_ok(Op(Flush{})));
  if (!params_.tables_only) KVTWIN_TRY_STATUS(send_expect_ok(Op(Checkpoint{})));
  KVTWIN_CHECK(host_blocks_.empty() && host_block_pages_ == 0, "the host tier's block pages recount to zero");
  KVTWIN_CHECK(full_pages_held_ == 0 && swa_pages_held_ == 0 && host_pages_held_ == 0,
               "the serving simulator's page accounting balances");
  summary_.simulated_us = now_us_;
  return ok_status();
}

}  // namespace kvtwin::traces
