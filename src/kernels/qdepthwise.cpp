#include "kernels/qdepthwise.hpp"

#include <algorithm>
#include <vector>

namespace basalt::kernels {

#define QDW_NAME qdepthwise_planes_portable
#include "kernels/qdepthwise.inc"
#undef QDW_NAME

int64_t qdepthwise_scratch_bytes(const QDepthwise& g) {
  const int64_t PH = qdw_padded_h(g), PW = qdw_padded_w(g);
  return (PH * PW + 31) / 32 * 32 * 2 + g.OH * g.OW * 4 + 64;
}

void qdepthwise_planes(Isa isa, const QDepthwise& g, const uint8_t* x, const uint8_t* w, const int32_t* wzp, int64_t C, int64_t p0,
                       int64_t p1, void* scratch, const QdwFinish& finish) {
  switch (isa) {
    case Isa::Avx512: return qdepthwise_planes_avx512(g, x, w, wzp, C, p0, p1, scratch, finish);
    case Isa::Avx2: return qdepthwise_planes_avx2(g, x, w, wzp, C, p0, p1, scratch, finish);
    default: return qdepthwise_planes_portable(g, x, w, wzp, C, p0, p1, scratch, finish);
  }
}

}  // namespace basalt::kernels
