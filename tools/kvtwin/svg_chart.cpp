// Hand-written SVG charts (svg_chart.h).
#include "tools/kvtwin/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvtwin::cli {
namespace {

constexpr double kWidth = 960;
constexpr double kLeft = 80;
constexpr double kRight = 52;  // room for the lanes' totals
constexpr double kTop = 26;
constexpr double kPlotHeight = 190;
constexpr double kAxisHeight = 34;
constexpr double kLaneHeight = 16;
constexpr double kLaneGap = 4;
constexpr double kPlotWidth = kWidth - kLeft - kRight;

std::string px(double v) { return format_number(v, 1); }

std::string format_value(double v, ValueFormat f) {
  switch (f) {
    case ValueFormat::bytes:
      return format_bytes(v);
    case ValueFormat::percent:
      return format_number(v, 1) + "%";
    case ValueFormat::seconds:
      return format_seconds(v);
    case ValueFormat::count:
      break;
  }
  return format_count(v);
}

// The legend: a row of swatches and names from x = kLeft.
std::string legend(const std::vector<std::pair<std::string, std::string>>& entries, double y) {
  std::string s = "<g class=\"legend\" font-size=\"11\">";
  double x = kLeft;
  for (const auto& [name, color] : entries) {
    s += "<rect x=\"" + px(x) + "\" y=\"" + px(y - 9) + "\" width=\"10\" height=\"10\" fill=\"" + escape_xml(color) +
         "\"/><text x=\"" + px(x + 14) + "\" y=\"" + px(y) + "\">" + escape_xml(name) + "</text>";
    x += 24 + 6.2 * static_cast<double>(name.size());
  }
  return s + "</g>";
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? '?' : c;
    }
  }
  return out;
}

std::string format_number(double value, int decimals) {
  if (!std::isfinite(value)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return format_number(v, u == 0 ? 0 : 1) + " " + units[u];
}

std::string format_count(double count) {
  const double a = std::fabs(count);
  if (a >= 1e9) return format_number(count / 1e9, 1) + "G";
  if (a >= 1e6) return format_number(count / 1e6, 1) + "M";
  if (a >= 1e4) return format_number(count / 1e3, 1) + "k";
  return format_number(count, a >= 100 ? 0 : 1);
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a == 0) return "0 s";
  if (a < 1) return format_number(seconds * 1000, 0) + " ms";
  if (a < 120) return format_number(seconds, 1) + " s";
  if (a < 7200) return format_number(seconds / 60, 1) + " min";
  return format_number(seconds / 3600, 1) + " h";
}

std::string hsl_color(double hue, double saturation, double lightness) {
  const double c = (1 - std::fabs(2 * lightness - 1)) * saturation;
  const double hp = std::fmod(std::fmod(hue, 360.0) + 360.0, 360.0) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) {
    r = c, g = x;
  } else if (hp < 2) {
    r = x, g = c;
  } else if (hp < 3) {
    g = c, b = x;
  } else if (hp < 4) {
    g = x, b = c;
  } else if (hp < 5) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  const double m = lightness - c / 2;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround((r + m) * 255)),
                static_cast<int>(std::lround((g + m) * 255)), static_cast<int>(std::lround((b + m) * 255)));
  return buf;
}

std::vector<double> nice_ticks(double low, double high, int wanted, ValueFormat format) {
  if (!(high > low)) high = low + 1;
  wanted = std::max(wanted, 1);
  const double raw = (high - low) / wanted;
  double step = 0;
  if (format == ValueFormat::bytes && raw >= 1) {
    step = std::exp2(std::ceil(std::log2(raw)));
  } else if (format == ValueFormat::seconds && raw > 30) {
    // Minutes and hours in steps a clock has.
    step = 0;
    for (double candidate :
         {60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0}) {
      step = candidate;
      if (step >= raw) break;
    }
    if (step < raw) step = 86400.0 * std::ceil(raw / 86400.0);
  } else {
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    for (double f : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      if (format == ValueFormat::count && f == 2.5 && power <= 1) continue;  // no 2.5 between whole counts
      step = f * power;
      if (step >= raw) break;
    }
    // Counts (ops, pages, requests) are whole: no tick between two of them.
    if (format == ValueFormat::count && step < 1) step = 1;
  }
  std::vector<double> ticks;
  const double first = std::floor(low / step) * step;
  for (int i = 0; i < 1000; ++i) {
    const double t = first + i * step;
    ticks.push_back(t);
    if (t >= high) break;
  }
  return ticks;
}

