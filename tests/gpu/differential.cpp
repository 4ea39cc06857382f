// The differential check (differential.h).
#include "tests/gpu/differential.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "core/oracle.h"

namespace kvtwin::gpu::testing {
namespace {

std::string join(const std::vector<std::int64_t>& v, std::size_t at_most = 40) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size() && i < at_most; ++i) out += (i ? "," : "") + std::to_string(v[i]);
  if (v.size() > at_most) out += ",...";
  return out + "]";
}

std::string hex(std::uint8_t b) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", b);
  return text;
}

}  // namespace

std::optional<std::string> result_difference(const OpResult& model, const OpResult& gpu) {
  if (same_result(model, gpu)) return std::nullopt;
  return "answers differ: model " + to_string(model) + (model.ok() ? "" : " (" + model.error().message + ")") +
         ", gpu " + to_string(gpu) + (gpu.ok() ? "" : " (" + gpu.error().message + ")");
}

std::optional<std::string> table_difference(const PoolTables& a, const PoolTables& b) {
  if (a.sides.size() != b.sides.size())
    return "the model has " + std::to_string(a.sides.size()) + " sides, the gpu " + std::to_string(b.sides.size());
  for (std::size_t i = 0; i < a.sides.size(); ++i) {
    const SideTables& m = a.sides[i];
    const SideTables& g = b.sides[i];
    const std::string side = "side '" + m.name + "' ";
    if (m.name != g.name) return side + "is named '" + g.name + "' on the gpu";
    for (std::size_t v = 0; v < std::max(m.v2p.size(), g.v2p.size()); ++v)
      if (v >= m.v2p.size() || v >= g.v2p.size() || m.v2p[v] != g.v2p[v])
        return side + "v2p[" + std::to_string(v) + "]: model " + (v < m.v2p.size() ? std::to_string(m.v2p[v]) : "-") +
               ", gpu " + (v < g.v2p.size() ? std::to_string(g.v2p[v]) : "-");
    for (std::size_t p = 0; p < std::max(m.p2v.size(), g.p2v.size()); ++p)
      if (p >= m.p2v.size() || p >= g.p2v.size() || m.p2v[p] != g.p2v[p])
        return side + "p2v[" + std::to_string(p) + "]: model " + (p < m.p2v.size() ? std::to_string(m.p2v[p]) : "-") +
               ", gpu " + (p < g.p2v.size() ? std::to_string(g.p2v[p]) : "-");
    if (m.free_queue != g.free_queue) return side + "free queue: model " + join(m.free_queue) + ", gpu " + join(g.free_queue);
    if (m.watermark != g.watermark)
      return side + "watermark: model " + std::to_string(m.watermark) + ", gpu " + std::to_string(g.watermark);
    if (m.holes != g.holes) return side + "holes: model " + join(m.holes) + ", gpu " + join(g.holes);
    if (m.allocated_pages != g.allocated_pages)
      return side + "allocated pages: model " + std::to_string(m.allocated_pages) + ", gpu " +
             std::to_string(g.allocated_pages);
  }
  return std::nullopt;
}

std::optional<std::string> pool_difference(const sim::Model& model, const GpuPool& gpu) {
  if (!model.built() || model.config().tables_only) return std::nullopt;
  const PoolDerived& d = model.derived();
  const std::uint64_t total = model.config().total_bytes;
  const std::uint64_t floor = d.geometry.reserved_floor_bytes;
  const Result<std::vector<std::uint8_t>> m = model.raw_bytes(0, total);
  const Result<std::vector<std::uint8_t>> g = gpu.raw_bytes(0, total);
  if (!m.ok() || !g.ok())
    return "raw bytes unavailable: model " + (m.ok() ? std::string("ok") : m.error().message) + ", gpu " +
           (g.ok() ? std::string("ok") : g.error().message);
  // Page by page (the first sub-pool's envelopes), one digest each.
  const std::uint64_t page = d.geometry.sub_pools[0].page_bytes;
  for (std::uint64_t begin = floor; begin < total; begin += page) {
    const std::uint64_t len = std::min(page, total - begin);
    const std::span<const std::uint8_t> a(m->data() + begin, len), b(g->data() + begin, len);
    if (digest_bytes(a) == digest_bytes(b) && std::equal(a.begin(), a.end(), b.begin())) continue;
    const auto diff = std::mismatch(a.begin(), a.end(), b.begin());
    const std::uint64_t at = begin + static_cast<std::uint64_t>(diff.first - a.begin());
    std::string where = "byte " + std::to_string(at) + " (in page envelope " + std::to_string(begin / page) + " of '" +
                        d.layouts[0].sub_pool + "')";
    if (const Result<sim::ByteOwner> owner = model.locate_byte(at); owner.ok()) where += ": " + owner->describe();
    return "pools differ at " + where + ": model " + hex(*diff.first) + ", gpu " + hex(*diff.second);
  }
  return std::nullopt;
}

std::optional<std::string> step(Twin& twin, const Op& op, bool compare_pools) {
  ++twin.steps;
  const OpResult m = twin.model.apply(op);
  const OpResult g = twin.gpu.apply(op);
  const std::string what = "step " + std::to_string(twin.steps) + " " + to_string(op) + ": ";
  if (auto d = result_difference(m, g)) return what + *d;
  const Result<PoolTables> tm = twin.model.tables();
  const Result<PoolTables> tg = twin.gpu.tables();
  if (tm.ok() != tg.ok()) return what + "tables available on one side only";
  if (tm.ok())
    if (auto d = table_difference(*tm, *tg)) return what + "tables differ: " + *d;
  // The GPU's own check: its host counters against its device tables.
  if (const Status v = twin.gpu.verify(); !v.ok()) return what + v.error().message;
  if (compare_pools || std::holds_alternative<Checkpoint>(op)) {
    ++twin.pool_comparisons;
    if (auto d = pool_difference(twin.model, twin.gpu)) return what + *d;
  }
  return std::nullopt;
}

}  // namespace kvtwin::gpu::testing
