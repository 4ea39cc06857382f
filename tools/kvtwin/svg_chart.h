// Hand-written SVG charts for the HTML reports (html_report.h): a time-series chart (lines,
// areas, stacked areas, bars) with axes, a legend, and "lanes" of event counts under the plot,
// and a horizontal bar chart. Plain C++ emitting text: no scripts, no fonts or images from
// outside, every string XML-escaped, coordinates rounded to a tenth of a pixel, so a report opens
// anywhere without the network and stays small.
//
// Every chart is an <svg class="chart"> whose drawn data sits in a <g class="marks"> group; the
// report's in-page self-check (html_report.cpp) and the browser test look there to tell a chart
// that drew from an empty one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtwin::cli {

// Text for XML and HTML (both element text and attribute values).
std::string escape_xml(std::string_view text);
// A number with at most `decimals` decimals, trailing zeros dropped ("12.5", "3").
std::string format_number(double value, int decimals = 1);
// 1536 -> "1.5 KiB"; 3221225472 -> "3 GiB".
std::string format_bytes(double bytes);
// 12345 -> "12.3k"; 4.2e6 -> "4.2M".
std::string format_count(double count);
// Seconds with a unit that fits: "850 ms", "12.5 s", "3.2 min", "1.6 h".
std::string format_seconds(double seconds);

enum class ValueFormat : std::uint8_t { count, bytes, percent, seconds };

struct ChartSeries {
  enum class Style : std::uint8_t { line, area, stacked_area, bars };
  std::string name;
  std::string color;  // CSS colour
  Style style = Style::line;
  std::vector<double> y;  // one per x
};

// A lane under the plot: one bar per interval between two x values, its height the count in it.
struct ChartLane {
  std::string name;
  std::string color;
  std::vector<double> counts;  // counts[i]: what happened in (x[i-1], x[i]]; counts[0] at x[0]
};

struct TimeChart {
  std::string id;  // unique in the page
  std::string x_label;
  std::string y_label;
  ValueFormat x_format = ValueFormat::count;
  ValueFormat y_format = ValueFormat::count;
  std::vector<double> x;  // ascending
  std::vector<ChartSeries> series;
  std::vector<ChartLane> lanes;
  double y_max = 0;  // 0: from the data
};

std::string render_time_chart(const TimeChart& chart);

struct BarChartRow {
  std::string label;
  std::vector<double> values;  // one per segment, stacked left to right
};

struct BarChart {
  std::string id;
  std::vector<std::string> segment_names;
  std::vector<std::string> segment_colors;
  std::vector<BarChartRow> rows;
  ValueFormat format = ValueFormat::count;
};

std::string render_bar_chart(const BarChart& chart);

// "#rrggbb" from hue (degrees), saturation and lightness (0..1).
std::string hsl_color(double hue, double saturation, double lightness);

// Evenly spaced "nice" tick values from 0 (or `low`) up to at least `high`: 1, 2, 2.5 or 5 times a
// power of ten apart (powers of two for bytes). The last tick is >= high.
std::vector<double> nice_ticks(double low, double high, int wanted, ValueFormat format);

}  // namespace kvtwin::cli
