// `kvtwin layout --svg`: the entry's byte map as a picture (layout_report.h, render_svg).
//
// For each sub-pool: a byte ruler over one entry; the entry as a bar of coloured bands, one per
// (part, layer) row at its true byte offset and width (K blue, V orange, MLA latent green, the
// shade alternating layer by layer), padding hatched grey; layer labels, sparse when layers are
// many; then one page (the first usable one) as a grid of slots, each slot the same entry in
// miniature (an SVG pattern), labelled with its physical token id and bytes in tooltips.
//
// Hand-written and self-contained (no scripts, no external fonts or images); every string from
// the model is XML-escaped. It draws only what build_layout_report computed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "tools/kvtwin/layout_report.h"

namespace kvtwin::cli {
namespace {

constexpr double kWidth = 1200;
constexpr double kMargin = 40;
constexpr double kContent = kWidth - 2 * kMargin;
constexpr double kBarHeight = 56;
constexpr std::uint64_t kMaxSlotsDrawn = 1024;

std::string escape_xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text; show them as '?'.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? '?' : c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

// HSL (h in degrees, s and l in 0..1) to "#rrggbb".
std::string hsl_hex(double h, double s, double l) {
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = std::fmod(h, 360.0) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) r = c, g = x;
  else if (hp < 2) r = x, g = c;
  else if (hp < 3) g = c, b = x;
  else if (hp < 4) g = x, b = c;
  else if (hp < 5) r = x, b = c;
  else r = c, b = x;
  const double m = l - c / 2;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround((r + m) * 255)),
                static_cast<int>(std::lround((g + m) * 255)), static_cast<int>(std::lround((b + m) * 255)));
  return buf;
}

double part_hue(const std::string& name, std::size_t index) {
  if (name == "k") return 212;
  if (name == "v") return 28;
  if (name == "kv") return 145;
  return std::fmod(280.0 + 50.0 * static_cast<double>(index), 360.0);
}

// Adjacent layers alternate between a darker and a lighter shade; a slow drift tells far layers apart.
std::string band_color(const std::string& name, std::size_t part_index, std::uint32_t layer, std::uint32_t layers) {
  const double drift = layers > 1 ? 0.10 * static_cast<double>(layer) / static_cast<double>(layers - 1) : 0.0;
  const double lightness = (layer % 2 == 0 ? 0.36 : 0.52) + drift;
  return hsl_hex(part_hue(name, part_index), 0.65, lightness);
}

std::string legend_color(const std::string& name, std::size_t part_index) {
  return hsl_hex(part_hue(name, part_index), 0.65, 0.45);
}

// A 1-2-5 step that puts at most about ten ticks over `extent` bytes.
std::uint64_t ruler_step(std::uint64_t extent) {
  std::uint64_t step = 1;
  while (true) {
    for (std::uint64_t f : {1ULL, 2ULL, 5ULL}) {
      if (step > UINT64_MAX / f) return step;
      if (extent / (step * f) <= 10) return step * f;
    }
    if (step > UINT64_MAX / 10) return step;
    step *= 10;
  }
}

struct Row {
  std::uint64_t begin = 0, end = 0;
  std::size_t part = 0;
  std::uint32_t layer = 0;
};

std::vector<Row> entry_rows(const SubPoolReport& s) {
  std::vector<Row> rows;
  for (std::size_t p = 0; p < s.parts.size(); ++p)
    for (const LayerViews& v : s.parts[p].layers)
      rows.push_back({v.offset_bytes, v.offset_bytes + s.parts[p].row_bytes, p, v.layer});
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.begin < b.begin; });
  return rows;
}

// The bytes of the entry no row covers: [begin, end) pairs, ascending.
std::vector<std::pair<std::uint64_t, std::uint64_t>> padding_spans(const std::vector<Row>& rows, std::uint64_t entry) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  std::uint64_t cursor = 0;
  for (const Row& r : rows) {
    if (r.begin > cursor) spans.emplace_back(cursor, r.begin);
    cursor = std::max(cursor, r.end);
  }
  if (cursor < entry) spans.emplace_back(cursor, entry);
  return spans;
}

// The MLA latent row is [kv_lora_rank | qk_rope_head_dim]; the rope tail is drawn darker.
double rope_fraction(const SubPoolReport& s) {
  if (s.spec.kind != SubPoolKind::mla || s.spec.k_head_dim == 0) return 0;
  return static_cast<double>(s.spec.k_head_dim - s.spec.v_head_dim) / static_cast<double>(s.spec.k_head_dim);
}

