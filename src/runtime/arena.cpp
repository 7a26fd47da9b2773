#include "runtime/arena.hpp"

#include "core/pages.hpp"

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
// Arenas of at least this size are whole huge pages (core/pages.hpp maps them 2 MB aligned and
// marked MADV_HUGEPAGE): kernels read activations with large strides (im2col, packing a conv's
// input rows, pooling windows), and with 4 KB pages nearly every row is a TLB miss.
// BASALT_HUGE_PAGES=0 turns it off.
constexpr uint64_t kHugePage = kHugePageBytes;
constexpr uint64_t kHugeArenaMin = 2 * kHugePage;
}  // namespace

Arena::Arena(uint64_t bytes) {
  uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  size_ = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
  if (size_ >= kHugeArenaMin && huge_pages_wanted()) size_ = (size_ + kHugePage - 1) / kHugePage * kHugePage;
  base_ = static_cast<char*>(map_pages(size_, size_ >= kHugeArenaMin));
  if (!base_) BASALT_THROW(MemoryLimit, "cannot map a run arena of " + std::to_string(size_) + " bytes");
  detail::count_allocation();
}

Arena::~Arena() {
  if (base_) unmap_pages(base_, size_);
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
