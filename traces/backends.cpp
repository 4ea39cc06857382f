// Backend selection and the model's planted faults (backends.h).
#include "traces/backends.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "core/planted_sizing.h"
#include "core/printable.h"
#include "core/reasons.h"
#include "sim/attention.h"
#include "sim/model.h"
#include "sim/translation.h"

#if KVTWIN_HAVE_GPU
#include "gpu/gpu_backend.h"
#endif

namespace kvtwin::traces {
namespace {

// The reference model with one named bug planted, for self-tests of the harness: every fault is
// a real bug class of SPEC.md section 10, and a run that pairs this copy with the plain model
// must catch it.
// SPEC 10.8, planted: the in-page token stride taken from the row's shape (heads * head_dim *
// itemsize) instead of the whole entry: page * page_size * E + slot * row + offset + l * stride.
// Inside the page's envelope (slot * row + E <= page_size * E), so never outside the pool.
std::uint64_t shape_stride_row_address(const DenseEntryLayout& layout, std::uint64_t page_size, std::int64_t pt,
                                       std::size_t part, std::uint32_t layer) {
  const DensePart& p = layout.parts[part];
  const auto t = static_cast<std::uint64_t>(pt);
  return t / page_size * page_size * layout.entry_bytes + t % page_size * p.row_bytes() + p.offset_bytes +
         std::uint64_t{layer} * p.layer_stride_bytes;
}

class PlantedModel : public sim::Model {
 public:
  explicit PlantedModel(std::string fault) : fault_(std::move(fault)), name_(fault_) {
    // The sizing bugs live in core's arithmetic (core/planted_sizing.h): planted for real, on
    // this thread, for as long as this model lives, so every user of core here shares them.
    if (fault_ == "model_one_sided_floor") sizing_bug_.emplace(PlantedSizingBug::one_sided_floor);
    if (fault_ == "model_row_address_32bit") sizing_bug_.emplace(PlantedSizingBug::row_address_32bit);
    if (fault_ == "model_state_sink_per_page") sizing_bug_.emplace(PlantedSizingBug::state_sink_per_page);
    if (fault_ == "model_state_entry_padded") sizing_bug_.emplace(PlantedSizingBug::state_entry_padded);
  }

  std::string_view name() const override { return name_; }

  OpResult apply(const Op& op) override {
    // SPEC 10.8 in a read: rows fetched with the shape-derived in-page token stride.
    if (fault_ == "model_read_stride_from_shape") {
      if (const auto* read = std::get_if<Read>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (!r.ok() || !std::holds_alternative<Bytes>(r.value())) return r;
        return OpResult(Outcome(shape_stride_read(*read)));
      }
    }
    // SPEC 10.8 in the decode attention: K and V rows fetched with the shape-derived stride.
    if (fault_ == "model_attention_stride_from_shape") {
      // A rebuild drops the graphs; a refused one keeps them (and the pool) as they were.
      if (std::holds_alternative<BuildPool>(op)) {
        OpResult r = sim::Model::apply(op);
        if (r.ok()) captures_.clear();
        return r;
      }
      if (const auto* capture = std::get_if<Capture>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (r.ok()) captures_[capture->graph] = *capture;
        return r;
      }
      if (const auto* replay = std::get_if<Replay>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (!r.ok() || !std::holds_alternative<Decode>(r.value())) return r;
        Decode d = std::get<Decode>(r.value());
        if (d.attention.size == 0) return r;
        d.attention = Bytes::of(shape_stride_attention(*replay, d));
        return OpResult(Outcome(std::move(d)));
      }
    }
    // SPEC 10.9: a negative id is not routed to the sink (here it passes through unchanged).
    if (fault_ == "model_negative_not_sink") {
      if (const auto* t = std::get_if<Translate>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (!r.ok() || !std::holds_alternative<Ids>(r.value())) return r;
        Ids ids = std::get<Ids>(r.value());
        for (std::size_t i = 0; i < t->ids.size() && i < ids.values.size(); ++i)
          if (t->ids[i] < 0) ids.values[i] = t->ids[i];
        return OpResult(Outcome(std::move(ids)));
      }
    }
    // SPEC 10.14: alloc_many that is not all-or-nothing (the first request stays allocated).
    if (fault_ == "model_alloc_many_partial") {
      if (const auto* m = std::get_if<AllocMany>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (r.ok() && std::holds_alternative<NoRoom>(r.value()) && m->tokens.size() > 1)
          (void)sim::Model::apply(Op(Alloc{m->tokens.front()}));
        return r;
      }
    }
    // A write door that puts down another write's rows (stale content): the answer and the
    // tables are right, only the bytes are wrong.
    if (fault_ == "model_stale_write") {
      if (const auto* w = std::get_if<Write>(&op)) {
        Write stale = *w;
        stale.write_number = w->write_number == 0 ? 1 : w->write_number - 1;
        return sim::Model::apply(Op(stale));
      }
    }
    // A refusal for the wrong reason: free_swa of a page that already left the window is refused
    // as a page never allocated (the kind is right, the cause is not; core/reasons.h).
    if (fault_ == "model_wrong_refusal_reason" && std::holds_alternative<FreeSwa>(op)) {
      OpResult r = sim::Model::apply(op);
      if (!r.ok() && r.error().reason == reason::left_window)
        return make_refusal(r.error().kind, reason::not_allocated, r.error().message);
      return r;
    }
    // SPEC 10.10 (a tombstone never made): free_swa is acknowledged but not applied.
    if (fault_ == "model_drop_free_swa" && std::holds_alternative<FreeSwa>(op)) return OpResult(Outcome(Compaction{}));
    return sim::Model::apply(op);
  }

