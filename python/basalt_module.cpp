// basalt — Python module (`import basalt`), an onnxruntime-like API over basalt::Session.
//
//   sess = basalt.InferenceSession("model.onnx")            # or the model's bytes
//   outs = sess.run(None, {"x": np.zeros((1, 3, 224, 224), np.float32)})
//
// Contracts (the README's "Python" section documents them for users):
// - Inputs: a C-contiguous, aligned, native-byte-order numpy array of a supported dtype is passed
//   to the runtime without a copy (a Tensor::view over the array's buffer). Any other array is
//   first copied into such an array. The module holds a reference to every array it views until
//   run() returns, so a caller may drop its own reference right after calling run().
// - Outputs: a tensor the run allocated for itself and that nothing else references is handed to
//   numpy without a copy; a py::capsule owning a Tensor handle is the array's base, so the bytes
//   live as long as the array. Every other output is copied first: an output whose storage is an
//   input view (Identity, Reshape of an input) would otherwise alias the caller's array, and one
//   that shares storage with the model's weights would let the caller write into the session.
// - The GIL is released while the model loads and while it runs. No py::object is created,
//   copied or destroyed without the GIL: Python objects are converted to basalt Values before the
//   release and back after it.
// - Errors: basalt::Error becomes a basalt.BasaltError subclass chosen by its code (see
//   make_exception_types below); the message is basalt's, which names the node/input at fault.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <basalt/basalt.hpp>

#include "core/storage.hpp"
#include "graph/model.hpp"

#include <cstring>
#include <string>
#include <utility>
#include <vector>
#include "runtime/session_access.hpp"

namespace py = pybind11;
using basalt::DType;
using basalt::ErrorCode;
using basalt::Tensor;
using basalt::Value;

namespace {

// ---------------------------------------------------------------- exceptions

// Indexed by int(ErrorCode); index 0 is the base class basalt.BasaltError. 7 (the C API's
// out-of-memory status) has no Error of its own.
PyObject* g_exc[9] = {};
PyObject* g_invalid_protobuf = nullptr;  // InvalidModelError raised while decoding the file

// onnxruntime's exception classes (onnxruntime.capi.onnxruntime_pybind11_state), which the
// onnxruntime alias package re-exports. basalt's own classes derive from them, so a program
// written for onnxruntime catches basalt's errors by the names it knows.
struct OrtClasses {
  PyObject *fail, *invalid_argument, *no_such_file, *no_model, *engine_error, *runtime_exception, *invalid_protobuf,
      *model_loaded, *not_implemented, *invalid_graph, *ep_fail;
};

OrtClasses make_ort_classes(py::module_& state) {
  auto make = [&](const char* name) {
    std::string full = std::string("onnxruntime.capi.onnxruntime_pybind11_state.") + name;
    PyObject* e = PyErr_NewException(full.c_str(), PyExc_Exception, nullptr);
    if (!e) throw py::error_already_set();
    state.attr(name) = py::handle(e);
    return e;
  };
  OrtClasses o;
  o.fail = make("Fail");
  o.invalid_argument = make("InvalidArgument");
  o.no_such_file = make("NoSuchFile");
  o.no_model = make("NoModel");
  o.engine_error = make("EngineError");
  o.runtime_exception = make("RuntimeException");
  o.invalid_protobuf = make("InvalidProtobuf");
  o.model_loaded = make("ModelLoaded");
  o.not_implemented = make("NotImplemented");
  o.invalid_graph = make("InvalidGraph");
  o.ep_fail = make("EPFail");
  return o;
}

// True for an InvalidModel error raised while decoding the bytes (loader.cpp's "is not a valid
// ONNX model" / "is not an ONNX model" / "is empty"): onnxruntime calls that InvalidProtobuf.
bool is_protobuf_error(const char* msg) {
  std::string m(msg);
  return m.find("is not a valid ONNX model") != std::string::npos || m.find("is not an ONNX model") != std::string::npos ||
         m.find("is empty (0 bytes)") != std::string::npos || m.find("malformed protobuf") != std::string::npos;
}

// Each basalt error code gets its own class. They all derive from basalt.BasaltError (itself a
// RuntimeError), from the builtin exception a Python user would naturally catch (`except
// ValueError` for a wrong input, `except OSError` for a missing file) and from the onnxruntime
// class onnxruntime raises for the same mistake.
void make_exception_types(py::module_& m) {
  py::module_ state = m.def_submodule("ort_state", "onnxruntime's exception classes");
  OrtClasses o = make_ort_classes(state);
  auto make = [&](const char* name, std::initializer_list<PyObject*> bases, const char* code, const char* doc) {
    py::tuple b(bases.size());
    size_t i = 0;
    for (PyObject* base : bases) b[i++] = py::reinterpret_borrow<py::object>(base);
    std::string full = std::string("basalt.") + name;
    // The new reference is kept for the life of the process: translators use it after module init.
    PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, b.ptr(), nullptr);
    if (!e) throw py::error_already_set();
    if (PyObject_SetAttrString(e, "code", py::str(code).ptr()) != 0) throw py::error_already_set();
    m.attr(name) = py::handle(e);
    return e;
  };
  g_exc[0] = make("BasaltError", {PyExc_RuntimeError}, "error", "Base class of every error basalt raises.");
  g_exc[int(ErrorCode::InvalidModel)] =
      make("InvalidModelError", {g_exc[0], PyExc_ValueError, o.fail, o.invalid_graph}, "invalid model",
           "The model file or graph is malformed (bad protobuf, cycle, dangling input, bad attribute).");
  g_invalid_protobuf = make("InvalidProtobufError", {g_exc[int(ErrorCode::InvalidModel)], o.invalid_protobuf},
                            "invalid model", "The model's bytes are not a decodable ONNX ModelProto.");
  g_exc[int(ErrorCode::InvalidArgument)] =
      make("InvalidArgumentError", {g_exc[0], PyExc_ValueError, o.invalid_argument}, "invalid argument",
           "The caller's inputs or options are wrong: unknown name, wrong dtype, rank or fixed dim.");
  g_exc[int(ErrorCode::Unsupported)] =
      make("UnsupportedError", {g_exc[0], PyExc_NotImplementedError, o.not_implemented}, "unsupported",
           "Valid ONNX that basalt does not run (op, dtype, attribute value).");
  g_exc[int(ErrorCode::MemoryLimit)] =
      make("MemoryLimitError", {g_exc[0], PyExc_MemoryError, o.runtime_exception}, "memory limit",
           "A request would exceed the memory limit or available memory.");
  g_exc[int(ErrorCode::Io)] =
      make("BasaltIOError", {g_exc[0], PyExc_OSError, o.no_such_file}, "io", "A file could not be read or mapped.");
  g_exc[int(ErrorCode::Internal)] =
      make("InternalError", {g_exc[0], o.runtime_exception}, "internal", "A bug in basalt.");
  g_exc[int(ErrorCode::Cancelled)] = make("CancelledError", {g_exc[0], o.fail}, "cancelled",
                                          "The run was stopped by RunOptions.terminate.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const basalt::Error& e) {
      int c = int(e.code());
      PyObject* cls = c >= 1 && c <= 8 && g_exc[c] ? g_exc[c] : g_exc[0];
      if (e.code() == ErrorCode::InvalidModel && is_protobuf_error(e.what())) cls = g_invalid_protobuf;
      PyErr_SetString(cls, e.what());
    }
  });
}

