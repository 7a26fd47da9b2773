#include "tools/npy.hpp"

#include <cstring>
#include <zlib.h>
#include <fstream>
#include <iterator>
#include <vector>

namespace basalt {
namespace {

struct Descr {
  const char* s;
  DType t;
};
const Descr kDescrs[] = {
    {"<f4", DType::Float}, {"<f8", DType::Double}, {"<f2", DType::Float16}, {"<i8", DType::Int64},
    {"<i4", DType::Int32}, {"<i2", DType::Int16},  {"|i1", DType::Int8},    {"<u8", DType::Uint64},
    {"<u4", DType::Uint32}, {"<u2", DType::Uint16}, {"|u1", DType::Uint8},  {"|b1", DType::Bool},
};

std::string field(const std::string& h, const std::string& key, const std::string& path) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) BASALT_THROW(InvalidArgument, path + ": npy header has no '" + key + "'");
  auto c = h.find(':', k);
  if (c == std::string::npos) BASALT_THROW(InvalidArgument, path + ": malformed npy header");
  size_t b = h.find_first_not_of(' ', c + 1);
  if (b == std::string::npos) BASALT_THROW(InvalidArgument, path + ": malformed npy header");
  size_t e;
  if (h[b] == '\'') {
    e = h.find('\'', b + 1);
    if (e == std::string::npos) BASALT_THROW(InvalidArgument, path + ": malformed npy header");
    return h.substr(b + 1, e - b - 1);
  }
  if (h[b] == '(') {
    e = h.find(')', b);
    if (e == std::string::npos) BASALT_THROW(InvalidArgument, path + ": malformed npy header");
    return h.substr(b, e - b + 1);
  }
  e = h.find_first_of(",}", b);
  return h.substr(b, e - b);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) BASALT_THROW(Io, "cannot open '" + path + "'");
  std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_npy(buf, path);
}

Tensor parse_npy(const std::vector<char>& buf, const std::string& path) {
  if (buf.size() < 10 || std::memcmp(buf.data(), "\x93NUMPY", 6) != 0)
    BASALT_THROW(InvalidArgument, path + ": not a .npy file");
  int major = uint8_t(buf[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = uint8_t(buf[8]) | (size_t(uint8_t(buf[9])) << 8);
    hstart = 10;
  } else {
    if (buf.size() < 12) BASALT_THROW(InvalidArgument, path + ": truncated .npy header");
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= size_t(uint8_t(buf[size_t(8 + i)])) << (8 * i);
    hstart = 12;
  }
  if (hstart + hlen > buf.size()) BASALT_THROW(InvalidArgument, path + ": truncated .npy header");
  std::string h(buf.data() + hstart, hlen);
  std::string descr = field(h, "descr", path);
  if (field(h, "fortran_order", path).find("True") != std::string::npos)
    BASALT_THROW(Unsupported, path + ": Fortran-order arrays are not supported");
  std::string shp = field(h, "shape", path);
  Shape shape;
  std::string num;
  for (char c : shp) {
    if (c >= '0' && c <= '9') num += c;
    else if (!num.empty()) {
      shape.push_back(std::stoll(num));
      num.clear();
    }
  }
  DType dt = DType::Undefined;
  for (auto& d : kDescrs)
    if (descr == d.s || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(d.s).substr(1))) dt = d.t;
  if (dt == DType::Undefined) BASALT_THROW(Unsupported, path + ": npy dtype '" + descr + "' is not supported");
  Tensor t(dt, shape);
  size_t need = t.nbytes();
  size_t off = hstart + hlen;
  if (buf.size() - off < need)
    BASALT_THROW(InvalidArgument, path + ": holds " + std::to_string(buf.size() - off) + " data bytes, shape " + shape_str(shape) +
                                      " needs " + std::to_string(need));
  if (need) std::memcpy(t.raw(), buf.data() + off, need);
  return t;
}

