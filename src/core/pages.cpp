#include "core/pages.hpp"
#include "core/config.hpp"

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace basalt {

namespace {
constexpr uintptr_t kHugePage = kHugePageBytes;
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14 (older headers lack the name)
#endif

size_t page_round(size_t bytes) {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

struct Recycler {
  std::mutex mu;
  int scopes = 0;
  std::vector<std::pair<char*, size_t>> parked;  // page-rounded lengths
  size_t parked_bytes = 0, reused_bytes = 0;
};
Recycler& recycler() {
  static Recycler* r = new Recycler;  // never destroyed: blocks may be freed during static destruction
  return *r;
}

// Parks block [p, p + len) when a scope is open and there is room; false: the caller unmaps it.
bool park(void* p, size_t len) {
  if (len < kRecycleMinBytes) return false;
  Recycler& r = recycler();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.scopes == 0 || r.parked_bytes + len > kRecycleMaxBytes) return false;
  r.parked.emplace_back(static_cast<char*>(p), len);
  r.parked_bytes += len;
  return true;
}

// A block of len bytes (page-rounded) made of parked pages where there are any, the rest fresh
// (populated when asked); zero-filled. Null when nothing is parked or the OS refuses.
void* take_parked(size_t len, bool populate) {
  Recycler& r = recycler();
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  char* dst = nullptr;
  size_t off = 0;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.parked.empty()) return nullptr;
    dst = static_cast<char*>(mmap(nullptr, len, prot, flags, -1, 0));  // the address range
    if (dst == MAP_FAILED) return nullptr;
    // Largest blocks first (fewer moves); a block's unused tail stays parked.
    std::sort(r.parked.begin(), r.parked.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    while (off < len && !r.parked.empty()) {
      auto [src, n] = r.parked.back();
      const size_t take = std::min(n, len - off);
      if (mremap(src, take, take, MREMAP_MAYMOVE | MREMAP_FIXED, dst + off) == MAP_FAILED) break;
      r.parked.pop_back();
      if (take < n) r.parked.emplace_back(src + take, n - take);
      r.parked_bytes -= take;
      r.reused_bytes += take;
      off += take;
    }
  }
  std::memset(dst, 0, off);  // the moved pages keep their old contents
  if (off < len && populate)  // fresh pages for the rest, faulted in at once
    mmap(dst + off, len - off, prot, flags | MAP_FIXED | MAP_POPULATE, -1, 0);
  return dst;
}
}  // namespace

RecycleScope::RecycleScope() {
  Recycler& r = recycler();
  std::lock_guard<std::mutex> lk(r.mu);
  ++r.scopes;
}

RecycleScope::~RecycleScope() {
  std::vector<std::pair<char*, size_t>> drop;
  {
    Recycler& r = recycler();
    std::lock_guard<std::mutex> lk(r.mu);
    if (--r.scopes == 0) {
      drop.swap(r.parked);
      r.parked_bytes = 0;
    }
  }
  for (auto [p, n] : drop) munmap(p, n);
}

RecycleStats recycle_stats() {
  Recycler& r = recycler();
  std::lock_guard<std::mutex> lk(r.mu);
  return RecycleStats{r.parked_bytes, r.reused_bytes};
}

namespace {
// -1: not decided yet (BASALT_HUGE_PAGES is read on first use); else 0 / 1.
std::atomic<int> g_huge{-1};
}  // namespace

bool huge_pages_wanted() {
  int v = g_huge.load(std::memory_order_relaxed);
  if (v < 0) {
    int want = env_config().huge_pages ? 1 : 0;
    g_huge.compare_exchange_strong(v, want);  // a concurrent set_huge_pages_wanted wins
    v = g_huge.load(std::memory_order_relaxed);
  }
  return v == 1;
}

void set_huge_pages_wanted(bool on) { g_huge.store(on ? 1 : 0, std::memory_order_relaxed); }

