// What `kvtwin layout` shows, computed once and rendered three ways (text, JSON, SVG).
//
// build_layout_report() takes a model shape and the pool options, runs the byte law of core/
// (plan_sub_pools -> SubPoolSpec::layout -> size_pool, per_layer_view / paged_view for every
// layer of every part, PageMajorLaw) and keeps every number the renderers print, so the three
// outputs cannot disagree. The renderers only format; they compute nothing of their own beyond
// the formula strings and the drawing's coordinates.
//
// Not covered here: argument parsing and exit codes (cmd_layout.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/model.h"
#include "core/pool_config.h"
#include "core/result.h"
#include "core/sizing.h"

namespace kvtwin::cli {

inline constexpr std::uint64_t kDefaultPageSize = 64;
inline constexpr std::uint64_t kDefaultTotalBytes = 4294967296ULL;  // 4 GiB
inline constexpr int kLayoutJsonVersion = 1;

struct LayoutOptions {
  std::uint32_t tp = 1;
  std::uint64_t page_size = kDefaultPageSize;
  std::uint64_t total_bytes = kDefaultTotalBytes;
  std::optional<DType> dtype;  // overrides the model's dtype when set
};

// One layer's views of one part.
struct LayerViews {
  std::uint32_t layer = 0;
  std::uint64_t offset_bytes = 0;  // part.offset + layer * part.layer_stride, inside the entry
  ViewDescriptor per_layer;        // (max_slots, heads, head_dim)
  ViewDescriptor paged;            // (num_pages, page_size, heads, head_dim)
};

struct PartReport {
  DensePart part;
  std::uint64_t row_bytes = 0;
  std::vector<LayerViews> layers;  // one per layer, in order
  std::string formula;             // byte(pt, k, l) = pt * E + offset + l * stride, numbers filled in
};

struct SubPoolReport {
  SubPoolSpec spec;
  DenseEntryLayout layout;
  SubPoolGeometry geometry;
  std::vector<std::uint32_t> model_layers;  // model layer indices that live here, ascending
  std::uint64_t row_bytes_total = 0;        // bytes of the entry that hold rows
  std::uint64_t padding_bytes = 0;          // entry_bytes - row_bytes_total
  std::uint64_t first_usable_byte = 0;      // min_page_index * page_bytes
  std::vector<PartReport> parts;
  std::optional<PageMajorLaw> page_major;   // absent when the law cannot express this entry
  std::string page_major_note;              // why it is absent, or how it compares
};

// SPEC 11: the state sub-pool of a hybrid chain, one slot per request.
struct StateBlockReport {
  StateBlock block;
  std::string formula;                 // byte(slot, block, l) = slot * E_state + offset + l * stride
  std::vector<ViewDescriptor> views;   // one per layer: (max_slots, *shape)
};

struct StateReport {
  StateEntryLayout layout;
  SubPoolGeometry geometry;            // page size 1, grows up
  std::vector<StateBlockReport> blocks;
  std::string entry_formula;           // E_state = L * (conv bytes) + L * temporal = ...
  std::uint64_t token_cost = 0;        // ceil(E_state / sum of token entries)
  std::uint64_t boot_floor_bytes = 0;  // 3 * E_state plus a page of every token sub-pool, above the floor
  std::uint64_t first_usable_byte = 0;
};

struct LayoutReport {
  ModelShape shape;  // after the dtype override
  LayoutOptions options;
  PoolGeometry geometry;
  std::vector<SubPoolReport> sub_pools;  // chain order: [up] or [up, down]
  // Composite pools: the bytes between the up side's first usable page and the down side's top.
  std::optional<std::uint64_t> initial_gap_bytes;
  // The chain low end first (["full"], ["full", "swa"], ["state", "swa", "full"], ...) and the
  // state sub-pool of a hybrid one.
  std::vector<std::string> chain;
  std::optional<StateReport> state;
};

// Computes everything; an error names the model, the sub-pool and the way out (from core/).
Result<LayoutReport> build_layout_report(const ModelShape& shape, const LayoutOptions& options);

// The full human-readable report.
std::string render_text(const LayoutReport& report);
// The same, machine-readable (keys documented in docs/layout-json.md).
nlohmann::json render_json(const LayoutReport& report);
// A self-contained SVG: the entry's byte map per sub-pool and one page of entries.
std::string render_svg(const LayoutReport& report);

// `kvtwin layout --all`: one header and one line per sub-pool.
std::string render_compact_header();
std::string render_compact_rows(const LayoutReport& report);

// `kvtwin layout --list`.
std::string render_catalogue_text(const std::vector<ModelShape>& catalogue);
nlohmann::json render_catalogue_json(const std::vector<ModelShape>& catalogue);

// "0-31", "1, 3, 5, 7", "0, 5-9": model layer lists, short.
std::string format_index_ranges(const std::vector<std::uint32_t>& indices);

}  // namespace kvtwin::cli