std::string render_time_chart(const TimeChart& c) {
  const std::size_t n = c.x.size();
  const double lanes_height = static_cast<double>(c.lanes.size()) * (kLaneHeight + kLaneGap);
  const double plot_bottom = kTop + kPlotHeight;
  const double height = plot_bottom + kAxisHeight + lanes_height + 6;
  const double x0 = n == 0 ? 0 : c.x.front();
  double x1 = n == 0 ? 1 : c.x.back();
  if (!(x1 > x0)) x1 = x0 + 1;
  // The y range: stacked areas add up; everything else stands alone.
  double y_top = 0;
  std::vector<double> stack(n, 0);
  for (const ChartSeries& s : c.series) {
    for (std::size_t i = 0; i < n && i < s.y.size(); ++i) {
      if (s.style == ChartSeries::Style::stacked_area) {
        stack[i] += s.y[i];
        y_top = std::max(y_top, stack[i]);
      } else {
        y_top = std::max(y_top, s.y[i]);
      }
    }
  }
  if (c.y_max > 0) y_top = std::max(y_top, c.y_max);
  const std::vector<double> y_ticks = nice_ticks(0, y_top > 0 ? y_top : 1, 5, c.y_format);
  const double y_hi = y_ticks.back();
  const auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotWidth; };
  const auto sy = [&](double y) { return plot_bottom - y / y_hi * kPlotHeight; };

  std::string s = "<svg class=\"chart\" id=\"" + escape_xml(c.id) + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  px(kWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) +
                  "\" font-family=\"sans-serif\">";
  // Grid and axes.
  s += "<g class=\"axes\" font-size=\"10\" fill=\"#444\">";
  for (double t : y_ticks) {
    const double y = sy(t);
    s += "<line x1=\"" + px(kLeft) + "\" x2=\"" + px(kLeft + kPlotWidth) + "\" y1=\"" + px(y) + "\" y2=\"" + px(y) +
         "\" stroke=\"#e3e3e3\"/><text x=\"" + px(kLeft - 4) + "\" y=\"" + px(y + 3) + "\" text-anchor=\"end\">" +
         escape_xml(format_value(t, c.y_format)) + "</text>";
  }
  for (double t : nice_ticks(x0, x1, 8, c.x_format)) {
    if (t < x0 || t > x1) continue;
    const double x = sx(t);
    s += "<line x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(plot_bottom) + "\" y2=\"" + px(plot_bottom + 4) +
         "\" stroke=\"#444\"/><text x=\"" + px(x) + "\" y=\"" + px(plot_bottom + 15) + "\" text-anchor=\"middle\">" +
         escape_xml(format_value(t, c.x_format)) + "</text>";
  }
  s += "<line x1=\"" + px(kLeft) + "\" x2=\"" + px(kLeft + kPlotWidth) + "\" y1=\"" + px(plot_bottom) + "\" y2=\"" +
       px(plot_bottom) + "\" stroke=\"#444\"/>";
  s += "<text x=\"" + px(kLeft + kPlotWidth / 2) + "\" y=\"" + px(plot_bottom + 29) + "\" text-anchor=\"middle\">" +
       escape_xml(c.x_label) + "</text>";
  s += "<text transform=\"translate(12 " + px(kTop + kPlotHeight / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape_xml(c.y_label) + "</text>";
  s += "</g>";

  // The data.
  s += "<g class=\"marks\">";
  std::fill(stack.begin(), stack.end(), 0.0);
  for (const ChartSeries& series : c.series) {
    const std::size_t m = std::min(n, series.y.size());
    if (m == 0) continue;
    const std::string color = escape_xml(series.color);
    const std::string title = "<title>" + escape_xml(series.name) + "</title>";
    switch (series.style) {
      case ChartSeries::Style::line: {
        // A value that is not a number (nothing to divide by in that interval) breaks the line.
        std::string d;
        bool pen_down = false;
        for (std::size_t i = 0; i < m; ++i) {
          if (!std::isfinite(series.y[i])) {
            pen_down = false;
            continue;
          }
          const bool isolated = !pen_down && (i + 1 >= m || !std::isfinite(series.y[i + 1]));
          d += (pen_down ? " L" : "M") + px(sx(c.x[i])) + " " + px(sy(series.y[i]));
          if (isolated) d += "h1.5";
          pen_down = true;
        }
        if (d.empty()) continue;
        s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + color +
             "\" stroke-width=\"1.5\" stroke-linecap=\"round\" stroke-linejoin=\"round\">" + title + "</path>";
        break;
      }
      case ChartSeries::Style::area:
      case ChartSeries::Style::stacked_area: {
        const bool stacked = series.style == ChartSeries::Style::stacked_area;
        std::vector<double> top(m), bottom(m);
        for (std::size_t i = 0; i < m; ++i) {
          bottom[i] = stacked ? stack[i] : 0;
          top[i] = bottom[i] + series.y[i];
          if (stacked) stack[i] = top[i];
        }
        std::string d = "M" + px(sx(c.x[0])) + " " + px(sy(top[0]));
        for (std::size_t i = 1; i < m; ++i) d += (i == 1 ? "L" : " ") + px(sx(c.x[i])) + " " + px(sy(top[i]));
        if (m == 1) d += " " + px(sx(c.x[0]) + 1) + " " + px(sy(top[0]));
        if (m == 1) d += " " + px(sx(c.x[0]) + 1) + " " + px(sy(bottom[0]));
        for (std::size_t i = m; i-- > 0;) d += " " + px(sx(c.x[i])) + " " + px(sy(bottom[i]));
        // A stacked layer has no outline: one that is zero throughout would draw a line of its colour.
        s += "<path d=\"" + d + "Z\" fill=\"" + color + "\" fill-opacity=\"0.75\"" +
             (stacked ? std::string(" stroke=\"none\"") : " stroke=\"" + color + "\" stroke-width=\"0.8\"") + ">" +
             title + "</path>";
        break;
      }
      case ChartSeries::Style::bars: {
        const double w = std::max(kPlotWidth / static_cast<double>(std::max<std::size_t>(m, 1)), 1.0);
        std::string d;
        for (std::size_t i = 0; i < m; ++i) {
          if (series.y[i] <= 0) continue;
          const double h = plot_bottom - sy(series.y[i]);
          d += "M" + px(sx(c.x[i]) - w / 2) + " " + px(plot_bottom) + "v" + px(-h) + "h" + px(w) + "v" + px(h) + "z";
        }
        if (d.empty())
          d = "M" + px(kLeft) + " " + px(plot_bottom) + "h" + px(kPlotWidth) + "v0";  // all zero: the baseline
        s += "<path d=\"" + d + "\" fill=\"" + color + "\" stroke=\"" + color + "\" stroke-width=\"0.5\">" + title +
             "</path>";
        break;
      }
    }
  }
  // Lanes: what happened between two samples, as bars scaled to the lane's largest count.
  double lane_y = plot_bottom + kAxisHeight + 4;
  for (const ChartLane& lane : c.lanes) {
    double peak = 0, total = 0;
    for (double v : lane.counts) {
      peak = std::max(peak, v);
      total += v;
    }
    std::string d;
    for (std::size_t i = 0; i < lane.counts.size() && i < n; ++i) {
      if (lane.counts[i] <= 0) continue;
      const double left = i == 0 ? sx(c.x[0]) : sx(c.x[i - 1]);
      const double w = std::max(sx(c.x[i]) - left, 1.0);
      const double h = std::max(kLaneHeight * lane.counts[i] / peak, 1.0);
      d += "M" + px(left) + " " + px(lane_y + kLaneHeight) + "v" + px(-h) + "h" + px(w) + "v" + px(h) + "z";
    }
    s += "<rect x=\"" + px(kLeft) + "\" y=\"" + px(lane_y) + "\" width=\"" + px(kPlotWidth) + "\" height=\"" +
         px(kLaneHeight) + "\" fill=\"#f6f6f6\"/>";
    if (!d.empty())
      s += "<path d=\"" + d + "\" fill=\"" + escape_xml(lane.color) + "\"><title>" + escape_xml(lane.name) + ": " +
           format_count(total) + " in all, at most " + format_count(peak) + " between two samples</title></path>";
    s += "<text x=\"" + px(kLeft - 4) + "\" y=\"" + px(lane_y + 11) + "\" text-anchor=\"end\" font-size=\"10\">" +
         escape_xml(lane.name) + "</text><text x=\"" + px(kLeft + kPlotWidth + 4) + "\" y=\"" + px(lane_y + 11) +
         "\" font-size=\"10\" fill=\"#555\">" + escape_xml(format_count(total)) + "</text>";
    lane_y += kLaneHeight + kLaneGap;
  }
  s += "</g>";
  std::vector<std::pair<std::string, std::string>> entries;
  for (const ChartSeries& series : c.series) entries.emplace_back(series.name, series.color);
  s += legend(entries, 16);
  s += "</svg>";
  return s;
}

