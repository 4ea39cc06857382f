// kvtwin_bench_baseline: the C++ side of the Python binding's benchmark (binding_bench.py). It
// times the reference model called directly from C++ (sim::Model::apply) on exactly the work the
// benchmark then times through the binding, in the same process and run, so that the binding's
// overhead comes out as a ratio of two numbers measured side by side.
//
// Both sides time the process's CPU time (CLOCK_PROCESS_CPUTIME_ID here, time.process_time() in
// Python), not wall time: on a shared machine a wall clock counts the other processes' turns too.
// This is a benchmark, never a test, and no result depends on it.
#include <ctime>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "core/op.h"
#include "sim/model.h"

namespace {

namespace py = pybind11;
using namespace kvtwin;

std::unique_ptr<sim::Model> built_model(const std::string& config_json) {
  Result<Op> op = op_from_json(nlohmann::json{{"op", "build"}, {"config", nlohmann::json::parse(config_json)}}, "bench");
  if (!op.ok()) throw std::runtime_error(op.error().message);
  auto model = std::make_unique<sim::Model>();
  OpResult r = model->apply(*op);
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return model;
}

// The process's CPU seconds so far.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// `reps` rounds of alloc(tokens) then free(its pages) on a fresh pool; seconds for all of them.
double alloc_free_seconds(const std::string& config_json, std::uint64_t tokens, std::uint64_t reps) {
  auto model = built_model(config_json);
  const double start = cpu_seconds();
  for (std::uint64_t i = 0; i < reps; ++i) {
    OpResult a = model->apply(Op(Alloc{tokens}));
    if (!a.ok()) throw std::runtime_error(a.error().message);
    OpResult f = model->apply(Op(Free{IdUnit::pages, std::get<Allocated>(a.value()).pages}));
    if (!f.ok()) throw std::runtime_error(f.error().message);
  }
  return cpu_seconds() - start;
}

// translate(ids) `reps` times on a pool with `alloc_tokens` allocated first; seconds for all. The
// op is the one the binding plays for the same call: int32 or int64 ids, a fresh output or the ids
// themselves (in place).
double translate_seconds(const std::string& config_json, std::uint64_t alloc_tokens,
                         const py::array_t<std::int64_t, py::array::c_style>& ids, std::uint64_t reps, bool int32,
                         bool in_place) {
  auto model = built_model(config_json);
  if (!model->apply(Op(Alloc{alloc_tokens})).ok()) throw std::runtime_error("the pool has no room for the ids");
  Translate op;
  op.ids.assign(ids.data(), ids.data() + ids.size());
  op.shape = {static_cast<std::int64_t>(ids.size())};
  op.index_dtype = int32 ? IndexDtype::int32 : IndexDtype::int64;
  op.out = in_place ? OutPlacement::alias : OutPlacement::fresh;
  const Op translate(std::move(op));
  const double start = cpu_seconds();
  for (std::uint64_t i = 0; i < reps; ++i) {
    OpResult r = model->apply(translate);
    if (!r.ok()) throw std::runtime_error(r.error().message);
  }
  return cpu_seconds() - start;
}

}  // namespace

PYBIND11_MODULE(kvtwin_bench_baseline, m) {
  m.doc() = "The C++ model timed directly, for tools/bench/python/binding_bench.py";
  m.def("alloc_free_seconds", &alloc_free_seconds, py::arg("config_json"), py::arg("tokens"), py::arg("reps"));
  m.def("translate_seconds", &translate_seconds, py::arg("config_json"), py::arg("alloc_tokens"), py::arg("ids"),
        py::arg("reps"), py::arg("int32") = false, py::arg("in_place") = false);
}
