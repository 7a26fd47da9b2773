#include "core/arena.hpp"

#include "core/pages.hpp"
#include "core/thread_pool.hpp"

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
// Arenas of at least this size are whole huge pages where huge pages are wanted (core/pages.hpp:
// off by default, BASALT_HUGE_PAGES=1): kernels read activations with large strides (im2col,
// packing a conv's input rows, pooling windows), and with 4 KB pages more rows are TLB misses.
// Otherwise an arena's pages are populated when it is mapped or grown (one system call, not a
// fault per page: a run writes the whole arena anyway).
constexpr uint64_t kHugePage = kHugePageBytes;
constexpr uint64_t kHugeArenaMin = 2 * kHugePage;
// Populating in parallel: pieces of this size, from this many bytes up (below it, one thread's
// madvise is a few hundred microseconds at most, and handing out the work costs a wake-up).
constexpr uint64_t kPopulateChunk = uint64_t(256) << 10;
constexpr uint64_t kParallelPopulateMin = uint64_t(1) << 20;
}  // namespace

namespace {
// An arena's mapped size for a plan of `bytes`: whole pages, at least one; whole huge pages from
// kHugeArenaMin up (where huge pages are wanted).
// Whether `len` new bytes of 4 KB pages are populated by the pool's threads together rather than
// by the mapping call itself.
bool split_populate(bool huge, const ThreadPool* pool, uint64_t len) {
  return !huge && pool && pool->threads() > 1 && len >= kParallelPopulateMin;
}

uint64_t arena_size(uint64_t bytes) {
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  uint64_t size = std::max<uint64_t>(page, (bytes + page - 1) / page * page);
  if (size >= kHugeArenaMin && huge_pages_wanted()) size = (size + kHugePage - 1) / kHugePage * kHugePage;
  return size;
}
}  // namespace

Arena::Arena(uint64_t bytes, ThreadPool* pool) : size_(arena_size(bytes)) {
  const bool huge = size_ >= kHugeArenaMin && huge_pages_wanted();
  const bool split = split_populate(huge, pool, size_);
  base_ = static_cast<char*>(map_pages(size_, huge, /*populate=*/!huge && !split));
  if (!base_) BASALT_THROW(MemoryLimit, "cannot map a run arena of " + std::to_string(size_) + " bytes");
  if (split) populate(0, *pool);
  detail::count_allocation();
}

void Arena::populate(uint64_t from, ThreadPool& pool) {
  const uint64_t len = size_ - from;
  char* base = base_ + from;
  const uint64_t pieces = (len + kPopulateChunk - 1) / kPopulateChunk;
  pool.parallel_for(int64_t(pieces), 1, [&](int64_t b, int64_t e) {
    const uint64_t lo = uint64_t(b) * kPopulateChunk, hi = std::min(len, uint64_t(e) * kPopulateChunk);
    populate_pages(base + lo, hi - lo);
  });
}

bool Arena::grow(uint64_t bytes, ThreadPool* pool) {
  const uint64_t size = arena_size(bytes);
  if (size <= size_) return true;
  const bool huge = size >= kHugeArenaMin && huge_pages_wanted();
  const bool split = split_populate(huge, pool, size - size_);
  void* p = grow_pages(base_, size_, size, huge, /*populate=*/!huge && !split);
  if (!p) return false;
  const uint64_t old = size_;
  base_ = static_cast<char*>(p);
  size_ = size;
  if (split) populate(old, *pool);
  detail::count_allocation();
  return true;
}

Arena::~Arena() {
  if (base_) unmap_pages(base_, size_);
}

std::shared_ptr<Arena> ArenaPool::acquire(uint64_t bytes, ThreadPool* pool) {
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
    // Idle arenas are all too small for this plan: the largest grows, the others are dominated
    // by it and unmapped.
    auto largest = std::max_element(idle_.begin(), idle_.end(),
                                    [](const auto& x, const auto& y) { return x->size() < y->size(); });
    if (largest != idle_.end()) a = std::move(*largest);
    for (auto& other : idle_)
      if (other) unmapped(other->size());
    idle_.clear();
  }
  if (a) {
    const uint64_t before = a->size();
    // The arena is this run's alone now (out of idle_): grow it outside the lock. Not when a view
    // of it escaped a run (a kernel kept one: ArenaRun::keep still holds it): growing may move
    // its pages, and that view would then point at unmapped memory.
    if (a.use_count() == 1 && a->grow(bytes, pool)) {
      mapped_ += a->size() - before;
      ++grows_;
      return a;
    }
    unmapped(before);  // the OS refused, or someone else holds it: a fresh arena instead
    a.reset();
  }
  try {
    a = std::make_shared<Arena>(bytes, pool);
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