[[noreturn]] void invalid_argument(const std::string& msg) { throw basalt::Error(ErrorCode::InvalidArgument, msg); }

// Sets one option through SessionOptions::validate, the one range check (InvalidArgumentError,
// a ValueError, names the field); a rejected value leaves the options as they were.
template <class F>
void set_checked(basalt::SessionOptions& o, const char* attr, F&& set) {
  basalt::SessionOptions t = o;
  set(t);
  try {
    t.validate();
  } catch (const basalt::Error& e) {
    throw basalt::Error(e.code(), std::string(attr) + ": " + e.what());
  }
  o = t;
}

// An int option read and written through set_checked (validated, named in the error).
void checked_property(py::class_<basalt::SessionOptions>& c, const char* name, int basalt::SessionOptions::*field,
                      const char* doc) {
  c.def_property(
      name, [field](const basalt::SessionOptions& o) { return o.*field; },
      [name, field](basalt::SessionOptions& o, int v) {
        set_checked(o, name, [&](basalt::SessionOptions& t) { t.*field = v; });
      },
      doc);
}

// ---------------------------------------------------------------- dtypes

// The numpy dtype for a basalt dtype that numpy can hold bit for bit, or nullptr.
const char* numpy_name(DType t) {
  switch (t) {
    case DType::Float: return "float32";
    case DType::Double: return "float64";
    case DType::Float16: return "float16";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Uint8: return "uint8";
    case DType::Uint16: return "uint16";
    case DType::Uint32: return "uint32";
    case DType::Uint64: return "uint64";
    case DType::Bool: return "bool";
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
    // Stored unpacked, one element per byte (dtype.hpp), so the bytes are already int8/uint8.
    case DType::Int4: case DType::Int2: return "int8";
    case DType::Uint4: case DType::Uint2: return "uint8";
    default: return nullptr;
  }
}

// basalt dtype of a numeric numpy dtype (by kind and size), or Undefined.
DType from_numpy(const py::dtype& dt) {
  char k = dt.kind();
  size_t n = size_t(dt.itemsize());
  switch (k) {
    case 'f': return n == 4 ? DType::Float : n == 8 ? DType::Double : n == 2 ? DType::Float16 : DType::Undefined;
    case 'i': return n == 1 ? DType::Int8 : n == 2 ? DType::Int16 : n == 4 ? DType::Int32 : n == 8 ? DType::Int64 : DType::Undefined;
    case 'u': return n == 1 ? DType::Uint8 : n == 2 ? DType::Uint16 : n == 4 ? DType::Uint32 : n == 8 ? DType::Uint64 : DType::Undefined;
    case 'b': return n == 1 ? DType::Bool : DType::Undefined;
    case 'c': return n == 8 ? DType::Complex64 : n == 16 ? DType::Complex128 : DType::Undefined;
    default: return DType::Undefined;
  }
}

// ---------------------------------------------------------------- inputs

// Python objects that input views point into. Destroyed only with the GIL held (run() declares it
// outside its gil_scoped_release block).
struct Keep {
  std::vector<py::object> arrays;
};

