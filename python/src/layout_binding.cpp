// Pool configurations, the model catalogue and the byte law from Python, as dicts in the
// vocabularies the files already use: configurations as in a trace header (docs/traces.md),
// shapes as in a spec file (docs/spec-files.md), layouts as `kvtwin layout --json` prints them
// (docs/layout-json.md; the same renderer, tools/kvtwin/layout_report.h).
#include "core/catalogue.h"
#include "core/pool_config.h"
#include "python/src/bindings.h"
#include "python/src/convert.h"
#include "tools/kvtwin/layout_report.h"

namespace kvtwin::python {
namespace {

using nlohmann::json;

// A model given as a catalogue name or a shape dict.
ModelShape shape_from(const py::handle& model) {
  if (PyUnicode_Check(model.ptr())) return unwrap(find_model(model.cast<std::string>()));
  return unwrap(shape_from_json(to_json(model, "model"), "model"));
}

}  // namespace

void bind_layout(py::module_& m) {
  m.def("catalogue", [] {
    json models = json::array();
    for (const ModelShape& s : model_catalogue()) models.push_back(shape_to_json(s));
    return from_json(models);
  }, "The built-in catalogue: one shape dict a model, in the spec-file vocabulary (docs/spec-files.md).");

  m.def("model_shape", [](const std::string& name) { return from_json(shape_to_json(unwrap(find_model(name)))); },
        py::arg("name"), "A catalogue model's shape (case-insensitive); an unknown name lists the catalogue.");

  m.def("pool_config", [](const py::object& config, const py::kwargs& kwargs) {
    const json j = object_from_call(config, kwargs, "config");
    const PoolConfig c = unwrap(pool_config_from_json(j, "config"));
    unwrap(derive_pool(c));  // a pool that cannot be built is refused here, with the byte law's message
    return from_json(pool_config_to_json(c));
  }, py::arg("config") = py::none(),
     "A pool configuration (a dict, or keywords: model, tp, page_size, total_bytes, mode, tables_only, seed), "
     "checked and completed: the whole shape, every default.");

  m.def("layout", [](const py::object& model, std::uint32_t tp, std::uint64_t page_size, std::uint64_t total_bytes,
                     const std::optional<std::string>& dtype) {
    cli::LayoutOptions options;
    options.tp = tp;
    options.page_size = page_size;
    options.total_bytes = total_bytes;
    if (dtype) {
      Result<DType> d = parse_dtype(*dtype);
      if (!d.ok()) raise(d.error().with_context("dtype: "));
      options.dtype = *d;
    }
    if (tp == 0) raise(make_error(ErrorKind::invalid_argument, "tp 0: the tensor-parallel size is at least 1"));
    if (page_size == 0) raise(make_error(ErrorKind::invalid_argument, "page_size 0: a page holds at least one slot"));
    if (total_bytes == 0) raise(make_error(ErrorKind::invalid_argument, "total_bytes 0: the pool needs bytes"));
    return from_json(cli::render_json(unwrap(cli::build_layout_report(shape_from(model), options))));
  }, py::arg("model"), py::arg("tp") = 1, py::arg("page_size") = cli::kDefaultPageSize,
     py::arg("total_bytes") = cli::kDefaultTotalBytes, py::arg("dtype") = py::none(),
     "Where every byte of a model's KV state lives (SPEC.md sections 2 and 3): the dict `kvtwin layout --json` "
     "prints (docs/layout-json.md). `model` is a catalogue name or a shape dict.");
}

}  // namespace kvtwin::python
