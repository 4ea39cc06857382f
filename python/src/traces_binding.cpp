// Pool traces from Python: reading and writing them (traces/pool_trace.h), a streaming writer for
// the Recorder, and replaying them through the runner (traces/replay.h) with the report as a dict.
//
// A trace in Python is a dict:
//   {"header": {"kvtwin_trace": 1, "kind": "pool", "seed": S, "config": {...}, "origin": {...}},
//    "ops":    [{"op": "alloc", "tokens": 8, "expect": {"pages": [1, 2]}}, ...],
//    "lines":  [2, 3, ...]}            (read_trace only: each op's line in its file)
// Writing goes through the reader's own line parser, so a trace written from Python is checked
// field by field exactly as a file would be, and comes out in the canonical form. A header given
// without "kvtwin_trace", "kind" or "seed" gets 1, "pool" and 0.
#include <optional>

#include "python/src/bindings.h"
#include "python/src/convert.h"
#include "traces/backends.h"
#include "traces/pool_trace.h"
#include "props/observers.h"
#include "traces/replay.h"

namespace kvtwin::python {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string path_string(const py::handle& path) {
  return py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
}

traces::TraceHeader header_from(const py::handle& header, const std::string& where) {
  json j = to_json(header, "header");
  if (!j.is_object()) raise(make_error(ErrorKind::malformed, where + ": the header must be a dict"));
  if (!j.contains("kvtwin_trace")) j["kvtwin_trace"] = traces::kPoolTraceVersion;
  if (!j.contains("kind")) j["kind"] = "pool";
  if (!j.contains("seed")) j["seed"] = 0;
  return unwrap(traces::parse_header_line(dump(j), where));
}

// One op dict (with its "expect", if any) as a trace line, read as the file reader reads one.
traces::TraceLine line_from(const json& op, const std::string& where) {
  return unwrap(traces::parse_op_line(dump(op), where));
}

json header_json(const traces::TraceHeader& h) { return json::parse(traces::header_to_line(h)); }

json line_json(const traces::TraceLine& line) {
  json j = op_to_json(line.op);
  if (line.expect) j["expect"] = result_to_json(*line.expect);
  return j;
}

traces::PoolTrace trace_from(const py::handle& trace) {
  if (!PyDict_Check(trace.ptr()))
    throw py::type_error("a trace is a path or a dict {\"header\": {...}, \"ops\": [...]}");
  const py::dict d = py::reinterpret_borrow<py::dict>(trace);
  if (!d.contains("header")) raise(make_error(ErrorKind::malformed, "trace: missing key 'header'"));
  traces::PoolTrace out;
  out.header = header_from(d["header"], "header");
  if (d.contains("ops")) {
    const json ops = to_json(d["ops"], "ops");
    if (!ops.is_array()) raise(make_error(ErrorKind::malformed, "trace: 'ops' must be a list of operation dicts"));
    for (std::size_t i = 0; i < ops.size(); ++i) {
      traces::TraceLine line = line_from(ops[i], "ops[" + std::to_string(i) + "]");
      line.line = i + 2;  // the line it would have in a file (the header is line 1)
      out.lines.push_back(std::move(line));
    }
  }
  return out;
}

py::dict trace_dict(const traces::PoolTrace& trace) {
  json ops = json::array();
  json lines = json::array();
  for (const traces::TraceLine& line : trace.lines) {
    ops.push_back(line_json(line));
    lines.push_back(line.line);
  }
  py::dict d;
  d["header"] = from_json(header_json(trace.header));
  d["ops"] = from_json(ops);
  d["lines"] = from_json(lines);
  return d;
}

// The Recorder's writer: a trace written line by line as the engine runs.
class TraceWriter {
 public:
  TraceWriter(const py::object& path, const py::object& header) : path_(path_string(path)) {
    const traces::TraceHeader h = header_from(header, path_ + ":1");
    writer_.emplace(unwrap(traces::PoolTraceWriter::open(path_, h)));
    config_ = pool_config_to_json(h.config);
  }

  // Appends one op (a dict in trace syntax; `expect` given here or under the dict's "expect").
  // Returns the line it was written on.
  std::uint64_t append(const py::object& op, const py::object& expect) {
    if (!writer_) raise(make_error(ErrorKind::io, path_ + ": the trace is closed"));
    json j = to_json(op, "op");
    if (!expect.is_none()) {
      if (!j.is_object()) raise(make_error(ErrorKind::malformed, "an operation must be a dict"));
      j["expect"] = to_json(expect, "expect");
    }
    const std::uint64_t line = writer_->lines_written() + 2;
    const traces::TraceLine parsed = line_from(j, path_ + ":" + std::to_string(line));
    unwrap(writer_->append(parsed.op, parsed.expect));
    return line;
  }