std::string render_bar_chart(const BarChart& c) {
  constexpr double kLabelWidth = 300;
  constexpr double kRowHeight = 20;
  const double bar_width = kWidth - kLabelWidth - 90;
  const double height = kTop + kRowHeight * static_cast<double>(c.rows.size()) + 8;
  double peak = 0;
  for (const BarChartRow& r : c.rows) {
    double sum = 0;
    for (double v : r.values) sum += v;
    peak = std::max(peak, sum);
  }
  if (peak <= 0) peak = 1;
  std::string s = "<svg class=\"chart\" id=\"" + escape_xml(c.id) + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  px(kWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) +
                  "\" font-family=\"sans-serif\" font-size=\"11\">";
  s += "<g class=\"marks\">";
  double y = kTop;
  for (const BarChartRow& r : c.rows) {
    s += "<text x=\"" + px(kLabelWidth - 6) + "\" y=\"" + px(y + 13) + "\" text-anchor=\"end\">" + escape_xml(r.label) +
         "</text>";
    double x = kLabelWidth;
    double sum = 0;
    for (std::size_t k = 0; k < r.values.size(); ++k) {
      sum += r.values[k];
      if (r.values[k] <= 0) continue;
      const double w = std::max(r.values[k] / peak * bar_width, 1.0);
      const std::string name = k < c.segment_names.size() ? c.segment_names[k] : "";
      const std::string color = k < c.segment_colors.size() ? c.segment_colors[k] : "#888";
      s += "<rect x=\"" + px(x) + "\" y=\"" + px(y + 3) + "\" width=\"" + px(w) + "\" height=\"" + px(kRowHeight - 6) +
           "\" fill=\"" + escape_xml(color) + "\"><title>" +
           escape_xml(r.label + ": " + name + " " + format_value(r.values[k], c.format)) + "</title></rect>";
      x += w;
    }
    s += "<text x=\"" + px(x + 4) + "\" y=\"" + px(y + 13) + "\" fill=\"#555\">" +
         escape_xml(format_value(sum, c.format)) + "</text>";
    y += kRowHeight;
  }
  s += "</g>";
  std::vector<std::pair<std::string, std::string>> entries;
  for (std::size_t k = 0; k < c.segment_names.size() && k < c.segment_colors.size(); ++k)
    entries.emplace_back(c.segment_names[k], c.segment_colors[k]);
  s += legend(entries, 16);
  s += "</svg>";
  return s;
}

}  // namespace kvtwin::cli
