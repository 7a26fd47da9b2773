// Shared by the differential kernel tests (kernels_gemm_conv_test, winograd_test): seeded random
// data, the instruction sets this CPU runs, and the thread pools every fast kernel is tried on.
#pragma once

#include "kernels/cpu.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace basalt::test {

// n uniform floats in [lo, hi) (none for n <= 0).
inline std::vector<float> rnd(int64_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (auto& x : v) x = d(rng);
  return v;
}

// Portable, then AVX2 and AVX-512 where this CPU has them.
inline std::vector<kernels::Isa> isas() {
  std::vector<kernels::Isa> v = {kernels::Isa::Portable};
  if (kernels::best_isa() >= kernels::Isa::Avx2) v.push_back(kernels::Isa::Avx2);
  if (kernels::best_isa() >= kernels::Isa::Avx512) v.push_back(kernels::Isa::Avx512);
  return v;
}

// No pool (inline), then 2 and 3 threads (never spinning).
inline std::vector<std::unique_ptr<ThreadPool>> pools() {
  std::vector<std::unique_ptr<ThreadPool>> v;
  v.push_back(nullptr);
  v.push_back(std::make_unique<ThreadPool>(2, 0));
  v.push_back(std::make_unique<ThreadPool>(3, 0));
  return v;
}

}  // namespace basalt::test
