// CPU feature detection for run-time kernel dispatch. Kernels exist in three flavours: portable
// C++ (any CPU; also the reference twin in differential tests), AVX2+FMA and AVX-512
// (F/BW/VL/DQ). best_isa() picks the widest one this CPU and OS support; BASALT_ISA=portable|
// avx2|avx512 in the environment caps it (for tests and for comparing paths).
#pragma once

namespace basalt::kernels {

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2 };

Isa best_isa();
const char* isa_name(Isa isa);

// How many 512-bit FMAs a core starts per cycle: 1 on AMD Zen 4 (family 19h), which splits each
// into two 256-bit halves, else 2 (the Intel Xeons with AVX-512 this project has run on). Where it
// is 1, the direct convolution kernels are bound by FMAs at half the rate, and Winograd's fewer
// multiplies pay on shapes where it loses on the others (kernels/nchwc.hpp, winograd_tile).
// BASALT_FMA512_PIPES=1|2 in the environment overrides it.
int fma512_pipes();

}  // namespace basalt::kernels
