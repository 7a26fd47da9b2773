// Large memory blocks straight from the OS: tensors and packed weights of 64 KB and up.
//
// - A block is an anonymous mapping: the kernel hands it out zero-filled (no memset), pages that
//   are never written never become resident, and freeing it returns it to the OS at once (a freed
//   malloc block of that size may stay in the heap).
// - Blocks of 2 MB and up can ask for huge pages, where huge pages are wanted (off by default;
//   BASALT_HUGE_PAGES=1 or set_huge_pages_wanted(true) turns them on): the block starts on a 2 MB
//   boundary and is marked MADV_HUGEPAGE, so where the kernel has transparent huge pages each
//   whole 2 MB of it is one page (one fault per 2 MB instead of 512, one TLB entry per 2 MB); the
//   tail past the last whole 2 MB stays in 4 KB pages, so resident memory is never rounded up.
//   Run arenas of 4 MB and up ask. Why off by default, measured on this machine (a VM whose host
//   takes back freed memory): touching 64 MB of fresh memory costs 0.33-0.41 ms per MB in 4 KB
//   pages, every time, and 0.09-2.3 ms per MB in huge pages, depending on whether the host still
//   backs the guest's free huge blocks. A larger input shape's arena is fresh memory, so with huge
//   pages PaddleOCR det's first run at a new, larger size cost 1.2-3.9x a repeat (4 KB pages:
//   1.07-1.4x), while the repeats themselves were as fast either way (det 640x640 48.6 vs 49.8 ms
//   at 1 thread, 24.8 vs 24.9 at 2; ResNet-50, UNet, DenseNet equal within noise). On the Intel
//   Xeons of an earlier session huge arenas made det 95 -> 78-87 ms: there BASALT_HUGE_PAGES=1
//   may pay. Tensors and packed weights never ask (kHugePackedWeights): ResNet-50 session
//   creation took 142-370 ms with them against a steady ~178 ms without.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

namespace basalt {

constexpr size_t kMapThresholdBytes = size_t(64) << 10;  // blocks from here up are mapped
constexpr size_t kHugePageBytes = size_t(2) << 20;        // a transparent huge page (x86-64)
constexpr bool kHugePackedWeights = false;                // see above

// Zero-filled block of `bytes` (mapped from kMapThresholdBytes up, huge pages as
// kHugePackedWeights says, else populated: map_pages; else 64-byte aligned heap); null when the
// OS refuses. Free it with free_pages(p, bytes), the same size. For blocks written whole (packed
// weights).
void* alloc_pages(size_t bytes);
void free_pages(void* p, size_t bytes);
// The mapped kind whatever the size (bytes > 0), huge pages when asked and bytes >= 2 MB;
// unmap_pages(p, bytes) frees it. populate: for a block the caller is about to write whole (packed
// weights, an aligned weight copy, a tensor made with Tensor::uninit): its 4 KB pages are faulted
// in by the mmap call itself (MAP_POPULATE) instead of one page fault each on first write. On
// this machine (a VM, where a fault is expensive) ResNet-50's session creation allocates ~220 MB
// that way: median of 8 alternating runs 216 -> 190 ms at 1 thread. Ignored for huge pages.
void* map_pages(size_t bytes, bool huge, bool populate = false);
void unmap_pages(void* p, size_t bytes);
// Resizes a block from map_pages(old_bytes, huge) to new_bytes > old_bytes, keeping its pages: they
// move with the block (mremap: page tables are moved, nothing is copied or faulted in again) and
// keep their contents; the pages added at the end are zero-filled and fresh (populated at once,
// as map_pages does, when `populate`; ignored for huge pages). The block may move
// (to a 2 MB aligned address when huge, as map_pages places it). Null when the OS refuses: the
// old block is then unchanged and still the caller's. Cheaper than a fresh block of new_bytes on
// a machine where a fault is expensive (a VM): only the added pages fault in.
void* grow_pages(void* p, size_t old_bytes, size_t new_bytes, bool huge, bool populate = false);
// Faults in the 4 KB pages of [p, p + bytes) for writing, keeping their contents: one
// MADV_POPULATE_WRITE call (Linux 5.14), or where the kernel lacks it one write per page that
// stores back what it read. For callers that split a large block across threads (run arenas: on
// this VM two threads populate 8-23 MB in 55-70% of one thread's time).
void populate_pages(void* p, size_t bytes);
// Whether blocks that ask for huge pages get them: BASALT_HUGE_PAGES=1 (default: no), unless
// set_huge_pages_wanted() said otherwise. Process-wide; blocks mapped before a change keep theirs.
bool huge_pages_wanted();
void set_huge_pages_wanted(bool on);

// Resident bytes of a heap block the allocator returned for `requested` bytes at p (null: 0):
// its usable size plus its header where the C library says (glibc malloc_usable_size), else the
// request rounded the way common mallocs do (16-byte granules, 8-byte header). For counting what
// long-lived structures (cached memory plans) really keep.
size_t heap_block_bytes(const void* p, size_t requested);

// Page recycling while a session's kernels are created. Packing a layer's weights allocates its
// packed copy and then frees the original (an aligned copy of a misaligned weight, or one the
// optimizer folded): fresh pages cost a fault-in and a zero-fill each, the freed ones go back to
// the OS. Within a RecycleScope, freed mapped blocks of kRecycleMinBytes and up (at most
// kRecycleMaxBytes in all) are parked instead, and map_pages builds new non-huge blocks from
// parked pages first: mremap moves them (no copy) into place, and they are zeroed there, so a
// block is zero-filled as always. Leaving the last scope unmaps whatever is still parked, so the
// process holds no more than before once creation ends. Scopes nest and may be open in several
// threads (sessions created at once share the parked blocks).
constexpr size_t kRecycleMinBytes = size_t(256) << 10;
constexpr size_t kRecycleMaxBytes = size_t(128) << 20;
class RecycleScope {
 public:
  RecycleScope();
  ~RecycleScope();
  RecycleScope(const RecycleScope&) = delete;
  RecycleScope& operator=(const RecycleScope&) = delete;
};
struct RecycleStats {
  size_t parked_bytes = 0;    // parked now
  size_t reused_bytes = 0;    // handed out again from parked pages, since the process started
};
RecycleStats recycle_stats();

// A fixed-size, zero-filled array of trivially copyable T in such a block: packed weights.
// reset(n) replaces the contents with n zeros (a fresh block, its pages populated at once: the
// packing routine that follows writes every page).
template <class T>
class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(size_t n) { reset(n); }
  PageBuffer(const PageBuffer& o) : PageBuffer(o.n_) {
    if (n_) std::memcpy(p_, o.p_, n_ * sizeof(T));
  }
  PageBuffer(PageBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PageBuffer& operator=(PageBuffer o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~PageBuffer() { release(); }

  void reset(size_t n) {
    release();
    if (!n) return;
    p_ = static_cast<T*>(alloc_pages(n * sizeof(T)));
    if (!p_) throw std::bad_alloc();
    n_ = n;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  void release() {
    if (p_) free_pages(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace basalt