basalt::Shape shape_of(const py::array& a) {
  basalt::Shape s(size_t(a.ndim()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = int64_t(a.shape(py::ssize_t(i)));
  return s;
}

// A string array (str, bytes or object elements) copied into a String tensor. str is stored as
// UTF-8, bytes as is; anything else is an error.
Tensor string_tensor(const py::array& a, const std::string& what) {
  Tensor t(DType::String, shape_of(a));
  py::object flat = a.attr("ravel")();
  std::string* out = t.data<std::string>();
  int64_t i = 0;
  for (py::handle item : flat) {
    if (PyUnicode_Check(item.ptr())) {
      Py_ssize_t len = 0;
      const char* s = PyUnicode_AsUTF8AndSize(item.ptr(), &len);
      if (!s) throw py::error_already_set();
      out[i].assign(s, size_t(len));
    } else if (PyBytes_Check(item.ptr())) {
      out[i] = std::string(py::reinterpret_borrow<py::bytes>(item));
    } else {
      invalid_argument(what + ": string tensors take str or bytes elements, got " +
                       std::string(py::str(py::type::of(item).attr("__name__"))));
    }
    ++i;
  }
  return t;
}

// A numpy array (or anything np.asarray accepts) as a Tensor. `want` is the model's dtype for this
// input (Undefined when unknown); it only matters for dtypes numpy lacks: a float32 array given
// for a bfloat16 input is rounded to bfloat16 (a copy), a uint16 array is taken as the raw
// bfloat16 bits (a view), and int8/uint8 arrays feed 4- and 2-bit inputs after a range check.
Tensor to_tensor(py::handle obj, DType want, const std::string& what, Keep& keep) {
  py::module_ np = py::module_::import("numpy");
  py::array a = py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj)
                                               : py::array(np.attr("asarray")(obj));
  py::dtype dt = a.dtype();
  char kind = dt.kind();
  if (kind == 'U' || kind == 'S' || kind == 'O') return string_tensor(a, what);

  DType t = from_numpy(dt);
  if (t == DType::Undefined)
    invalid_argument(what + ": numpy dtype " + std::string(py::str(dt)) + " has no ONNX equivalent");
  if (want == DType::BFloat16 && t == DType::Float) {
    py::array_t<float, py::array::c_style | py::array::forcecast> f(a);
    Tensor b(DType::BFloat16, shape_of(f));
    const float* src = f.data();
    for (int64_t i = 0; i < b.numel(); ++i) b.data<basalt::bfloat16>()[i] = basalt::bfloat16(src[i]);
    return b;
  }
  // uint16 given for a bfloat16 input holds the raw bfloat16 bits (as onnx.numpy_helper reads them).
  if (want == DType::BFloat16 && t == DType::Uint16) t = DType::BFloat16;
  // int8/uint8 given for a 4- or 2-bit input: basalt stores those unpacked, one per byte.
  bool narrow = ((want == DType::Int4 || want == DType::Int2) && t == DType::Int8) ||
                ((want == DType::Uint4 || want == DType::Uint2) && t == DType::Uint8);
  // Views need a C-contiguous, aligned, native-order buffer; anything else is copied into one.
  bool native = py::bool_(dt.attr("isnative"));
  bool usable = native && (a.flags() & py::array::c_style) && (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_);
  if (!usable) {
    py::object native_dt = native ? py::object(dt) : dt.attr("newbyteorder")("=");
    a = py::array(np.attr("ascontiguousarray")(a, native_dt));
  }
  if (narrow) {
    // Kernels assume in-range values, so check them once here.
    int lo = want == DType::Int4 ? -8 : want == DType::Int2 ? -2 : 0;
    int hi = want == DType::Int4 ? 7 : want == DType::Int2 ? 1 : want == DType::Uint4 ? 15 : 3;
    const char* p = static_cast<const char*>(a.data());
    for (py::ssize_t i = 0; i < a.size(); ++i) {
      int v = t == DType::Int8 ? int(static_cast<int8_t>(p[i])) : int(static_cast<uint8_t>(p[i]));
      if (v < lo || v > hi)
        invalid_argument(what + ": value " + std::to_string(v) + " is out of range for " + basalt::dtype_name(want));
    }
    t = want;
  }
  keep.arrays.push_back(a);
  // The view holds no keep-alive: `keep` holds the array until run() returns, and outputs that
  // still point into it are copied before they leave run() (see must_copy).
  return Tensor::view(t, shape_of(a), const_cast<void*>(a.data()), nullptr);
}

Value to_value(py::handle obj, const basalt::IoInfo* io, const std::string& name, Keep& keep) {
  std::string what = "input '" + name + "'";
  std::string kind = io ? io->kind : "tensor";
  DType want = io ? io->dtype : DType::Undefined;
  bool is_list = py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj);
  if (obj.is_none()) {
    if (kind == "optional") return Value();
    invalid_argument(what + ": None is only accepted for an optional input");
  }
  if (kind == "sequence" || (kind == "optional" && is_list)) {
    if (!is_list) invalid_argument(what + ": expected a list of numpy arrays for " + io->type_string());
    std::vector<Tensor> items;
    size_t i = 0;
    for (py::handle item : obj)
      items.push_back(to_tensor(item, want, what + "[" + std::to_string(i++) + "]", keep));
    return Value::make_sequence(std::move(items), want);
  }
  return Value(to_tensor(obj, want, what, keep));
}

