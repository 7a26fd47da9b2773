// CPU feature detection for run-time kernel dispatch. Kernels exist in three flavours: portable
// C++ (any CPU; also the reference twin in differential tests), AVX2+FMA and AVX-512
// (F/BW/VL/DQ). best_isa() picks the widest one this CPU and OS support; BASALT_ISA=portable|
// avx2|avx512 in the environment caps it (for tests and for comparing paths).
#pragma once

namespace basalt::kernels {

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2 };

Isa best_isa();
const char* isa_name(Isa isa);

// How many 512-bit FMAs a core starts per cycle: 1 on AMD Zen 4 (family 19h with AVX-512), which
// splits each into two 256-bit halves, else 2 (the Intel Xeons with AVX-512 this project has run
// on; Intel parts with a single 512-bit FMA unit also report 2, unmeasured). Where it is 1 and the
// AVX-512 kernels run, the direct convolution kernels are bound by FMAs at half the Xeons' rate,
// and Winograd's fewer multiplies pay on shapes where it loses on the Xeons (kernels/nchwc.hpp,
// winograd_tile). BASALT_FMA512_PIPES=1|2 in the environment overrides it.
int fma512_pipes();
// The FMA rate the kernel routing assumes: fma512_pipes() where the AVX-512 kernels run, else 2
// (AVX2 kernels start two 256-bit FMAs per cycle on Zen 4 and on Intel alike).
int routing_fma_pipes();

}  // namespace basalt::kernels
