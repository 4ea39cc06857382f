// Pool trace reader and writer (pool_trace.h; the format is docs/traces.md).
#include "traces/pool_trace.h"

#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>

#include "core/check.h"
#include "core/files.h"
#include "core/json_fields.h"
#include "core/printable.h"
#include "core/strict_json.h"

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

Result<json> parse_json_line(std::string_view text, std::string_view where) {
  return parse_json_strict(text, where, JsonText::line);
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

std::string header_to_line(const TraceHeader& h, std::uint64_t version) {
  std::string s = "{\"kvtwin_trace\":" + std::to_string(version) +
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

namespace {

// The header and its format version (1: no end line; 2: an end line closes the trace).
Result<TraceHeader> parse_header(std::string_view text, std::string_view where, std::uint64_t& version) {
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
  KVTWIN_TRY(version, f.u64_required("kvtwin_trace"));
  if (version < kOldestPoolTraceVersion || version > kPoolTraceVersion)
    return malformed(where, "unknown trace version " + std::to_string(version) + "; this kvtwin reads versions " +
                                std::to_string(kOldestPoolTraceVersion) + " to " + std::to_string(kPoolTraceVersion) +
                                " (use the kvtwin that wrote it, or re-record it)");
  KVTWIN_TRY_STATUS(f.only({"kvtwin_trace", "kind", "seed", "config", "origin"}));
  KVTWIN_TRY(std::string kind, f.string_required("kind"));
  if (kind != "pool") return malformed(where, "field 'kind' is '" + printable(kind) + "'; this reader reads \"pool\" traces");
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

}  // namespace

Result<TraceHeader> parse_header_line(std::string_view text, std::string_view where) {
  std::uint64_t version = 0;
  return parse_header(text, where, version);
}

Result<TraceLine> parse_op_line(std::string_view text, std::string_view where) {
  KVTWIN_TRY(json j, parse_json_line(text, where));
  if (!j.is_object()) return malformed(where, "an operation line must be a JSON object {\"op\":...}");
  if (j.contains("kvtwin_trace")) return malformed(where, "a second header; a trace has one header, on its first line");
  if (j.contains(kEndKey))
    return malformed(where, "an end line where an operation belongs; the end line is the trace's last line");
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

Result<bool> PoolTraceReader::next_text() {
  while (true) {
    const LineRead got = read_line(in_, text_);
    if (got == LineRead::end) return false;
    ++line_;
    if (got == LineRead::too_long)
      return malformed(place(), "the line is longer than " + std::to_string(kMaxInputLineBytes) +
                                    " bytes; a pool trace holds one operation a line (is this a pool trace?)");
    if (text_.find_first_not_of(" \t") != std::string::npos) return true;
  }
}

std::string PoolTraceReader::place() const { return printable(name_, 400) + ":" + std::to_string(line_); }

Result<TraceHeader> PoolTraceReader::header() {
  KVTWIN_TRY(bool found, next_text());
  if (!found)
    return make_error(ErrorKind::malformed, printable(name_, 400) +
                                                ": the file is empty; a pool trace begins with a header line "
                                                "{\"kvtwin_trace\":2,\"kind\":\"pool\",...}");
  KVTWIN_TRY(TraceHeader h, parse_header(text_, place(), version_));
  have_header_ = true;
  return h;
}

Result<std::optional<TraceLine>> PoolTraceReader::next() {
  KVTWIN_CHECK(have_header_, "PoolTraceReader::next() before header()");
  while (true) {
    KVTWIN_TRY(bool found, next_text());
    if (!found) {
      if (in_.bad()) return make_error(ErrorKind::io, place() + ": read error after this line");
      if (version_ >= 2 && !ended_)
        return malformed(printable(name_, 400),
                         "the trace stops after line " + std::to_string(line_) + " without its end line {\"" +
                             std::string(kEndKey) + "\":" + std::to_string(ops_) +
                             "}: it is truncated (a recording that was interrupted?); record it again");
      return std::optional<TraceLine>();
    }
    if (ended_) return malformed(place(), "a line after the end line; the end line is the trace's last line");
    if (text_.find(kEndKey) != std::string::npos) {
      KVTWIN_TRY(bool is_end, read_end_line());
      if (is_end) continue;
    }
    KVTWIN_TRY(TraceLine line, parse_op_line(text_, place()));
    line.line = line_;
    ++ops_;
    return std::optional<TraceLine>(std::move(line));
  }
}

Result<bool> PoolTraceReader::read_end_line() {
  KVTWIN_TRY(json j, parse_json_line(text_, place()));
  if (!j.is_object() || !j.contains(kEndKey)) return false;  // an op that merely mentions the key
  if (version_ < 2)
    return malformed(place(), "an end line in a version-" + std::to_string(version_) +
                                  " trace; end lines belong to version 2 and later (fix the header's kvtwin_trace)");
  JsonFields f(j, place());
  KVTWIN_TRY_STATUS(f.only({kEndKey}));
  KVTWIN_TRY(std::uint64_t ops, f.u64_required(kEndKey));
  if (ops != ops_)
    return malformed(place(), "the end line counts " + std::to_string(ops) + " operation lines but the trace has " +
                                  std::to_string(ops_) + "; lines are missing or were added");
  ended_ = true;
  return true;
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
  KVTWIN_TRY(std::unique_ptr<std::ifstream> in, open_input(path, "pool trace"));
  return parse_pool_trace(*in, path);
}

std::string end_line(std::uint64_t ops) { return "{\"" + std::string(kEndKey) + "\":" + std::to_string(ops) + "}"; }

void write_pool_trace(std::ostream& out, const PoolTrace& trace) {
  out << header_to_line(trace.header) << '\n';
  for (const TraceLine& line : trace.lines) out << op_to_line(line.op, line.expect) << '\n';
  out << end_line(trace.lines.size()) << '\n';
}

Status write_pool_trace_file(const std::string& path, const PoolTrace& trace) {
  KVTWIN_TRY(PoolTraceWriter writer, PoolTraceWriter::open(path, trace.header));
  for (const TraceLine& line : trace.lines) KVTWIN_TRY_STATUS(writer.append(line.op, line.expect));
  return writer.close();
}

Result<PoolTraceWriter> PoolTraceWriter::open(const std::string& path, const TraceHeader& header) {
  KVTWIN_TRY(OutputFile file, OutputFile::create(path));
  file.stream() << header_to_line(header) << '\n';
  if (!file.stream()) return make_error(ErrorKind::io, path + ": write failed (disk full?)");
  return PoolTraceWriter(path, std::make_unique<OutputFile>(std::move(file)));
}

Status PoolTraceWriter::append(const Op& op, const std::optional<OpResult>& expect) {
  KVTWIN_CHECK(out_ != nullptr, "append after close");
  out_->stream() << op_to_line(op, expect) << '\n';
  ++lines_;
  if (!out_->stream())
    return make_error(ErrorKind::io, path_ + ": write failed after " + std::to_string(lines_) + " lines");
  return ok_status();
}

Status PoolTraceWriter::flush() {
  KVTWIN_CHECK(out_ != nullptr, "flush after close");
  out_->stream().flush();
  if (!out_->stream()) return make_error(ErrorKind::io, path_ + ": write failed after " + std::to_string(lines_) + " lines");
  std::ifstream so_far(out_->temp_path(), std::ios::binary);
  std::ostringstream text;
  text << so_far.rdbuf();
  if (!so_far && !so_far.eof())
    return make_error(ErrorKind::io, out_->temp_path() + ": cannot read back the lines written so far");
  text << end_line(lines_) << '\n';
  return write_file_atomically(path_, text.str());
}

Status PoolTraceWriter::close() {
  if (!out_) return ok_status();
  out_->stream() << end_line(lines_) << '\n';
  Status committed = out_->commit();
  out_.reset();
  return committed;
}

void PoolTraceWriter::discard() { out_.reset(); }

PoolTraceWriter::PoolTraceWriter(PoolTraceWriter&&) noexcept = default;
PoolTraceWriter::~PoolTraceWriter() = default;

}  // namespace kvtwin::traces
