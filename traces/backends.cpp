// Backend selection and the model's planted faults (backends.h).
#include "traces/backends.h"

#include <algorithm>

#include "core/printable.h"
#include "sim/model.h"

#if KVTWIN_HAVE_GPU
#include "gpu/gpu_backend.h"
#endif

namespace kvtwin::traces {
namespace {

// The reference model with one named bug planted, for self-tests of the harness: every fault is
// a real bug class of SPEC.md section 10, and a run that pairs this copy with the plain model
// must catch it.
class PlantedModel : public sim::Model {
 public:
  explicit PlantedModel(std::string fault) : fault_(std::move(fault)), name_("model+" + fault_) {}

  std::string_view name() const override { return name_; }

  OpResult apply(const Op& op) override {
    // SPEC 10.9: a negative id is not routed to the sink (here it passes through unchanged).
    if (fault_ == "negative_not_sink") {
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
    if (fault_ == "alloc_many_partial") {
      if (const auto* m = std::get_if<AllocMany>(&op)) {
        OpResult r = sim::Model::apply(op);
        if (r.ok() && std::holds_alternative<NoRoom>(r.value()) && m->tokens.size() > 1)
          (void)sim::Model::apply(Op(Alloc{m->tokens.front()}));
        return r;
      }
    }
    // A write door that puts down another write's rows (stale content): the answer and the
    // tables are right, only the bytes are wrong.
    if (fault_ == "stale_write") {
      if (const auto* w = std::get_if<Write>(&op)) {
        Write stale = *w;
        stale.write_number = w->write_number == 0 ? 1 : w->write_number - 1;
        return sim::Model::apply(Op(stale));
      }
    }
    // SPEC 10.10 (a tombstone never made): free_swa is acknowledged but not applied.
    if (fault_ == "drop_free_swa" && std::holds_alternative<FreeSwa>(op)) return OpResult(Outcome(Compaction{}));
    return sim::Model::apply(op);
  }

 protected:
  // SPEC 10.11: compaction pairs survivors and holes out of order (survivors descending).
  std::vector<sim::PagePair> pair_for_compaction(const std::vector<std::int64_t>& survivors,
                                                 const std::vector<std::int64_t>& holes) const override {
    if (fault_ != "pairing_out_of_order") return sim::Model::pair_for_compaction(survivors, holes);
    std::vector<std::int64_t> reversed(survivors.rbegin(), survivors.rend());
    return sim::Model::pair_for_compaction(reversed, holes);
  }

 private:
  std::string fault_;
  std::string name_;
};

Player model_player(sim::Model& m) {
  Player p;
  p.backend = &m;
  p.verify = [&m] { return m.verify(); };
  p.describe_byte = [&m](std::uint64_t byte) -> std::string {
    Result<sim::ByteOwner> owner = m.locate_byte(byte);
    return owner.ok() ? owner->describe() : owner.error().message;
  };
  return p;
}

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
#else
bool gpu_backend_built() { return false; }
bool gpu_device_available() { return false; }
std::string gpu_unavailable_reason() {
  return "GPU backend not built: this kvtwin was configured without CUDA (KVTWIN_WITH_CUDA=OFF); use --backend "
         "model";
}
#endif

std::vector<std::string> planted_faults() {
  return {"alloc_many_partial", "drop_free_swa", "negative_not_sink", "pairing_out_of_order", "stale_write"};
}

std::string BackendSet::names() const {
  std::string s;
  for (const Player& p : players) s += (s.empty() ? "" : "+") + std::string(p.backend->name());
  return s;
}

Result<BackendSet> make_backend_set(BackendChoice choice, const std::string& fault) {
  BackendSet set;
  if (choice != BackendChoice::model) {
    if (!gpu_backend_built() || !gpu_device_available())
      return make_error(ErrorKind::unsupported, gpu_unavailable_reason());
#if KVTWIN_HAVE_GPU
    // The GPU's own fault switches (gpu/faults.h), by name.
    Result<gpu::Faults> faults = gpu::parse_faults(fault);
    if (!faults.ok()) return faults.error();
    if (choice == BackendChoice::both) {
      auto model = std::make_unique<sim::Model>();
      set.players.push_back(model_player(*model));
      set.owned.push_back(std::move(model));
    }
    std::unique_ptr<Backend> device = gpu::make_gpu_backend(*faults);
    Player p;
    p.backend = device.get();
    set.players.push_back(p);
    set.owned.push_back(std::move(device));
    return set;
#endif
  }
  if (!fault.empty()) {
    const std::vector<std::string> known = planted_faults();
    if (std::find(known.begin(), known.end(), fault) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return make_error(ErrorKind::invalid_argument, "unknown fault '" + fault + "'; the model can plant: " + list);
    }
  }
  auto model = std::make_unique<sim::Model>();
  set.players.push_back(model_player(*model));
  set.owned.push_back(std::move(model));
  if (!fault.empty()) {
    auto planted = std::make_unique<PlantedModel>(fault);
    set.players.push_back(model_player(*planted));
    set.owned.push_back(std::move(planted));
  }
  return set;
}

}  // namespace kvtwin::traces