// The entry in objectBoundingBox units, to fill each slot of the page grid.
std::string entry_pattern(const SubPoolReport& s, std::size_t index, const std::vector<Row>& rows) {
  std::ostringstream o;
  const double e = static_cast<double>(s.layout.entry_bytes);
  o << "    <pattern id=\"entry-" << index
    << "\" patternUnits=\"objectBoundingBox\" patternContentUnits=\"objectBoundingBox\" width=\"1\" height=\"1\">\n";
  o << "      <rect x=\"0\" y=\"0\" width=\"1\" height=\"1\" fill=\"#d9d9d9\"/>\n";
  for (const Row& r : rows)
    o << "      <rect x=\"" << num(static_cast<double>(r.begin) / e) << "\" y=\"0\" width=\""
      << num(static_cast<double>(r.end - r.begin) / e) << "\" height=\"1\" fill=\""
      << band_color(s.parts[r.part].part.name, r.part, r.layer, s.parts[r.part].part.layer_num) << "\"/>\n";
  o << "    </pattern>\n";
  return o.str();
}

}  // namespace

std::string render_svg(const LayoutReport& r) {
  std::ostringstream body;
  std::ostringstream defs;
  double y = 0;

  // Title and summary.
  const std::string title = "kvtwin layout: " + r.shape.name + ", TP " + std::to_string(r.options.tp) + ", page size " +
                            std::to_string(r.options.page_size) + ", " + std::string(dtype_name(r.shape.dtype));
  body << "  <text x=\"" << num(kMargin) << "\" y=\"34\" class=\"title\">" << escape_xml(title) << "</text>\n";
  std::string summary;
  for (const SubPoolReport& s : r.sub_pools)
    summary += (summary.empty() ? "" : ";  ") + s.layout.sub_pool + ": entry " + std::to_string(s.layout.entry_bytes) +
               " bytes, page " + std::to_string(s.geometry.page_bytes) + " bytes";
  body << "  <text x=\"" << num(kMargin) << "\" y=\"56\" class=\"sub\">" << escape_xml(summary) << "</text>\n";
  y = 76;

  // Legend: one swatch per part name, then padding.
  std::map<std::string, std::size_t> part_names;  // name -> part index (colour), sorted for stable output
  bool any_rope = false;
  for (const SubPoolReport& s : r.sub_pools) {
    for (std::size_t p = 0; p < s.parts.size(); ++p) part_names.emplace(s.parts[p].part.name, p);
    any_rope |= rope_fraction(s) > 0;
  }
  double lx = kMargin;
  auto swatch = [&](const std::string& fill, const std::string& label) {
    body << "  <rect x=\"" << num(lx) << "\" y=\"" << num(y) << "\" width=\"16\" height=\"12\" fill=\"" << fill
         << "\" stroke=\"#555\" stroke-width=\"0.5\"/>\n";
    body << "  <text x=\"" << num(lx + 22) << "\" y=\"" << num(y + 10) << "\" class=\"small\">" << escape_xml(label)
         << "</text>\n";
    lx += 30 + 7.0 * static_cast<double>(label.size());
  };
  for (const auto& [name, index] : part_names)
    swatch(legend_color(name, index), name == "k" ? "K rows" : name == "v" ? "V rows" : name == "kv" ? "MLA latent rows (kv)" : name + " rows");
  if (any_rope) swatch("#1b4d2e", "rope tail of the latent");
  swatch("url(#hatch)", "padding");
  body << "  <text x=\"" << num(lx) << "\" y=\"" << num(y + 10)
       << "\" class=\"small\">shades alternate layer by layer; hover a band for its bytes</text>\n";
  y += 30;

  // The whole pool: the sink's floor, where each side starts and which way it grows (SPEC 3, 4).
  {
    const double total = static_cast<double>(r.geometry.total_bytes);
    const auto pool_px = [&](std::uint64_t byte) { return kMargin + kContent * static_cast<double>(byte) / total; };
    body << "  <text x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" class=\"sub\">"
         << escape_xml("the pool: one buffer of " + std::to_string(r.geometry.total_bytes) + " bytes; the sink owns [0, " +
                       std::to_string(r.sub_pools.front().first_usable_byte) + ")")
         << "</text>\n";
    y += 8;
    body << "  <rect x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" width=\"" << num(kContent)
         << "\" height=\"22\" fill=\"#f4f4f4\"/>\n";
    const SubPoolReport& up = r.sub_pools.front();
    // SPEC 11: a hybrid chain's low end is the state sub-pool; its owner grows down.
    const std::uint64_t low_start = r.state ? r.state->first_usable_byte : up.first_usable_byte;
    const double floor_w = std::max(3.0, pool_px(low_start) - kMargin);
    body << "  <rect x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" width=\"" << num(floor_w)
         << "\" height=\"22\" fill=\"#555\"><title>sink floor: bytes [0, " << low_start << ")</title></rect>\n";
    const std::string low_text =
        r.state ? "state slots (" + std::to_string(r.state->layout.entry_bytes) + " bytes each) grow up from byte " +
                      std::to_string(low_start) +
                      (r.sub_pools.size() == 2 ? "; " + r.sub_pools[1].layout.sub_pool + " floats in the middle" : "")
                : up.layout.sub_pool + " pages (" + std::to_string(up.geometry.page_bytes) + " bytes each) grow up from byte " +
                      std::to_string(up.first_usable_byte);
    body << "  <text x=\"" << num(kMargin + floor_w + 6) << "\" y=\"" << num(y + 15) << "\" class=\"sub\">"
         << escape_xml("\u2192 " + low_text) << "</text>\n";
    if (r.sub_pools.size() == 2 || r.state) {
      const SubPoolReport& down = r.state ? r.sub_pools[0] : r.sub_pools[1];
      const std::uint64_t top = down.geometry.num_pages * down.geometry.page_bytes;
      const double tail_x = pool_px(top);
      if (top < r.geometry.total_bytes)
        body << "  <rect x=\"" << num(tail_x) << "\" y=\"" << num(y) << "\" width=\""
             << num(std::max(2.0, kMargin + kContent - tail_x)) << "\" height=\"22\" fill=\"url(#hatch)\"><title>tail: bytes ["
             << top << ", " << r.geometry.total_bytes << "), less than one " << down.layout.sub_pool
             << " page</title></rect>\n";
      body << "  <text x=\"" << num(tail_x - 6) << "\" y=\"" << num(y + 15) << "\" class=\"sub\" text-anchor=\"end\">"
           << escape_xml(down.layout.sub_pool + " pages (" + std::to_string(down.geometry.page_bytes) +
                         " bytes each) grow down from byte " + std::to_string(top) + " \u2190")
           << "</text>\n";
    }
    body << "  <rect x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" width=\"" << num(kContent)
         << "\" height=\"22\" class=\"frame\"/>\n";
    y += 30;
  }

  for (std::size_t i = 0; i < r.sub_pools.size(); ++i) {
    const SubPoolReport& s = r.sub_pools[i];
    const SubPoolGeometry& g = s.geometry;
    const double e = static_cast<double>(s.layout.entry_bytes);
    const auto px = [&](std::uint64_t byte) { return kMargin + kContent * static_cast<double>(byte) / e; };
    const std::vector<Row> rows = entry_rows(s);
    defs << entry_pattern(s, i, rows);

    // Heading.
    y += 22;
    body << "  <text x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" class=\"head\">"
         << escape_xml("sub-pool " + s.layout.sub_pool + " (" +
                       (g.direction == GrowDirection::float_middle ? std::string("floats in the middle")
                                                                    : "grows " + std::string(grow_direction_name(g.direction))) +
                       "; model layers " + format_index_ranges(s.model_layers) + ")")
         << "</text>\n";
    y += 18;
    std::string parts_text;
    for (const PartReport& p : s.parts)
      parts_text += (parts_text.empty() ? "" : ", ") + p.part.name + " row " + std::to_string(p.row_bytes) +
                    " bytes at offset " + std::to_string(p.part.offset_bytes) + " + l * " +
                    std::to_string(p.part.layer_stride_bytes);
    body << "  <text x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" class=\"sub\">"
         << escape_xml("one entry: " + std::to_string(s.layout.entry_bytes) + " bytes = " +
                       std::to_string(s.row_bytes_total) + " in rows + " + std::to_string(s.padding_bytes) +
                       " padding; " + parts_text)
         << "</text>\n";

    // Byte ruler over the entry.
    y += 26;
    const std::uint64_t step = ruler_step(s.layout.entry_bytes);
    body << "  <line x1=\"" << num(kMargin) << "\" y1=\"" << num(y) << "\" x2=\"" << num(kMargin + kContent) << "\" y2=\""
         << num(y) << "\" class=\"axis\"/>\n";
    for (std::uint64_t b = 0; b <= s.layout.entry_bytes; b += step) {
      const bool near_end = b != 0 && static_cast<double>(s.layout.entry_bytes - b) < 0.06 * e;
      if (!near_end || b == s.layout.entry_bytes) {
        body << "  <line x1=\"" << num(px(b)) << "\" y1=\"" << num(y - 4) << "\" x2=\"" << num(px(b)) << "\" y2=\""
             << num(y + 4) << "\" class=\"axis\"/>\n";
        body << "  <text x=\"" << num(px(b)) << "\" y=\"" << num(y - 7) << "\" class=\"tick\">" << b << "</text>\n";
      }
      if (s.layout.entry_bytes - b < step) break;
    }
    if (s.layout.entry_bytes % step != 0) {
      body << "  <line x1=\"" << num(px(s.layout.entry_bytes)) << "\" y1=\"" << num(y - 4) << "\" x2=\""
           << num(px(s.layout.entry_bytes)) << "\" y2=\"" << num(y + 4) << "\" class=\"axis\"/>\n";
      body << "  <text x=\"" << num(px(s.layout.entry_bytes)) << "\" y=\"" << num(y - 7) << "\" class=\"tick\">"
           << s.layout.entry_bytes << "</text>\n";
    }
    body << "  <text x=\"" << num(kMargin - 4) << "\" y=\"" << num(y + 3)
         << "\" class=\"small\" text-anchor=\"end\">bytes</text>\n";

    // The entry: one band per (part, layer) row, padding hatched.
    y += 6;
    const double bar_top = y;
    const double rope = rope_fraction(s);
    for (const Row& row : rows) {
      const PartReport& p = s.parts[row.part];
      const double x0 = px(row.begin), w = px(row.end) - x0;
      body << "  <rect x=\"" << num(x0) << "\" y=\"" << num(bar_top) << "\" width=\"" << num(w) << "\" height=\""
           << num(kBarHeight) << "\" fill=\"" << band_color(p.part.name, row.part, row.layer, p.part.layer_num)
           << "\"><title>" << escape_xml(p.part.name + " layer " + std::to_string(row.layer) + ": bytes [" +
                                         std::to_string(row.begin) + ", " + std::to_string(row.end) + ")")
           << "</title></rect>\n";
      if (rope > 0)
        body << "  <rect x=\"" << num(x0 + w * (1 - rope)) << "\" y=\"" << num(bar_top + kBarHeight * 0.6)
             << "\" width=\"" << num(w * rope) << "\" height=\"" << num(kBarHeight * 0.4) << "\" fill=\"#1b4d2e\"/>\n";
      const double letter_px = 7.0 * static_cast<double>(p.part.name.size()) + 4;
      if (w >= letter_px)
        body << "  <text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(bar_top + 22) << "\" class=\"band\">"
             << escape_xml(p.part.name) << "</text>\n";
    }
    for (const auto& [b0, b1] : padding_spans(rows, s.layout.entry_bytes))
      body << "  <rect x=\"" << num(px(b0)) << "\" y=\"" << num(bar_top) << "\" width=\"" << num(px(b1) - px(b0))
           << "\" height=\"" << num(kBarHeight) << "\" fill=\"url(#hatch)\"><title>padding: bytes [" << b0 << ", " << b1
           << ")</title></rect>\n";
    body << "  <rect x=\"" << num(kMargin) << "\" y=\"" << num(bar_top) << "\" width=\"" << num(kContent)
         << "\" height=\"" << num(kBarHeight) << "\" class=\"frame\"/>\n";

    // Layer labels under the bar, at each layer's first row; sparse when bands are narrow.
    y = bar_top + kBarHeight + 14;
    const PartReport& first_part = s.parts.front();
    const double layer_px = first_part.part.layer_num > 0
                                ? kContent * static_cast<double>(first_part.part.layer_stride_bytes) / e
                                : kContent;
    const std::uint32_t label_every =
        std::max<std::uint32_t>(1, static_cast<std::uint32_t>(std::ceil(34.0 / std::max(layer_px, 1e-9))));
    for (const LayerViews& v : first_part.layers) {
      if (v.layer % label_every != 0) continue;
      body << "  <line x1=\"" << num(px(v.offset_bytes)) << "\" y1=\"" << num(bar_top + kBarHeight) << "\" x2=\""
           << num(px(v.offset_bytes)) << "\" y2=\"" << num(y - 9) << "\" class=\"axis\"/>\n";
      body << "  <text x=\"" << num(px(v.offset_bytes) + 1) << "\" y=\"" << num(y) << "\" class=\"small\">L" << v.layer
           << "</text>\n";
    }
    if (label_every > 1)
      body << "  <text x=\"" << num(kMargin + kContent) << "\" y=\"" << num(y + 14)
           << "\" class=\"small\" text-anchor=\"end\">every layer has its bands; labels every " << label_every
           << " layers</text>\n";

    // One page of entries: the first usable page, slot by slot.
    const std::uint64_t page = g.min_page_index;
    const std::uint64_t first_token = page * g.page_size;
    const std::uint64_t page_start = page * g.page_bytes;
    y += 34;
    body << "  <text x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" class=\"sub\">"
         << escape_xml("one page: page " + std::to_string(page) + " (the first usable one), " +
                       std::to_string(g.page_size) + " slots = physical tokens " + std::to_string(first_token) + ".." +
                       std::to_string(first_token + g.page_size - 1) + ", bytes [" + std::to_string(page_start) + ", " +
                       std::to_string(page_start + g.page_bytes) + "); slot s starts at byte " +
                       std::to_string(page_start) + " + s * " + std::to_string(g.entry_bytes))
         << "</text>\n";
    y += 10;
    const std::uint64_t drawn = std::min<std::uint64_t>(g.page_size, kMaxSlotsDrawn);
    const std::uint64_t cols = std::min<std::uint64_t>(drawn, 32);
    const std::uint64_t grid_rows = (drawn + cols - 1) / cols;
    if (grid_rows > 1)
      body << "  <text x=\"" << num(kMargin + kContent) << "\" y=\"" << num(y) << "\" class=\"small\" text-anchor=\"end\">"
           << cols << " slots per row</text>\n";
    const double cell_w = kContent / static_cast<double>(cols);
    const double cell_h = grid_rows > 8 ? 14 : 26;
    for (std::uint64_t c = 0; c < cols; c += 8)
      body << "  <text x=\"" << num(kMargin + cell_w * static_cast<double>(c) + 1) << "\" y=\"" << num(y + 10)
           << "\" class=\"small\">slot " << c << "</text>\n";
    y += 14;
    for (std::uint64_t slot = 0; slot < drawn; ++slot) {
      const double x = kMargin + cell_w * static_cast<double>(slot % cols);
      const double top = y + cell_h * static_cast<double>(slot / cols);
      const std::uint64_t b0 = page_start + slot * g.entry_bytes;
      body << "  <rect x=\"" << num(x) << "\" y=\"" << num(top) << "\" width=\"" << num(cell_w) << "\" height=\""
           << num(cell_h) << "\" fill=\"url(#entry-" << i << ")\" class=\"slot\"><title>slot " << slot
           << ": physical token " << first_token + slot << ", bytes [" << b0 << ", " << b0 + g.entry_bytes
           << ")</title></rect>\n";
    }
    y += cell_h * static_cast<double>(grid_rows);
    if (drawn < g.page_size) {
      y += 16;
      body << "  <text x=\"" << num(kMargin) << "\" y=\"" << num(y) << "\" class=\"small\">... and "
           << g.page_size - drawn << " more slots of the same entry</text>\n";
    }
    y += 12;
  }
  y += 20;

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\"" << num(y)
      << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(y) << "\">\n";
  svg << "  <title>" << escape_xml(title) << "</title>\n";
  svg << "  <defs>\n";
  svg << "    <style>\n"
         "      text { font-family: 'DejaVu Sans', Verdana, sans-serif; fill: #222; }\n"
         "      .title { font-size: 20px; font-weight: bold; }\n"
         "      .head { font-size: 15px; font-weight: bold; }\n"
         "      .sub { font-size: 12px; }\n"
         "      .small { font-size: 10px; fill: #444; }\n"
         "      .tick { font-size: 9px; fill: #444; text-anchor: middle; }\n"
         "      .band { font-size: 11px; fill: #fff; text-anchor: middle; }\n"
         "      .axis { stroke: #666; stroke-width: 1; }\n"
         "      .frame { fill: none; stroke: #333; stroke-width: 1; }\n"
         "      .slot { stroke: #fff; stroke-width: 1; }\n"
         "    </style>\n";
  svg << "    <pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
         "patternTransform=\"rotate(45)\">\n"
         "      <rect x=\"0\" y=\"0\" width=\"6\" height=\"6\" fill=\"#e6e6e6\"/>\n"
         "      <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#999\" stroke-width=\"2\"/>\n"
         "    </pattern>\n";
  svg << defs.str();
  svg << "  </defs>\n";
  svg << "  <rect x=\"0\" y=\"0\" width=\"" << num(kWidth) << "\" height=\"" << num(y) << "\" fill=\"#fff\"/>\n";
  svg << body.str();
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace kvtwin::cli
