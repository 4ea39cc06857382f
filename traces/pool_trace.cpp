// Pool trace reader and writer (pool_trace.h; the format is docs/traces.md).
#include "traces/pool_trace.h"

#include <istream>
#include <ostream>
#include <sstream>

#include "core/check.h"
#include "core/json_fields.h"

namespace kvtwin::traces {
namespace {

using nlohmann::json;

Error malformed(std::string_view where, const std::string& message) {
  return make_error(ErrorKind::malformed, std::string(where) + ": " + message);
}

// A malformed error that begins "FILE:LINE: ", whether or not the helper that produced the message
// knew its place (a catalogue lookup inside a build op's config does not; a JSON field reader
// writes "FILE:LINE config: ...").
Error placed(std::string_view where, const std::string& message) {
  std::string_view rest = message;
  if (rest.substr(0, where.size()) == where) {
    rest.remove_prefix(where.size());
    while (!rest.empty() && (rest.front() == ':' || rest.front() == ' ')) rest.remove_prefix(1);
  }
  return malformed(where, std::string(rest));
}

// nlohmann's error text without its exception prefix: "at column 7: syntax error ...".
std::string parse_error_text(const json::exception& e) {
  std::string text = e.what();
  const std::size_t column = text.find("column");
  if (column != std::string::npos) return "at " + text.substr(column);
  const std::size_t prefix_end = text.find("] ");
  if (text.rfind("[json.exception", 0) == 0 && prefix_end != std::string::npos) return text.substr(prefix_end + 2);
  return text;
}

Result<json> parse_json_line(std::string_view text, std::string_view where) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return malformed(where, "malformed JSON " + parse_error_text(e));
  }
}

// JSON text of one value, compact, as nlohmann writes it (object keys sorted).
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

}  // namespace

bool same_lines(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(a[i].op == b[i].op)) return false;
    if (a[i].expect.has_value() != b[i].expect.has_value()) return false;
    if (a[i].expect && !same_result(*a[i].expect, *b[i].expect)) return false;
  }
  return true;
}

std::string header_to_line(const TraceHeader& h) {
  std::string s = "{\"kvtwin_trace\":" + std::to_string(kPoolTraceVersion) +
                  ",\"kind\":\"pool\",\"seed\":" + std::to_string(h.seed) +
                  ",\"config\":" + dump(pool_config_to_json(h.config));
  if (h.origin.is_object() && !h.origin.empty()) s += ",\"origin\":" + dump(h.origin);
  return s + "}";
}

std::string op_to_line(const Op& op, const std::optional<OpResult>& expect) {
  const json j = op_to_json(op);
  std::string s = "{\"op\":" + dump(j.at("op"));
  for (const auto& [key, value] : j.items()) {  // nlohmann's objects iterate in sorted key order
    if (key == "op") continue;
    s += "," + dump(json(key)) + ":" + dump(value);
  }
  if (expect) s += ",\"expect\":" + dump(result_to_json(*expect));
  return s + "}";
}

Result<TraceHeader> parse_header_line(std::string_view text, std::string_view where) {
  KVTWIN_TRY(json j, parse_json_line(text, where));
  if (!j.is_object()) return malformed(where, "the header must be a JSON object {\"kvtwin_trace\":1,...}");
  if (!j.contains("kvtwin_trace")) {
    if (j.contains("op"))
      return malformed(where,
                       "the first line must be the header {\"kvtwin_trace\":1,\"kind\":\"pool\",...}; found "
                       "an operation (docs/traces.md shows a whole trace)");
    if (j.contains("hash_ids") || j.contains("input_length"))
      return malformed(where,
                       "this looks like a Mooncake request trace, not a pool trace; replay it with "
                       "--format mooncake (or --format auto)");
    return malformed(where,
                     "missing field 'kvtwin_trace' (the format version); a pool trace begins with "
                     "{\"kvtwin_trace\":1,\"kind\":\"pool\",...}");
  }
  JsonFields f(j, where);
  KVTWIN_TRY(std::uint64_t version, f.u64_required("kvtwin_trace"));
  if (version != kPoolTraceVersion)
    return malformed(where, "unknown trace version " + std::to_string(version) + "; this kvtwin reads version " +
                                std::to_string(kPoolTraceVersion) + " (use the kvtwin that wrote it, or re-record it)");
  KVTWIN_TRY_STATUS(f.only({"kvtwin_trace", "kind", "seed", "config", "origin"}));
  KVTWIN_TRY(std::string kind, f.string_required("kind"));
  if (kind != "pool") return malformed(where, "field 'kind' is '" + kind + "'; this reader reads \"pool\" traces");
  TraceHeader h;
  KVTWIN_TRY(h.seed, f.u64_required("seed"));
  if (!j.contains("config")) return malformed(where, "missing field 'config' (the pool configuration)");
  Result<PoolConfig> config = pool_config_from_json(j.at("config"), "field 'config'");
  if (!config.ok()) return placed(where, config.error().message);
  h.config = std::move(config).value();
  Result<PoolDerived> derived = derive_pool(h.config);
  if (!derived.ok())
    return malformed(where, "field 'config' describes a pool that cannot be built: " + derived.error().message);
  if (j.contains("origin")) {
    if (!j.at("origin").is_object()) return malformed(where, "field 'origin' must be a JSON object");
    h.origin = j.at("origin");
  }
  return h;
}

