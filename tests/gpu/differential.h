// The differential check: the reference model and the CUDA implementation play the same
// operations, and after each one their answers and allocator tables must be equal; at
// checkpoints and at the end their whole raw pools must be equal, page by page (a digest per
// page; on a mismatch the first differing page, slot, layer, part and byte, both values, and
// what the content oracle expected there).
//
// Used by the RapidCheck differential property and by the fault-switch reproducers, so that
// "the default check catches it" means exactly this check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/op.h"
#include "gpu/gpu_pool.h"
#include "sim/model.h"

namespace kvtwin::gpu::testing {

// The two systems side by side.
struct Twin {
  sim::Model model;
  GpuPool gpu;
  std::uint64_t steps = 0;
  std::uint64_t pool_comparisons = 0;

  explicit Twin(const Faults& faults = {}) : gpu(faults) {}
};

// Equal answers: the same outcome, or errors of the same kind. Otherwise both, in trace syntax.
std::optional<std::string> result_difference(const OpResult& model, const OpResult& gpu);

// Equal tables, or the first differing field.
std::optional<std::string> table_difference(const PoolTables& model, const PoolTables& gpu);

// Equal raw pools (from the reserved floor to the end; the sink's bytes are never data), or the
// first differing page and byte, described. Nothing to compare for a tables-only pool.
std::optional<std::string> pool_difference(const sim::Model& model, const GpuPool& gpu);

// Plays one operation on both and checks answers, tables and the GPU's own invariants
// (GpuPool::verify: host counters against device tables), and whole pools at a checkpoint, or
// always when `compare_pools`. Returns the divergence, described with the operation.
std::optional<std::string> step(Twin& twin, const Op& op, bool compare_pools = false);

}  // namespace kvtwin::gpu::testing