 protected:
  // The write door skips the last lane of a write that puts down two lanes or more: the answer
  // and the tables are right, the lane's rows keep their old bytes, and the ledger (written with
  // the rows) agrees, so verify() passes: only an oracle that predicts the bytes can see it.
  void commit_layer_write(const LayerWrite& w, std::uint64_t write_number) override {
    if (fault_ != "model_skipped_write_lane") return sim::Model::commit_layer_write(w, write_number);
    const std::uint64_t sink_end = derived().geometry.sub_pools[w.side].min_page_index * config().page_size;
    std::optional<std::size_t> last;
    std::size_t lanes = 0;
    const std::span<const std::int64_t> locs = w.locs();
    for (std::size_t i = 0; i < locs.size(); ++i)
      if (locs[i] >= 0 && static_cast<std::uint64_t>(locs[i]) >= sink_end) {
        last = i;
        ++lanes;
      }
    if (lanes < 2) return sim::Model::commit_layer_write(w, write_number);
    LayerWrite skipped = w;
    skipped.derived_locs.assign(locs.begin(), locs.end());
    skipped.derived = true;
    skipped.derived_locs[*last] = 0;  // the sink: discarded
    sim::Model::commit_layer_write(skipped, write_number);
  }

  // SPEC 10.20: moves (eager compaction, flush, move_pages) and host compaction run while
  // transfers are still in flight ("compaction is not gated on those async copies"): the copy then
  // lands from (offload) or into (load-back) the physical page it resolved, which now holds
  // another page or nothing.
  bool compaction_waits_for_transfers() const override {
    return fault_ != "model_compaction_ignores_transfers";
  }

  // SPEC 10.13: a transfer that does not wait for its producer's event ("index preparation runs
  // on the transfer stream before its producer-event wait"): a load-back of a host page that an
  // offload on another stream still fills copies the page before that offload has landed.
  bool transfer_waits_for_producer() const override { return fault_ != "model_transfer_before_producer_event"; }

  // SPEC 10.15 and 10.16, in the storage tier (core/page_store.h's switches): a store of zero
  // pages keyed as every page (Python's hashes[-0:]); the storage space without the format tag.
  PageStoreFaults page_store_faults() const override {
    PageStoreFaults f;
    f.store_zero_pages_as_all = fault_ == "model_store_zero_pages_as_all";
    f.store_ignores_format_tag = fault_ == "model_store_ignores_format_tag";
    return f;
  }

  // SPEC 10.19: cache ids fed to a pool that takes physical pages: the transfer uses the host
  // logical id as the physical host page, skipping the arena's logical -> physical map.
  std::int64_t transfer_host_page(std::uint32_t thread, std::size_t side, std::int64_t logical) override {
    if (fault_ == "model_transfer_logical_as_physical") return logical;
    return sim::Model::transfer_host_page(thread, side, logical);
  }

