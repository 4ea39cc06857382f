// Mooncake and Azure request trace readers, and format detection (request_trace.h).
#include "traces/request_trace.h"

#include <fstream>
#include <istream>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/files.h"
#include "core/json_fields.h"
#include "core/printable.h"
#include "core/strict_json.h"

namespace kvtwin::traces {
namespace {

using nlohmann::json;

constexpr std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr std::string_view kKnownFormats =
    "kvtwin reads pool traces (JSON Lines with a {\"kvtwin_trace\":1,...} header, docs/traces.md), Mooncake "
    "request traces (JSON Lines with timestamp, input_length, output_length, hash_ids) and Azure LLM inference "
    "traces (CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens)";

Error malformed(std::string_view where, const std::string& message) {
  return make_error(ErrorKind::malformed, std::string(where) + ": " + message);
}

std::string shorten(std::string_view text) { return printable(text); }

// The next non-blank line; false at the end; an error for a line past kMaxInputLineBytes.
Result<bool> next_line(std::istream& in, std::string& text, std::uint64_t& line, std::string_view name) {
  while (true) {
    const LineRead got = read_line(in, text);
    if (got == LineRead::end) return false;
    ++line;
    if (got == LineRead::too_long)
      return malformed(printable(name, 400) + ":" + std::to_string(line),
                       "the line is longer than " + std::to_string(kMaxInputLineBytes) +
                           " bytes; a request trace holds one request a line (is this a request trace?)");
    if (text.find_first_not_of(" \t") != std::string::npos) return true;
  }
}

// A non-negative decimal integer that must fit 64 bits.
Result<std::uint64_t> parse_u64_text(std::string_view text, std::string_view where, std::string_view field) {
  if (text.empty()) return malformed(where, "field '" + std::string(field) + "' is empty; expected a whole number");
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return malformed(
          where, "field '" + std::string(field) + "' = '" + shorten(text) + "' is not a non-negative whole number");
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10)
      return malformed(where,
                       "field '" + std::string(field) + "' = '" + shorten(text) + "' is a number too big for 64 bits");
    v = v * 10 + digit;
  }
  return v;
}

bool is_leap_year(std::uint64_t year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

std::uint64_t days_in_month(std::uint64_t year, std::uint64_t month) {
  constexpr std::uint64_t kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap_year(year) ? 29 : kDays[month - 1];
}

// `block_tokens`: tokens per hash_ids block; `given`: it came from --block-tokens (named in errors).
Result<Request> parse_mooncake_line(const std::string& text, std::string_view where, std::uint64_t block_tokens,
                                    bool given) {
  KVTWIN_TRY(json j, parse_json_strict(text, where, JsonText::line));
  JsonFields f(j, where);
  if (!j.is_object()) return f.error("a Mooncake request must be a JSON object");
  KVTWIN_TRY_STATUS(f.only({"timestamp", "input_length", "output_length", "hash_ids"}));
  Request r;
  KVTWIN_TRY(std::uint64_t timestamp_ms, f.u64_required("timestamp"));
  KVTWIN_TRY(r.arrival_us, checked_mul(timestamp_ms, 1000, std::string(where) + ": field 'timestamp' in microseconds"));
  KVTWIN_TRY(r.input_tokens, f.u64_required("input_length"));
  KVTWIN_TRY(r.output_tokens, f.u64_required("output_length"));
  KVTWIN_TRY(r.block_hashes, f.i64_array("hash_ids"));
  if (r.input_tokens == 0) return f.error("field 'input_length' is 0; a request has at least one prompt token");
  const std::uint64_t blocks = ceil_div(r.input_tokens, block_tokens);
  if (r.block_hashes.size() != blocks)
    return f.error("field 'hash_ids' has " + std::to_string(r.block_hashes.size()) + " blocks but input_length " +
                   std::to_string(r.input_tokens) + " needs ceil(" + std::to_string(r.input_tokens) + " / " +
                   std::to_string(block_tokens) + ") = " + std::to_string(blocks) +
                   (given ? " (blocks of --block-tokens " + std::to_string(block_tokens) + ")"
                          : " (Mooncake's 512-token blocks; a trace with other blocks needs --block-tokens N)"));
  for (std::size_t i = 0; i < r.block_hashes.size(); ++i)
    if (r.block_hashes[i] < 0)
      return f.error("field 'hash_ids[" + std::to_string(i) + "]' = " + std::to_string(r.block_hashes[i]) +
                     " is negative; block ids are non-negative");
  return r;
}

Result<Request> parse_azure_line(const std::string& text, std::string_view where) {
  std::vector<std::string_view> fields;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    fields.push_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (fields.size() != 3)
    return malformed(where, "expected 3 comma-separated fields (TIMESTAMP,ContextTokens,GeneratedTokens), got " +
                                std::to_string(fields.size()) + ": '" + shorten(text) + "'");
  Request r;
  KVTWIN_TRY(r.arrival_us, parse_azure_timestamp_us(fields[0], where));
  KVTWIN_TRY(r.input_tokens, parse_u64_text(fields[1], where, "ContextTokens"));
  KVTWIN_TRY(r.output_tokens, parse_u64_text(fields[2], where, "GeneratedTokens"));
  if (r.input_tokens == 0)
    return malformed(where, "field 'ContextTokens' is 0; a request has at least one prompt token");
  return r;
}

}  // namespace

