// The parts of the Python module kvtwin._native, one function per binding file; module.cpp calls
// them in order. docs/python.md is the user's view of all of it.
#pragma once

#include <pybind11/pybind11.h>

namespace kvtwin::python {

void bind_model(pybind11::module_& m);   // model_binding.cpp: kvtwin.Model, bytes_result
void bind_traces(pybind11::module_& m);  // traces_binding.cpp: read/write traces, TraceWriter, replay
void bind_layout(pybind11::module_& m);  // layout_binding.cpp: configurations, catalogue, layout
void bind_checks(pybind11::module_& m);  // checks_binding.cpp: fuzz and the named configurations

}  // namespace kvtwin::python
