// A pool's configuration: the model shape, how it is divided and paged, how many bytes the
// pool has, the compaction mode and the oracle seed. Everything a backend needs to build the
// same pool; a trace header carries it whole (the shape included, so a trace stands alone).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/layout.h"
#include "core/model.h"
#include "core/result.h"
#include "core/sizing.h"

namespace kvtwin {

enum class CompactionMode : std::uint8_t { eager, lazy };

// The most tensor-parallel ranks a pool may be split over (every command and reader agrees).
inline constexpr std::uint64_t kMaxTensorParallel = 1024;

struct PoolConfig {
  ModelShape shape;
  std::uint32_t tp = 1;
  std::uint64_t page_size = 1;
  std::uint64_t total_bytes = 0;
  CompactionMode mode = CompactionMode::eager;
  bool tables_only = false;   // no bytes: tables and decisions only (real-scale replays)
  std::uint64_t seed = 0;     // content oracle seed
  // Bytes of the pinned host arena shared by the full and SWA sides (SPEC 8); 0: no host arena
  // (host operations are refused). A trace writes it only when it is not 0.
  std::uint64_t host_bytes = 0;
  // Capacity in page-file bytes of the storage tier below the host arena (docs/storage.md); 0: no
  // storage tier (store_pages and load_stored are refused). Needs a host arena. Written when not 0.
  std::uint64_t storage_bytes = 0;
  // The chain of sub-pools in the buffer, low end first (SPEC 3, 11): empty for the model's own
  // chain. A hybrid model's is ["state", "full"], ["state", "mla"] or ["state", "swa", "full"];
  // its token chain alone (["full"], ["full", "swa"], ["mla"]) drops the state sub-pool.
  std::vector<std::string> chain = {};

  bool operator==(const PoolConfig&) const = default;
};

// Everything derived from a configuration: sub-pool plan, layouts, geometry.
struct PoolDerived {
  PoolPlan plan;
  std::vector<DenseEntryLayout> layouts;  // one per sub-pool, in chain order
  PoolGeometry geometry;
  // Hybrid chains (SPEC 11): the state entry, and the chain as built (low end first).
  std::optional<StateEntryLayout> state_layout = {};
  std::vector<std::string> chain = {};

  bool is_composite() const { return layouts.size() == 2; }
  bool has_state() const { return state_layout.has_value(); }
  // The tri-pool [state up | swa float | owner down]: the SWA sub-pool is a float middle.
  bool has_float() const { return has_state() && is_composite(); }
  // Sub-pool index by name ("full", "swa", "mla"); nullopt when absent.
  std::optional<std::size_t> sub_pool_index(std::string_view name) const;
};

Result<PoolDerived> derive_pool(const PoolConfig& config);

// The chain a model builds by default, low end first: its token sub-pools, behind "state" when it
// has a recurrent state (SPEC 11): ["full"], ["full", "swa"], ["mla"], ["state", "full"],
// ["state", "mla"], ["state", "swa", "full"].
std::vector<std::string> default_chain(const PoolPlan& plan);
// The token sub-pools alone (a hybrid model without its state): ["full"], ["full", "swa"], ["mla"].
std::vector<std::string> token_chain(const PoolPlan& plan);
std::string chain_text(const std::vector<std::string>& chain);

nlohmann::json pool_config_to_json(const PoolConfig& config);
// "model" may be a catalogue name or a full shape object. `where` prefixes errors.
Result<PoolConfig> pool_config_from_json(const nlohmann::json& j, std::string_view where);

}  // namespace kvtwin