void* map_pages(size_t bytes, bool huge, bool populate) {
  const size_t len = page_round(bytes);
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (huge && len >= kHugePage && huge_pages_wanted()) {
    // One huge page more than needed, then the slack on both sides unmapped: a 2 MB aligned start.
    void* p = mmap(nullptr, len + kHugePage, prot, flags, -1, 0);
    if (p != MAP_FAILED) {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
      const uintptr_t a = (lo + kHugePage - 1) & ~(kHugePage - 1);
      if (a > lo) munmap(p, a - lo);
      const uintptr_t end = lo + len + kHugePage;
      if (end > a + len) munmap(reinterpret_cast<void*>(a + len), end - (a + len));
      madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);  // a hint: without THP it does nothing
      return reinterpret_cast<void*>(a);
    }
  }
  if (len >= kRecycleMinBytes)
    if (void* p = take_parked(len, populate)) return p;
  void* p = mmap(nullptr, len, prot, flags | (populate ? MAP_POPULATE : 0), -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* grow_pages(void* p, size_t old_bytes, size_t new_bytes, bool huge, bool populate) {
  const size_t old_len = page_round(old_bytes), len = page_round(new_bytes);
  if (!p || len <= old_len) return nullptr;
  // Resize first, without MREMAP_FIXED: when the kernel refuses (a block made of parked pages may
  // span several mappings; an address-space limit) nothing has changed, and the caller keeps its
  // block. (With MREMAP_FIXED the target range is unmapped before the old one is checked, so a
  // refusal would leave a hole another thread's mmap could take.)
  void* q = mremap(p, old_len, len, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return nullptr;
  if (huge && len >= kHugePage && huge_pages_wanted()) {
    if ((reinterpret_cast<uintptr_t>(q) & (kHugePage - 1)) != 0) {
      // Move the (now single-mapping) block onto a 2 MB aligned start in a reserved range, then
      // unmap the slack on both sides; both ends of the move aligned, huge pages move whole. If
      // the move is refused the block stays where it is (valid, just not aligned) and only the
      // slack is unmapped: the aligned part of the reservation is left alone (it may already be
      // gone, and another mapping may sit there).
      void* r = mmap(nullptr, len + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (r != MAP_FAILED) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(r);
        const uintptr_t a = (lo + kHugePage - 1) & ~(kHugePage - 1);
        void* m = mremap(q, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(a));
        if (a > lo) munmap(r, a - lo);
        const uintptr_t end = lo + len + kHugePage;
        if (end > a + len) munmap(reinterpret_cast<void*>(a + len), end - (a + len));
        if (m != MAP_FAILED) q = m;
      }
    }
    madvise(q, len, MADV_HUGEPAGE);  // a block that was under 2 MB was not marked
    return q;
  }
  // The added pages faulted in by one call (MADV_POPULATE_WRITE, Linux 5.14); where the kernel
  // lacks it they fault in on first write as usual.
  if (populate) madvise(static_cast<char*>(q) + old_len, len - old_len, kPopulateWrite);
  return q;
}

void populate_pages(void* p, size_t bytes) {
  if (!p || !bytes) return;
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(uintptr_t(page) - 1);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(p) + bytes;
  if (madvise(reinterpret_cast<void*>(lo), hi - lo, kPopulateWrite) == 0 || errno != EINVAL) return;
  // (ENOMEM and the like: the pages are left to fault in when written, as without populating.)
  // An atomic add of 0: a write access (one fault per page) that leaves the byte as it was.
  for (uintptr_t a = std::max(lo, reinterpret_cast<uintptr_t>(p)); a < hi; a = (a | (page - 1)) + 1)
    __atomic_fetch_add(reinterpret_cast<char*>(a), char(0), __ATOMIC_RELAXED);
}

void unmap_pages(void* p, size_t bytes) {
  if (!p) return;
  const size_t len = page_round(bytes);
  if (!park(p, len)) munmap(p, len);
}

void* alloc_pages(size_t bytes) {
  if (bytes >= kMapThresholdBytes) return map_pages(bytes, kHugePackedWeights, /*populate=*/true);
  const size_t a = bytes ? (bytes + 63) / 64 * 64 : 64;
  void* p = std::aligned_alloc(64, a);
  if (p) std::memset(p, 0, a);
  return p;
}

void free_pages(void* p, size_t bytes) {
  if (!p) return;
  if (bytes >= kMapThresholdBytes) unmap_pages(p, bytes);
  else std::free(p);
}

size_t heap_block_bytes(const void* p, size_t requested) {
  if (!p) return 0;
#if defined(__GLIBC__)
  return malloc_usable_size(const_cast<void*>(p)) + sizeof(size_t);
#else
  return std::max<size_t>(32, (requested + sizeof(size_t) + 15) & ~size_t(15));
#endif
}

}  // namespace basalt