  // SPEC 10.21: the sliding-window offload filters single tokens by `swa_loc > 0`
  // (swa_indices[swa_indices > 0]) instead of selecting whole bound pages: a window that starts
  // or ends inside a page keeps a partial page, the length is no multiple of the page size, and
  // the host allocation refuses it ("the requested size should be a multiple of the page size").
  Result<std::vector<std::int64_t>> offload_selection(std::size_t side, IdUnit unit,
                                                      const std::vector<std::int64_t>& ids) const override {
    KVTWIN_TRY(std::vector<std::int64_t> whole, sim::Model::offload_selection(side, unit, ids));
    if (fault_ != "model_swa_offload_token_filter" || side != 1 || unit != IdUnit::tokens) return whole;
    const sim::PageAllocator& a = allocator_view();
    const auto ps = static_cast<std::int64_t>(config().page_size);
    std::vector<std::int64_t> kept;
    std::vector<std::int64_t> tokens = ids;
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    for (std::int64_t t : tokens) {
      const std::int64_t full = sim::translate_token(a.owner().v2p(), ps, t);
      if (sim::swa_token(a.side(0).p2v(), a.side(1).v2p(), ps, full) > 0) kept.push_back(t);
    }
    if (kept.size() % static_cast<std::size_t>(ps) != 0)
      return make_error(ErrorKind::invalid_argument, "offload: " + std::to_string(kept.size()) +
                                                         " window tokens mapped; the requested size should be a "
                                                         "multiple of the page size " + std::to_string(ps));
    std::vector<std::int64_t> pages;
    for (std::int64_t t : kept)
      if (pages.empty() || pages.back() != t / ps) pages.push_back(t / ps);
    return pages;
  }

  // SPEC 10.11: compaction pairs survivors and holes out of order (survivors descending).
  std::vector<sim::PagePair> pair_for_compaction(const std::vector<std::int64_t>& survivors,
                                                 const std::vector<std::int64_t>& holes) const override {
    if (fault_ != "model_pairing_out_of_order") return sim::Model::pair_for_compaction(survivors, holes);
    std::vector<std::int64_t> reversed(survivors.rbegin(), survivors.rend());
    return sim::Model::pair_for_compaction(reversed, holes);
  }

  // SPEC 11's make_room: the float's envelopes copied in source order, so a page moving up lands
  // on the next live page before that one has left.
  std::vector<sim::PagePair> float_copy_order(const std::vector<sim::PagePair>& moves) const override {
    if (fault_ != "model_float_relocation_overwrites") return sim::Model::float_copy_order(moves);
    std::vector<sim::PagePair> by_source = moves;
    std::sort(by_source.begin(), by_source.end(), [](const sim::PagePair& a, const sim::PagePair& b) { return a.src < b.src; });
    return by_source;
  }

  // SPEC 10.22: a state slot moved away from under a reader is reused at once.
  bool state_slot_quarantined(std::int64_t physical_slot) const override {
    if (fault_ != "model_state_reuse_before_readers_done") return sim::Model::state_slot_quarantined(physical_slot);
    return false;
  }

 private:
  // A read's answer with every non-sink row taken from the shape-stride address (the model
  // validated the read already).
  Bytes shape_stride_read(const Read& read) const {
    const PoolDerived& d = derived();
    const LayerPlacement& place = d.plan.layer_map[read.layer];
    const DenseEntryLayout& layout = d.layouts[place.sub_pool];
    const std::size_t part = *layout.part_index(read.part);
    const std::uint64_t row = layout.parts[part].row_bytes();
    const std::uint64_t sink_end = d.geometry.sub_pools[place.sub_pool].min_page_index * config().page_size;
    const std::span<const std::uint8_t> pool = *bytes_view();
    std::vector<std::uint8_t> data;
    for (std::int64_t id : read.ids) {
      if (static_cast<std::uint64_t>(id) < sink_end) {
        data.insert(data.end(), row, 0);
        continue;
      }
      const std::uint64_t at = shape_stride_row_address(layout, config().page_size, id, part, place.local_layer);
      data.insert(data.end(), pool.begin() + static_cast<std::ptrdiff_t>(at),
                  pool.begin() + static_cast<std::ptrdiff_t>(at + row));
    }
    return Bytes::of(std::move(data));
  }