// ---------------------------------------------------------------- outputs

struct Range {
  const char* begin;
  const char* end;
};

// The memory of the arrays the run views (inputs and bound outputs): outputs that overlap it are
// copied before they leave the run.
std::vector<Range> ranges_of(const Keep& keep) {
  std::vector<Range> ranges;
  for (const py::object& o : keep.arrays) {
    const py::array& a = static_cast<const py::array&>(o);
    const char* b = static_cast<const char*>(a.data());
    ranges.push_back({b, b + a.nbytes()});
  }
  return ranges;
}

// True when `t` may not be handed to numpy as is: its bytes belong to someone else (an input
// view, a mapped weight), or another Tensor shares them (a weight copied at load, a second output
// of the same value). Runs without the GIL; the run's own references are gone by now, so a
// use_count of 1 means this result is the only owner.
bool must_copy(const Tensor& t, const std::vector<Range>& inputs) {
  const auto& st = t.storage();
  if (!st || t.dtype() == DType::String) return false;  // strings are converted element by element
  // A dynamic pool block (exclusive) is the caller's as it is, like memory basalt owns: copying it
  // cost PaddleOCR det a fresh 0.4-5.4 MB output (and its page faults) on every run.
  if (!t.owns_exclusively()) return true;
  const char* b = static_cast<const char*>(st->data);
  const char* e = b + st->bytes;
  for (const Range& r : inputs)
    if (b < r.end && r.begin < e) return true;
  return false;
}

void make_exclusive(Value& v, const std::vector<Range>& inputs) {
  if (v.is_tensor()) {
    if (must_copy(v.tensor, inputs)) v.tensor = v.tensor.clone();
  } else if (v.is_sequence()) {
    // Take the items out of the list (copying the list only when the run shares it, e.g. with a
    // sequence input), so that use_count sees no reference from the old list.
    std::shared_ptr<std::vector<Tensor>> seq = std::move(v.sequence);
    std::vector<Tensor> items = seq.use_count() == 1 ? std::move(*seq) : *seq;
    seq.reset();
    for (Tensor& t : items)
      if (must_copy(t, inputs)) t = t.clone();
    v = Value::make_sequence(std::move(items), v.seq_elem_type);
  }
}

py::object to_numpy(Tensor t, const std::string& what) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == DType::String) {
    py::array out(py::dtype("O"), shape);
    py::object flat = out.attr("reshape")(-1);
    const std::string* s = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      // Strings come back as str like onnxruntime's; bytes that are not UTF-8 come back as bytes.
      PyObject* u = PyUnicode_DecodeUTF8(s[i].data(), py::ssize_t(s[i].size()), nullptr);
      py::object item;
      if (u) {
        item = py::reinterpret_steal<py::object>(u);
      } else {
        PyErr_Clear();
        item = py::bytes(s[i]);
      }
      flat[py::int_(i)] = item;
    }
    return out;
  }
  if (t.dtype() == DType::BFloat16) {  // numpy has no bfloat16: float32 holds every value exactly
    py::array_t<float> out(shape);
    float* d = out.mutable_data();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = float(t.data<basalt::bfloat16>()[i]);
    return out;
  }
  const char* name = numpy_name(t.dtype());
  if (!name)
    throw basalt::Error(ErrorCode::Unsupported, what + ": basalt cannot return a " + basalt::dtype_name(t.dtype()) +
                                                    " tensor to Python (numpy has no such dtype)");
  py::dtype dt(name);
  if (!t.raw()) return py::array(dt, shape);  // an empty tensor without storage
  auto* holder = new Tensor(std::move(t));
  py::capsule base(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, {}, holder->raw(), base);
}

py::object to_python(Value v, const std::string& what) {
  if (v.is_none()) return py::none();
  if (v.is_sequence()) {
    py::list l;
    size_t i = 0;
    for (Tensor& t : *v.sequence) l.append(to_numpy(std::move(t), what + "[" + std::to_string(i++) + "]"));
    return l;
  }
  return to_numpy(std::move(v.tensor), what);
}

// ---------------------------------------------------------------- session

// Metadata of one graph input or output, like onnxruntime's NodeArg.
struct NodeArg {
  std::string name, type, kind;
  py::object shape;    // list of int / str (symbolic) / None (unknown); None when the rank is unknown
  py::object dtype;    // numpy dtype, or None when numpy has none (bfloat16, float8, ...)
  bool has_default = false;
};

NodeArg make_node_arg(const basalt::IoInfo& io) {
  NodeArg a;
  a.name = io.name;
  a.type = io.type_string();
  a.kind = io.kind;
  a.has_default = io.has_default;
  if (io.has_shape) {
    py::list s;
    for (size_t d = 0; d < io.shape.size(); ++d) {
      if (io.shape[d] >= 0)
        s.append(io.shape[d]);
      else if (!io.dim_params[d].empty())
        s.append(io.dim_params[d]);
      else
        s.append(py::none());
    }
    a.shape = s;
  } else {
    a.shape = py::none();
  }
  const char* n = io.dtype == DType::BFloat16 ? "float32" : numpy_name(io.dtype);
  a.dtype = n ? py::object(py::dtype(n)) : py::none();
  return a;
}

struct PySession {
  std::unique_ptr<basalt::Session> s;
};

