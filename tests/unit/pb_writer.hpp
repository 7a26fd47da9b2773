// A minimal protobuf writer for unit tests that build ONNX models byte by byte (to reach inputs the
// onnx library would refuse to write: misaligned raw_data, hostile sizes, deep nesting). Fields are
// appended in call order; `m` nests a message. Only the wire types ONNX models need.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace basalt::test {

struct Pb {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(char(v | 0x80));
      v >>= 7;
    }
    b.push_back(char(v));
  }
  // Varint field.
  Pb& u(int field, uint64_t v) {
    varint(uint64_t(field) << 3);
    varint(v);
    return *this;
  }
  // Length-delimited field (bytes, string).
  Pb& s(int field, const std::string& v) {
    varint((uint64_t(field) << 3) | 2);
    varint(v.size());
    b += v;
    return *this;
  }
  // Nested message.
  Pb& m(int field, const Pb& v) { return s(field, v.b); }
  // fixed32 float field.
  Pb& f32(int field, float v) {
    varint((uint64_t(field) << 3) | 5);
    char c[4];
    std::memcpy(c, &v, 4);
    b.append(c, 4);
    return *this;
  }
};

// NodeProto: inputs, outputs, name, op_type, attributes (AttributeProto messages).
inline Pb onnx_node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                    const std::string& name, const std::vector<Pb>& attrs = {}) {
  Pb n;
  for (auto& i : in) n.s(1, i);
  for (auto& o : out) n.s(2, o);
  n.s(3, name).s(4, op);
  for (auto& a : attrs) n.m(5, a);
  return n;
}

}  // namespace basalt::test
