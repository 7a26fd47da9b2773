// The bounded pool for tensors the memory plan cannot place: values whose size depends on data
// (NonZero, Unique, the outputs of Loop bodies, everything inside a subgraph) and so have no
// arena slot.
//
// Blocks are kept by size class (four classes per power of two, at least 64 bytes, so a block
// wastes under a quarter of its size); a request takes the smallest idle block of its class up to
// twice that. A run asks for a block, a tensor views it, and when the
// last tensor viewing it goes the block returns to the pool, where the next run of the same shape
// finds it again: repeated runs allocate nothing new. Idle blocks are bounded by `max_idle_bytes`:
// a block returned over the bound, the oldest idle blocks first, is freed at once (blocks of
// 64 KB and more are mmap'd, so freeing them gives the pages back to the OS).
//
// Contract: thread-safe. A block outlives the pool safely (its keep-alive holds a weak reference
// and frees the block itself when the pool is gone), so releasing a session frees every idle
// block at once and every block still viewed when its last view goes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace basalt {

class DynamicPool : public std::enable_shared_from_this<DynamicPool> {
 public:
  struct Stats {
    uint64_t hits = 0;        // requests served by an idle block
    uint64_t misses = 0;      // requests that allocated a new block
    uint64_t frees = 0;       // blocks given back to the OS (over the bound, trimmed, or at release)
    uint64_t idle_bytes = 0;  // bytes of idle blocks held now (the bounded part)
    uint64_t in_use_bytes = 0;  // bytes of blocks viewed by tensors now
    uint64_t peak_bytes = 0;  // largest idle + in use so far
    uint64_t max_idle_bytes = 0;
  };
  struct Block {
    void* data = nullptr;
    uint64_t bytes = 0;                 // the block's size (its size class, up to twice the request's)
    std::shared_ptr<const void> keep;   // returns the block to the pool when the last copy goes
  };

  // Use through std::make_shared (the blocks hold weak references to the pool).
  explicit DynamicPool(uint64_t max_idle_bytes) : max_idle_(max_idle_bytes) {}
  ~DynamicPool();
  DynamicPool(const DynamicPool&) = delete;
  DynamicPool& operator=(const DynamicPool&) = delete;

  // A block of at least `bytes` (64-byte aligned, contents unspecified). Throws MemoryLimit when
  // the memory cannot be had.
  Block acquire(uint64_t bytes);
  // Frees idle blocks, oldest first, until at most `keep_bytes` stay idle.
  void trim(uint64_t keep_bytes);
  Stats stats() const;

  // The size class of a request: `bytes` rounded up to 64 and then to one of four steps per
  // power of two.
  static uint64_t size_class(uint64_t bytes);

 private:
  struct Idle {
    void* data;
    uint64_t bytes;
    uint64_t stamp;  // when it became idle (for freeing the oldest first)
  };
  void give_back(void* data, uint64_t bytes);
  void trim_locked(uint64_t keep_bytes, std::vector<Idle>& to_free);
  static void* allocate(uint64_t bytes);
  static void release(void* data, uint64_t bytes);
  friend struct DynamicPoolLease;

  mutable std::mutex mu_;
  uint64_t max_idle_;
  std::multimap<uint64_t, Idle> idle_;  // by size class
  uint64_t stamp_ = 0;
  Stats st_;
};

}  // namespace basalt
