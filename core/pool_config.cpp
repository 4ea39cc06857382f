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
  KVTWIN_TRY(d.geometry, size_pool(d.layouts, config.page_size, config.total_bytes));
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
  return j;
}

Result<PoolConfig> pool_config_from_json(const nlohmann::json& j, std::string_view where) {
  JsonFields f(j, where);
  KVTWIN_TRY_STATUS(f.only({"model", "tp", "page_size", "total_bytes", "mode", "tables_only", "seed", "host_bytes"}));
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
  return c;
}

}  // namespace kvtwin