// RunOptions.terminate: a flag another thread may set while a run reads it (GIL released).
struct TerminateFlag {
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
};

basalt::RunOptions run_options_of(py::handle terminate, std::shared_ptr<std::atomic<bool>>& hold) {
  basalt::RunOptions ro;
  if (terminate.is_none()) return ro;
  if (!py::isinstance<TerminateFlag>(terminate)) throw py::type_error("terminate must be a basalt._native.TerminateFlag or None");
  hold = terminate.cast<const TerminateFlag&>().flag;
  ro.terminate = hold.get();
  return ro;
}

std::vector<std::string> output_names_of(py::object output_names) {
  std::vector<std::string> names;
  if (output_names.is_none()) return names;
  if (py::isinstance<py::str>(output_names)) throw py::type_error("output_names must be a list of str or None");
  for (py::handle n : output_names) {
    if (!py::isinstance<py::str>(n)) throw py::type_error("output_names must be a list of str or None");
    names.push_back(n.cast<std::string>());
  }
  return names;
}

basalt::SessionOptions options_of(py::handle o) {
  if (o.is_none()) return {};
  if (!py::isinstance<basalt::SessionOptions>(o))
    throw py::type_error("sess_options must be a basalt.SessionOptions, got " +
                         std::string(py::str(py::type::of(o).attr("__name__"))));
  return o.cast<basalt::SessionOptions>();
}

std::unique_ptr<PySession> open_session(py::object src, py::object sess_options) {
  basalt::SessionOptions opts = options_of(sess_options);
  auto ps = std::make_unique<PySession>();
  if (PyBytes_Check(src.ptr()) || PyByteArray_Check(src.ptr()) || PyMemoryView_Check(src.ptr())) {
    if (PyMemoryView_Check(src.ptr()) && !py::bool_(src.attr("c_contiguous"))) src = py::bytes(src);
    py::buffer_info buf = py::reinterpret_borrow<py::buffer>(src).request();  // released with the GIL held
    size_t n = size_t(buf.size * buf.itemsize);
    // from_bytes copies the bytes before it returns, so the buffer is only needed during the call.
    {
      py::gil_scoped_release nogil;
      ps->s = basalt::Session::from_bytes(buf.ptr, n, opts);
    }
  } else {
    py::object p;
    try {
      p = py::module_::import("os").attr("fspath")(src);
    } catch (py::error_already_set&) {
      throw py::type_error("InferenceSession takes a path (str or os.PathLike) or the model's bytes, got " +
                           std::string(py::str(py::type::of(src).attr("__name__"))));
    }
    if (!py::isinstance<py::str>(p)) p = p.attr("decode")("utf-8", "surrogateescape");
    std::string path = p.cast<std::string>();
    py::gil_scoped_release nogil;
    ps->s = basalt::Session::open(path, opts);
  }
  return ps;
}

// input_feed ({name: array}) as the session's feeds; the arrays viewed without a copy are kept in
// `keep`. An unknown name is converted anyway; Session::run reports it with the valid names.
std::vector<std::pair<std::string, Value>> feeds_of(const basalt::Session& s, py::object input_feed, Keep& keep) {
  if (!py::isinstance<py::dict>(input_feed))
    throw py::type_error("input_feed must be a dict {input name: numpy array}");
  std::vector<std::pair<std::string, Value>> feeds;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(input_feed)) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("input_feed keys must be str (input names)");
    std::string name = k.cast<std::string>();
    const basalt::IoInfo* io = nullptr;
    for (const auto& i : s.inputs())
      if (i.name == name) io = &i;
    feeds.emplace_back(name, to_value(v, io, name, keep));
  }
  return feeds;
}

py::list run_session(const PySession& ps, py::object output_names, py::object input_feed, py::object terminate) {
  const basalt::Session& s = *ps.s;
  std::shared_ptr<std::atomic<bool>> hold;
  basalt::RunOptions ro = run_options_of(terminate, hold);
  std::vector<std::string> names = output_names_of(output_names);
  Keep keep;  // declared first: destroyed last, with the GIL held
  std::vector<std::pair<std::string, Value>> feeds = feeds_of(s, input_feed, keep);
  std::vector<Range> ranges = ranges_of(keep);

  std::vector<Value> outs;
  {
    py::gil_scoped_release nogil;
    outs = s.run(feeds, names, ro);
    feeds.clear();  // drop the input views before deciding which outputs are exclusive
    for (Value& v : outs) make_exclusive(v, ranges);
  }
  std::vector<std::string> out_names = names;
  if (out_names.empty())
    for (const auto& o : s.outputs()) out_names.push_back(o.name);
  py::list result;
  for (size_t i = 0; i < outs.size(); ++i)
    result.append(to_python(std::move(outs[i]), "output '" + (i < out_names.size() ? out_names[i] : "?") + "'"));
  return result;
}

