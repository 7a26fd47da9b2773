#include "runtime/arena.hpp"

#include <basalt/error.hpp>
#include <basalt/tensor.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace basalt {

namespace {
constexpr uint64_t kHugePage = uint64_t(2) << 20;

// Arenas of at least this size are mapped 2 MB aligned and marked MADV_HUGEPAGE: kernels read
// activations with large strides (im2col, packing a conv's input rows, pooling windows), and with
// 4 KB pages nearly every row is a TLB miss. BASALT_HUGE_PAGES=0 turns it off.
constexpr uint64_t kHugeArenaMin = 2 * kHugePage;

bool huge_pages_wanted() {
  static const bool on = [] {
    const char* e = std::getenv("BASALT_HUGE_PAGES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}
}  // namespace

Arena::Arena(uint64_t bytes) {
  uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  size_ = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (size_ >= kHugeArenaMin && huge_pages_wanted()) {
    // Whole huge pages, 2 MB aligned: map one extra huge page and unmap the slack on both sides.
    const uint64_t want = (size_ + kHugePage - 1) / kHugePage * kHugePage;
    void* p = mmap(nullptr, want + kHugePage, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p != MAP_FAILED) {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
      const uintptr_t a = (lo + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
      if (a > lo) munmap(p, a - lo);
      const uintptr_t end = lo + want + kHugePage;
      if (end > a + want) munmap(reinterpret_cast<void*>(a + want), end - (a + want));
      base_ = reinterpret_cast<char*>(a);
      size_ = want;
      madvise(base_, size_, MADV_HUGEPAGE);  // a hint: without transparent huge pages it does nothing
      detail::count_allocation();
      return;
    }
  }
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED)
    BASALT_THROW(MemoryLimit, "cannot map a run arena of " + std::to_string(size_) + " bytes");
  base_ = static_cast<char*>(p);
  detail::count_allocation();
}

Arena::~Arena() {
  if (base_) munmap(base_, size_);
}

std::shared_ptr<Arena> ArenaPool::acquire(uint64_t bytes) {
  std::shared_ptr<Arena> a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_use_;
    max_in_use_ = std::max(max_in_use_, in_use_);
    size_t best = idle_.size();
    for (size_t i = 0; i < idle_.size(); ++i)
      if (idle_[i]->size() >= bytes && (best == idle_.size() || idle_[i]->size() < idle_[best]->size())) best = i;
    if (best < idle_.size()) {
      a = std::move(idle_[best]);
      idle_.erase(idle_.begin() + std::ptrdiff_t(best));
      return a;
    }
    // Idle arenas too small for this plan are dominated by the one mapped now: unmap them.
    for (auto it = idle_.begin(); it != idle_.end();) {
      unmapped((*it)->size());
      it = idle_.erase(it);
    }
  }
  try {
    a = std::make_shared<Arena>(bytes);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    --in_use_;
    throw;
  }
  mapped_ += a->size();
  ++maps_;
  return a;
}

void ArenaPool::release(std::shared_ptr<Arena> a) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_use_;
  if (!a) return;
  idle_.push_back(std::move(a));
  while (idle_.size() > size_t(std::max(1, max_in_use_))) {
    auto smallest = std::min_element(idle_.begin(), idle_.end(),
                                     [](const auto& x, const auto& y) { return x->size() < y->size(); });
    unmapped((*smallest)->size());
    idle_.erase(smallest);
  }
}

void ArenaPool::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& a : idle_) unmapped(a->size());
  idle_.clear();
}

}  // namespace basalt
