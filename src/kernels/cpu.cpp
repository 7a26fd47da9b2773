#include "kernels/cpu.hpp"
#include "core/config.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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
  if (const std::string& e = env_config().isa; !e.empty()) {
    Isa cap = isa;
    if (e == "portable") cap = Isa::Portable;
    else if (e == "avx2") cap = Isa::Avx2;
    else if (e == "avx512") cap = Isa::Avx512;
    if (int(cap) < int(isa)) isa = cap;
  }
  return isa;
}

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

static int detect_fma512_pipes() {
  if (int p = env_config().fma512_pipes) return p;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    if (!std::strcmp(vendor, "AuthenticAMD") && __get_cpuid(1, &a, &b, &c, &d)) {
      const unsigned base = (a >> 8) & 0xf, ext = (a >> 20) & 0xff;
      const unsigned family = base == 0xf ? base + ext : base;
      // Zen 3 and Zen 4 are both family 19h; only Zen 4 has AVX-512 (Zen 3's 256-bit FMAs are
      // two per cycle, as on the Intel parts)
      if (family == 0x19 && __builtin_cpu_supports("avx512f")) return 1;
    }
  }
#endif
  return 2;
}

int fma512_pipes() {
  static const int v = detect_fma512_pipes();
  return v;
}

int routing_fma_pipes() { return best_isa() == Isa::Avx512 ? fma512_pipes() : 2; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "portable";
  }
}

}  // namespace basalt::kernels