// IO binding: output arrays given by the caller (C-contiguous, writable, the exact dtype) are
// filled in place; the kernel that produces an output writes straight into the array. Returns a
// list with one entry per model output in graph order: None for a bound output (its array holds
// the result), the value as run() returns it for the others. Nothing is allocated for a bound
// output, and the returned list holds only None when every output is bound.
py::list run_bound_session(const PySession& ps, py::dict outputs, py::object input_feed, py::object terminate) {
  const basalt::Session& s = *ps.s;
  std::shared_ptr<std::atomic<bool>> hold;
  basalt::RunOptions ro = run_options_of(terminate, hold);
  Keep keep;
  std::vector<std::pair<std::string, Value>> feeds = feeds_of(s, input_feed, keep);
  std::vector<std::pair<std::string, Tensor>> bind;
  for (auto [k, v] : outputs) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("outputs keys must be str (output names)");
    std::string name = k.cast<std::string>();
    if (!py::isinstance<py::array>(v)) throw py::type_error("outputs['" + name + "'] must be a numpy array");
    py::array a = py::reinterpret_borrow<py::array>(v);
    if (!(a.flags() & py::array::c_style)) invalid_argument("output '" + name + "': the bound array must be C-contiguous");
    if (!a.writeable()) invalid_argument("output '" + name + "': the bound array must be writable");
    DType t = from_numpy(a.dtype());
    if (t == DType::String || t == DType::Undefined)
      invalid_argument("output '" + name + "': numpy dtype " + std::string(py::str(a.dtype())) + " cannot be bound");
    keep.arrays.push_back(a);
    bind.emplace_back(name, Tensor::view(t, shape_of(a), a.mutable_data(), nullptr));
  }
  std::vector<Range> ranges = ranges_of(keep);
  std::vector<Value> outs;
  std::vector<bool> is_bound(s.outputs().size(), false);
  for (const auto& [name, t] : bind)
    for (size_t k = 0; k < s.outputs().size(); ++k)
      if (s.outputs()[k].name == name) is_bound[k] = true;
  {
    py::gil_scoped_release nogil;
    outs = s.run_into(feeds, bind, ro);
    feeds.clear();
    bind.clear();
    for (size_t k = 0; k < outs.size(); ++k) {
      if (k < is_bound.size() && is_bound[k]) outs[k] = Value();
      else make_exclusive(outs[k], ranges);
    }
  }
  py::list result;
  for (size_t k = 0; k < outs.size(); ++k)
    result.append(k < is_bound.size() && is_bound[k] ? py::none()
                                                     : to_python(std::move(outs[k]), "output '" + s.outputs()[k].name + "'"));
  return result;
}

py::dict metadata_of(const PySession& ps) {
  const basalt::ModelMetadata& md = ps.s->metadata();
  py::dict d;
  d["producer_name"] = md.producer_name;
  d["producer_version"] = md.producer_version;
  d["domain"] = md.domain;
  d["description"] = md.description;
  d["graph_name"] = md.graph_name;
  d["graph_description"] = md.graph_description;
  d["version"] = md.version;
  py::dict custom;
  for (const auto& [k, v] : md.custom) custom[py::str(k)] = py::str(v);
  d["custom_metadata_map"] = custom;
  return d;
}

py::dict memory_stats(const PySession& ps) {
  const basalt::Model& m = session_model(*ps.s);
  basalt::MemoryStats st = ps.s->memory_stats();
  py::dict d;
  d["weight_bytes"] = st.weights_bytes;
  d["weight_bytes_in_place"] = st.weights_in_place_bytes;
  d["weight_bytes_copied"] = st.weights_bytes - st.weights_in_place_bytes;
  d["packed_weight_bytes"] = st.packed_weights_bytes;
  d["model_file_bytes"] = m.file_size;
  d["plan_cache_hits"] = st.plan_cache_hits;
  d["plan_cache_misses"] = st.plan_cache_misses;
  d["plan_cache_evictions"] = st.plan_cache_evictions;
  d["plan_cache_entries"] = st.plan_cache_entries;
  d["plan_cache_bytes"] = st.plan_cache_bytes;
  d["arena_bytes"] = st.arena_bytes;
  d["last_run_arena_bytes"] = st.last_run_arena_bytes;
  d["peak_run_bytes"] = st.peak_run_bytes;
  d["memory_limit"] = st.memory_limit;
  d["arena_maps"] = st.arena_maps;
  d["arena_grows"] = st.arena_grows;
  d["heap_fallbacks"] = st.heap_fallbacks;
  d["unplanned_alias_runs"] = st.unplanned_alias_runs;
  d["last_run_heap_bytes"] = st.last_run_heap_bytes;
  d["dynamic_pool_hits"] = st.dynamic_pool_hits;
  d["dynamic_pool_misses"] = st.dynamic_pool_misses;
  d["dynamic_pool_frees"] = st.dynamic_pool_frees;
  d["dynamic_pool_held_bytes"] = st.dynamic_pool_held_bytes;
  d["dynamic_pool_in_use_bytes"] = st.dynamic_pool_in_use_bytes;
  d["dynamic_pool_peak_bytes"] = st.dynamic_pool_peak_bytes;
  return d;
}

py::dict pool_stats(const PySession& ps) {
  const basalt::ThreadPoolStats st = ps.s->pool_stats();
  py::dict d;
  d["threads"] = st.threads;
  d["spin_us"] = st.spin_us;
  d["shared"] = st.shared;
  d["busy_detections"] = st.busy_detections;
  d["preempted_spins"] = st.preempted_spins;
  d["apart_moves"] = st.apart_moves;
  return d;
}

