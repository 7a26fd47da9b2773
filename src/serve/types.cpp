// Datatype names and raw tensor bytes of the Open Inference Protocol (see types.hpp).
#include "serve/types.hpp"

#include <cstring>
#include <limits>

namespace basalt::serve {

int http_status(Status s) {
  switch (s) {
    case Status::BadRequest: return 400;
    case Status::NotFound: return 404;
    case Status::TooLarge: return 413;
    case Status::Unavailable: return 503;
    case Status::Unauthorized: return 401;
    case Status::Internal: return 500;
  }
  return 500;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::BadRequest: return "bad request";
    case Status::NotFound: return "not found";
    case Status::TooLarge: return "too large";
    case Status::Unavailable: return "unavailable";
    case Status::Unauthorized: return "unauthorized";
    case Status::Internal: return "internal";
  }
  return "internal";
}

namespace {
struct NamePair {
  const char* name;
  DType dtype;
};
constexpr NamePair kDatatypes[] = {
    {"BOOL", DType::Bool},     {"UINT8", DType::Uint8},   {"UINT16", DType::Uint16},  {"UINT32", DType::Uint32},
    {"UINT64", DType::Uint64}, {"INT8", DType::Int8},     {"INT16", DType::Int16},    {"INT32", DType::Int32},
    {"INT64", DType::Int64},   {"FP16", DType::Float16},  {"FP32", DType::Float},     {"FP64", DType::Double},
    {"BF16", DType::BFloat16}, {"BYTES", DType::String},
};
}  // namespace

DType dtype_from_datatype(const std::string& datatype) {
  for (const auto& p : kDatatypes)
    if (datatype == p.name) return p.dtype;
  throw ServeError(Status::BadRequest, "unknown datatype '" + datatype +
                                           "' (the protocol's are BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, "
                                           "BF16, BYTES)");
}

const char* datatype_of(DType dt) {
  for (const auto& p : kDatatypes)
    if (dt == p.dtype) return p.name;
  return nullptr;
}

int64_t checked_numel(const std::string& name, const Shape& shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ServeError(Status::BadRequest, "input '" + name + "': negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > max_elements / d)
      throw ServeError(Status::TooLarge, "input '" + name + "': shape " + shape_str(shape) + " has more than " +
                                             std::to_string(max_elements) + " elements (--max-tensor-elements)");
    n *= d;
  }
  if (n > max_elements)
    throw ServeError(Status::TooLarge, "input '" + name + "': shape " + shape_str(shape) + " has more than " +
                                           std::to_string(max_elements) + " elements (--max-tensor-elements)");
  return n;
}

Tensor tensor_from_raw(const std::string& name, DType dt, const Shape& shape, const char* data, size_t n) {
  int64_t numel = shape_numel(shape);
  if (dt == DType::String) {
    Tensor t(DType::String, shape);
    auto* out = t.data<std::string>();
    size_t pos = 0;
    for (int64_t i = 0; i < numel; ++i) {
      if (n - pos < 4)
        throw ServeError(Status::BadRequest, "input '" + name + "': BYTES data ends inside element " + std::to_string(i) +
                                                 "'s 4-byte length (" + std::to_string(n) + " bytes for " +
                                                 std::to_string(numel) + " elements)");
      uint32_t len;
      std::memcpy(&len, data + pos, 4);
      pos += 4;
      if (n - pos < len)
        throw ServeError(Status::BadRequest, "input '" + name + "': BYTES element " + std::to_string(i) + " says " +
                                                 std::to_string(len) + " bytes but only " + std::to_string(n - pos) +
                                                 " remain");
      out[i].assign(data + pos, len);
      pos += len;
    }
    if (pos != n)
      throw ServeError(Status::BadRequest, "input '" + name + "': " + std::to_string(n - pos) +
                                               " bytes left over after " + std::to_string(numel) + " BYTES elements");
    return t;
  }
  size_t want = size_t(numel) * dtype_size(dt);
  if (want != n)
    throw ServeError(Status::BadRequest, "input '" + name + "': " + std::to_string(n) + " bytes of data, but shape " +
                                             shape_str(shape) + " of " + datatype_of(dt) + " needs " +
                                             std::to_string(want));
  Tensor t = Tensor::uninit(dt, shape);
  if (n) std::memcpy(t.raw(), data, n);
  if (dt == DType::Bool)  // any nonzero byte is true; kernels expect 0/1
    for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(t.raw())[i] = data[i] != 0;
  return t;
}

size_t raw_size(const Tensor& t) {
  if (t.dtype() != DType::String) return t.nbytes();
  size_t n = 0;
  const auto* s = t.data<std::string>();
  for (int64_t i = 0; i < t.numel(); ++i) n += 4 + s[i].size();
  return n;
}

void append_raw(const Tensor& t, std::string& out) {
  if (t.dtype() != DType::String) {
    out.append(static_cast<const char*>(t.raw()), t.nbytes());
    return;
  }
  const auto* s = t.data<std::string>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint32_t len = uint32_t(s[i].size());
    char b[4];
    std::memcpy(b, &len, 4);
    out.append(b, 4);
    out.append(s[i]);
  }
}

}  // namespace basalt::serve
