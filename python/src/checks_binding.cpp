// Seeded fuzzing from Python: the one place the module binds the fuzzer (props/fuzz.h;
// the lead's refactor moves it to props/, and only this file follows it). kvtwin.check() does not
// live here: the gate's logic is the CLI's (tools/kvtwin/cmd_check.cpp), so python/kvtwin/checks.py
// runs the built `kvtwin check --json` and returns its report.
//
// fuzz() runs cases as `kvtwin fuzz --cases N` does (case i's seed derives from the run's seed and
// i; a shard runs the cases i % shard_count == shard_index) and returns the report
// `kvtwin fuzz --json` writes, with the same keys. A failing case is shrunk; its trace (each op with
// the reference's answer as its expectation) comes back in the report as a trace dict, and is
// written to `out` when given, with the `kvtwin replay` command that reproduces it.
#include <filesystem>
#include <optional>

#include "python/src/bindings.h"
#include "python/src/convert.h"
#include "traces/backends.h"
#include "props/fuzz.h"

namespace kvtwin::python {
namespace {

using nlohmann::json;

json trace_json(const traces::PoolTrace& trace) {
  json ops = json::array();
  for (const traces::TraceLine& line : trace.lines) {
    json j = op_to_json(line.op);
    if (line.expect) j["expect"] = result_to_json(*line.expect);
    ops.push_back(std::move(j));
  }
  return {{"header", json::parse(traces::header_to_line(trace.header))}, {"ops", ops}};
}

py::dict fuzz(std::uint64_t seed, std::uint64_t cases, const std::string& config, std::uint64_t ops,
              const std::string& backend, const std::string& fault, const std::optional<std::string>& out,
              std::optional<std::uint64_t> only_case, std::uint64_t shard_index, std::uint64_t shard_count) {
  const traces::BackendChoice choice = unwrap(traces::parse_backend_choice(backend));
  if (ops == 0) raise(make_error(ErrorKind::invalid_argument, "ops must be at least 1"));
  if (shard_count == 0 || shard_index >= shard_count)
    raise(make_error(ErrorKind::invalid_argument, "shard_index " + std::to_string(shard_index) +
                                                      " must be below shard_count " + std::to_string(shard_count)));
  unwrap(props::named_config(config, seed));
  const props::BackendFactory factory = [&] { return traces::make_backend_set(choice, fault); };
  unwrap(factory());

  std::uint64_t ran = 0, ops_played = 0, checks = 0;
  std::optional<props::CaseResult> failed;
  std::optional<Error> error;
  {
    py::gil_scoped_release released;
    const auto run_one = [&](std::uint64_t index) {
      props::CaseSpec spec;
      spec.index = index;
      spec.seed = props::case_seed(seed, index, config);
      spec.config = config;
      spec.ops = ops;
      Result<props::CaseResult> r = props::run_case(spec, factory);
      if (!r.ok()) {
        error = r.error();
        return;
      }
      ++ran;
      ops_played += r->stats.ops;
      checks += r->stats.checks_passed() + r->shadow_checks;
      if (r->failure) failed = std::move(r).value();
    };
    if (only_case) {
      run_one(*only_case);
    } else {
      for (std::uint64_t i = 0; i < cases && !failed && !error; ++i)
        if (i % shard_count == shard_index) run_one(i);
    }
    if (failed) props::shrink_case(*failed, factory);
  }
  if (error) raise(*error);

  json report = {{"seed", seed},         {"backend", backend},       {"config", config},
                 {"cases", ran},         {"ops", ops_played},        {"checks_passed", checks},
                 {"fault", fault},       {"passed", !failed},        {"shard_index", shard_index},
                 {"shard_count", shard_count}};
  if (failed) {
    const props::CaseResult& r = *failed;
    const std::string reproduce = "kvtwin fuzz --seed " + std::to_string(seed) + " --case " +
                                  std::to_string(r.spec.index) + " --ops " + std::to_string(ops) + " --config " +
                                  config + " --backend " + backend + (fault.empty() ? "" : " --fault " + fault);
    const json origin = {{"producer", "kvtwin.fuzz"},    {"run_seed", seed},       {"case", r.spec.index},
                         {"case_seed", r.spec.seed},     {"config", config},       {"swarm", r.swarm},
                         {"backend", backend},           {"fault", fault},         {"check", r.failure->failure.check},
                         {"ops_before_shrinking", r.failure->shrink_stats.ops_before}, {"reproduce", reproduce}};
    const traces::PoolTrace trace = props::failure_trace(r, factory, origin);
    json failure = {{"case", r.spec.index},
                    {"case_seed", r.spec.seed},
                    {"check", r.failure->failure.check},
                    {"message", r.failure->failure.message},
                    {"description", r.failure->failure.describe()},
                    {"ops_before", r.failure->shrink_stats.ops_before},
                    {"ops_after", r.failure->shrink_stats.ops_after},
                    {"reproduce", reproduce},
                    {"trace", nullptr},
                    {"replay", nullptr},
                    {"shrunk_trace", trace_json(trace)}};
    if (out) {
      std::error_code ec;
      std::filesystem::create_directories(*out, ec);
      const std::string path = (std::filesystem::path(*out) / ("fuzz-seed" + std::to_string(seed) + "-case" +
                                                              std::to_string(r.spec.index) + ".jsonl"))
                                   .string();
      unwrap(traces::write_pool_trace_file(path, trace));
      failure["trace"] = path;
      failure["replay"] = "kvtwin replay " + path + " --backend " + backend + (fault.empty() ? "" : " --fault " + fault);
    }
    report["failure"] = std::move(failure);
  }
  return from_json(report).cast<py::dict>();
}

}  // namespace

void bind_checks(py::module_& m) {
  m.def("fuzz", &fuzz, py::kw_only(), py::arg("seed") = 1, py::arg("cases") = 100, py::arg("config") = "random",
        py::arg("ops") = 200, py::arg("backend") = "model", py::arg("fault") = "", py::arg("out") = py::none(),
        py::arg("case") = py::none(), py::arg("shard_index") = 0, py::arg("shard_count") = 1,
        "Seeded swarm fuzzing of the stateful properties, as `kvtwin fuzz --cases N` runs it; returns the report "
        "`kvtwin fuzz --json` writes (a failure is shrunk, its trace included under failure.shrunk_trace).");

  m.def("named_config", [](const std::string& name, std::uint64_t seed, std::uint64_t usable_pages) {
    return from_json(pool_config_to_json(unwrap(props::named_config(name, seed, usable_pages))));
  }, py::arg("name"), py::arg("seed") = 0, py::arg("usable_pages") = 40,
     "A fuzzing configuration by name: MODEL[/tpN][/psN][/eager|lazy][/tables], scaled to `usable_pages` pages, "
     "or \"random\" (drawn from the seed).");

  m.def("catalogue_config_names", &props::catalogue_config_names,
        "The configurations `kvtwin check` covers (every catalogue model, eager and lazy, several page sizes; "
        "hybrid models on their state chain, tables-only).");
  m.def("planted_faults", &traces::planted_faults, "The bugs `fault=` can plant in the model (which then runs alone, checked by the shadow).");
  m.def("gpu_available", &traces::gpu_device_available, "Whether the GPU backend is built and a CUDA device exists.");
}

}  // namespace kvtwin::python