namespace {

uint32_t le(const std::vector<char>& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint32_t(uint8_t(b[at + size_t(i)])) << (8 * i);
  return v;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) BASALT_THROW(Io, "cannot open '" + path + "'");
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // the end-of-central-directory record: the last "PK\5\6" within the final 64 KiB + 22 bytes
  size_t eocd = std::string::npos;
  for (size_t i = b.size() >= 22 ? b.size() - 22 : 0, stop = b.size() > 65557 ? b.size() - 65557 : 0; b.size() >= 22; --i) {
    if (le(b, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == stop) break;
  }
  if (eocd == std::string::npos) BASALT_THROW(InvalidArgument, path + ": not a .npz (zip) file");
  const uint32_t entries = le(b, eocd + 10, 2), cd_size = le(b, eocd + 12, 4), cd_off = le(b, eocd + 16, 4);
  if (entries == 0xFFFF || cd_off == 0xFFFFFFFFu) BASALT_THROW(Unsupported, path + ": ZIP64 archives are not supported");
  if (size_t(cd_off) + cd_size > eocd) BASALT_THROW(InvalidArgument, path + ": corrupt zip central directory");
  std::vector<std::pair<std::string, Tensor>> out;
  size_t p = cd_off;
  for (uint32_t e = 0; e < entries; ++e) {
    if (p + 46 > eocd || le(b, p, 4) != 0x02014b50) BASALT_THROW(InvalidArgument, path + ": corrupt zip central directory");
    const uint32_t method = le(b, p + 10, 2), csize = le(b, p + 20, 4), usize = le(b, p + 24, 4);
    const uint32_t nlen = le(b, p + 28, 2), xlen = le(b, p + 30, 2), clen = le(b, p + 32, 2), loff = le(b, p + 42, 4);
    if (p + 46 + nlen > eocd) BASALT_THROW(InvalidArgument, path + ": corrupt zip central directory");
    std::string name(b.data() + p + 46, nlen);
    p += 46 + nlen + xlen + clen;
    if (size_t(loff) + 30 > b.size() || le(b, loff, 4) != 0x04034b50) BASALT_THROW(InvalidArgument, path + ": corrupt zip entry '" + name + "'");
    const size_t data = size_t(loff) + 30 + le(b, loff + 26, 2) + le(b, loff + 28, 2);
    if (data + csize > b.size()) BASALT_THROW(InvalidArgument, path + ": truncated zip entry '" + name + "'");
    std::vector<char> npy;
    if (method == 0) {
      npy.assign(b.begin() + std::ptrdiff_t(data), b.begin() + std::ptrdiff_t(data + csize));
    } else if (method == 8) {  // deflate (np.savez_compressed)
      npy.resize(usize);
      z_stream z{};
      if (inflateInit2(&z, -15) != Z_OK) BASALT_THROW(Internal, "zlib inflateInit2 failed");
      z.next_in = reinterpret_cast<Bytef*>(b.data() + data);
      z.avail_in = csize;
      z.next_out = reinterpret_cast<Bytef*>(npy.data());
      z.avail_out = usize;
      const int rc = inflate(&z, Z_FINISH);
      inflateEnd(&z);
      if (rc != Z_STREAM_END || z.total_out != usize) BASALT_THROW(InvalidArgument, path + ": corrupt compressed entry '" + name + "'");
    } else {
      BASALT_THROW(Unsupported, path + ": zip entry '" + name + "' uses compression method " + std::to_string(method));
    }
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    out.emplace_back(name, parse_npy(npy, path + ":" + name));
  }
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  const char* descr = nullptr;
  for (auto& d : kDescrs)
    if (d.t == t.dtype()) descr = d.s;
  Tensor src = t;
  if (t.dtype() == DType::BFloat16) {  // numpy has no bfloat16: write float32
    src = Tensor(DType::Float, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) src.data<float>()[i] = float(t.data<bfloat16>()[i]);
    descr = "<f4";
  }
  if (!descr) BASALT_THROW(Unsupported, std::string("cannot write a ") + dtype_name(t.dtype()) + " tensor as .npy");
  std::string shape = "(";
  for (size_t i = 0; i < src.shape().size(); ++i) shape += std::to_string(src.shape()[i]) + ",";
  if (src.shape().size() > 1) shape.pop_back();
  shape += ")";
  std::string h = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream f(path, std::ios::binary);
  if (!f) BASALT_THROW(Io, "cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t hl = uint16_t(h.size());
  char l[2] = {char(hl & 0xff), char(hl >> 8)};
  f.write(l, 2);
  f.write(h.data(), std::streamsize(h.size()));
  f.write(static_cast<const char*>(src.raw()), std::streamsize(src.nbytes()));
  if (!f) BASALT_THROW(Io, "error writing '" + path + "'");
}

}  // namespace basalt
