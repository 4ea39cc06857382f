// kvtwin.Model: the reference model (sim::Model) from Python, as an oracle a pytest suite can ask
// "what should my allocator have answered?".
//
//   m = kvtwin.Model({"model": "llama-3.1-8b", "tp": 8, "page_size": 4, "total_bytes": 1 << 20})
//   m.apply("alloc", tokens=8)            -> {"pages": [1, 2]}
//   m.apply({"op": "free", "pages": [1]}) -> {"moves": [["full", 2, 1]]}
//   m.apply("free", pages=[1])            raises kvtwin.Error (kind "double_free"), model unchanged
//
// Operations and answers are dicts in trace syntax (docs/traces.md): operations are read by core/'s
// own op_from_json, answers are result_to_json's keys built directly as Python objects (the
// per-operation cost; tests/python checks the two agree on every kind of answer). A refused
// operation raises kvtwin.Error with the model's message and leaves the model as it was (the model
// validates before it mutates);
// try_apply returns the refusal as {"error": kind, "message": ...} instead. A read's bytes come
// back under "data" as well (a numpy uint8 array), next to their size and digest.
//
// raw_bytes() is a read-only numpy view of the pool's buffer, without a copy. A view belongs to
// the pool that was built when it was taken: a `build` makes a fresh sim::Model and the view
// keeps the old one alive, so a view never dangles.
//
// translate(ids, out=None, out_width=0) takes numpy int32/int64 arrays, one- or two-dimensional,
// strided or not, with an optional int64 output (aliasing the ids, a strided slice, or separate),
// and plays the model's translate operation on them (SPEC.md section 5).
#include <cstring>
#include <memory>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "core/oracle.h"
#include "python/src/bindings.h"
#include "python/src/convert.h"
#include "sim/model.h"

namespace kvtwin::python {
namespace {

using nlohmann::json;

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// A std::vector handed to numpy without a copy: the capsule owns it.
template <class T>
py::array_t<T> vector_to_array(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), owner);
}

py::dict bytes_dict(Bytes&& b) {
  py::dict d = from_json(result_to_json(OpResult(Outcome(b)))).cast<py::dict>();
  const auto size = static_cast<py::ssize_t>(b.bytes.size());
  d["data"] = vector_to_array(std::move(b.bytes), {size});
  return d;
}

py::list int_list(const std::vector<std::int64_t>& values) {
  py::list list(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(values[i]));
  return list;
}

py::list int_rows(const std::vector<std::vector<std::int64_t>>& rows) {
  py::list list(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) list[i] = int_list(rows[i]);
  return list;
}

// An answer as a dict, in trace syntax: result_to_json's keys and values (tests/python checks the
// two agree on every kind of answer), built directly as Python objects because this is the
// binding's per-operation cost. Refusals (rare) go through result_to_json itself. Reads and
// decode steps also carry their bytes under "data".
py::dict answer_dict(OpResult&& r) {
  if (!r.ok()) return from_json(result_to_json(r)).cast<py::dict>();
  py::dict d;
  std::visit(Overloaded{
                 [&](Done&) { d["ok"] = true; },
                 [&](NoRoom&) { d["no_room"] = true; },
                 [&](Allocated& o) { d["pages"] = int_list(o.pages); },
                 [&](AllocatedMany& o) {
                   d["pages"] = int_rows(o.pages);
                   if (o.pages.empty()) d["many"] = true;  // as result_to_json says which it is
                 },
                 [&](Compaction& o) {
                   py::list moves(o.moves.size());
                   for (std::size_t i = 0; i < o.moves.size(); ++i) {
                     py::list m(3);
                     m[0] = py::str(o.moves[i].sub_pool);
                     m[1] = py::int_(o.moves[i].src);
                     m[2] = py::int_(o.moves[i].dst);
                     moves[i] = std::move(m);
                   }
                   d["moves"] = std::move(moves);
                 },
                 [&](Ids& o) { d["ids"] = int_list(o.values); },
                 [&](Table& o) { d["table"] = int_rows(o.rows); },
                 [&](Bytes& o) { d = bytes_dict(std::move(o)); },
                 [&](Marks& o) {
                   py::list marks(2);
                   marks[0] = py::bool_(o.left_physical);
                   marks[1] = py::bool_(o.right_physical);
                   d["marks"] = std::move(marks);
                 },
                 [&](Decode& o) {
                   d["loc"] = int_list(o.loc);
                   d["table"] = int_rows(o.table);
                   d["attention"] = bytes_dict(std::move(o.attention));
                 },
                 // Host arena outcomes are rare per step: their dict is result_to_json's.
                 [&](HostAllocated& o) { d = from_json(result_to_json(OpResult(Outcome(o)))).cast<py::dict>(); },
                 [&](TransferStarted& o) { d = from_json(result_to_json(OpResult(Outcome(o)))).cast<py::dict>(); },
             },
             r.value());
  return d;
}

