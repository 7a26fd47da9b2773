// Run arenas: one block of memory per run, laid out by a MemoryPlan (runtime/planner.hpp).
//
// An Arena is an anonymous mmap (so its pages go back to the OS on munmap, whatever the heap
// does). An ArenaPool keeps the idle arenas of one session: a run takes the smallest idle arena
// that is large enough, else grows the largest idle one (its pages stay: only the added ones are
// new), else maps a new one; it gives it back when it ends. Concurrent runs each hold their own
// arena. Contract: the pool must outlive every arena it handed out (the Session
// owns the pool and runs hold a shared_ptr to it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace basalt {

class ThreadPool;

class Arena {
 public:
  // Maps `bytes` (rounded up to whole pages; at least one page), its pages faulted in at once (4 KB
  // pages; huge ones fault in on first touch): by the threads of `pool` together where it has more
  // than one and the arena is large (see populate()), else by the mmap call. Throws MemoryLimit on
  // failure.
  explicit Arena(uint64_t bytes, ThreadPool* pool = nullptr);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  char* data() const { return base_; }
  uint64_t size() const { return size_; }
  // Grows the arena to at least `bytes` (rounded as the constructor rounds), keeping the pages it
  // has (core/pages.hpp grow_pages; data() may change). False when the OS refuses: the arena is
  // then unchanged.
  bool grow(uint64_t bytes, ThreadPool* pool = nullptr);

 private:
  // Faults in [from, size_) on the pool's threads, in kPopulateChunk pieces (where
  // split_populate says so; otherwise the mapping call populates).
  void populate(uint64_t from, ThreadPool& pool);
  char* base_ = nullptr;
  uint64_t size_ = 0;
};

class ArenaPool {
 public:
  // An arena of at least `bytes`. When no idle arena is large enough, the largest idle one grows
  // to `bytes` (or, where the OS refuses that, a new one is mapped) and the other idle ones are
  // unmapped (a larger arena serves every smaller plan).
  //
  // Why grow rather than map afresh: a fully convolutional model's arena grows with each larger
  // input size it meets, and on a VM every fresh page costs a fault that can cost more than the
  // work done in it. PaddleOCR det at 2 threads, first run at a new size over a repeat while the
  // arena grows (sizes 416x448 .. 992x1216): 1.26-1.83 with a fresh arena each time.
  //
  // The pages a new or grown arena adds are faulted in by `pool`'s threads together (Arena): on a
  // VM a fresh page costs ~1 us, so PaddleOCR det's first run at 320x320 spent 2.7-3.2 ms of its
  // ~10 ms populating an 8.1 MB arena on one thread.
  std::shared_ptr<Arena> acquire(uint64_t bytes, ThreadPool* pool = nullptr);
  // Returns an arena taken with acquire(). Keeps at most as many idle arenas as runs were ever
  // in flight at once, dropping the smallest.
  void release(std::shared_ptr<Arena> a);
  uint64_t mapped_bytes() const { return mapped_.load(); }  // idle + in use
  uint64_t maps() const { return maps_.load(); }            // arenas mapped so far
  uint64_t grows() const { return grows_.load(); }          // idle arenas grown for a larger plan
  void clear();                                              // unmaps the idle arenas

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Arena>> idle_;
  int in_use_ = 0, max_in_use_ = 0;
  std::atomic<uint64_t> mapped_{0}, maps_{0}, grows_{0};
  void unmapped(uint64_t bytes) { mapped_ -= bytes; }
};

}  // namespace basalt