  // The decode step's attention as the model computes it, over rows at the shape-stride address.
  std::vector<std::uint8_t> shape_stride_attention(const Replay& replay, const Decode& decode) const {
    const Capture& shape = captures_.at(replay.graph);
    const PoolDerived& d = derived();
    const LayerPlacement& place = d.plan.layer_map[shape.layer];
    const SubPoolSpec& spec = d.plan.sub_pools[place.sub_pool];
    const DenseEntryLayout& layout = d.layouts[place.sub_pool];
    const bool mla = spec.kind == SubPoolKind::mla;
    sim::AttentionShape a;
    a.layout = &layout;
    a.k_part = *layout.part_index(mla ? "kv" : "k");
    a.v_part = *layout.part_index(mla ? "kv" : "v");
    a.local_layer = place.local_layer;
    a.kv_heads = spec.heads_per_rank;
    a.k_head_dim = spec.k_head_dim;
    a.v_head_dim = spec.v_head_dim;
    a.query_heads = shape.query_heads;
    a.page_size = static_cast<std::int64_t>(config().page_size);
    std::vector<std::int64_t> lengths;
    for (const auto& tokens : replay.requests) lengths.push_back(static_cast<std::int64_t>(tokens.size()));
    std::vector<std::vector<std::int64_t>> table(decode.table.begin(),
                                                 decode.table.begin() + static_cast<std::ptrdiff_t>(lengths.size()));
    const std::span<const std::uint8_t> pool = *bytes_view();
    const std::uint64_t ps = config().page_size;
    const sim::AttentionRowAt row_at = [&](std::int64_t pt, std::size_t part) {
      const std::uint64_t at = shape_stride_row_address(layout, ps, pt, part, a.local_layer);
      return pool.subspan(at, layout.parts[part].row_bytes());
    };
    return sim::reference_decode_attention(row_at, a, table, lengths, replay.query_seed);
  }

