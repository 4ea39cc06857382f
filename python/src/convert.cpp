// Python objects <-> JSON, errors, operations from calls (convert.h). Written against the CPython
// API directly, since every Model.apply goes through it and its cost is the binding's overhead.
#include "python/src/convert.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace kvtwin::python {
namespace {

using nlohmann::json;

std::string type_name(py::handle object) { return Py_TYPE(object.ptr())->tp_name; }

[[noreturn]] void type_error(std::string_view what, py::handle object) {
  throw py::type_error(std::string(what) + ": cannot express a " + type_name(object) +
                       " in trace syntax; give None, bool, int, float, str, a list, a dict or a numpy array");
}

json int_to_json(PyObject* o, std::string_view what) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow == 0) {
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    // As the JSON parser reads them: non-negative integers unsigned, negative ones signed.
    return v >= 0 ? json(static_cast<std::uint64_t>(v)) : json(static_cast<std::int64_t>(v));
  }
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (!PyErr_Occurred()) return json(static_cast<std::uint64_t>(u));
    PyErr_Clear();
  }
  // Past 64 bits: a float, which the field readers refuse with "is a number too big for 64 bits".
  const double d = PyLong_AsDouble(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raise(make_error(ErrorKind::malformed, std::string(what) + ": an integer of more than 1000 digits"));
  }
  return json(d);
}

json convert(PyObject* o, std::string_view what, int depth) {
  if (depth > 64) raise(make_error(ErrorKind::malformed, std::string(what) + ": nested more than 64 levels deep"));
  if (o == Py_None) return json(nullptr);
  if (PyBool_Check(o)) return json(o == Py_True);
  if (PyLong_Check(o)) return int_to_json(o, what);
  if (PyFloat_Check(o)) return json(PyFloat_AS_DOUBLE(o));
  if (PyUnicode_Check(o)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(o, &size);
    if (text == nullptr) throw py::error_already_set();
    return json(std::string(text, static_cast<std::size_t>(size)));
  }
  if (PyDict_Check(o)) {
    json j = json::object();
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value)) {
      if (!PyUnicode_Check(key))
        throw py::type_error(std::string(what) + ": dict keys must be str, got " + type_name(key));
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(key, &size);
      if (text == nullptr) throw py::error_already_set();
      j[std::string(text, static_cast<std::size_t>(size))] = convert(value, what, depth + 1);
    }
    return j;
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    const bool list = PyList_Check(o);
    const Py_ssize_t n = list ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o);
    json j = json::array();
    j.get_ref<json::array_t&>().reserve(static_cast<std::size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i)
      j.push_back(convert(list ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i), what, depth + 1));
    return j;
  }
  // numpy arrays and scalars, torch tensors: their Python values (before the index check, which
  // numpy arrays pass too).
  py::handle handle(o);
  if (py::hasattr(handle, "tolist")) {
    py::object values = handle.attr("tolist")();
    if (values.ptr() == o) type_error(what, handle);
    return convert(values.ptr(), what, depth + 1);
  }
  // Other integer types (anything that is an index).
  if (PyIndex_Check(o)) {
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(o));
    if (!index) throw py::error_already_set();
    return int_to_json(index.ptr(), what);
  }
  type_error(what, handle);
}

PyObject* error_class() {
  // Imported once and kept for the life of the process (never released: no destructor runs at
  // interpreter shutdown).
  static PyObject* cls = [] {
    py::object errors = py::module_::import("kvtwin._errors");
    return py::object(errors.attr("Error")).release().ptr();
  }();
  return cls;
}

}  // namespace

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ErrorException& e) {
      py::object instance = py::reinterpret_borrow<py::object>(error_class())(
          e.error().message, std::string(error_kind_name(e.error().kind)), e.error().reason);
      PyErr_SetObject(error_class(), instance.ptr());
    }
  });
}

nlohmann::json to_json(py::handle object, std::string_view what) { return convert(object.ptr(), what, 0); }

py::object from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return py::none();
    case json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case json::value_t::number_integer:
      return py::reinterpret_steal<py::object>(PyLong_FromLongLong(j.get<std::int64_t>()));
    case json::value_t::number_unsigned:
      return py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(j.get<std::uint64_t>()));
    case json::value_t::number_float:
      return py::float_(j.get<double>());
    case json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case json::value_t::array: {
      py::list list(j.size());
      std::size_t i = 0;
      for (const json& e : j) list[i++] = from_json(e);
      return list;
    }
    case json::value_t::object: {
      py::dict dict;
      for (const auto& [key, value] : j.items()) dict[py::str(key)] = from_json(value);
      return dict;
    }
    default:
      throw py::type_error("kvtwin: a JSON value of type " + std::string(j.type_name()) + " has no Python form");
  }
}

nlohmann::json op_json_from_call(const py::args& args, const py::kwargs& kwargs) {
  if (args.size() > 1)
    throw py::type_error("give one operation: a dict in trace syntax, or its name and fields as keywords, e.g. "
                         "apply(\"alloc\", tokens=8)");
  json j = json::object();
  if (args.size() == 1) {
    py::handle first = args[0];
    if (PyUnicode_Check(first.ptr())) {
      j["op"] = to_json(first, "op");
    } else if (PyDict_Check(first.ptr())) {
      j = to_json(first, "op");
    } else {
      throw py::type_error("an operation is a dict in trace syntax ({\"op\": \"alloc\", \"tokens\": 8}) or its name "
                           "with fields as keywords; got a " + type_name(first));
    }
  }
  for (const auto& [key, value] : kwargs) j[py::cast<std::string>(key)] = to_json(value, "op");
  return j;
}

Op op_from_call(const py::args& args, const py::kwargs& kwargs) {
  return unwrap(op_from_json(op_json_from_call(args, kwargs), ""));
}

nlohmann::json object_from_call(const py::object& given, const py::kwargs& kwargs, std::string_view what) {
  json j = json::object();
  if (!given.is_none()) {
    if (!PyDict_Check(given.ptr()))
      throw py::type_error(std::string(what) + " is a dict in trace syntax (or keyword arguments); got a " +
                           type_name(given));
    j = to_json(given, what);
  }
  for (const auto& [key, value] : kwargs) j[py::cast<std::string>(key)] = to_json(value, what);
  return j;
}

}  // namespace kvtwin::python
