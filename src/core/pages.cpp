#include "core/pages.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace basalt {

namespace {
constexpr uintptr_t kHugePage = kHugePageBytes;

size_t page_round(size_t bytes) {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}
}  // namespace

bool huge_pages_wanted() {
  static const bool on = [] {
    const char* e = std::getenv("BASALT_HUGE_PAGES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

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
  void* p = mmap(nullptr, len, prot, flags | (populate ? MAP_POPULATE : 0), -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_pages(void* p, size_t bytes) {
  if (p) munmap(p, page_round(bytes));
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

}  // namespace basalt
