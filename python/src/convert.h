// What every binding file of the Python module shares: Python objects <-> JSON in trace syntax,
// kvtwin Errors -> the Python exception kvtwin.Error, and operations given as a dict or as
// keyword arguments.
//
// Why JSON: core/ already reads and writes every operation, result and configuration in trace
// syntax (core/op.h), with strict field checks and messages that name the field. The binding goes
// through the same functions, so a dict a Python test passes to Model.apply is read exactly as the
// same line in a trace file would be, and fails with the same message.
//
// Conversions: None, bool, int (signed or unsigned 64-bit; larger ints become floats, which the
// field readers refuse as "too big for 64 bits"), float, str, dict (str keys), list and tuple,
// numpy integer scalars and anything with tolist() (numpy arrays, torch tensors). Anything else is
// a TypeError naming the type.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/op.h"
#include "core/result.h"

namespace kvtwin::python {

namespace py = pybind11;

// A kvtwin Error on its way to Python: translated to kvtwin.Error(message, kind) (_errors.py).
class ErrorException : public std::runtime_error {
 public:
  explicit ErrorException(Error error) : std::runtime_error(error.message), error_(std::move(error)) {}
  const Error& error() const { return error_; }

 private:
  Error error_;
};

// Registers the translation of ErrorException to kvtwin.Error.
void register_error_translator();

[[noreturn]] inline void raise(const Error& error) { throw ErrorException(error); }

template <class T>
T unwrap(Result<T>&& r) {
  if (!r.ok()) raise(r.error());
  return std::move(r).value();
}
inline void unwrap(const Status& s) {
  if (!s.ok()) raise(s.error());
}

// `what` names the argument in a TypeError ("op", "config").
nlohmann::json to_json(py::handle object, std::string_view what);
py::object from_json(const nlohmann::json& j);

// An operation as Model.apply takes it: apply({"op": "alloc", "tokens": 8}),
// apply("alloc", tokens=8) or apply(op="alloc", tokens=8). Keyword fields override dict fields.
nlohmann::json op_json_from_call(const py::args& args, const py::kwargs& kwargs);
Op op_from_call(const py::args& args, const py::kwargs& kwargs);

// A dict argument, or keyword arguments, as one JSON object (configurations).
nlohmann::json object_from_call(const py::object& given, const py::kwargs& kwargs, std::string_view what);

}  // namespace kvtwin::python
