// Workspace slots for the jobs of one parallel_for: ThreadPool::parallel_for runs at most
// threads() chunks at once, so a kernel whose workspace holds `threads` slots gives each running
// chunk one of them (conv2d's per-thread column chunks, the Winograd driver).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

namespace basalt::kernels {

class SlotSet {
 public:
  static constexpr int kMax = 64;

  // The lowest free slot (waits while all kMax are taken). With at most T holders at once the
  // result is below T: the compare-exchange succeeds only on the very value whose lowest free bit
  // was chosen, and after a failed one the scan restarts from the value it saw. (Continuing a
  // scan over a stale value could pass a slot released meanwhile and take one >= T, outside the
  // workspace: found by the sanitizer suite as a rare overflow in the Winograd test.)
  int acquire() {
    uint64_t cur = used_.load(std::memory_order_relaxed);
    for (;;) {
      const int i = std::countr_one(cur);
      if (i >= kMax) {
        cur = used_.load(std::memory_order_relaxed);
        continue;
      }
      if (used_.compare_exchange_weak(cur, cur | (uint64_t(1) << i), std::memory_order_acquire,
                                      std::memory_order_relaxed))
        return i;
    }
  }
  void release(int i) { used_.fetch_and(~(uint64_t(1) << i), std::memory_order_release); }

 private:
  std::atomic<uint64_t> used_{0};
};

}  // namespace basalt::kernels
