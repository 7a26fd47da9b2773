#include "onnx/tensor_proto.hpp"
#include "core/storage.hpp"

#include <cstring>
#include <filesystem>
#include <limits>

namespace basalt {
namespace fs = std::filesystem;

size_t ExternalDataResolver::mapped_bytes() const {
  size_t n = 0;
  for (auto& [k, f] : files_) n += f->size();
  return n;
}

static int64_t parse_int_field(const std::string& s, const std::string& what, const char* key) {
  if (s.empty() || s.size() > 19) BASALT_THROW(InvalidModel, what + ": external_data " + key + " '" + s + "' is not a valid number");
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') BASALT_THROW(InvalidModel, what + ": external_data " + key + " '" + s + "' is not a valid number");
    // 19 digits can exceed int64 (found by fuzz_external): refuse instead of overflowing.
    if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10)
      BASALT_THROW(InvalidModel, what + ": external_data " + key + " '" + s + "' is too large");
    v = v * 10 + (c - '0');
  }
  return v;
}

const uint8_t* ExternalDataResolver::resolve(const pb::TensorProto& t, size_t expected, std::shared_ptr<const void>& keep,
                                             const std::string& what, const MappedFile** file) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (auto& [k, v] : t.external_data) {
    if (k == "location") location = v;
    else if (k == "offset") offset = parse_int_field(v, what, "offset");
    else if (k == "length") length = parse_int_field(v, what, "length");
  }
  if (location.empty()) BASALT_THROW(InvalidModel, what + ": external data has no location");
  if (base_dir_.empty())
    BASALT_THROW(InvalidModel, what + ": uses external data file '" + location +
                                   "', but the model was loaded from memory (no folder to resolve it in)");
  fs::path loc(location);
  if (loc.is_absolute())
    BASALT_THROW(InvalidModel, what + ": external data location '" + location + "' is absolute; it must be relative to the model's folder");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(base_dir_), ec);
  fs::path full = fs::weakly_canonical(base / loc, ec);
  auto rel = full.lexically_relative(base);
  if (ec || rel.empty() || *rel.begin() == "..")
    BASALT_THROW(InvalidModel, what + ": external data location '" + location + "' escapes the model's folder");
  std::string key = full.string();
  auto it = files_.find(key);
  if (it == files_.end()) {
    try {
      it = files_.emplace(key, MappedFile::open(key)).first;
    } catch (const Error& e) {
      BASALT_THROW(InvalidModel, what + ": external data: " + e.what());
    }
  }
  const auto& f = it->second;
  if (length < 0) length = int64_t(f->size()) - offset;
  if (offset < 0 || uint64_t(offset) > f->size() || uint64_t(length) > f->size() - uint64_t(offset))
    BASALT_THROW(InvalidModel, what + ": external data (offset " + std::to_string(offset) + ", length " + std::to_string(length) +
                                   ") runs past the end of '" + location + "' (" + std::to_string(f->size()) + " bytes)");
  if (uint64_t(length) != expected)
    BASALT_THROW(InvalidModel, what + ": external data length " + std::to_string(length) + " does not match the " +
                                   std::to_string(expected) + " bytes its shape and type need");
  keep = f;
  if (file) *file = f.get();
  return f->data() + offset;
}

namespace {

void unpack_subbyte(DType dt, const uint8_t* src, size_t n, uint8_t* dst) {
  int bits = dtype_file_bits(dt);
  int per = 8 / bits;
  uint8_t mask = uint8_t((1 << bits) - 1);
  bool sign = dt == DType::Int4 || dt == DType::Int2;
  for (size_t i = 0; i < n; ++i) {
    uint8_t v = uint8_t((src[i / size_t(per)] >> (bits * int(i % size_t(per)))) & mask);
    if (sign && (v & (1 << (bits - 1)))) v = uint8_t(v | ~mask);
    dst[i] = v;
  }
}

template <class Src, class Dst>
void copy_cast(const std::vector<Src>& src, Dst* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<Dst>(src[i]);
}

}  // namespace

Tensor aligned_weight_copy(const Tensor& t) {
  if (t.dtype() == DType::String || !t.raw()) return t.clone();
  Tensor out = Tensor::uninit(t.dtype(), t.shape());
  size_t n = t.nbytes();
  // read_bytes reads a view of the file with pread: the kernel copies from its page cache, and
  // the file mapping never faults its pages in (ResNet-50's 100 MB of misaligned weights: ~25k
  // page faults, a quarter of session creation).
  if (n) t.read_bytes(0, n, out.raw());
  const bool file_backed = t.storage() && t.storage()->file_fd >= 0;
  if (file_backed && n >= (size_t(1) << 16)) release_file_pages(static_cast<const uint8_t*>(t.raw()), n);
  return out;
}

