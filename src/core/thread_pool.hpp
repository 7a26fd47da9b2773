// One thread pool type for the whole runtime (issue 5).
//
// - A session owns a pool, or sessions share the process-wide one (SessionOptions::shared_pool).
// - parallel_for splits the chunks into one contiguous part per thread. A thread takes chunks
//   from the front of its own part (a counter on its own cache line: no traffic between cores per
//   chunk), then steals from the other parts, so a slow, preempted or late thread holds up at
//   most one chunk; the caller works too.
// - Waiting threads spin for a bounded time (spin_us; 0 = never spin), then sleep on a futex.
//   An idle pool uses no CPU.
// - A busy machine (another process wants the cores) changes two things for 200 ms after the last
//   sign of it: nobody spins (spinning only burns the share of the cores the pool gets, and a
//   thread that sleeps is scheduled sooner when woken), and the caller of a parallel_for, once its
//   own chunks are done, yields its core (sched_yield) until the job ends instead of sleeping (a
//   sleeping caller hands its core to the other process, and the rest of the run queues for one).
//   Signs of a busy machine: a worker that spent over a quarter of the last >= 20 ms waiting in
//   the run queue (/proc/thread-self/schedstat), or spinning threads found preempted 4 times in
//   100 ms; either counts only while more threads are runnable on the machine than the pool has
//   (/proc/loadavg), since the pool's own threads sharing a core, or a hypervisor descheduling a
//   virtual CPU, look the same to both signs.
//   While the machine is busy the workers are also kept off the caller's core (their affinity is
//   the caller's cores less the one it runs on, set again when the caller moves): a worker
//   woken on a machine with no idle core is often placed on its waker's core, and the scheduler's
//   balancer then sees 2 | 1 threads on 2 cores as balanced whichever 2 share, so the pool's
//   threads would share one core while the other process has the other. The workers get the
//   caller's cores back when the machine is no longer busy. Only where the caller may run on at
//   least threads() cores. BASALT_POOL_APART=0 turns it off (for comparing).
// - A pool with 1 thread, a null pool, a nested call (from inside a chunk) and a call made while
//   another caller has the pool all run the loop inline on the calling thread: results never
//   depend on which of these happened, only the speed does.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace basalt {

class ThreadPool {
 public:
  // threads: total threads that work on a parallel_for, the caller included (>= 1).
  explicit ThreadPool(int threads, int spin_us = 50);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  int spin_us() const { return spin_us_; }
  // Times a spinning thread found it had been preempted.
  uint64_t preempted_spins() const { return preempted_spins_.load(std::memory_order_relaxed); }
  // Times the pool found the machine busy (another process wants the cores; see the top).
  uint64_t busy_detections() const { return busy_detections_.load(std::memory_order_relaxed); }
  // Times the workers were moved off the caller's core (see the top).
  uint64_t apart_moves() const { return apart_moves_.load(std::memory_order_relaxed); }

  // Equivalent to the serial loop
  //   fn(0, n);
  // split into chunks [b, e) whose bounds are multiples of grain (or n): the chunks run in any
  // order, on up to threads() threads at once, so fn must handle any such sub-range and chunks
  // must not write to the same memory. If fn throws, the first exception is rethrown to the
  // caller after every started chunk has finished (chunks not yet started are skipped).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool (created on first use with `threads` threads; later calls get the same
  // pool whatever they ask for).
  static std::shared_ptr<ThreadPool> shared(int threads, int spin_us = 50);
  // Cores this process may run on (sched_getaffinity), at least 1.
  static int available_cores();

 private:
  struct Job;
  struct Part;
  void keep_apart(int64_t now_ns);
  void worker_main(int index);
  void run_chunks(Job& job, int self);
  template <class Pred>
  bool spin_until(Pred pred);
  struct WaitProbe;
  void note_preempted(int64_t now_ns);
  void note_busy(int64_t now_ns);
  bool machine_busy(int64_t now_ns) const;
  void probe_wait(WaitProbe& p);

  int threads_;
  int spin_us_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Part[]> parts_;        // one per thread, reused by every job
  std::unique_ptr<std::atomic<int>[]> tids_;  // the workers' thread ids (0 until a worker starts)
  int apart_from_ = -1;                  // the core the workers are kept off, or -1 (caller_mu_)
  int apart_denied_ = -1;                // a core the caller ran on while busy where its affinity left no room (caller_mu_)
  std::mutex caller_mu_;                 // one parallel_for owns the workers at a time
  std::atomic<uint32_t> epoch_{0};       // bumped to wake workers for a new job (futex word)
  std::atomic<int> sleepers_{0};         // workers asleep on epoch_ (wake only when > 0)
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> active_{0};           // workers currently touching *job_
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> busy_until_ns_{0};  // steady_clock ns: the machine counts as busy before this
  std::atomic<uint64_t> preempted_spins_{0};
  std::atomic<uint64_t> busy_detections_{0};
  std::atomic<uint64_t> apart_moves_{0};
  std::mutex preempt_mu_;           // guards the two below
  int64_t window_start_ns_ = 0;     // preemptions counted since then
  uint32_t window_count_ = 0;
};

// Runs fn over [0, n) on `pool` in chunks of `grain`; inline (one call fn(0, n)) when pool is null,
// has 1 thread, or n <= grain.
inline void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (!pool || pool->threads() <= 1 || n <= grain) {
    fn(0, n);
    return;
  }
  pool->parallel_for(n, grain, fn);
}

}  // namespace basalt