py::dict plan_memory(const PySession& ps, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, basalt::Shape> m(shapes.begin(), shapes.end());
  basalt::MemoryPlanReport r;
  {
    py::gil_scoped_release nogil;
    r = ps.s->plan_memory(m);
  }
  py::dict d;
  d["key"] = r.key;
  d["arena_bytes"] = r.arena_bytes;
  d["tensor_bytes"] = r.tensor_bytes;
  d["workspace_bytes"] = r.workspace_bytes;
  d["inputs_bytes"] = r.inputs_bytes;
  d["outputs_bytes"] = r.outputs_bytes;
  d["weights_bytes"] = r.weights_bytes;
  d["packed_weights_bytes"] = r.packed_weights_bytes;
  d["peak_bytes"] = r.peak_bytes;
  d["planned_tensors"] = r.planned_tensors;
  d["in_place_tensors"] = r.in_place_tensors;
  d["concat_in_place"] = r.concat_in_place;
  d["dynamic_values"] = r.dynamic_values;
  return d;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() =
      "basalt's native core. Use the basalt package (python/basalt/__init__.py), which adds onnxruntime's "
      "API on top of it.";
  make_exception_types(m);

  py::class_<basalt::SessionOptions> opts(m, "SessionOptions", "basalt's native session options.");
  checked_property(opts, "intra_op_num_threads", &basalt::SessionOptions::threads,
                   "Threads one run may use inside an op, the calling thread included; 0 = every core this process "
                   "may use.");
  checked_property(opts, "threads", &basalt::SessionOptions::threads, "Alias of intra_op_num_threads.");
  checked_property(opts, "spin_us", &basalt::SessionOptions::spin_us,
                   "Microseconds an idle pool thread spins before it sleeps; 0 = never spin.");
  checked_property(opts, "graph_optimization_level", &basalt::SessionOptions::optimization_level,
                   "basalt's level: 0 none, 1 basic, 2 extended, 3 all (the package maps onnxruntime's levels onto it).");
  opts.def(py::init<>())
      .def_readwrite("memory_limit", &basalt::SessionOptions::memory_limit,
                     "Bytes; 0 = no limit. A run whose memory plan needs more raises MemoryLimitError before "
                     "allocating; the session stays usable for smaller inputs.")
      .def_readwrite("memory_plan", &basalt::SessionOptions::memory_plan,
                     "Run in one planned arena per input-shape signature (default). Off: every tensor comes from "
                     "the heap; the plan is still made for the memory limit.")
      .def_readwrite("shared_pool", &basalt::SessionOptions::shared_pool,
                     "Use the process-wide thread pool (shared by every session that sets this) instead of an own one.")
      .def_readwrite("free_dimensions_by_name", &basalt::SessionOptions::free_dimensions_by_name)
      .def_readwrite("free_dimensions_by_denotation", &basalt::SessionOptions::free_dimensions_by_denotation)
      .def_readwrite("optimized_model_path", &basalt::SessionOptions::optimized_model_path)
      .def_readwrite("denormals_as_zero", &basalt::SessionOptions::denormals_as_zero)
      .def(
          "set_initializers",
          [](basalt::SessionOptions& o, const std::vector<std::pair<std::string, py::array>>& items) {
            // The caller (the package's SessionOptions) keeps the arrays alive as long as any session.
            std::vector<std::pair<std::string, Tensor>> v;
            for (const auto& [name, a] : items) {
              bool ok = (a.flags() & py::array::c_style) && (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) &&
                        py::bool_(a.dtype().attr("isnative"));
              if (!ok) invalid_argument("initializer '" + name + "': the array must be C-contiguous, aligned and native-endian");
              DType t = from_numpy(a.dtype());
              if (t == DType::Undefined) invalid_argument("initializer '" + name + "': numpy dtype " + std::string(py::str(a.dtype())) + " has no ONNX equivalent");
              v.emplace_back(name, Tensor::view(t, shape_of(a), const_cast<void*>(a.data()), nullptr));
            }
            o.initializers = std::move(v);
          },
          py::arg("items"))
      .def_property(
          "plan_cache_entries", [](const basalt::SessionOptions& o) { return o.plan_cache_entries; },
          [](basalt::SessionOptions& o, long long v) {
            if (v < 0) throw py::value_error("plan_cache_entries must be >= 0 (0 = no caching)");
            o.plan_cache_entries = size_t(v);
          },
          "Memory plans cached per input-shape signature (LRU); 0 = plan every run.")
      .def_readwrite("plan_cache_bytes", &basalt::SessionOptions::plan_cache_bytes,
                     "Bound on the resident bytes the cached plans keep (memory_stats()['plan_cache_bytes']).")
      .def_readwrite("dynamic_pool_bytes", &basalt::SessionOptions::dynamic_pool_bytes,
                     "Idle bytes kept by the pool of tensors whose size depends on data (0 = keep none).")
      .def_readwrite("winograd", &basalt::SessionOptions::winograd,
                     "Winograd convolution for the 3x3 stride-1 convs where it is faster (default). Its "
                     "transformed weights are 1.8x-4x the originals; False keeps every conv on the direct "
                     "kernels, for the smallest packed weights at some speed.")
      .def_readwrite("allow_unsupported", &basalt::SessionOptions::allow_unsupported,
                     "Load a model that has ops basalt cannot run (running it raises UnsupportedError).")
      .def_readwrite("enable_profiling", &basalt::SessionOptions::enable_profiling,
                     "Record a per-node profile of every run (as onnxruntime's option of the same name). "
                     "InferenceSession.end_profiling() writes it as a Chrome trace.")
      .def_readwrite("profile_path", &basalt::SessionOptions::profile_path,
                     "Where end_profiling() (or the session's destruction) writes the Chrome trace; setting it "
                     "also enables profiling.")
      .def("__repr__", [](const basalt::SessionOptions& o) {
        return "SessionOptions(intra_op_num_threads=" + std::to_string(o.threads) +
               ", memory_limit=" + std::to_string(o.memory_limit) +
               ", allow_unsupported=" + (o.allow_unsupported ? "True" : "False") + ")";
      });

  py::class_<NodeArg>(m, "NodeArg", "Metadata of a graph input or output.")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("type", &NodeArg::type, "onnxruntime-style type: 'tensor(float)', 'seq(tensor(int64))', ...")
      .def_readonly("kind", &NodeArg::kind, "'tensor', 'sequence', 'optional', 'map' or 'unknown'")
      .def_readonly("shape", &NodeArg::shape,
                    "List with an int per fixed dim, the symbol (str) per symbolic dim and None per unknown "
                    "dim; None when the rank itself is unknown.")
      .def_readonly("dtype", &NodeArg::dtype, "numpy dtype of the elements, None when numpy has none")
      .def_readonly("has_default", &NodeArg::has_default, "an initializer backs this input: it may be omitted")
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name=" + std::string(py::repr(py::str(a.name))) + ", type=" + std::string(py::repr(py::str(a.type))) +
               ", shape=" + std::string(py::repr(a.shape)) + ")";
      });

  py::class_<TerminateFlag>(m, "TerminateFlag", "RunOptions.terminate: read by a run before every node.")
      .def(py::init<>())
      .def("set", [](TerminateFlag& f, bool v) { f.flag->store(v); })
      .def("is_set", [](const TerminateFlag& f) { return f.flag->load(); });

  m.def("set_default_random_seed", &basalt::set_default_random_seed, py::arg("seed"),
        "Seed of the random ops that have no seed attribute, process-wide (onnxruntime's set_seed).");

  py::class_<PySession>(m, "Session",
                        "A loaded model. Immutable; run() may be called from many threads at once (it "
                        "releases the GIL).")
      .def(py::init(&open_session), py::arg("path_or_bytes"), py::arg("sess_options") = py::none(),
           "Loads a model from a path (str or os.PathLike) or from its bytes (bytes, bytearray, memoryview; copied).")
      .def("run", &run_session, py::arg("output_names"), py::arg("input_feed"), py::arg("terminate") = py::none(),
           "Runs the model. output_names: list of names, or None for all outputs in graph order. input_feed: "
           "{name: numpy array}; a sequence input takes a list of arrays, an optional input may be None. "
           "Returns a list with one numpy array per output (a list of arrays for a sequence output, None for "
           "an empty optional).")
      .def("run_bound", &run_bound_session, py::arg("outputs"), py::arg("input_feed"), py::arg("terminate") = py::none(),
           "IO binding: writes each output named in `outputs` ({name: numpy array}) in place and returns every "
           "output in graph order, None for the bound ones.")
      .def("metadata", &metadata_of)
      .def("profiling_start_ns", [](const PySession& ps) { return ps.s->profiling_start_ns(); })
      .def("get_inputs",
           [](const PySession& ps) {
             std::vector<NodeArg> v;
             for (const auto& io : ps.s->inputs()) v.push_back(make_node_arg(io));
             return v;
           })
      .def("get_outputs",
           [](const PySession& ps) {
             std::vector<NodeArg> v;
             for (const auto& io : ps.s->outputs()) v.push_back(make_node_arg(io));
             return v;
           })
      .def("memory_stats", &memory_stats,
           "Memory figures in bytes and plan-cache counters: weight_bytes (all constant tensors), "
           "weight_bytes_in_place (used in place from the mapped file), weight_bytes_copied, packed_weight_bytes "
           "(copies kernels made in packed layouts), model_file_bytes, plan_cache_hits/misses/evictions/entries/"
           "bytes, arena_bytes, last_run_arena_bytes, peak_run_bytes, memory_limit.")
      .def("pool_stats", &pool_stats,
           "The session's thread pool: threads, spin_us, shared, and counters since it was created: "
           "busy_detections (another process wanted the cores), preempted_spins, apart_moves.")
      .def("plan_memory", &plan_memory, py::arg("shapes"),
           "Plans the memory of a run with these input shapes ({name: [dims]}) without running it and returns "
           "the plan in bytes: arena_bytes, workspace_bytes, inputs_bytes, outputs_bytes, weights_bytes, "
           "packed_weights_bytes, peak_bytes, plus dynamic_values (sizes that depend on data). Planning never "
           "fails on memory_limit; run() does, before allocating, when peak_bytes exceeds it.")
      .def(
          "end_profiling",
          [](const PySession& ps, const std::string& path) {
            py::gil_scoped_release nogil;
            return ps.s->end_profiling(path);
          },
          py::arg("path") = std::string(),
          "Writes the profile recorded so far as a Chrome trace to `path` (default: the options' "
          "profile_path; one of the two is required) and returns the file name.")
      .def_property_readonly("options", [](const PySession& ps) { return ps.s->options(); });
}