Tensor tensor_from_proto(const pb::TensorProto& t, const std::string& what, std::shared_ptr<const void> keep_alive,
                         ExternalDataResolver* ext, const MappedFile* file, bool allow_misaligned) {
  if (!dtype_is_known(t.data_type))
    BASALT_THROW(InvalidModel, what + ": unknown data type " + std::to_string(t.data_type));
  DType dt = DType(t.data_type);
  if (dt == DType::Complex64 || dt == DType::Complex128)
    BASALT_THROW(Unsupported, what + ": complex tensors are not supported");
  if (t.has_segment) BASALT_THROW(Unsupported, what + ": segmented tensors are not supported");
  Shape shape(t.dims.begin(), t.dims.end());
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) BASALT_THROW(InvalidModel, what + ": negative dimension in " + shape_str(shape));
    if (d && n > (uint64_t(1) << 40) / uint64_t(d)) BASALT_THROW(InvalidModel, what + ": shape " + shape_str(shape) + " is too large");
    n *= uint64_t(d);
  }
  const size_t es = dtype_size(dt);
  const int bits = dtype_file_bits(dt);
  const size_t file_bytes = size_t((n * uint64_t(bits) + 7) / 8);

  const uint8_t* raw = nullptr;
  size_t raw_n = 0;
  std::shared_ptr<const void> raw_keep = keep_alive;
  if (t.data_location == 1) {
    if (!ext) BASALT_THROW(InvalidModel, what + ": external data is not allowed here");
    if (dt == DType::String) BASALT_THROW(InvalidModel, what + ": string tensors cannot use external data");
    raw = ext->resolve(t, file_bytes, raw_keep, what, &file);
    raw_n = file_bytes;
  } else if (t.has_raw) {
    raw = t.raw_data.p;
    raw_n = t.raw_data.n;
  }

  if (raw || (t.has_raw && dt != DType::String)) {
    if (dt == DType::String) BASALT_THROW(InvalidModel, what + ": string tensor stored as raw_data");
    if (raw_n != file_bytes)
      BASALT_THROW(InvalidModel, what + ": raw data has " + std::to_string(raw_n) + " bytes, but shape " + shape_str(shape) +
                                     " of " + dtype_name(dt) + " needs " + std::to_string(file_bytes));
    if (bits < 8) {
      Tensor out(dt, shape);
      unpack_subbyte(dt, raw, size_t(n), out.data<uint8_t>());
      return out;
    }
    if (dt == DType::Bool) {
      Tensor out(dt, shape);
      for (size_t i = 0; i < n; ++i) out.data<bool>()[i] = raw[i] != 0;
      return out;
    }
    // Use in place when someone keeps the bytes alive, they are aligned for the type, and the
    // tensor is big enough for a copy to matter. Misaligned bytes only when the caller will make
    // sure that every reader copies them bytewise (see "Misaligned weights" in the header).
    const bool aligned = reinterpret_cast<uintptr_t>(raw) % es == 0;
    if (raw_keep && file_bytes >= 64 && (aligned || (allow_misaligned && file_bytes >= kMisalignedInPlaceMinBytes))) {
      Tensor v = Tensor::view(dt, shape, const_cast<uint8_t*>(raw), raw_keep);
      if (file && file->fd() >= 0) {
        v.storage()->file_fd = file->fd();
        v.storage()->file_offset = uint64_t(raw - file->data());
      }
      return v;
    }
    Tensor out(dt, shape);
    if (file_bytes) std::memcpy(out.raw(), raw, file_bytes);
    if (file && file_bytes >= (size_t(1) << 16)) release_file_pages(raw, file_bytes);
    return out;
  }

  Tensor out(dt, shape);
  auto check_count = [&](size_t have, size_t want, const char* field) {
    if (have != want)
      BASALT_THROW(InvalidModel, what + ": " + field + " has " + std::to_string(have) + " values, but shape " +
                                     shape_str(shape) + " needs " + std::to_string(want));
  };
  switch (dt) {
    case DType::Float:
      check_count(t.float_data.size(), n, "float_data");
      copy_cast(t.float_data, out.data<float>());
      break;
    case DType::Double:
      check_count(t.double_data.size(), n, "double_data");
      copy_cast(t.double_data, out.data<double>());
      break;
    case DType::Int64:
      check_count(t.int64_data.size(), n, "int64_data");
      copy_cast(t.int64_data, out.data<int64_t>());
      break;
    case DType::Uint32: case DType::Uint64:
      check_count(t.uint64_data.size(), n, "uint64_data");
      if (dt == DType::Uint32) copy_cast(t.uint64_data, out.data<uint32_t>());
      else copy_cast(t.uint64_data, out.data<uint64_t>());
      break;
    case DType::String:
      check_count(t.string_data.size(), n, "string_data");
      for (size_t i = 0; i < n; ++i) out.data<std::string>()[i] = t.string_data[i].str();
      break;
    case DType::Int32: check_count(t.int32_data.size(), n, "int32_data"); copy_cast(t.int32_data, out.data<int32_t>()); break;
    case DType::Int16: check_count(t.int32_data.size(), n, "int32_data"); copy_cast(t.int32_data, out.data<int16_t>()); break;
    case DType::Uint16: case DType::Float16: case DType::BFloat16:
      check_count(t.int32_data.size(), n, "int32_data");
      copy_cast(t.int32_data, out.data<uint16_t>());
      break;
    case DType::Int8: check_count(t.int32_data.size(), n, "int32_data"); copy_cast(t.int32_data, out.data<int8_t>()); break;
    case DType::Bool:
      check_count(t.int32_data.size(), n, "int32_data");
      for (size_t i = 0; i < n; ++i) out.data<bool>()[i] = t.int32_data[i] != 0;
      break;
    case DType::Uint8: case DType::Float8E4M3FN: case DType::Float8E4M3FNUZ: case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ: case DType::Float8E8M0:
      check_count(t.int32_data.size(), n, "int32_data");
      copy_cast(t.int32_data, out.data<uint8_t>());
      break;
    case DType::Int4: case DType::Uint4: case DType::Float4E2M1: case DType::Int2: case DType::Uint2: {
      // Packed into int32_data, (8 / bits) elements per int32 value's low byte.
      size_t per = size_t(8 / bits);
      check_count(t.int32_data.size(), (n + per - 1) / per, "int32_data");
      std::vector<uint8_t> packed(t.int32_data.size());
      for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(t.int32_data[i]);
      unpack_subbyte(dt, packed.data(), size_t(n), out.data<uint8_t>());
      break;
    }
    default: BASALT_THROW(Unsupported, what + ": data type " + dtype_name(dt) + " is not supported");
  }
  return out;
}