  void flush() {
    if (!writer_) raise(make_error(ErrorKind::io, path_ + ": the trace is closed"));
    unwrap(writer_->flush());
  }

  void close() {
    if (!writer_) return;
    closed_lines_ = writer_->lines_written();
    Status s = writer_->close();
    writer_.reset();
    unwrap(s);
  }

  std::uint64_t lines_written() const { return writer_ ? writer_->lines_written() : closed_lines_; }
  const std::string& path() const { return path_; }
  py::object config() const { return from_json(config_); }
  bool closed() const { return !writer_; }

 private:
  std::string path_;
  std::optional<traces::PoolTraceWriter> writer_;
  std::uint64_t closed_lines_ = 0;
  json config_;
};

traces::CheckCadence cadence_from(std::optional<std::uint64_t> verify_every, std::uint64_t tables_every,
                                  bool compare_pools) {
  traces::CheckCadence c;
  c.verify_every = verify_every.value_or(traces::kVerifyAuto);
  c.tables_every = tables_every;
  c.compare_pools = compare_pools;
  return c;
}

py::dict replay(const py::object& trace, const std::string& backend, const std::string& fault,
                std::optional<std::uint64_t> verify_every, std::uint64_t tables_every, bool compare_pools) {
  const traces::BackendChoice choice = unwrap(traces::parse_backend_choice(backend));
  traces::BackendSet backends = unwrap(traces::make_backend_set(choice, fault));
  const traces::CheckCadence cadence = cadence_from(verify_every, tables_every, compare_pools);
  std::optional<traces::ReplayReport> report;
  // As kvtwin replay: the shadow, the policy and the refusal checks join the trace's expectations
  // whenever tables are checked after every line.
  const traces::ObserverFactory observers =
      cadence.tables_every == 1 ? props::property_observer_factory() : traces::ObserverFactory{};
  if (PyDict_Check(trace.ptr())) {
    const traces::PoolTrace t = trace_from(trace);
    Result<traces::ReplayReport> r = make_error(ErrorKind::internal, "not run");
    {
      py::gil_scoped_release released;
      r = traces::replay_lines(t.header, t.lines, backends, cadence, "<memory>", observers);
    }
    report = unwrap(std::move(r));
  } else {
    const std::string path = path_string(trace);
    Result<traces::ReplayReport> r = make_error(ErrorKind::internal, "not run");
    {
      py::gil_scoped_release released;
      r = traces::replay_pool_trace_file(path, backends, cadence, {}, observers);
    }
    report = unwrap(std::move(r));
  }
  return from_json(traces::report_json(*report)).cast<py::dict>();
}

}  // namespace

void bind_traces(py::module_& m) {
  m.def("read_trace", [](const py::object& path) {
    return trace_dict(unwrap(traces::read_pool_trace_file(path_string(path))));
  }, py::arg("path"), "Reads a pool trace: {\"header\": ..., \"ops\": [...], \"lines\": [...]}.");

  m.def("write_trace", [](const py::object& path, const py::object& trace) {
    unwrap(traces::write_pool_trace_file(path_string(path), trace_from(trace)));
  }, py::arg("path"), py::arg("trace"),
     "Writes a pool trace ({\"header\": ..., \"ops\": [...]}) in canonical form, each line checked as the reader "
     "checks it.");

  m.def("replay", &replay, py::arg("trace"), py::arg("backend") = "model", py::arg("fault") = "",
        py::arg("verify_every") = py::none(), py::arg("tables_every") = 1, py::arg("compare_pools") = true,
        "Replays a pool trace (a path, or a dict as read_trace returns) as `kvtwin replay` does, checking after "
        "every operation; returns the report `kvtwin replay --json` writes. A trace that cannot be read raises "
        "kvtwin.Error; a failed check is a report with passed False and a failure with its line.");

  py::class_<TraceWriter>(m, "TraceWriter", "Writes a pool trace line by line (the Recorder's writer).")
      .def(py::init<const py::object&, const py::object&>(), py::arg("path"), py::arg("header"))
      .def("append", &TraceWriter::append, py::arg("op"), py::arg("expect") = py::none(),
           "Appends one operation (and its expected result); returns its line number.")
      .def("flush", &TraceWriter::flush, "Publishes the lines written so far as a whole trace under its name (a checkpoint); writing goes on.")
      .def("close", &TraceWriter::close)
      .def_property_readonly("lines_written", &TraceWriter::lines_written)
      .def_property_readonly("path", &TraceWriter::path)
      .def_property_readonly("config", &TraceWriter::config)
      .def_property_readonly("closed", &TraceWriter::closed);
}

}  // namespace kvtwin::python