std::string_view format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::pool:
      return "pool";
    case TraceFormat::mooncake:
      return "mooncake";
    case TraceFormat::azure:
      return "azure";
  }
  return "pool";
}

Result<TraceFormat> parse_format_name(std::string_view name) {
  for (TraceFormat f : {TraceFormat::pool, TraceFormat::mooncake, TraceFormat::azure})
    if (format_name(f) == name) return f;
  return make_error(ErrorKind::invalid_argument,
                    "unknown trace format '" + printable(name) + "'; use auto, pool, mooncake or azure");
}

Result<TraceFormat> detect_format_of_line(std::string_view first_line, std::string_view name, std::uint64_t line) {
  std::string_view text = first_line;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte order mark
  if (text == kAzureHeader) return TraceFormat::azure;
  const std::size_t start = text.find_first_not_of(" \t");
  if (start != std::string_view::npos && text[start] == '{') {
    const std::string where = printable(name, 400) + ":" + std::to_string(line);
    // A line that opens like JSON is judged as JSON: a syntax error is reported where it is.
    Result<json> j = parse_json_strict(text, where, JsonText::line);
    if (!j.ok())
      return make_error(ErrorKind::malformed, j.error().message + " (the first line; " + std::string(kKnownFormats) + ")");
    if (j->is_object()) {
      if (j->contains("kvtwin_trace")) return TraceFormat::pool;
      if (j->contains("input_length") && j->contains("timestamp")) return TraceFormat::mooncake;
    }
  }
  return make_error(ErrorKind::unsupported, printable(name, 400) + ":" + std::to_string(line) +
                                                ": unsupported format: the first line is '" + shorten(text) + "'; " +
                                                std::string(kKnownFormats));
}

Result<TraceFormat> detect_format(const std::string& path) {
  KVTWIN_TRY(std::unique_ptr<std::ifstream> in, open_input(path, "trace"));
  std::string text;
  std::uint64_t line = 0;
  KVTWIN_TRY(bool found, next_line(*in, text, line, path));
  if (!found)
    return make_error(ErrorKind::unsupported,
                      printable(path, 400) + ": the file is empty; " + std::string(kKnownFormats));
  return detect_format_of_line(text, path, line);
}

Result<std::uint64_t> parse_azure_timestamp_us(std::string_view text, std::string_view where) {
  // YYYY-MM-DD HH:MM:SS[.fraction]
  const auto fail = [&](const std::string& why) {
    return malformed(where,
                     "field 'TIMESTAMP' = '" + shorten(text) + "' " + why + "; expected 'YYYY-MM-DD HH:MM:SS.fffffff'");
  };
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':' || text[16] != ':')
    return fail("is not a date and time");
  const auto number = [&](std::size_t at, std::size_t digits, std::uint64_t& out) {
    out = 0;
    for (std::size_t i = at; i < at + digits; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(text[i] - '0');
    }
    return true;
  };
  std::uint64_t year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!number(0, 4, year) || !number(5, 2, month) || !number(8, 2, day) || !number(11, 2, hour) ||
      !number(14, 2, minute) || !number(17, 2, second))
    return fail("has a non-digit where a digit belongs");
  if (year < 1970 || year > 2200) return fail("has a year outside 1970..2200");
  if (month < 1 || month > 12) return fail("has a month outside 1..12");
  if (day < 1 || day > days_in_month(year, month)) return fail("has a day that month does not have");
  if (hour > 23 || minute > 59 || second > 60) return fail("has a time of day out of range");
  std::uint64_t micros = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20 || text.size() > 29) return fail("has a malformed fraction of a second");
    std::uint64_t scale = 100000;
    for (std::size_t i = 20; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return fail("has a non-digit in its fraction of a second");
      micros += static_cast<std::uint64_t>(text[i] - '0') * scale;
      scale /= 10;
    }
  }
  std::uint64_t days = 0;
  for (std::uint64_t y = 1970; y < year; ++y) days += is_leap_year(y) ? 366 : 365;
  for (std::uint64_t m = 1; m < month; ++m) days += days_in_month(year, m);
  days += day - 1;
  const std::uint64_t seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
  return seconds * 1000000 + micros;
}

