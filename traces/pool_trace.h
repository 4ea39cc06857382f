// Pool traces: what a server would record at the pool's API, as JSON Lines (docs/traces.md).
//
// Line 1 is the header, {"kvtwin_trace":2,"kind":"pool","seed":S,"config":{...},"origin":{...}}:
// the format version, the pool configuration the trace runs against (the shape included, so a
// trace stands alone), the seed of whatever produced it, and free-form provenance. Every further
// line is one operation in the operation vocabulary's JSON (core/op.h), optionally with the
// result it must produce under "expect". Version 2 ends with {"kvtwin_trace_end":N}, N the number
// of operation lines, so a trace cut short by an interrupted writer is refused rather than
// replayed as if whole; version 1 (no end line) is still read, and cannot tell (docs/traces.md).
//
// The reader is strict and says where the first problem is: file, line and field (malformed
// JSON, a repeated key, an unknown version or operation, a missing, unknown or mistyped field,
// an id or size out of the range of its type or of a pool that can be built, a number too big
// for 64 bits, a line longer than kMaxInputLineBytes, a missing or wrong end line), as an
// ErrorKind::malformed Error. What depends on the pool (a layer or part it lacks, a double
// free, a buffer that disagrees with its shape) is not a reading error: the pool answers it, and
// a trace may expect that answer (the fuzzer's traces do). The writer produces
// one canonical form ("op" first, the other keys sorted, "expect" last), so reading a canonical
// file and writing it again gives the same bytes; it writes through an OutputFile (core/files.h),
// so the trace appears whole under its name or not at all. Replaying is the runner's job.
#pragma once

#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "core/result.h"

namespace kvtwin::traces {

// The version this kvtwin writes, and the oldest it reads.
inline constexpr std::uint64_t kPoolTraceVersion = 2;
inline constexpr std::uint64_t kOldestPoolTraceVersion = 1;
// The key of the end line (version 2 and later): {"kvtwin_trace_end":N}.
inline constexpr char kEndKey[] = "kvtwin_trace_end";

struct TraceHeader {
  PoolConfig config;
  std::uint64_t seed = 0;  // the seed of the producer (fuzz case, simulator); printed on replay
  nlohmann::json origin = nlohmann::json::object();  // provenance: producer, command, parameters

  bool operator==(const TraceHeader&) const = default;
};

struct TraceLine {
  Op op;
  std::optional<OpResult> expect;
  std::uint64_t line = 0;  // 1-based line in the file; 0 for lines built in memory
};

struct PoolTrace {
  TraceHeader header;
  std::vector<TraceLine> lines;
};

// The ops and expectations of two traces are equal (line numbers and messages of expected
// errors aside; an expected error compares by kind, as results do).
bool same_lines(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b);

// Canonical text of a header, of an op line and of the end line (no newline). A header of
// version 1 needs no end line after its ops.
std::string header_to_line(const TraceHeader& header, std::uint64_t version = kPoolTraceVersion);
std::string op_to_line(const Op& op, const std::optional<OpResult>& expect);
std::string end_line(std::uint64_t ops);

// Parses one line. `where` is "FILE:LINE", prefixed to every error.
Result<TraceHeader> parse_header_line(std::string_view text, std::string_view where);
Result<TraceLine> parse_op_line(std::string_view text, std::string_view where);

// Reads a trace line by line, so that a replay of a long trace holds one line at a time.
class PoolTraceReader {
 public:
  // `name` is used in error messages (the file's path, or "<memory>").
  PoolTraceReader(std::istream& in, std::string name);

  // Reads and checks the header (call first).
  Result<TraceHeader> header();
  // The next op line; nullopt at the end of the trace (after its end line, from version 2).
  Result<std::optional<TraceLine>> next();

  const std::string& name() const { return name_; }
  std::uint64_t version() const { return version_; }

 private:
  // The next non-blank line into text_; false at the end; an error for an over-long line.
  Result<bool> next_text();
  // Whether text_ is the end line (checked: its count, its version); false for an op line.
  Result<bool> read_end_line();
  std::string place() const;  // "FILE:LINE"

  std::istream& in_;
  std::string name_;
  std::string text_;
  std::uint64_t line_ = 0;
  std::uint64_t version_ = 0;
  std::uint64_t ops_ = 0;  // operation lines read
  bool have_header_ = false;
  bool ended_ = false;
};

Result<PoolTrace> parse_pool_trace(std::istream& in, std::string name);
Result<PoolTrace> read_pool_trace_file(const std::string& path);

void write_pool_trace(std::ostream& out, const PoolTrace& trace);
Status write_pool_trace_file(const std::string& path, const PoolTrace& trace);

// Writes a trace as it is produced (the serving simulator's `record`), to a temporary file that
// close() ends with the end line and renames over `path`. A writer destroyed (or discarded)
// without close() leaves the old file, or none. Errors are io Errors.
class PoolTraceWriter {
 public:
  static Result<PoolTraceWriter> open(const std::string& path, const TraceHeader& header);
  PoolTraceWriter(PoolTraceWriter&&) noexcept;
  ~PoolTraceWriter();
  Status append(const Op& op, const std::optional<OpResult>& expect);
  // A checkpoint for a recording that may end in a crash: publishes the lines written so far as a
  // whole trace (with its end line) under the trace's name, atomically; writing goes on, and
  // close() replaces it with the whole trace. Costs a copy of the trace so far.
  Status flush();
  Status close();
  void discard();
  std::uint64_t lines_written() const { return lines_; }

 private:
  PoolTraceWriter(std::string path, std::unique_ptr<OutputFile> out) : path_(std::move(path)), out_(std::move(out)) {}
  std::string path_;
  std::unique_ptr<OutputFile> out_;
  std::uint64_t lines_ = 0;
};

}  // namespace kvtwin::traces