Result<TraceLine> parse_op_line(std::string_view text, std::string_view where) {
  KVTWIN_TRY(json j, parse_json_line(text, where));
  if (!j.is_object()) return malformed(where, "an operation line must be a JSON object {\"op\":...}");
  if (j.contains("kvtwin_trace")) return malformed(where, "a second header; a trace has one header, on its first line");
  TraceLine line;
  Result<Op> op = op_from_json(j, where);
  if (!op.ok()) return placed(where, op.error().message);
  line.op = std::move(op).value();
  if (j.contains("expect")) {
    KVTWIN_TRY(OpResult expect, result_from_json(j.at("expect"), std::string(where) + ": field 'expect'"));
    line.expect = std::move(expect);
  }
  // A build op's configuration may describe a pool that cannot be built (a misaligned row): that
  // is the pool's answer to give (SPEC 10.17), not a reading error. The header's must build.
  return line;
}

PoolTraceReader::PoolTraceReader(std::istream& in, std::string name) : in_(in), name_(std::move(name)) {}

bool PoolTraceReader::next_text() {
  while (std::getline(in_, text_)) {
    ++line_;
    if (!text_.empty() && text_.back() == '\r') text_.pop_back();
    if (text_.find_first_not_of(" \t") != std::string::npos) return true;
  }
  return false;
}

Result<TraceHeader> PoolTraceReader::header() {
  if (!next_text())
    return make_error(ErrorKind::malformed, name_ +
                                                ": the file is empty; a pool trace begins with a header line "
                                                "{\"kvtwin_trace\":1,\"kind\":\"pool\",...}");
  KVTWIN_TRY(TraceHeader h, parse_header_line(text_, name_ + ":" + std::to_string(line_)));
  have_header_ = true;
  return h;
}

Result<std::optional<TraceLine>> PoolTraceReader::next() {
  KVTWIN_CHECK(have_header_, "PoolTraceReader::next() before header()");
  if (!next_text()) {
    if (in_.bad()) return make_error(ErrorKind::io, name_ + ": read error after line " + std::to_string(line_));
    return std::optional<TraceLine>();
  }
  KVTWIN_TRY(TraceLine line, parse_op_line(text_, name_ + ":" + std::to_string(line_)));
  line.line = line_;
  return std::optional<TraceLine>(std::move(line));
}

Result<PoolTrace> parse_pool_trace(std::istream& in, std::string name) {
  PoolTraceReader reader(in, std::move(name));
  PoolTrace trace;
  KVTWIN_TRY(trace.header, reader.header());
  while (true) {
    KVTWIN_TRY(std::optional<TraceLine> line, reader.next());
    if (!line) break;
    trace.lines.push_back(std::move(*line));
  }
  return trace;
}

Result<PoolTrace> read_pool_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorKind::io, path + ": cannot open the file for reading; check the path");
  return parse_pool_trace(in, path);
}

void write_pool_trace(std::ostream& out, const PoolTrace& trace) {
  out << header_to_line(trace.header) << '\n';
  for (const TraceLine& line : trace.lines) out << op_to_line(line.op, line.expect) << '\n';
}

Status write_pool_trace_file(const std::string& path, const PoolTrace& trace) {
  KVTWIN_TRY(PoolTraceWriter writer, PoolTraceWriter::open(path, trace.header));
  for (const TraceLine& line : trace.lines) KVTWIN_TRY_STATUS(writer.append(line.op, line.expect));
  return writer.close();
}

Result<PoolTraceWriter> PoolTraceWriter::open(const std::string& path, const TraceHeader& header) {
  auto out = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*out) return make_error(ErrorKind::io, path + ": cannot open the file for writing; check the folder exists");
  *out << header_to_line(header) << '\n';
  if (!*out) return make_error(ErrorKind::io, path + ": write failed (disk full?)");
  return PoolTraceWriter(path, std::move(out));
}

Status PoolTraceWriter::append(const Op& op, const std::optional<OpResult>& expect) {
  KVTWIN_CHECK(out_ != nullptr, "append after close");
  *out_ << op_to_line(op, expect) << '\n';
  ++lines_;
  if (!*out_) return make_error(ErrorKind::io, path_ + ": write failed after " + std::to_string(lines_) + " lines");
  return ok_status();
}

Status PoolTraceWriter::flush() {
  KVTWIN_CHECK(out_ != nullptr, "flush after close");
  out_->flush();
  if (!*out_) return make_error(ErrorKind::io, path_ + ": write failed after " + std::to_string(lines_) + " lines");
  return ok_status();
}

Status PoolTraceWriter::close() {
  if (!out_) return ok_status();
  out_->close();
  const bool good = !out_->fail();
  out_.reset();
  if (!good) return make_error(ErrorKind::io, path_ + ": closing the file failed (disk full?)");
  return ok_status();
}

}  // namespace kvtwin::traces
