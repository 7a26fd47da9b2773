// Run arenas: one block of memory per run, laid out by a MemoryPlan (runtime/planner.hpp).
//
// An Arena is an anonymous mmap (so its pages go back to the OS on munmap, whatever the heap
// does). An ArenaPool keeps the idle arenas of one session: a run takes the smallest idle arena
// that is large enough, or maps a new one; it gives it back when it ends. Concurrent runs each
// hold their own arena. Contract: the pool must outlive every arena it handed out (the Session
// owns the pool and runs hold a shared_ptr to it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace basalt {

class Arena {
 public:
  // Maps `bytes` (rounded up to whole pages; at least one page). Throws MemoryLimit on failure.
  explicit Arena(uint64_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  char* data() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  uint64_t size_ = 0;
};

class ArenaPool {
 public:
  // An arena of at least `bytes`. Maps a new one only when no idle arena is large enough; idle
  // arenas smaller than the new one are unmapped then (a larger arena serves every smaller plan).
  std::shared_ptr<Arena> acquire(uint64_t bytes);
  // Returns an arena taken with acquire(). Keeps at most as many idle arenas as runs were ever
  // in flight at once, dropping the smallest.
  void release(std::shared_ptr<Arena> a);
  uint64_t mapped_bytes() const { return mapped_.load(); }  // idle + in use
  uint64_t maps() const { return maps_.load(); }            // arenas mapped so far
  void clear();                                              // unmaps the idle arenas

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Arena>> idle_;
  int in_use_ = 0, max_in_use_ = 0;
  std::atomic<uint64_t> mapped_{0}, maps_{0};
  void unmapped(uint64_t bytes) { mapped_ -= bytes; }
};

}  // namespace basalt
