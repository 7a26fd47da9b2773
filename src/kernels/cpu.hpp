// CPU feature detection for run-time kernel dispatch. Kernels exist in three flavours: portable
// C++ (any CPU; also the reference twin in differential tests), AVX2+FMA and AVX-512
// (F/BW/VL/DQ). best_isa() picks the widest one this CPU and OS support; BASALT_ISA=portable|
// avx2|avx512 in the environment caps it (for tests and for comparing paths).
#pragma once

namespace basalt::kernels {

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2 };

Isa best_isa();
const char* isa_name(Isa isa);

}  // namespace basalt::kernels
