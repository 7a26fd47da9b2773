#include "core/dynamic_pool.hpp"

#include "core/pages.hpp"

#include <basalt/error.hpp>
#include <basalt/tensor.hpp>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace basalt {

// Blocks from this size up are mmap'd (as Tensor does), so freeing them returns their pages at once.
static constexpr uint64_t kMapFrom = uint64_t(64) << 10;

static uint64_t page_size() {
  static const uint64_t p = uint64_t(sysconf(_SC_PAGESIZE));
  return p;
}

uint64_t DynamicPool::size_class(uint64_t bytes) {
  uint64_t b = std::max<uint64_t>(64, (bytes + 63) / 64 * 64);
  if (b <= 256) return b;
  // Four steps per power of two: 1, 1.25, 1.5, 1.75 times 2^k.
  const int k = 63 - std::countl_zero(b);
  const uint64_t step = uint64_t(1) << (k - 2);
  uint64_t c = (b + step - 1) / step * step;
  if (c >= kMapFrom) c = (c + page_size() - 1) / page_size() * page_size();
  return c;
}

void* DynamicPool::allocate(uint64_t bytes) {
  void* p = nullptr;
  if (bytes >= kMapFrom) {
    p = map_pages(bytes, false);  // core/pages.hpp
  } else {
    p = std::aligned_alloc(64, bytes);
  }
  if (!p) BASALT_THROW(MemoryLimit, "out of memory allocating a " + std::to_string(bytes) + "-byte tensor");
  detail::count_allocation();
  return p;
}

void DynamicPool::release(void* data, uint64_t bytes) {
  if (bytes >= kMapFrom) unmap_pages(data, bytes);
  else std::free(data);
}

// The keep-alive of one handed-out block: returns it to the pool, or frees it when the pool is gone.
struct DynamicPoolLease {
  std::weak_ptr<DynamicPool> pool;
  void* data;
  uint64_t bytes;
  DynamicPoolLease(std::weak_ptr<DynamicPool> p, void* d, uint64_t b) : pool(std::move(p)), data(d), bytes(b) {}
  DynamicPoolLease(const DynamicPoolLease&) = delete;  // exactly one gives the block back
  DynamicPoolLease& operator=(const DynamicPoolLease&) = delete;
  ~DynamicPoolLease() {
    if (auto p = pool.lock()) p->give_back(data, bytes);
    else DynamicPool::release(data, bytes);
  }
};

DynamicPool::~DynamicPool() {
  for (auto& [cls, b] : idle_) release(b.data, b.bytes);
}

DynamicPool::Block DynamicPool::acquire(uint64_t bytes) {
  const uint64_t cls = size_class(bytes);
  Block blk;
  blk.bytes = cls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest idle block that holds the request, when it is at most twice the request's
    // class: a shape a little smaller than one seen before reuses its block instead of adding
    // one more idle block per distinct size (the pool then grows with the range of sizes seen,
    // a few blocks per doubling, not with their count).
    auto it = idle_.lower_bound(cls);
    if (it != idle_.end() && it->first / 2 <= cls) {
      blk.data = it->second.data;
      blk.bytes = it->first;
      idle_.erase(it);
      ++st_.hits;
      st_.idle_bytes -= blk.bytes;
      st_.in_use_bytes += blk.bytes;
    }
  }
  if (!blk.data) {
    blk.data = allocate(cls);
    std::lock_guard<std::mutex> lock(mu_);
    ++st_.misses;
    st_.in_use_bytes += cls;
    st_.peak_bytes = std::max(st_.peak_bytes, st_.in_use_bytes + st_.idle_bytes);
  }
  try {
    blk.keep = std::make_shared<DynamicPoolLease>(weak_from_this(), blk.data, blk.bytes);
  } catch (...) {
    give_back(blk.data, blk.bytes);
    throw;
  }
  return blk;
}

void DynamicPool::give_back(void* data, uint64_t bytes) {
  std::vector<Idle> to_free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st_.in_use_bytes -= bytes;
    if (bytes > max_idle_) {
      to_free.push_back({data, bytes, 0});
    } else {
      trim_locked(max_idle_ - bytes, to_free);
      idle_.insert({bytes, Idle{data, bytes, ++stamp_}});
      st_.idle_bytes += bytes;
    }
    st_.frees += to_free.size();
  }
  for (const Idle& b : to_free) release(b.data, b.bytes);
}

void DynamicPool::trim_locked(uint64_t keep_bytes, std::vector<Idle>& to_free) {
  while (st_.idle_bytes > keep_bytes && !idle_.empty()) {
    auto oldest = idle_.begin();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if (it->second.stamp < oldest->second.stamp) oldest = it;
    to_free.push_back(oldest->second);
    st_.idle_bytes -= oldest->second.bytes;
    idle_.erase(oldest);
  }
}

void DynamicPool::trim(uint64_t keep_bytes) {
  std::vector<Idle> to_free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    trim_locked(keep_bytes, to_free);
    st_.frees += to_free.size();
  }
  for (const Idle& b : to_free) release(b.data, b.bytes);
}

DynamicPool::Stats DynamicPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = st_;
  s.max_idle_bytes = max_idle_;
  return s;
}

}  // namespace basalt
