// The strip map (strip_map.h).
#include "tools/kvtwin/strip_map.h"

#include <algorithm>
#include <cmath>

#include "tools/kvtwin/svg_chart.h"

namespace kvtwin::cli {
namespace {

constexpr double kWidth = 960;
constexpr double kLeft = 56;
constexpr double kRight = 12;
constexpr double kBarWidth = kWidth - kLeft - kRight;
constexpr double kRowHeight = 14;
constexpr double kLabelHeight = 16;
constexpr double kGapHeight = 30;  // between strips, where the moves are drawn
constexpr double kLegendHeight = 26;

const char* kCachedColor = "#9aa7b4";
const char* kUnknownOwnerColor = "#5b7fae";
const char* kSinkColor = "#444";
const char* kFreeColor = "#f3f3f3";
const char* kMoveColor = "#e0701a";

std::string px(double v) { return format_number(v, 1); }

}  // namespace

std::string owner_color(std::int64_t owner, std::size_t side) {
  if (owner < 0) return kUnknownOwnerColor;
  const double hue = std::fmod(static_cast<double>(owner) * 137.508, 360.0);
  return hsl_color(hue, 0.55, side == 0 ? 0.52 : 0.68);
}

std::string render_strip_map(const StripMapInput& in) {
  const double total = static_cast<double>(std::max<std::uint64_t>(in.total_bytes, 1));
  const auto bx = [&](double byte) { return kLeft + byte / total * kBarWidth; };
  const double rows_height = kRowHeight * static_cast<double>(std::max<std::size_t>(in.sides.size(), 1));
  const double strip_height = kLabelHeight + rows_height;
  const double height = kLegendHeight + static_cast<double>(in.strips.size()) * (strip_height + kGapHeight);
  const std::string holder = in.serving ? "request " : "allocation ";

  std::string s = "<svg class=\"chart\" id=\"" + escape_xml(in.id) +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) + "\" height=\"" + px(height) +
                  "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) +
                  "\" font-family=\"sans-serif\" font-size=\"10\">";
  s += "<defs><pattern id=\"" + escape_xml(in.id) +
       "-hole\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
       "<rect width=\"4\" height=\"4\" fill=\"#fbe3e3\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"4\" stroke=\"#d33\" "
       "stroke-width=\"2\"/></pattern></defs>";
  const std::string hole_fill = "url(#" + escape_xml(in.id) + "-hole)";
  // Legend.
  {
    struct Entry {
      std::string name, fill;
    };
    std::vector<Entry> entries = {
        {in.serving ? "bound (colour: its request)" : "bound (colour: its allocation)", owner_color(3, 0)},
        {"hole", hole_fill},
        {"sink and reserved floor", kSinkColor},
        {"free", kFreeColor},
        {"compaction move", kMoveColor}};
    if (in.serving) entries.insert(entries.begin() + 1, Entry{"held by the prefix cache", kCachedColor});
    double x = kLeft;
    for (const Entry& e : entries) {
      s += "<rect x=\"" + px(x) + "\" y=\"6\" width=\"10\" height=\"10\" fill=\"" + e.fill +
           "\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"" + px(x + 14) + "\" y=\"15\" font-size=\"11\">" +
           escape_xml(e.name) + "</text>";
      x += 26 + 6.0 * static_cast<double>(e.name.size());
    }
  }
  s += "<g class=\"marks\">";
  // Where each side row of strip k starts, for the moves between strips.
  const auto row_top = [&](std::size_t strip, std::size_t side) {
    return kLegendHeight + static_cast<double>(strip) * (strip_height + kGapHeight) + kLabelHeight +
           kRowHeight * static_cast<double>(side);
  };
  for (std::size_t k = 0; k < in.strips.size(); ++k) {
    const Strip& strip = in.strips[k];
    const double label_y = kLegendHeight + static_cast<double>(k) * (strip_height + kGapHeight) + 12;
    std::string label = strip.label;
    if (label.empty())
      label = in.serving ? "t = " + format_seconds(static_cast<double>(strip.time_us) / 1e6) + " (after op " +
                               std::to_string(strip.ops) + ")"
                         : "after op " + std::to_string(strip.ops);
    std::string counts;
    for (std::size_t i = 0; i < strip.sides.size() && i < in.sides.size(); ++i)
      counts += (counts.empty() ? "" : ", ") + in.sides[i].name + ": " + std::to_string(strip.sides[i].bound_pages) +
                " bound, " + std::to_string(strip.sides[i].hole_pages) + " holes";
    const bool moves_drawn = in.draw_moves && k > 0 && strip.moves_before_total > 0;
    if (moves_drawn)
      counts += "; " + std::to_string(strip.moves_before_total) + " compaction moves since the strip above" +
                (strip.moves_before.size() < strip.moves_before_total
                     ? " (" + std::to_string(strip.moves_before.size()) + " drawn)"
                     : std::string());
    s += "<text x=\"" + px(kLeft) + "\" y=\"" + px(label_y) + "\" font-weight=\"bold\">" + escape_xml(label) +
         "</text><text x=\"" + px(kLeft + kBarWidth) + "\" y=\"" + px(label_y) +
         "\" text-anchor=\"end\" fill=\"#555\">" + escape_xml(counts) + "</text>";
    for (std::size_t i = 0; i < in.sides.size(); ++i) {
      const SideInfo& side = in.sides[i];
      const double y = row_top(k, i);
      s += "<text x=\"" + px(kLeft - 4) + "\" y=\"" + px(y + 10) + "\" text-anchor=\"end\">" + escape_xml(side.name) +
           "</text>";
      s += "<rect x=\"" + px(kLeft) + "\" y=\"" + px(y) + "\" width=\"" + px(kBarWidth) + "\" height=\"" +
           px(kRowHeight - 2) + "\" fill=\"" + kFreeColor + "\"/>";
      s += "<rect x=\"" + px(kLeft) + "\" y=\"" + px(y) + "\" width=\"" +
           px(std::max(bx(static_cast<double>(in.reserved_floor_bytes)) - kLeft, 0.5)) + "\" height=\"" +
           px(kRowHeight - 2) + "\" fill=\"" + kSinkColor + "\"><title>the sink and the reserved floor: bytes [0, " +
           std::to_string(in.reserved_floor_bytes) + ")</title></rect>";
      if (i >= strip.sides.size()) continue;
      const StripSide& cells = strip.sides[i];
      // Neighbouring cells with the same fill become one box.
      std::size_t c = 0;
      while (c < cells.cells.size()) {
        const StripCell& first = cells.cells[c];
        const bool hole = first.bound == 0;
        const std::string fill = hole           ? hole_fill
                                 : first.cached ? std::string(kCachedColor)
                                                : owner_color(first.owner, i);
        std::size_t e = c + 1;
        std::uint64_t bound = first.bound, holes = first.holes, pages = first.pages;
        while (e < cells.cells.size()) {
          const StripCell& next = cells.cells[e];
          const StripCell& prev = cells.cells[e - 1];
          if (next.first_page != prev.first_page + prev.pages) break;
          if ((next.bound == 0) != hole) break;
          if (!hole && (next.owner != first.owner || next.cached != first.cached)) break;
          bound += next.bound;
          holes += next.holes;
          pages += next.pages;
          ++e;
        }
        const double x0 = bx(static_cast<double>(first.first_page * side.page_bytes));
        const double x1 = bx(static_cast<double>((first.first_page + pages) * side.page_bytes));
        std::string title = side.name + " pages " + std::to_string(first.first_page) + "-" +
                            std::to_string(first.first_page + pages - 1) + ": ";
        if (hole) {
          title += std::to_string(holes) + " holes";
        } else {
          title += std::to_string(bound) + " bound";
          if (holes != 0) title += ", " + std::to_string(holes) + " holes";
          title += first.owner < 0 ? std::string()
                                   : (first.cached ? ", prefix cache (from " : ", ") + holder +
                                         std::to_string(first.owner) + (first.cached ? ")" : "");
        }
        s += "<rect x=\"" + px(x0) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(x1 - x0, 0.6)) + "\" height=\"" +
             px(kRowHeight - 2) + "\" fill=\"" + fill + "\"><title>" + escape_xml(title) + "</title></rect>";
        c = e;
      }
      // The frontier: the up side's watermark page starts it; the down side's ends one page above.
      const double frontier =
          side.direction == GrowDirection::up
              ? static_cast<double>(std::max<std::int64_t>(cells.watermark, 0)) * static_cast<double>(side.page_bytes)
              : static_cast<double>(cells.watermark + 1) * static_cast<double>(side.page_bytes);
      s += "<rect x=\"" + px(bx(frontier) - 0.75) + "\" y=\"" + px(y - 1) + "\" width=\"1.5\" height=\"" +
           px(kRowHeight) + "\" fill=\"#000\"><title>" + escape_xml(side.name) + " frontier (watermark " +
           std::to_string(cells.watermark) + ")</title></rect>";
    }
    // Highlighted pages.
    if (k < in.marks.size()) {
      for (const PageMark& m : in.marks[k]) {
        if (m.side >= in.sides.size()) continue;
        const SideInfo& side = in.sides[m.side];
        const double x0 = bx(static_cast<double>(static_cast<std::uint64_t>(m.page) * side.page_bytes));
        const double x1 = bx(static_cast<double>(static_cast<std::uint64_t>(m.page + 1) * side.page_bytes));
        const double y = row_top(k, m.side);
        const double w = std::max(x1 - x0, 3.0);
        s += "<g class=\"highlight\"><rect x=\"" + px(x0 - 1) + "\" y=\"" + px(y - 2) + "\" width=\"" + px(w + 2) +
             "\" height=\"" + px(kRowHeight + 2) + "\" fill=\"none\" stroke=\"#c00\" stroke-width=\"2\"/><path d=\"M" +
             px(x0 + w / 2 - 4) + " " + px(y - 8) + "h8l-4 5z\" fill=\"#c00\"/><title>" +
             escape_xml(side.name + " page " + std::to_string(m.page) + ": " + m.why) + "</title></g>";
      }
    }
    // The compaction moves made since the strip above, from the old row's bottom to above the new label.
    if (moves_drawn) {
      std::string d;
      for (const PageMove& move : strip.moves_before) {
        std::size_t side = 0;
        while (side < in.sides.size() && in.sides[side].name != move.sub_pool) ++side;
        if (side == in.sides.size()) continue;
        const double pb = static_cast<double>(in.sides[side].page_bytes);
        const double xs = bx((static_cast<double>(move.src) + 0.5) * pb);
        const double xd = bx((static_cast<double>(move.dst) + 0.5) * pb);
        d += "M" + px(xs) + " " + px(row_top(k - 1, side) + kRowHeight - 2) + "L" + px(xd) + " " +
             px(row_top(k, 0) - kLabelHeight + 1);
      }
      if (!d.empty())
        s += "<path d=\"" + d + "\" stroke=\"" + kMoveColor +
             "\" stroke-opacity=\"0.22\" stroke-width=\"0.5\" fill=\"none\"><title>" +
             escape_xml(std::to_string(strip.moves_before_total) + " compaction moves since the strip above") +
             "</title></path>";
    }
  }
  s += "</g></svg>";
  return s;
}

}  // namespace kvtwin::cli