py::dict tables_dict(const PoolTables& tables) {
  py::list sides;
  for (const SideTables& s : tables.sides) {
    py::dict d;
    d["name"] = s.name;
    d["v2p"] = py::cast(s.v2p);
    d["p2v"] = py::cast(s.p2v);
    d["free_queue"] = py::cast(s.free_queue);
    d["watermark"] = s.watermark;
    d["holes"] = py::cast(s.holes);
    d["allocated_pages"] = s.allocated_pages;
    sides.append(std::move(d));
  }
  py::dict out;
  out["sides"] = std::move(sides);
  return out;
}

class PyModel {
 public:
  PyModel() : model_(std::make_shared<sim::Model>()) {}

  // Plays one operation; a `build` goes to a fresh model, kept only when it succeeds.
  OpResult play(const Op& op) {
    if (std::holds_alternative<BuildPool>(op)) {
      auto fresh = std::make_shared<sim::Model>();
      OpResult r = fresh->apply(op);
      if (r.ok()) model_ = std::move(fresh);
      return r;
    }
    return model_->apply(op);
  }

  py::dict apply(const py::args& args, const py::kwargs& kwargs) {
    const Op op = unwrap(op_from_json(op_json_from_call(args, kwargs), "apply"));
    OpResult r = play(op);
    if (!r.ok()) raise(r.error());
    return answer_dict(std::move(r));
  }

  py::dict try_apply(const py::args& args, const py::kwargs& kwargs) {
    const Op op = unwrap(op_from_json(op_json_from_call(args, kwargs), "try_apply"));
    return answer_dict(play(op));
  }

  py::dict tables() const { return tables_dict(unwrap(model_->tables())); }

  void verify() const { unwrap(model_->verify()); }

  std::uint64_t digest() const { return model_->state_digest(); }

  bool built() const { return model_->built(); }

  py::object config() const {
    if (!model_->built()) return py::none();
    return from_json(pool_config_to_json(model_->config()));
  }

  // A read-only view of [offset, offset + length) of the pool's bytes (the rest of the pool
  // when length is None), without a copy. The array keeps this pool's model alive.
  py::array raw_bytes(std::uint64_t offset, std::optional<std::uint64_t> length) const {
    const std::span<const std::uint8_t> all = unwrap(model_->bytes_view());
    if (offset > all.size())
      raise(make_error(ErrorKind::out_of_range, "raw_bytes: offset " + std::to_string(offset) +
                                                    " is past the pool's " + std::to_string(all.size()) + " bytes"));
    const std::uint64_t n = length.value_or(all.size() - offset);
    if (n > all.size() - offset)
      raise(make_error(ErrorKind::out_of_range, "raw_bytes: [" + std::to_string(offset) + ", " +
                                                    std::to_string(offset) + " + " + std::to_string(n) +
                                                    ") is outside the pool's " + std::to_string(all.size()) +
                                                    " bytes"));
    auto* keep = new std::shared_ptr<sim::Model>(model_);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<sim::Model>*>(p); });
    py::array_t<std::uint8_t> view({static_cast<py::ssize_t>(n)}, all.data() + offset, owner);
    // numpy arrays over foreign memory are writeable by default: the pool is the model's.
    py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return view;
  }

  std::string describe_byte(std::uint64_t offset) const { return unwrap(model_->locate_byte(offset)).describe(); }

  py::array translate(const py::object& ids_object, const py::object& out_object, std::uint64_t out_width);

 private:
  std::shared_ptr<sim::Model> model_;
};

// ---------------------------------------------------------------- translate over numpy arrays

// What an array's layout says, in the translate operation's terms (core/op.h Translate).
struct ArrayLayout {
  bool int32 = false;
  std::vector<std::int64_t> shape;
  std::int64_t stride = 0;  // elements: 1-D lane stride, 2-D row stride; 0 when the op cannot say
};

bool is_integer_dtype(const py::array& a, int itemsize) {
  return a.dtype().kind() == 'i' && a.itemsize() == itemsize;
}

ArrayLayout layout_of(const py::array& a) {
  ArrayLayout l;
  l.int32 = a.itemsize() == 4;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) l.shape.push_back(static_cast<std::int64_t>(a.shape(d)));
  const auto item = static_cast<py::ssize_t>(a.itemsize());
  // The op knows positive lane strides (1-D) and row strides over contiguous rows (2-D); any
  // other layout (negative, broadcast, column-strided) is read by value and played as contiguous.
  if (a.ndim() == 1 && a.strides(0) > 0 && a.strides(0) % item == 0) l.stride = a.strides(0) / item;
  if (a.ndim() == 2 && a.strides(1) == item && a.strides(0) > 0 && a.strides(0) % item == 0)
    l.stride = a.strides(0) / item;
  return l;
}

