#include "tools/testdata.hpp"

#include "core/mapped_file.hpp"
#include "onnx/proto.hpp"
#include "onnx/tensor_proto.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

namespace basalt {

static Value from_optional(const pb::OptionalProto& o, const std::string& what);

static Value from_sequence(const pb::SequenceProto& s, const std::string& what) {
  std::vector<Tensor> items;
  for (auto& t : s.tensor_values) items.push_back(tensor_from_proto(t, what, nullptr, nullptr));
  if (!s.sequence_values.empty() || !s.optional_values.empty())
    BASALT_THROW(Unsupported, what + ": nested sequences are not supported");
  DType elem = items.empty() ? DType::Undefined : items[0].dtype();
  return Value::make_sequence(std::move(items), elem);
}

static Value from_optional(const pb::OptionalProto& o, const std::string& what) {
  if (o.has_tensor) return Value(tensor_from_proto(o.tensor_value, what, nullptr, nullptr));
  if (o.has_sequence) return from_sequence(*o.sequence_value, what);
  if (o.has_optional) return from_optional(*o.optional_value, what);
  return Value();
}

static Value fix_type(Value v, DType expect) {
  if (v.is_tensor() && expect == DType::BFloat16 && v.tensor.dtype() == DType::Uint16) {
    Tensor t = v.tensor;
    Tensor b(DType::BFloat16, t.shape());
    if (t.nbytes()) std::memcpy(b.raw(), t.raw(), t.nbytes());
    return Value(b);
  }
  return v;
}

static Value read_pb_value_raw(const std::string& path, const std::string& kind);

Value read_pb_value(const std::string& path, const std::string& kind, DType expect) {
  return fix_type(read_pb_value_raw(path, kind), expect);
}

static Value read_pb_value_raw(const std::string& path, const std::string& kind) {
  auto f = MappedFile::open(path);
  if (kind == "sequence") return from_sequence(pb::parse_sequence(f->data(), f->size()), path);
  if (kind == "optional") {
    // Optional inputs are stored either as OptionalProto or (older data) as a plain tensor.
    auto o = pb::parse_optional(f->data(), f->size());
    return from_optional(o, path);
  }
  return Value(tensor_from_proto(pb::parse_tensor(f->data(), f->size()), path, nullptr, nullptr));
}

static std::string compare_tensors(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  int64_t n = got.numel();
  DType dt = got.dtype();
  std::ostringstream os;
  if (dt == DType::String) {
    for (int64_t i = 0; i < n; ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i]) {
        os << "element " << i << " is '" << got.data<std::string>()[i] << "', expected '" << want.data<std::string>()[i] << "'";
        return os.str();
      }
    return "";
  }
  bool is_float = dt == DType::Float || dt == DType::Double || dt == DType::Float16 || dt == DType::BFloat16;
  if (!is_float) {  // exact, byte-wise on storage (covers ints, bools, float8/4-bit bit patterns)
    size_t es = dtype_size(dt);
    auto* a = static_cast<const uint8_t*>(got.raw());
    auto* b = static_cast<const uint8_t*>(want.raw());
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(a + size_t(i) * es, b + size_t(i) * es, es) != 0) {
        if (dt == DType::Bool || dtype_is_integer(dt)) os << "element " << i << " is " << got.get_int(i) << ", expected " << want.get_int(i);
        else os << "element " << i << " differs (bit pattern)";
        return os.str();
      }
    return "";
  }
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a = got.get_double(i), b = want.get_double(i);
    bool ok;
    if (std::isnan(b)) ok = std::isnan(a);
    else if (std::isinf(b)) ok = a == b;
    else ok = std::fabs(a - b) <= atol + rtol * std::fabs(b);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
      if (!std::isnan(a - b)) worst = std::max(worst, std::fabs(a - b));
    }
  }
  if (bad) {
    os.precision(8);
    os << bad << " of " << n << " elements differ; first at " << first << ": " << got.get_double(first) << " vs expected "
       << want.get_double(first) << " (max abs diff " << worst << ")";
    return os.str();
  }
  return "";
}

std::string compare_values(const Value& got, const Value& want, double rtol, double atol) {
  if (want.is_none()) return got.is_none() ? "" : "expected an empty optional";
  if (got.is_none()) return "got no value (empty optional)";
  if (want.is_tensor()) {
    if (!got.is_tensor()) return "expected a tensor, got a sequence";
    return compare_tensors(got.tensor, want.tensor, rtol, atol);
  }
  if (!got.is_sequence()) return "expected a sequence, got a tensor";
  if (got.sequence->size() != want.sequence->size())
    return "sequence of length " + std::to_string(got.sequence->size()) + ", expected " + std::to_string(want.sequence->size());
  for (size_t i = 0; i < got.sequence->size(); ++i) {
    std::string r = compare_tensors((*got.sequence)[i], (*want.sequence)[i], rtol, atol);
    if (!r.empty()) return "sequence item " + std::to_string(i) + ": " + r;
  }
  return "";
}

double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get_double(i), y = b.get_double(i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace basalt