  std::string fault_;
  std::string name_;
  std::optional<PlantedSizingHold> sizing_bug_;
  std::map<std::uint32_t, Capture> captures_;  // model_attention_stride_from_shape: graph -> its capture
};

}  // namespace

std::string_view backend_choice_name(BackendChoice c) {
  switch (c) {
    case BackendChoice::model:
      return "model";
    case BackendChoice::gpu:
      return "gpu";
    case BackendChoice::both:
      return "both";
  }
  return "model";
}

Result<BackendChoice> parse_backend_choice(std::string_view name) {
  for (BackendChoice c : {BackendChoice::model, BackendChoice::gpu, BackendChoice::both})
    if (backend_choice_name(c) == name) return c;
  return make_error(ErrorKind::invalid_argument, "unknown backend '" + printable(name) + "'; use model, gpu or both");
}

#if KVTWIN_HAVE_GPU
bool gpu_backend_built() { return true; }
bool gpu_device_available() { return gpu::cuda_device_available(); }
std::string gpu_unavailable_reason() {
  if (gpu_device_available()) return "";
  return gpu::cuda_device_description() + "; use --backend model (or run where a CUDA device is)";
}
Status gpu_context_health() { return gpu::cuda_context_health(); }
#else
bool gpu_backend_built() { return false; }
bool gpu_device_available() { return false; }
Status gpu_context_health() { return ok_status(); }
std::string gpu_unavailable_reason() {
  return "GPU backend not built: this kvtwin was configured without CUDA (KVTWIN_WITH_CUDA=OFF); use --backend "
         "model";
}
#endif

// The model's planted faults; the GPU's come from gpu/faults.h.
const std::vector<FaultInfo>& model_faults() {
  static const std::vector<FaultInfo> kFaults = {
      {"model_alloc_many_partial", FaultSite::model, "14", "alloc_many leaves its first request allocated on no room"},
      {"model_compaction_ignores_transfers", FaultSite::model, "20",
       "device moves and host compaction run while transfers are in flight"},
      {"model_swa_offload_token_filter", FaultSite::model, "21",
       "the sliding-window offload filters single tokens (swa_loc > 0), not whole bound pages"},
      {"model_transfer_before_producer_event", FaultSite::model, "13",
       "a transfer's copy does not wait for its producer's event (the wait_event)"},
      {"model_transfer_logical_as_physical", FaultSite::model, "19",
       "a transfer uses host logical (cache) ids as physical host pages"},
      {"model_store_zero_pages_as_all", FaultSite::model, "15",
       "the storage tier keys a store of the last 0 pages as every page (hashes[-0:]), so pages never sent are stored"},
      {"model_store_ignores_format_tag", FaultSite::model, "16",
       "the storage space is the model name alone, without the format tag: a page-major page reads back token-major"},
      {"model_attention_stride_from_shape", FaultSite::model, "8",
       "the decode attention takes the in-page token stride from the row shape, not the entry"},
      {"model_drop_free_swa", FaultSite::model, "10", "free_swa is acknowledged but no tombstone is made"},
      {"model_float_relocation_overwrites", FaultSite::model, "",
       "the float's make_room copies its pages in source order, overwriting a page moving up before it has left"},
      {"model_negative_not_sink", FaultSite::model, "9", "translate passes a negative id through instead of the sink"},
      {"model_one_sided_floor", FaultSite::model, "",
       "core sizes the reserved floor from the first sub-pool of the chain only (every backend shares it)"},
      {"model_pairing_out_of_order", FaultSite::model, "11", "compaction pairs survivors (descending) with holes"},
      {"model_read_stride_from_shape", FaultSite::model, "8",
       "a read takes the in-page token stride from the row shape, not the entry"},
      {"model_row_address_32bit", FaultSite::model, "18",
       "core computes a row's byte address in 32 bits, wrapping past 4 GiB (every backend shares it)"},
      {"model_skipped_write_lane", FaultSite::model, "", "the write door skips the last lane of a multi-lane write"},
      {"model_stale_write", FaultSite::model, "", "the write door puts down the previous write's rows"},
      {"model_state_entry_padded", FaultSite::model, "23",
       "the state entry is padded to 32 bytes as a token entry (core's state layout), so views and budget grow"},
      {"model_state_reuse_before_readers_done", FaultSite::model, "22",
       "a state slot compaction moved away from under a reader is reused before the reader is done"},
      {"model_state_sink_per_page", FaultSite::model, "23",
       "the state entry is charged page_size times in the sink (core's reserved floor counts page_size * E_state)"},
      {"model_wrong_refusal_reason", FaultSite::model, "",
       "free_swa of a page already out of the window is refused as a page never allocated"},
  };
  return kFaults;
}

std::string_view fault_site_name(FaultSite site) { return site == FaultSite::model ? "model" : "gpu"; }

std::vector<FaultInfo> fault_catalogue() {
  std::vector<FaultInfo> all = model_faults();
#if KVTWIN_HAVE_GPU
  for (const gpu::FaultInfo& f : gpu::fault_catalogue())
    all.push_back(FaultInfo{std::string(f.name), FaultSite::gpu, f.spec_class == 0 ? "" : std::to_string(f.spec_class),
                            std::string(f.what)});
#endif
  return all;
}

std::vector<std::string> planted_faults() {
  std::vector<std::string> names;
  for (const FaultInfo& f : model_faults()) names.push_back(f.name);
  return names;
}

std::string FaultChoice::joined() const {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

namespace {
Result<FaultChoice> parse_faults(std::string_view text, bool one_site) {
  FaultChoice choice;
  const std::vector<FaultInfo> known = fault_catalogue();
  bool have_site = false;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string name(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (name.empty()) continue;
    const auto it = std::find_if(known.begin(), known.end(), [&](const FaultInfo& f) { return f.name == name; });
    if (it == known.end()) {
      std::string list;
      for (const FaultInfo& f : known) list += (list.empty() ? "" : ", ") + f.name;
      return make_error(ErrorKind::invalid_argument, "unknown fault '" + name + "'; known faults (kvtwin faults): " + list +
                                                         (gpu_backend_built() ? "" : " (GPU faults: GPU backend not built)"));
    }
    if (one_site && have_site && it->site != choice.site)
      return make_error(ErrorKind::invalid_argument, "faults '" + choice.joined() + "' and '" + name +
                                                         "' live in different backends; plant model faults or GPU faults, not both");
    choice.site = it->site;
    have_site = true;
    choice.names.push_back(name);
  }
  return choice;
}
}  // namespace

Result<FaultChoice> parse_fault_choice(std::string_view text) { return parse_faults(text, true); }
Result<FaultChoice> parse_fault_choice_any_site(std::string_view text) { return parse_faults(text, false); }

Player model_player(sim::Model& m) {
  Player p;
  p.backend = &m;
  p.verify = [&m] { return m.verify(); };
  p.verify_changed = [&m] { return m.verify_changed(); };
  p.verify_checks_tables = true;
  p.describe_byte = [&m](std::uint64_t byte) -> std::string {
    Result<sim::ByteOwner> owner = m.locate_byte(byte);
    return owner.ok() ? owner->describe() : owner.error().message;
  };
  p.touched = [&m] { return m.touched_bytes(); };
  p.touched_digest = [&m] { return m.touched_digest(); };
  p.state_digest = [&m] { return m.state_digest(false); };  // bytes: touched_bytes() says what was written
  return p;
}

Result<std::unique_ptr<sim::Model>> make_planted_model(std::string_view fault) {
  const std::vector<std::string> known = planted_faults();
  if (std::find(known.begin(), known.end(), fault) == known.end())
    return make_error(ErrorKind::invalid_argument, "'" + std::string(fault) + "' is not a model fault");
  return std::unique_ptr<sim::Model>(std::make_unique<PlantedModel>(std::string(fault)));
}

std::string BackendSet::names() const {
  std::string s;
  for (const Player& p : players) s += (s.empty() ? "" : "+") + std::string(p.backend->name());
  return s;
}

bool gpu_host_ops_requested() {
  const char* host_ops = std::getenv("KVTWIN_GPU_HOST_OPS");
  return host_ops == nullptr || std::string_view(host_ops) != "0";
}

Result<BackendSet> make_backend_set(BackendChoice choice, const std::string& fault, const BackendOptions& options) {
  KVTWIN_TRY(const FaultChoice faults, parse_fault_choice(fault));
  const bool model_fault = !faults.names.empty() && faults.site == FaultSite::model;
  const bool gpu_fault = !faults.names.empty() && faults.site == FaultSite::gpu;
  if (model_fault && faults.names.size() > 1)
    return make_error(ErrorKind::invalid_argument, "plant one model fault at a time ('" + faults.joined() + "')");
  if (gpu_fault && choice == BackendChoice::model)
    return make_error(ErrorKind::invalid_argument, "fault '" + faults.joined() +
                                                       "' is a GPU switch; use --backend gpu or both (or a model_ fault)");
  if (model_fault && choice == BackendChoice::gpu)
    return make_error(ErrorKind::invalid_argument,
                      "fault '" + faults.joined() + "' is planted in the model; use --backend model or both");
  BackendSet set;
  if (choice != BackendChoice::gpu) {
    std::unique_ptr<sim::Model> model =
        model_fault ? std::make_unique<PlantedModel>(faults.names.front()) : std::make_unique<sim::Model>();
    model->set_storage_parent(options.storage_parent);
    set.players.push_back(model_player(*model));
    set.owned.push_back(std::move(model));
  }
  if (choice != BackendChoice::model) {
    // The GPU has its host arena and transfers (docs/gpu.md); KVTWIN_GPU_HOST_OPS=0 leaves host
    // operations out of runs with the GPU (generators emit none, kvtwin check skips such traces).
    set.host_ops = gpu_host_ops_requested();
    if (!gpu_backend_built() || !gpu_device_available())
      return make_error(ErrorKind::unsupported, gpu_unavailable_reason());
#if KVTWIN_HAVE_GPU
    Result<gpu::Faults> switches = gpu::parse_faults(gpu_fault ? faults.joined() : "");
    if (!switches.ok()) return switches.error();
    std::unique_ptr<Backend> device = gpu::make_gpu_backend(*switches, options.storage_parent);
    Player p;
    p.backend = device.get();
    // The GPU's own invariant check: its host counters against its device tables.
    p.verify = [backend = device.get()] { return gpu::verify_gpu_backend(*backend); };
    p.verify_with_tables = [backend = device.get()](std::optional<PoolTables>& tables_read) {
      return gpu::verify_gpu_backend(*backend, tables_read);
    };
    // Beside the model, its tables are compared with the model's verified ones by digest after
    // every op (Runner::check_tables), which covers its host counters too; its own check, which
    // downloads every table, runs at checkpoints and at the end. Alone, it runs at its cadence.
    p.verify_at_checkpoints_only = choice == BackendChoice::both;
    set.players.push_back(p);
    set.owned.push_back(std::move(device));
#endif
  }
  return set;
}

}  // namespace kvtwin::traces
