// Building and rendering the `kvtwin layout` report (layout_report.h).
//
// Every number comes from core/: the plan and layouts from plan_sub_pools / SubPoolSpec::layout,
// the sizing from size_pool, the views from per_layer_view / paged_view, the old law from
// PageMajorLaw. The text renderer prints the SPEC formulas next to their values so a reader can
// redo the arithmetic; the SVG renderer turns the same numbers into bands.
#include "tools/kvtwin/layout_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/catalogue.h"
#include "core/check.h"
#include "core/checked.h"

namespace kvtwin::cli {
namespace {

using nlohmann::json;

std::string tuple_text(const std::vector<std::int64_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + ")";
}

std::string tuple_text_u32(const std::vector<std::uint32_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + ")";
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// 4294967296 -> "4 GiB", 12779520 -> "12.19 MiB": for a reader's eye, next to the exact number.
std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0 || value == std::floor(value))
    std::snprintf(buf, sizeof buf, "%.0f %s", value, kUnits[unit]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string direction_name(GrowDirection d) { return std::string(grow_direction_name(d)); }

std::string u32_list(const std::vector<std::uint32_t>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? " x " : "") + std::to_string(v[i]);
  return out;
}

// SPEC 11: E_state = L * (conv_0 + ... ) + L * temporal, with its numbers.
std::string state_entry_formula(const StateEntryLayout& l) {
  const std::uint32_t layers = l.blocks.front().layer_num;
  std::string conv;
  for (std::size_t i = 0; i + 1 < l.blocks.size(); ++i) conv += (i ? " + " : "") + std::to_string(l.blocks[i].tensor_bytes());
  std::string out = "E_state = ";
  if (!conv.empty()) out += std::to_string(layers) + " * " + (l.blocks.size() > 2 ? "(" + conv + ")" : conv) + " + ";
  return out + std::to_string(layers) + " * " + std::to_string(l.blocks.back().tensor_bytes()) + " = " +
         std::to_string(l.entry_bytes);
}

Result<StateReport> build_state_report(const PoolDerived& d) {
  StateReport r;
  r.layout = *d.state_layout;
  r.geometry = *d.geometry.state;
  r.entry_formula = state_entry_formula(r.layout);
  r.token_cost = d.geometry.state_token_cost;
  r.boot_floor_bytes = kBootStates * r.layout.entry_bytes;
  for (const SubPoolGeometry& g : d.geometry.sub_pools) r.boot_floor_bytes += g.page_bytes;
  r.first_usable_byte = r.geometry.min_page_index * r.geometry.page_bytes;
  for (const StateBlock& b : r.layout.blocks) {
    StateBlockReport br;
    br.block = b;
    br.formula = "byte(slot, " + b.name + ", l) = slot * " + std::to_string(r.layout.entry_bytes) + " + " +
                 std::to_string(b.offset_bytes) + " + l * " + std::to_string(b.layer_stride_bytes);
    for (std::uint32_t l = 0; l < b.layer_num; ++l) {
      KVTWIN_TRY(ViewDescriptor v, state_view(r.layout, b, l, r.geometry.max_slots));
      br.views.push_back(std::move(v));
    }
    r.blocks.push_back(std::move(br));
  }
  return r;
}

// The byte law with the numbers filled in (SPEC 2): byte(pt, part, l) = pt * E + offset + l * stride.
std::string formula_text(const DenseEntryLayout& layout, const DensePart& part) {
  return "byte(pt, " + part.name + ", l) = pt * " + std::to_string(layout.entry_bytes) + " + " +
         std::to_string(part.offset_bytes) + " + l * " + std::to_string(part.layer_stride_bytes);
}

// E = align_up(L * (k_row + v_row), 32) or align_up(L * row, 32), with its numbers.
std::string entry_formula_text(const SubPoolReport& s) {
  const DenseEntryLayout& l = s.layout;
  std::string inner;
  if (l.parts.size() == 1) {
    inner = std::to_string(l.parts[0].layer_num) + " * " + std::to_string(s.parts[0].row_bytes);
  } else {
    inner = std::to_string(l.parts[0].layer_num) + " * (";
    for (std::size_t i = 0; i < s.parts.size(); ++i) inner += (i ? " + " : "") + std::to_string(s.parts[i].row_bytes);
    inner += ")";
  }
  return "E = align_up(" + inner + ", " + std::to_string(kEntryAlignBytes) + ") = " + std::to_string(l.entry_bytes);
}

json view_json(const ViewDescriptor& v) {
  return json{{"shape", v.shape}, {"strides", v.strides}, {"storage_offset", v.storage_offset}};
}

}  // namespace

std::string format_index_ranges(const std::vector<std::uint32_t>& indices) {
  std::string out;
  std::size_t i = 0;
  while (i < indices.size()) {
    std::size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(indices[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(indices[j]);
    i = j + 1;
  }
  return out;
}

Result<LayoutReport> build_layout_report(const ModelShape& shape_in, const LayoutOptions& options) {
  LayoutReport report;
  report.shape = shape_in;
  if (options.dtype) report.shape.dtype = *options.dtype;
  report.options = options;
  if (options.page_size == 0)
    return make_error(ErrorKind::invalid_argument, "page size is 0; use a page size of at least 1 (--page-size 64)");

  KVTWIN_TRY(PoolPlan plan, plan_sub_pools(report.shape, options.tp));
  std::vector<DenseEntryLayout> layouts;
  for (const SubPoolSpec& spec : plan.sub_pools) {
    auto layout = spec.layout();
    if (!layout.ok())
      return layout.error().with_context("model '" + report.shape.name + "', TP " + std::to_string(options.tp) + ": ");
    layouts.push_back(*layout);
  }
  // The model's own chain (SPEC 11: a hybrid model's state sub-pool at the low end).
  PoolConfig config;
  config.shape = report.shape;
  config.tp = options.tp;
  config.page_size = options.page_size;
  config.total_bytes = options.total_bytes;
  auto derived = derive_pool(config);
  if (!derived.ok()) return derived.error().with_context("model '" + report.shape.name + "': ");
  report.geometry = derived->geometry;
  report.chain = derived->chain;
  if (derived->has_state()) {
    KVTWIN_TRY(StateReport state, build_state_report(*derived));
    report.state = std::move(state);
  }

  for (std::size_t i = 0; i < layouts.size(); ++i) {
    SubPoolReport s;
    s.spec = plan.sub_pools[i];
    s.layout = layouts[i];
    s.geometry = report.geometry.sub_pools[i];
    for (std::size_t l = 0; l < plan.layer_map.size(); ++l)
      if (plan.layer_map[l].sub_pool == i) s.model_layers.push_back(static_cast<std::uint32_t>(l));
    for (const DensePart& part : s.layout.parts) {
      PartReport p;
      p.part = part;
      p.row_bytes = part.row_bytes();  // validated by layout(): no overflow
      p.formula = formula_text(s.layout, part);
      s.row_bytes_total += p.row_bytes * part.layer_num;
      for (std::uint32_t l = 0; l < part.layer_num; ++l) {
        LayerViews v;
        v.layer = l;
        v.offset_bytes = part.offset_bytes + std::uint64_t{l} * part.layer_stride_bytes;
        auto per_layer = per_layer_view(s.layout, part, l, s.geometry.max_slots);
        if (!per_layer.ok()) return per_layer.error().with_context("sub-pool '" + s.layout.sub_pool + "': ");
        auto paged = paged_view(s.layout, part, l, s.geometry.num_pages, options.page_size);
        if (!paged.ok()) return paged.error().with_context("sub-pool '" + s.layout.sub_pool + "': ");
        v.per_layer = *per_layer;
        v.paged = *paged;
        p.layers.push_back(std::move(v));
      }
      s.parts.push_back(std::move(p));
    }
    KVTWIN_CHECK(s.row_bytes_total <= s.layout.entry_bytes, "validated rows exceed their entry");
    s.padding_bytes = s.layout.entry_bytes - s.row_bytes_total;
    KVTWIN_CHECK(s.padding_bytes == s.layout.padding_bytes(), "two counts of the entry's padding disagree");
    KVTWIN_TRY(s.first_usable_byte, checked_mul(s.geometry.min_page_index, s.geometry.page_bytes, "first usable byte"));

    auto law = PageMajorLaw::from_layout(s.layout, options.page_size);
    if (law.ok()) {
      s.page_major = *law;
      const bool same_envelope = law->page_bytes() == s.geometry.page_bytes;
      const bool same_order = same_envelope && (options.page_size == 1 || law->blocks_per_page == 1);
      if (!same_envelope)
        s.page_major_note = "page-major page of " + std::to_string(law->page_bytes()) + " bytes vs token-major " +
                            std::to_string(s.geometry.page_bytes) + " (the token-major entry carries " +
                            std::to_string(s.padding_bytes) + " bytes of padding)";
      else if (same_order)
        s.page_major_note = "same page envelope and, at this page size, the same byte order";
      else
        s.page_major_note = "same page envelope, different byte order: stored pages carry format tag '" +
                            std::string(kTokenMajorFormatTag) + "' (token-major) or '" +
                            std::string(kPageMajorFormatTag) + "' (page-major)";
    } else {
      s.page_major_note = "not expressible: " + law.error().message;
    }
    report.sub_pools.push_back(std::move(s));
  }

  if (report.state) {
    // SPEC 11: the state frontier starts at its first usable slot; the owner grows down from its top.
    const SubPoolReport& owner = report.sub_pools[0];
    KVTWIN_TRY(std::uint64_t top, checked_mul(owner.geometry.num_pages, owner.geometry.page_bytes, "down frontier"));
    report.initial_gap_bytes = top > report.state->first_usable_byte ? top - report.state->first_usable_byte : 0;
  } else if (report.sub_pools.size() == 2) {
    // SPEC 4: up frontier starts at min_page_index * epp; the down frontier at num_pages * epp.
    const SubPoolReport& up = report.sub_pools[0];
    const SubPoolReport& down = report.sub_pools[1];
    KVTWIN_TRY(std::uint64_t down_top, checked_mul(down.geometry.num_pages, down.geometry.page_bytes, "down frontier"));
    report.initial_gap_bytes = down_top > up.first_usable_byte ? down_top - up.first_usable_byte : 0;
  }
  return report;
}

// ---------------------------------------------------------------------------------------- text

std::string render_text(const LayoutReport& r) {
  std::ostringstream o;
  const ModelShape& m = r.shape;
  std::size_t full = 0, swa = 0, cross = 0;
  for (LayerKind k : m.layers) {
    full += k == LayerKind::full;
    swa += k == LayerKind::swa;
    cross += k == LayerKind::cross;
  }
  o << "kvtwin layout: " << m.name << "\n";
  o << "  source       " << m.source << "\n";
  if (m.attention == AttentionKind::mla) {
    o << "  shape        mla, " << m.layers.size() << " layers, kv_lora_rank " << m.kv_lora_rank
      << ", qk_rope_head_dim " << m.qk_rope_head_dim << ", " << dtype_name(m.dtype) << "\n";
  } else {
    o << "  shape        mha, " << m.layers.size() << " layers (" << full << " full";
    if (swa) o << ", " << swa << " swa";
    if (cross) o << ", " << cross << " cross";
    o << "), " << m.num_kv_heads << " KV heads";
    if (m.swa_num_kv_heads) o << " (" << m.swa_num_kv_heads << " on swa layers)";
    o << ", head dim K " << m.k_head_dim << " / V " << m.v_head_dim << ", " << dtype_name(m.dtype);
    if (m.sliding_window_tokens) o << ", window " << m.sliding_window_tokens << " tokens";
    o << "\n";
  }
  o << "  pool         tp " << r.options.tp << ", page size " << r.options.page_size << ", total " << r.geometry.total_bytes
    << " bytes (" << human_bytes(r.geometry.total_bytes) << "), " << r.sub_pools.size() + (r.state ? 1 : 0)
    << " sub-pool" << (r.sub_pools.size() + (r.state ? 1 : 0) == 1 ? "" : "s") << "\n";
  std::string floor_terms;
  for (const SubPoolReport& s : r.sub_pools)
    floor_terms += (floor_terms.empty() ? "" : ", ") + std::to_string(s.layout.entry_bytes) + ", " +
                   std::to_string(r.options.page_size) + " * " + std::to_string(s.layout.entry_bytes);
  if (r.state) floor_terms += ", " + std::to_string(r.state->layout.entry_bytes) + " (the state sink, charged once)";
  o << "  floor        reserved_floor = max(" << floor_terms << ") = " << r.geometry.reserved_floor_bytes << " bytes\n";
  if (r.state) {
    const SubPoolReport& owner = r.sub_pools[0];
    o << "  chain        " << chain_text(r.chain) << ": state grows up from byte " << r.state->first_usable_byte << ", "
      << owner.layout.sub_pool << " grows down from byte " << owner.geometry.num_pages * owner.geometry.page_bytes;
    if (r.sub_pools.size() == 2)
      o << ", " << r.sub_pools[1].layout.sub_pool << " floats in the middle (an empty float starts at page "
        << r.geometry.float_start_page << ", byte " << r.geometry.float_start_page * r.sub_pools[1].geometry.page_bytes << ")";
    o << "; initial gap " << *r.initial_gap_bytes << " bytes\n";
  } else if (r.initial_gap_bytes)
    o << "  chain        " << r.sub_pools[0].layout.sub_pool << " grows up from byte " << r.sub_pools[0].first_usable_byte
      << ", " << r.sub_pools[1].layout.sub_pool << " grows down from byte "
      << r.sub_pools[1].geometry.num_pages * r.sub_pools[1].geometry.page_bytes << "; initial gap "
      << *r.initial_gap_bytes << " bytes\n";

  if (r.state) {
    const StateReport& st = *r.state;
    const SubPoolGeometry& g = st.geometry;
    o << "\nsub-pool " << st.layout.sub_pool << " (chain low end, grows up, page size 1: one slot per request)\n";
    o << "  entry        " << st.entry_formula << " bytes (no padding)\n";
    o << "  blocks       name        offset  layer_stride  layers  dtype  shape\n";
    for (const StateBlockReport& b : st.blocks)
      o << "               " << pad_right(b.block.name, 9) << pad_left(std::to_string(b.block.offset_bytes), 9)
        << pad_left(std::to_string(b.block.layer_stride_bytes), 14) << pad_left(std::to_string(b.block.layer_num), 8) << "  "
        << pad_right(std::string(dtype_name(b.block.dtype)), 5) << "  " << u32_list(b.block.shape) << "\n";
    for (std::size_t b = 0; b < st.blocks.size(); ++b)
      o << (b == 0 ? "  formula      " : "               ") << st.blocks[b].formula << "\n";
    o << "  sizing       max_slots = " << r.geometry.total_bytes << " // " << g.entry_bytes << " = " << g.max_slots << "\n";
    o << "               min_slot_index = ceil(" << r.geometry.reserved_floor_bytes << " / " << g.entry_bytes << ") = "
      << g.min_slot_index << " (" << g.usable_pages() << " usable slots, " << g.min_slot_index << ".." << g.max_slots - 1
      << ")\n";
    o << "               boot floor 3 * " << g.entry_bytes << " + a page of each token sub-pool = " << st.boot_floor_bytes
      << " bytes above the floor\n";
    o << "               a fresh state slot costs ceil(" << g.entry_bytes << " / token entries) = " << st.token_cost
      << " tokens\n";
    for (const StateBlockReport& b : st.blocks) {
      const ViewDescriptor& first = b.views.front();
      o << "  views of " << b.block.name << " (in " << dtype_name(b.block.dtype)
        << " elements; the slot stride is the whole entry, " << first.strides[0] << " elements)\n";
      o << "               shape " << pad_right(tuple_text(first.shape), 24) << "strides " << tuple_text(first.strides)
        << "\n";
      o << "               storage offset of layer l = " << first.storage_offset << " + l * "
        << b.block.layer_stride_bytes / dtype_size_bytes(b.block.dtype) << " (layer " << b.views.size() - 1 << ": "
        << b.views.back().storage_offset << ")\n";
    }
  }

  for (std::size_t i = 0; i < r.sub_pools.size(); ++i) {
    const SubPoolReport& s = r.sub_pools[i];
    const SubPoolGeometry& g = s.geometry;
    const std::uint32_t is = dtype_size_bytes(s.spec.dtype);
    o << "\nsub-pool " << s.layout.sub_pool << " (chain " << i << ", "
      << (g.direction == GrowDirection::float_middle ? "floats in the middle" : "grows " + direction_name(g.direction))
      << "; model layers " << format_index_ranges(s.model_layers) << ")\n";
    o << "  per rank     " << s.spec.layers << " layers, " << s.spec.heads_per_rank << " head"
      << (s.spec.heads_per_rank == 1 ? "" : "s") << ", " << dtype_name(s.spec.dtype) << " (" << is << " bytes)\n";
    o << "  rows         ";
    for (std::size_t p = 0; p < s.parts.size(); ++p) {
      const DensePart& part = s.parts[p].part;
      o << (p ? ";  " : "") << part.name << " " << s.parts[p].row_bytes << " bytes = " << part.heads() << " x "
        << part.head_dim() << " x " << is;
    }
    if (s.spec.kind == SubPoolKind::mla)
      o << " (latent " << s.spec.v_head_dim << " + rope " << s.spec.k_head_dim - s.spec.v_head_dim
        << "; V is the first " << s.spec.v_head_dim << " elements of the row)";
    o << "\n";
    o << "  entry        " << entry_formula_text(s) << " bytes (" << s.row_bytes_total << " in rows, "
      << s.padding_bytes << " padding)\n";
    o << "  page         page_bytes = " << g.page_size << " * " << g.entry_bytes << " = " << g.page_bytes << " bytes\n";
    o << "  parts        name  offset  layer_stride  layers  row_bytes  row_shape\n";
    for (const PartReport& p : s.parts)
      o << "               " << pad_right(p.part.name, 4) << pad_left(std::to_string(p.part.offset_bytes), 8)
        << pad_left(std::to_string(p.part.layer_stride_bytes), 14) << pad_left(std::to_string(p.part.layer_num), 8)
        << pad_left(std::to_string(p.row_bytes), 11) << "  " << tuple_text_u32(p.part.row_shape) << "\n";
    for (std::size_t p = 0; p < s.parts.size(); ++p)
      o << (p == 0 ? "  formula      " : "               ") << s.parts[p].formula << "\n";
    o << "  sizing       max_slots = " << r.geometry.total_bytes << " // " << g.entry_bytes << " = " << g.max_slots << "\n";
    o << "               min_slot_index = ceil(" << r.geometry.reserved_floor_bytes << " / " << g.entry_bytes
      << ") = " << g.min_slot_index << "\n";
    o << "               num_pages = " << g.max_slots << " // " << g.page_size << " = " << g.num_pages << "\n";
    o << "               min_page_index = ceil(" << g.min_slot_index << " / " << g.page_size << ") = " << g.min_page_index
      << " (the first usable page; " << g.usable_pages() << " usable pages, " << g.min_page_index << ".."
      << g.num_pages - 1 << ")\n";
    o << "               sink floor bytes [0, " << s.first_usable_byte << "), views end at byte "
      << g.max_slots * g.entry_bytes << " of " << r.geometry.total_bytes << "\n";
      o << "  page-major   ";
    if (s.page_major)
      o << "blocks_per_page " << s.page_major->blocks_per_page << ", page " << s.page_major->page_bytes() << " bytes\n"
        << "               ";
    o << s.page_major_note << "\n";
    for (const PartReport& p : s.parts) {
      const LayerViews& first = p.layers.front();
      o << "  views of " << p.part.name << " (strides and offset_el in " << dtype_name(p.part.dtype)
        << " elements, offset_B in bytes; the slot stride is the whole entry, " << first.per_layer.strides[0]
        << " elements)\n";
      o << "               per-layer  shape " << pad_right(tuple_text(first.per_layer.shape), 24) << "strides "
        << tuple_text(first.per_layer.strides) << "\n";
      o << "               paged      shape " << pad_right(tuple_text(first.paged.shape), 24) << "strides "
        << tuple_text(first.paged.strides) << "\n";
      // Every layer shares the shape and strides; only the storage offset moves (SPEC 2).
      for (const LayerViews& v : p.layers) {
        KVTWIN_CHECK(v.per_layer.shape == first.per_layer.shape && v.per_layer.strides == first.per_layer.strides &&
                         v.paged.shape == first.paged.shape && v.paged.strides == first.paged.strides,
                     "layers of one part have different view shapes or strides");
        KVTWIN_CHECK(v.per_layer.storage_offset == v.paged.storage_offset,
                     "per-layer and paged views of one layer start at different offsets");
      }
      constexpr std::size_t kPerLine = 4;
      o << "               ";
      for (std::size_t c = 0; c < std::min(kPerLine, p.layers.size()); ++c)
        o << (c ? "   " : "") << "layer  offset_B  offset_el";
      o << "\n";
      for (std::size_t at = 0; at < p.layers.size(); at += kPerLine) {
        o << "               ";
        for (std::size_t c = at; c < std::min(at + kPerLine, p.layers.size()); ++c) {
          const LayerViews& v = p.layers[c];
          o << (c > at ? "   " : "") << pad_left(std::to_string(v.layer), 5)
            << pad_left(std::to_string(v.offset_bytes), 10) << pad_left(std::to_string(v.per_layer.storage_offset), 11);
        }
        o << "\n";
      }
    }
  }
  return o.str();
}

// ---------------------------------------------------------------------------------------- JSON

json render_json(const LayoutReport& r) {
  json j;
  j["kvtwin_layout"] = kLayoutJsonVersion;
  j["model"] = r.shape.name;
  j["source"] = r.shape.source;
  j["attention"] = r.shape.attention == AttentionKind::mla ? "mla" : "mha";
  j["num_layers"] = r.shape.layers.size();
  j["shape"] = shape_to_json(r.shape);  // a valid spec file (docs/spec-files.md)
  j["dtype"] = std::string(dtype_name(r.shape.dtype));
  j["tp"] = r.options.tp;
  j["page_size"] = r.options.page_size;
  j["total_bytes"] = r.geometry.total_bytes;
  j["reserved_floor_bytes"] = r.geometry.reserved_floor_bytes;
  j["initial_gap_bytes"] = r.initial_gap_bytes ? json(*r.initial_gap_bytes) : json(nullptr);
  json pools = json::array();
  for (const SubPoolReport& s : r.sub_pools) {
    const SubPoolGeometry& g = s.geometry;
    json sp;
    sp["name"] = s.layout.sub_pool;
    sp["kind"] = std::string(sub_pool_kind_name(s.spec.kind));
    sp["direction"] = direction_name(g.direction);
    sp["model_layers"] = s.model_layers;
    sp["layers"] = s.spec.layers;
    sp["heads_per_rank"] = s.spec.heads_per_rank;
    sp["k_head_dim"] = s.spec.k_head_dim;
    sp["v_head_dim"] = s.spec.v_head_dim;
    sp["dtype"] = std::string(dtype_name(s.spec.dtype));
    sp["itemsize"] = dtype_size_bytes(s.spec.dtype);
    sp["entry_bytes"] = s.layout.entry_bytes;
    sp["row_bytes_total"] = s.row_bytes_total;
    sp["padding_bytes"] = s.padding_bytes;
    sp["page_bytes"] = g.page_bytes;
    sp["entry_formula"] = entry_formula_text(s);
    json parts = json::array();
    for (const PartReport& p : s.parts) {
      json pj;
      pj["name"] = p.part.name;
      pj["offset_bytes"] = p.part.offset_bytes;
      pj["layer_stride_bytes"] = p.part.layer_stride_bytes;
      pj["layer_num"] = p.part.layer_num;
      pj["row_shape"] = p.part.row_shape;
      pj["row_bytes"] = p.row_bytes;
      pj["formula"] = p.formula;
      json views = json::array();
      for (const LayerViews& v : p.layers)
        views.push_back(json{{"layer", v.layer},
                             {"offset_bytes", v.offset_bytes},
                             {"per_layer", view_json(v.per_layer)},
                             {"paged", view_json(v.paged)}});
      pj["views"] = views;
      parts.push_back(pj);
    }
    sp["parts"] = parts;
    sp["sizing"] = json{{"max_slots", g.max_slots},
                        {"min_slot_index", g.min_slot_index},
                        {"num_pages", g.num_pages},
                        {"min_page_index", g.min_page_index},
                        {"usable_pages", g.usable_pages()},
                        {"page_bytes", g.page_bytes},
                        {"reserved_floor_bytes", r.geometry.reserved_floor_bytes},
                        {"first_usable_byte", s.first_usable_byte}};
    if (s.page_major)
      sp["page_major"] = json{{"blocks_per_page", s.page_major->blocks_per_page},
                              {"row_bytes", s.page_major->row_bytes},
                              {"page_bytes", s.page_major->page_bytes()},
                              {"note", s.page_major_note}};
    else
      sp["page_major"] = json{{"blocks_per_page", nullptr}, {"row_bytes", nullptr}, {"page_bytes", nullptr},
                              {"note", s.page_major_note}};
    pools.push_back(sp);
  }
  j["sub_pools"] = pools;
  j["chain"] = r.chain;
  if (r.state) {
    const StateReport& st = *r.state;
    const SubPoolGeometry& g = st.geometry;
    json blocks = json::array();
    for (const StateBlockReport& b : st.blocks) {
      json views = json::array();
      for (std::size_t l = 0; l < b.views.size(); ++l) views.push_back(json{{"layer", l}, {"view", view_json(b.views[l])}});
      blocks.push_back(json{{"name", b.block.name},
                            {"offset_bytes", b.block.offset_bytes},
                            {"layer_stride_bytes", b.block.layer_stride_bytes},
                            {"layer_num", b.block.layer_num},
                            {"shape", b.block.shape},
                            {"dtype", std::string(dtype_name(b.block.dtype))},
                            {"itemsize", dtype_size_bytes(b.block.dtype)},
                            {"formula", b.formula},
                            {"views", views}});
    }
    j["state"] = json{{"name", st.layout.sub_pool},
                      {"direction", "up"},
                      {"entry_bytes", st.layout.entry_bytes},
                      {"entry_formula", st.entry_formula},
                      {"blocks", blocks},
                      {"sizing", json{{"max_slots", g.max_slots},
                                      {"min_slot_index", g.min_slot_index},
                                      {"usable_slots", g.usable_pages()},
                                      {"reserved_floor_bytes", r.geometry.reserved_floor_bytes},
                                      {"first_usable_byte", st.first_usable_byte},
                                      {"boot_floor_bytes", st.boot_floor_bytes}}},
                      {"token_cost", st.token_cost}};
    j["float_start_page"] = r.sub_pools.size() == 2 ? json(r.geometry.float_start_page) : json(nullptr);
  } else {
    j["state"] = nullptr;
  }
  return j;
}

// ---------------------------------------------------------------------------------------- compact

std::string render_compact_header() {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-22s %-5s %6s %6s %8s %-5s %9s %11s %8s %11s %7s %10s\n", "model", "pool", "layers",
                "heads", "k/v dim", "dtype", "row k/v", "entry_bytes", "padding", "page_bytes", "pages", "first_page");
  return buf;
}

std::string render_compact_rows(const LayoutReport& r) {
  std::string out;
  for (const SubPoolReport& s : r.sub_pools) {
    std::string dims = std::to_string(s.spec.k_head_dim) + "/" + std::to_string(s.spec.v_head_dim);
    std::string rows;
    for (std::size_t p = 0; p < s.parts.size(); ++p) rows += (p ? "/" : "") + std::to_string(s.parts[p].row_bytes);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-22s %-5s %6u %6u %8s %-5s %9s %11llu %8llu %11llu %7llu %10llu\n", r.shape.name.c_str(),
                  s.layout.sub_pool.c_str(), s.spec.layers, s.spec.heads_per_rank, dims.c_str(),
                  std::string(dtype_name(s.spec.dtype)).c_str(), rows.c_str(),
                  static_cast<unsigned long long>(s.layout.entry_bytes), static_cast<unsigned long long>(s.padding_bytes),
                  static_cast<unsigned long long>(s.geometry.page_bytes),
                  static_cast<unsigned long long>(s.geometry.num_pages),
                  static_cast<unsigned long long>(s.geometry.min_page_index));
    out += buf;
  }
  return out;
}

std::string render_catalogue_text(const std::vector<ModelShape>& catalogue) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-22s %-4s %6s  %-28s %-5s  %s\n", "model", "attn", "layers", "kv shape", "dtype",
                "source");
  out += buf;
  for (const ModelShape& m : catalogue) {
    std::string kv;
    if (m.attention == AttentionKind::mla) {
      kv = "latent " + std::to_string(m.kv_lora_rank) + " + rope " + std::to_string(m.qk_rope_head_dim);
    } else {
      kv = std::to_string(m.num_kv_heads) + " heads, K " + std::to_string(m.k_head_dim) + " / V " +
           std::to_string(m.v_head_dim);
      std::size_t swa = std::count(m.layers.begin(), m.layers.end(), LayerKind::swa);
      if (swa) kv += ", " + std::to_string(swa) + " swa";
    }
    std::snprintf(buf, sizeof buf, "%-22s %-4s %6zu  %-28s %-5s  %s\n", m.name.c_str(),
                  m.attention == AttentionKind::mla ? "mla" : "mha", m.layers.size(), kv.c_str(),
                  std::string(dtype_name(m.dtype)).c_str(), m.source.c_str());
    out += buf;
  }
  return out;
}

json render_catalogue_json(const std::vector<ModelShape>& catalogue) {
  json models = json::array();
  for (const ModelShape& m : catalogue) models.push_back(shape_to_json(m));
  return json{{"kvtwin_catalogue", kLayoutJsonVersion}, {"models", models}};
}

}  // namespace kvtwin::cli