Result<RequestTrace> parse_request_trace(std::istream& in, std::string name, TraceFormat format,
                                         const RequestReadOptions& options) {
  if (format == TraceFormat::pool)
    return make_error(ErrorKind::invalid_argument, name + " is a pool trace; read it with the pool trace reader");
  RequestTrace trace;
  trace.format = format;
  trace.name = name;
  if (options.block_tokens != 0 && format != TraceFormat::mooncake)
    return make_error(ErrorKind::invalid_argument,
                      "--block-tokens " + std::to_string(options.block_tokens) + ": " + name + " is in the " +
                          std::string(format_name(format)) +
                          " format, which has no prefix hashes; the block size applies to traces with "
                          "hash_ids (mooncake)");
  trace.block_tokens = format == TraceFormat::mooncake ? kMooncakeBlockTokens : 0;
  if (options.block_tokens != 0) {
    trace.block_tokens = options.block_tokens;
    trace.block_tokens_given = true;
  }
  std::string text;
  std::uint64_t line = 0;
  if (format == TraceFormat::azure) {
    KVTWIN_TRY(bool found, next_line(in, text, line, name));
    if (!found)
      return make_error(ErrorKind::malformed, name + ": the file is empty; an Azure trace begins with the header " +
                                                  std::string(kAzureHeader));
    std::string_view header = text;
    if (header.substr(0, 3) == "\xEF\xBB\xBF") header.remove_prefix(3);
    if (header != kAzureHeader)
      return malformed(
          name + ":" + std::to_string(line),
          "the header is '" + shorten(header) + "'; an Azure trace begins with " + std::string(kAzureHeader));
  }
  std::uint64_t first_arrival_us = 0, last_arrival_us = 0, skipped = 0;
  bool any = false;
  while (options.limit == 0 || trace.requests.size() < options.limit) {
    KVTWIN_TRY(bool found, next_line(in, text, line, name));
    if (!found) break;
    const std::string where = name + ":" + std::to_string(line);
    Result<Request> r =
        format == TraceFormat::mooncake ? parse_mooncake_line(text, where, trace.block_tokens, trace.block_tokens_given)
                                        : parse_azure_line(text, where);
    if (!r.ok()) return r.error();
    Request request = std::move(r).value();
    if (any && request.arrival_us < last_arrival_us)
      return malformed(where, "arrivals must not go back in time: this request arrives " +
                                  std::to_string(last_arrival_us - request.arrival_us) +
                                  " us before the one above it; sort the file by timestamp");
    last_arrival_us = request.arrival_us;
    any = true;
    if (skipped < options.skip) {
      ++skipped;
      continue;
    }
    if (trace.requests.empty()) first_arrival_us = request.arrival_us;
    request.arrival_us -= first_arrival_us;
    request.index = trace.requests.size();
    request.line = line;
    trace.requests.push_back(std::move(request));
  }
  if (in.bad()) return make_error(ErrorKind::io, name + ": read error after line " + std::to_string(line));
  if (trace.requests.empty())
    return make_error(ErrorKind::malformed,
                      name + ": the trace holds no requests" +
                          (options.skip != 0 ? " after the first " + std::to_string(options.skip) : std::string()));
  return trace;
}

Result<RequestTrace> read_request_trace(const std::string& path, TraceFormat format,
                                        const RequestReadOptions& options) {
  KVTWIN_TRY(std::unique_ptr<std::ifstream> in, open_input(path, "request trace"));
  return parse_request_trace(*in, path, format, options);
}

}  // namespace kvtwin::traces