Tensor tensor_from_sparse_proto(const pb::SparseTensorProto& s, const std::string& what, ExternalDataResolver* ext) {
  Tensor values = tensor_from_proto(s.values, what + " (values)", nullptr, ext);
  Tensor indices = tensor_from_proto(s.indices, what + " (indices)", nullptr, ext);
  Shape shape(s.dims.begin(), s.dims.end());
  Tensor out(values.dtype(), shape);
  if (values.dtype() == DType::String) BASALT_THROW(Unsupported, what + ": sparse string tensors are not supported");
  int64_t nnz = values.numel();
  int64_t total = out.numel();
  size_t es = dtype_size(values.dtype());
  auto idx = indices.to_int64_vector();
  int rank = int(shape.size());
  bool flat = indices.rank() == 1;
  if ((flat && int64_t(idx.size()) != nnz) || (!flat && int64_t(idx.size()) != nnz * rank))
    BASALT_THROW(InvalidModel, what + ": sparse indices do not match the number of values");
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t lin = 0;
    if (flat) {
      lin = idx[size_t(k)];
    } else {
      for (int d = 0; d < rank; ++d) {
        int64_t iv = idx[size_t(k * rank + d)];
        if (iv < 0 || iv >= shape[size_t(d)]) BASALT_THROW(InvalidModel, what + ": sparse index out of range");
        lin = lin * shape[size_t(d)] + iv;
      }
    }
    if (lin < 0 || lin >= total) BASALT_THROW(InvalidModel, what + ": sparse index out of range");
    std::memcpy(static_cast<char*>(out.raw()) + size_t(lin) * es, static_cast<const char*>(values.raw()) + size_t(k) * es, es);
  }
  return out;
}

}  // namespace basalt
