// kvtwin._native: the C++ half of the Python module `kvtwin` (python/kvtwin/__init__.py is the
// package users import; it re-exports what is here). See docs/python.md.
#include <pybind11/pybind11.h>

#include "python/src/bindings.h"
#include "python/src/convert.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "kvtwin's reference model, traces, replay and fuzzing (import kvtwin, not this)";
  m.attr("__version__") = KVTWIN_VERSION;
  kvtwin::python::register_error_translator();
  kvtwin::python::bind_model(m);
  kvtwin::python::bind_traces(m);
  kvtwin::python::bind_layout(m);
  kvtwin::python::bind_checks(m);
}
