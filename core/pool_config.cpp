// Pool configuration: derivation and JSON.
#include "core/pool_config.h"

#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/json_fields.h"
#include "core/printable.h"

namespace kvtwin {

std::optional<std::size_t> PoolDerived::sub_pool_index(std::string_view name) const {
  for (std::size_t i = 0; i < layouts.size(); ++i)
    if (layouts[i].sub_pool == name) return i;
  return std::nullopt;
}

std::vector<std::string> token_chain(const PoolPlan& plan) {
  std::vector<std::string> token;
  for (const SubPoolSpec& s : plan.sub_pools) token.push_back(s.name);
  return token;
}

std::vector<std::string> default_chain(const PoolPlan& plan) {
  const std::vector<std::string> token = token_chain(plan);
  if (!plan.state) return token;
  // SPEC 11: [state up | owner down] or [state up | swa float | owner down].
  std::vector<std::string> chain{"state"};
  for (std::size_t i = token.size(); i-- > 0;) chain.push_back(token[i]);
  return chain;
}

std::string chain_text(const std::vector<std::string>& chain) {
  std::string out = "[";
  for (std::size_t i = 0; i < chain.size(); ++i) out += (i ? ", " : "") + chain[i];
  return out + "]";
}

Result<PoolDerived> derive_pool(const PoolConfig& config) {
  PoolDerived d;
  if (config.tp > kMaxTensorParallel)
    return make_error(ErrorKind::invalid_argument, "tensor-parallel size " + std::to_string(config.tp) +
                                                       " is more than " + std::to_string(kMaxTensorParallel) +
                                                       " ranks; use --tp 1 .. " + std::to_string(kMaxTensorParallel));
  KVTWIN_TRY(d.plan, plan_sub_pools(config.shape, config.tp));
  for (const SubPoolSpec& s : d.plan.sub_pools) {
    KVTWIN_TRY(DenseEntryLayout layout, s.layout());
    d.layouts.push_back(std::move(layout));
  }
  // The chain: the model's own, or (for a hybrid model) its token chain alone.
  const std::vector<std::string> own = default_chain(d.plan);
  const std::vector<std::string> token = token_chain(d.plan);
  d.chain = config.chain.empty() ? own : config.chain;
  if (d.chain != own && d.chain != token)
    return make_error(ErrorKind::invalid_argument,
                      "chain " + chain_text(config.chain) + " does not fit model '" + config.shape.name +
                          "': its chain is " + chain_text(own) +
                          (own != token ? " (or " + chain_text(token) + " without its state)" : std::string()) +
                          "; give one of those, or leave 'chain' out");
  if (d.plan.state && d.chain == own) {
    KVTWIN_TRY(StateEntryLayout state, state_entry_layout(*d.plan.state));
    d.state_layout = std::move(state);
  }
  KVTWIN_TRY(d.geometry, size_pool(d.layouts, config.page_size, config.total_bytes,
                                   d.state_layout ? &*d.state_layout : nullptr));
  return d;
}

nlohmann::json pool_config_to_json(const PoolConfig& c) {
  nlohmann::json j;
  j["model"] = shape_to_json(c.shape);
  j["tp"] = c.tp;
  j["page_size"] = c.page_size;
  j["total_bytes"] = c.total_bytes;
  j["mode"] = c.mode == CompactionMode::lazy ? "lazy" : "eager";
  j["tables_only"] = c.tables_only;
  j["seed"] = c.seed;
  if (c.host_bytes != 0) j["host_bytes"] = c.host_bytes;  // configurations before the host arena read as 0
  if (c.storage_bytes != 0) j["storage_bytes"] = c.storage_bytes;  // and before the storage tier
  if (!c.chain.empty()) j["chain"] = c.chain;
  return j;
}

Result<PoolConfig> pool_config_from_json(const nlohmann::json& j, std::string_view where) {
  JsonFields f(j, where);
  KVTWIN_TRY_STATUS(f.only({"model", "tp", "page_size", "total_bytes", "mode", "tables_only", "seed", "host_bytes", "storage_bytes",
                             "chain"}));
  PoolConfig c;
  if (!j.is_object() || !j.contains("model")) return f.error("missing field 'model' (a catalogue name or a shape object)");
  const nlohmann::json& m = j.at("model");
  if (m.is_string()) {
    auto shape = find_model(m.get<std::string>());
    if (!shape.ok()) return shape.error().with_context(std::string(where) + ": ");
    c.shape = std::move(shape).value();
  } else {
    KVTWIN_TRY(c.shape, shape_from_json(m, std::string(where) + " model"));
  }
  KVTWIN_TRY(std::uint64_t tp, f.u64("tp", 1));
  if (tp == 0 || tp > kMaxTensorParallel)
    return f.error("field 'tp' = " + std::to_string(tp) + " is out of range (1 .. " +
                   std::to_string(kMaxTensorParallel) + ")");
  c.tp = static_cast<std::uint32_t>(tp);
  KVTWIN_TRY(c.page_size, f.u64_required("page_size"));
  KVTWIN_TRY(c.total_bytes, f.u64_required("total_bytes"));
  KVTWIN_TRY(std::string mode, f.string("mode", "eager"));
  if (mode != "eager" && mode != "lazy") return f.error("field 'mode' is '" + printable(mode) + "'; use \"eager\" or \"lazy\"");
  c.mode = mode == "lazy" ? CompactionMode::lazy : CompactionMode::eager;
  KVTWIN_TRY(c.tables_only, f.boolean("tables_only", false));
  KVTWIN_TRY(c.seed, f.u64("seed", 0));
  KVTWIN_TRY(c.host_bytes, f.u64("host_bytes", 0));
  KVTWIN_TRY(c.storage_bytes, f.u64("storage_bytes", 0));
  if (c.storage_bytes != 0 && c.host_bytes == 0)
    return f.error("field 'storage_bytes' = " + std::to_string(c.storage_bytes) +
                   " needs a host arena: the storage tier stores host pages (give 'host_bytes' too)");
  // Configurations written before hybrid chains have no 'chain': the model's own chain.
  if (j.contains("chain")) {
    const nlohmann::json& chain = j.at("chain");
    if (!chain.is_array() || chain.size() > 3)
      return f.error("field 'chain' must be an array of at most 3 sub-pool names, low end first (e.g. [\"state\", \"full\"])");
    for (const nlohmann::json& name : chain) {
      if (!name.is_string()) return f.error("field 'chain' must hold sub-pool names (strings)");
      const std::string n = name.get<std::string>();
      if (n != "state" && n != "full" && n != "swa" && n != "mla")
        return f.error("field 'chain' names an unknown sub-pool '" + printable(n) + "'; known: state, full, swa, mla");
      c.chain.push_back(n);
    }
  }
  return c;
}

}  // namespace kvtwin