// The array's values in row-major order, read through its strides.
template <class T>
void read_values(const py::array& a, std::vector<std::int64_t>& out) {
  const auto* base = static_cast<const char*>(a.data());
  if (a.ndim() == 1) {
    const py::ssize_t n = a.shape(0), s = a.strides(0);
    out.resize(static_cast<std::size_t>(n));
    if (s == static_cast<py::ssize_t>(sizeof(T)) && sizeof(T) == sizeof(std::int64_t)) {
      std::memcpy(out.data(), base, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    for (py::ssize_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = *reinterpret_cast<const T*>(base + i * s);
    return;
  }
  if (a.ndim() == 2) {
    const py::ssize_t rows = a.shape(0), cols = a.shape(1), s0 = a.strides(0), s1 = a.strides(1);
    out.resize(static_cast<std::size_t>(rows * cols));
    std::size_t k = 0;
    for (py::ssize_t r = 0; r < rows; ++r)
      for (py::ssize_t c = 0; c < cols; ++c) out[k++] = *reinterpret_cast<const T*>(base + r * s0 + c * s1);
    return;
  }
  // Other ranks: the values in order, for the model to refuse by shape.
  const py::array flat = py::array::ensure(a.attr("reshape")(-1));
  read_values<T>(flat, out);
}

// Writes row-major values into an int64 array through its strides.
void write_values(const std::vector<std::int64_t>& values, py::array& out) {
  auto* base = static_cast<char*>(out.mutable_data());
  if (out.ndim() == 1) {
    const py::ssize_t n = out.shape(0), s = out.strides(0);
    if (s == static_cast<py::ssize_t>(sizeof(std::int64_t))) {
      std::memcpy(base, values.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t));
      return;
    }
    for (py::ssize_t i = 0; i < n; ++i) *reinterpret_cast<std::int64_t*>(base + i * s) = values[static_cast<std::size_t>(i)];
    return;
  }
  const py::ssize_t rows = out.shape(0), cols = out.shape(1), s0 = out.strides(0), s1 = out.strides(1);
  std::size_t k = 0;
  for (py::ssize_t r = 0; r < rows; ++r)
    for (py::ssize_t c = 0; c < cols; ++c) *reinterpret_cast<std::int64_t*>(base + r * s0 + c * s1) = values[k++];
}

// [first byte, one past the last byte] an array's elements span.
std::pair<std::intptr_t, std::intptr_t> extent(const py::array& a) {
  auto lo = reinterpret_cast<std::intptr_t>(a.data());
  std::intptr_t hi = lo;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.shape(d) == 0) return {lo, lo};
    const std::intptr_t reach = static_cast<std::intptr_t>((a.shape(d) - 1) * a.strides(d));
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + static_cast<std::intptr_t>(a.itemsize())};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

py::array PyModel::translate(const py::object& ids_object, const py::object& out_object, std::uint64_t out_width) {
  const py::array ids = py::array::ensure(ids_object);
  if (!ids) throw py::error_already_set();
  if (!is_integer_dtype(ids, 4) && !is_integer_dtype(ids, 8))
    raise(invalid("translate takes int32 or int64 ids; got an array of " +
                  py::str(static_cast<py::handle>(ids.dtype())).cast<std::string>()));
  const ArrayLayout in = layout_of(ids);
  Translate op;
  if (in.int32)
    read_values<std::int32_t>(ids, op.ids);
  else
    read_values<std::int64_t>(ids, op.ids);
  op.shape = in.shape;
  op.index_dtype = in.int32 ? IndexDtype::int32 : IndexDtype::int64;
  op.input_stride = in.stride;
  op.out_width = out_width;

  std::optional<py::array> out;
  if (!out_object.is_none()) {
    if (!py::isinstance<py::array>(out_object))
      throw py::type_error("translate: out must be a numpy int64 array, got a " +
                           std::string(Py_TYPE(out_object.ptr())->tp_name));
    out = py::reinterpret_borrow<py::array>(out_object);
    // SPEC 5: the output is int64; anything else is what the model refuses (out_dtype).
    if (!is_integer_dtype(*out, 8)) op.out_dtype = IndexDtype::int32;
    if (!out->writeable()) raise(invalid("translate: out is a read-only array; give a writeable int64 array"));
    std::vector<std::int64_t> expected = in.shape;
    if (out_width != 0 && in.shape.size() == 1) expected = {static_cast<std::int64_t>(out_width)};
    const ArrayLayout o = layout_of(*out);
    if (op.out_dtype == IndexDtype::int64 && o.shape != expected)
      raise(invalid("translate: out has shape " + shape_text(o.shape) + " but the answer has shape " +
                    shape_text(expected) + "; give an int64 out of that shape"));
    const bool same_start = out->data() == ids.data();
    const bool same_strides = ids.ndim() == out->ndim() &&
                              std::equal(ids.strides(), ids.strides() + ids.ndim(), out->strides());
    if (same_start && same_strides && !in.int32) {
      op.out = OutPlacement::alias;  // the ids' own buffer (with out_width lanes, a capture-stable one)
    } else {
      const auto [a_lo, a_hi] = extent(ids);
      const auto [b_lo, b_hi] = extent(*out);
      if (a_lo < b_hi && b_lo < a_hi && op.out_dtype == IndexDtype::int64)
        raise(invalid("translate: out overlaps the ids without being the same buffer; give the ids array itself "
                      "(to translate in place) or a separate array"));
      const bool contiguous = o.shape.size() == 1 ? o.stride == 1 : (o.shape.size() == 2 && o.stride == o.shape[1]);
      if (!contiguous && o.stride != 0) {
        op.out = OutPlacement::strided;
        op.out_stride = o.stride;
      }
    }
  }
  OpResult r = model_->apply(Op(std::move(op)));
  if (!r.ok()) raise(r.error());
  std::vector<std::int64_t>& values = std::get<Ids>(r.value()).values;
  if (out) {
    write_values(values, *out);
    return *out;
  }
  std::vector<py::ssize_t> shape(in.shape.begin(), in.shape.end());
  if (out_width != 0 && shape.size() == 1) shape[0] = static_cast<py::ssize_t>(out_width);
  return vector_to_array(std::move(values), shape);
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PyModel>(m, "Model", R"(The reference model (sim::Model): the oracle for a pool allocator.

Model(config=None, **fields) builds a pool when a configuration is given (a dict in trace syntax,
or its fields as keywords: model, tp, page_size, total_bytes, mode, tables_only, seed).)")
      .def(py::init([](const py::object& config, const py::kwargs& kwargs) {
             auto model = std::make_unique<PyModel>();
             if (!config.is_none() || kwargs.size() != 0) {
               json op = {{"op", "build"}, {"config", object_from_call(config, kwargs, "config")}};
               OpResult r = model->play(unwrap(op_from_json(op, "Model")));
               if (!r.ok()) raise(r.error());
             }
             return model;
           }),
           py::arg("config") = py::none())
      .def("apply", &PyModel::apply,
           "Plays one operation in trace syntax, as a dict or a name with keyword fields: apply(\"alloc\", "
           "tokens=8). Returns the answer as a dict; a refusal raises kvtwin.Error and changes nothing.")
      .def("try_apply", &PyModel::try_apply,
           "As apply, but a refusal comes back as {\"error\": kind, \"message\": ...} instead of raising.")
      .def("tables", &PyModel::tables,
           "The allocator tables of every sub-pool: {\"sides\": [{name, v2p, p2v, free_queue, watermark, holes, "
           "allocated_pages}]} (SPEC.md section 4).")
      .def("verify", &PyModel::verify,
           "Re-checks every invariant and re-reads every live row; raises kvtwin.Error naming the first broken one.")
      .def("digest", &PyModel::digest, "A digest of everything observable (equal before and after a refusal).")
      .def_property_readonly("built", &PyModel::built)
      .def_property_readonly("config", &PyModel::config, "The configuration built, the whole shape included.")
      .def("raw_bytes", &PyModel::raw_bytes, py::arg("offset") = 0, py::arg("length") = py::none(),
           "A read-only numpy uint8 view of the pool's bytes, without a copy.")
      .def("describe_byte", &PyModel::describe_byte, py::arg("offset"),
           "Which sub-pool, page, slot, layer and part a byte belongs to, and what the oracle expects there.")
      .def("translate", &PyModel::translate, py::arg("ids"), py::arg("out") = py::none(), py::arg("out_width") = 0,
           "Virtual -> physical token ids (SPEC.md section 5) over a numpy int32/int64 array, 1-D or 2-D, "
           "strided or not. Returns a fresh int64 array, or fills `out` (int64, the ids' shape, or "
           "out_width lanes): out may be the ids themselves (in place) or a strided slice.");

  m.def("bytes_result", [](const py::buffer& data) {
    const py::buffer_info info = data.request();
    const auto* p = static_cast<const std::uint8_t*>(info.ptr);
    const std::vector<std::uint8_t> bytes(p, p + info.size * info.itemsize);
    return from_json(result_to_json(OpResult(Outcome(Bytes::of(bytes)))));
  }, py::arg("data"), "The trace result of bytes a read returned: {\"bytes\": size, \"digest\": hex}.");
}

}  // namespace kvtwin::python
