#include "kernels/cpu.hpp"

#include <cstdlib>
#include <cstring>

namespace basalt::kernels {

static Isa detect() {
  Isa isa = Isa::Portable;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = Isa::Avx2;
  if (isa == Isa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    isa = Isa::Avx512;
#endif
  if (const char* e = std::getenv("BASALT_ISA")) {
    Isa cap = isa;
    if (!std::strcmp(e, "portable")) cap = Isa::Portable;
    else if (!std::strcmp(e, "avx2")) cap = Isa::Avx2;
    else if (!std::strcmp(e, "avx512")) cap = Isa::Avx512;
    if (int(cap) < int(isa)) isa = cap;
  }
  return isa;
}

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "portable";
  }
}

}  // namespace basalt::kernels
