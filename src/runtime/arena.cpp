#include "runtime/arena.hpp"

#include <basalt/error.hpp>
#include <basalt/tensor.hpp>

#include <algorithm>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace basalt {

Arena::Arena(uint64_t bytes) {
  uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  size_ = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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
