#include "core/thread_pool.hpp"
#include "core/config.hpp"

#include <linux/futex.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BASALT_CPU_RELAX() _mm_pause()
#else
#define BASALT_CPU_RELAX() ((void)0)
#endif

namespace basalt {

namespace {
thread_local bool t_in_pool_chunk = false;  // nested parallel_for runs inline

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A gap this long between two looks at the clock while spinning means the spinning thread was
// descheduled: another process wants this core, and spinning only burns our share of it.
constexpr int64_t kPreemptedGapNs = 200'000;
// A busy machine stays marked busy for this long after the last sign of it.
constexpr int64_t kBusyNs = 200'000'000;
// BASALT_POOL_APART=0 leaves thread placement to the scheduler on a busy machine (for comparing).
bool no_apart() {
  return !env_config().pool_apart;
}
}  // namespace

// An idle machine preempts a spinning pool thread now and then (kernel threads, timers); a core
// taken by another process does it every few scheduler slices.
// The machine counts as busy when kBusyPreemptions happen within one kWindowNs.
void ThreadPool::note_preempted(int64_t now) {
  constexpr int64_t kWindowNs = 100'000'000;
  constexpr uint32_t kBusyPreemptions = 4;
  preempted_spins_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(preempt_mu_);
  if (now - window_start_ns_ > kWindowNs) {
    window_start_ns_ = now;
    window_count_ = 0;
  }
  if (++window_count_ >= kBusyPreemptions) note_busy(now);
}

// Runnable threads on the whole machine now: the fourth field of /proc/loadavg ("R/T"), the
// scheduler's count of tasks running or waiting for a core. -1 when unreadable.
static int64_t runnable_now() {
  int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t r = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (r <= 0) return -1;
  buf[r] = 0;
  const char* p = buf;
  for (int field = 0; field < 3; ++field) {  // skip the three load averages
    while (*p && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  char* end = nullptr;
  long long n = std::strtoll(p, &end, 10);
  return end && *end == '/' ? n : -1;
}

// A sign of a busy machine counts only while more threads are runnable than this pool has: our
// own threads can also make a worker wait for a core (woken onto the core of a caller that is
// still busy with its chunks), and so can a hypervisor that deschedules the virtual CPU, and
// neither is another process that wants the cores. On a 2-vCPU VM, 0-2 false detections per
// process run came from there, each turning off spinning and moving the workers for 200 ms.
void ThreadPool::note_busy(int64_t now) {
  const int64_t runnable = runnable_now();
  if (runnable >= 0 && runnable <= threads_) return;
  busy_detections_.fetch_add(1, std::memory_order_relaxed);
  busy_until_ns_.store(now + kBusyNs, std::memory_order_relaxed);
}

bool ThreadPool::machine_busy(int64_t now) const { return now < busy_until_ns_.load(std::memory_order_relaxed); }

// Run-queue wait of the calling thread: /proc/thread-self/schedstat holds "run_ns wait_ns slices",
// where wait_ns is the time the thread was runnable but had no core. A pool thread that waits for
// a core for a good part of the time it wants one shares its cores with another process. A worker
// sleeps when it has nothing to do, so its run-queue time is time lost inside parallel_fors.
struct ThreadPool::WaitProbe {
  int fd = -1;
  int64_t last_check_ns = 0, last_wait_ns = 0;
  WaitProbe() {
    fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) last_wait_ns = read_wait();
    last_check_ns = now_ns();
  }
  ~WaitProbe() {
    if (fd >= 0) ::close(fd);
  }
  int64_t read_wait() const {
    char buf[128];
    ssize_t r = ::pread(fd, buf, sizeof buf - 1, 0);
    if (r <= 0) return -1;
    buf[r] = 0;
    char* end = nullptr;
    std::strtoll(buf, &end, 10);  // run_ns
    if (!end || *end != ' ') return -1;
    return std::strtoll(end + 1, nullptr, 10);
  }
};

// Called by a worker after each job: at most every kProbeNs, compares the run-queue time it
// gained since the last look with the wall time; over kBusyShare of it marks the machine busy.
void ThreadPool::probe_wait(WaitProbe& p) {
  constexpr int64_t kProbeNs = 20'000'000;
  constexpr double kBusyShare = 0.25;
  if (p.fd < 0) return;
  int64_t t = now_ns();
  if (t - p.last_check_ns < kProbeNs) return;
  int64_t w = p.read_wait();
  if (w < 0) {  // schedstat unreadable: no probe
    ::close(p.fd);
    p.fd = -1;
    return;
  }
  if (double(w - p.last_wait_ns) > kBusyShare * double(t - p.last_check_ns)) note_busy(t);
  p.last_wait_ns = w;
  p.last_check_ns = t;
}

// Spin until pred() or spin_us elapse. Returns pred()'s last value. No spinning while the machine
// is busy; spinning stops early when this thread finds it was preempted while spinning.
template <class Pred>
bool ThreadPool::spin_until(Pred pred) {
  if (spin_us_ <= 0) return pred();
  int64_t last = now_ns();
  if (machine_busy(last)) return pred();
  const int64_t deadline = last + int64_t(spin_us_) * 1000;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    BASALT_CPU_RELAX();
    if ((i & 63) == 63) {
      int64_t t = now_ns();
      if (t - last > kPreemptedGapNs) {
        note_preempted(t);
        return pred();
      }
      if (t >= deadline) return pred();
      last = t;
    }
  }
}

namespace {
// Sleep while *word == expected (a spurious or early return is fine: callers re-check).
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace

// Chunks [next, end) of one thread's part; `next` only moves forward (fetch_add), and a thread
// that finds it at or past `end` moves on to the next part.
struct alignas(64) ThreadPool::Part {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, grain = 1, chunks = 0;
  Part* parts = nullptr;
  int nparts = 0;
  alignas(64) std::atomic<uint32_t> remaining{0};  // chunks not finished (futex word for the caller)
  std::atomic<bool> caller_sleeps{false};          // the caller may be asleep on `remaining`
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  std::exception_ptr err;
  // The caller's floating-point control word (x86 MXCSR: rounding, flush-to-zero and
  // denormals-are-zero): workers run the job's chunks under it, so a session that asks for
  // denormals as zero gets them on every thread of the pool.
  unsigned fp_mode = 0;
};

namespace {
#if defined(__x86_64__) || defined(__i386__)
unsigned fp_mode_now() { return _mm_getcsr(); }
void set_fp_mode(unsigned m) { _mm_setcsr(m); }
#else
unsigned fp_mode_now() { return 0; }
void set_fp_mode(unsigned) {}
#endif
// Runs under the job's FP mode, restoring the thread's own afterwards.
struct FpModeScope {
  unsigned saved;
  explicit FpModeScope(unsigned want) : saved(fp_mode_now()) {
    if (want != saved) set_fp_mode(want);
  }
  ~FpModeScope() {
    if (fp_mode_now() != saved) set_fp_mode(saved);
  }
};
}  // namespace

int ThreadPool::available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int c = CPU_COUNT(&set);
    if (c > 0) return c;
  }
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

ThreadPool::ThreadPool(int threads, int spin_us)
    : threads_(threads < 1 ? 1 : threads),
      spin_us_(spin_us < 0 ? 0 : spin_us),
      parts_(new Part[size_t(threads_)]),
      tids_(new std::atomic<int>[size_t(threads_)]) {
  for (int i = 0; i < threads_; ++i) tids_[i].store(0);
  workers_.reserve(size_t(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.fetch_add(1);
  futex_wake_all(epoch_);
  for (auto& t : workers_) t.join();
}

std::shared_ptr<ThreadPool> ThreadPool::shared(int threads, int spin_us) {
  static std::mutex mu;
  static std::shared_ptr<ThreadPool> pool;
  std::lock_guard<std::mutex> lk(mu);
  if (!pool) pool = std::make_shared<ThreadPool>(threads < 1 ? available_cores() : threads, spin_us);
  return pool;
}

void ThreadPool::run_chunks(Job& job, int self) {
  FpModeScope fp(job.fp_mode);
  bool was = t_in_pool_chunk;
  t_in_pool_chunk = true;
  uint32_t done = 0;
  // Own part first, then the others in turn (stealing from their fronts).
  for (int k = 0; k < job.nparts; ++k) {
    Part& p = job.parts[(self + k) % job.nparts];
    for (;;) {
      // A plain load first: a drained part is not written again (no cache-line ping-pong).
      if (p.next.load(std::memory_order_relaxed) >= p.end) break;
      int64_t c = p.next.fetch_add(1, std::memory_order_relaxed);
      if (c >= p.end) break;
      if (!job.failed.load(std::memory_order_relaxed)) {
        int64_t b = c * job.grain;
        int64_t e = b + job.grain < job.n ? b + job.grain : job.n;
        try {
          (*job.fn)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lk(job.err_mu);
          if (!job.err) job.err = std::current_exception();
          job.failed.store(true);
        }
      }
      ++done;
    }
  }
  t_in_pool_chunk = was;
  // One decrement per thread and job (not per chunk); the last one wakes a sleeping caller.
  if (done && job.remaining.fetch_sub(done) == done && self != 0 && job.caller_sleeps.load())
    futex_wake_all(job.remaining);
}

void ThreadPool::worker_main(int index) {
  // epoch_ is 0 until the first job: a worker that starts running after that job was posted still
  // sees it as new (reading epoch_ here would skip it, leaving the first job to the caller).
  uint32_t seen = 0;
  WaitProbe probe;
  tids_[index].store(int(syscall(SYS_gettid)));
  for (;;) {
    // stop_ is set before epoch_ is bumped: if this thread read `seen` after the final bump, it
    // sees stop_ here and never waits on an epoch that will not change again.
    if (stop_.load()) return;
    // Bounded spin for the next job, then sleep until epoch_ changes. sleepers_ is raised before
    // the last check of epoch_, and the caller bumps epoch_ before reading sleepers_: either this
    // thread sees the new epoch or the caller sees a sleeper and wakes it.
    if (!spin_until([&] { return epoch_.load(std::memory_order_acquire) != seen; })) {
      sleepers_.fetch_add(1);
      if (epoch_.load() == seen) futex_wait(epoch_, seen);
      sleepers_.fetch_sub(1);
    }
    uint32_t now = epoch_.load(std::memory_order_acquire);
    if (now == seen) continue;  // spurious wake-up
    seen = now;
    if (stop_.load()) return;
    // Register before touching the job, so the caller cannot finish and destroy it under us;
    // then re-check that it is still posted (the caller clears job_ before waiting on active_).
    active_.fetch_add(1);
    Job* j = job_.load();
    if (j) run_chunks(*j, index);
    active_.fetch_sub(1);
    probe_wait(probe);
  }
}

// While the machine is busy, the workers may run on the caller's cores but the one it runs on
// (see the header); otherwise on all of the caller's cores. Called by the caller holding
// caller_mu_, before it posts a job: an idle machine costs one clock read, a busy one also
// sched_getcpu, and only a change of state or of the caller's core makes system calls.
void ThreadPool::keep_apart(int64_t now) {
  int here = machine_busy(now) ? sched_getcpu() : -1;
  if (here < 0) apart_denied_ = -1;  // quiet: the next busy spell looks at the affinity again
  // (a caller whose affinity left no room on this core is not asked again per job)
  if (here == apart_from_ || (here >= 0 && here == apart_denied_)) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
  // Apart only where the workers still have a core each.
  if (here >= 0 && CPU_ISSET(here, &mask) && CPU_COUNT(&mask) >= threads_) {
    CPU_CLR(here, &mask);
  } else {
    if (here >= 0) apart_denied_ = here;
    here = -1;
  }
  if (here == apart_from_) return;
  for (int i = 1; i < threads_; ++i) {
    int tid = tids_[i].load(std::memory_order_relaxed);
    if (tid > 0) sched_setaffinity(tid, sizeof mask, &mask);  // a refusal leaves it where it was
  }
  if (here >= 0) apart_moves_.fetch_add(1, std::memory_order_relaxed);
  apart_from_ = here;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = (n + grain - 1) / grain;
  // Inline: nothing to share, nested inside a chunk, or another caller has the workers (its
  // threads are busy anyway; concurrent callers are their own parallelism).
  std::unique_lock<std::mutex> lk(caller_mu_, std::defer_lock);
  if (threads_ <= 1 || chunks <= 1 || t_in_pool_chunk || !lk.try_lock()) {
    fn(0, n);
    return;
  }
  if (chunks > int64_t(1) << 30) {  // keep the futex counter in range: coarser chunks
    grain = (n + (int64_t(1) << 30) - 1) >> 30;
    chunks = (n + grain - 1) / grain;
  }
  if (!no_apart()) keep_apart(now_ns());
  Job job;
  job.fn = &fn;
  job.fp_mode = fp_mode_now();
  job.n = n;
  job.grain = grain;
  job.chunks = chunks;
  job.nparts = int(chunks < threads_ ? chunks : threads_);
  job.parts = parts_.get();
  for (int p = 0; p < job.nparts; ++p) {
    job.parts[p].next.store(chunks * p / job.nparts, std::memory_order_relaxed);
    job.parts[p].end = chunks * (p + 1) / job.nparts;
  }
  job.remaining.store(uint32_t(chunks));
  job_.store(&job);
  epoch_.fetch_add(1);
  if (sleepers_.load() > 0) futex_wake_all(epoch_);
  run_chunks(job, 0);
  // Wait for chunks other threads took: spin briefly, then sleep on the counter. On a busy machine
  // the caller does not sleep but yields until the job is done: a sleeping caller gives its core
  // to the other process, and the rest of the job (and the next one) then queues for a core.
  // ResNet-50 at 2 threads with one core busy: ~60 ms sleeping, ~46 ms yielding (idle: ~35 ms).
  if (!spin_until([&] { return job.remaining.load(std::memory_order_acquire) == 0; }) && machine_busy(now_ns())) {
    while (job.remaining.load(std::memory_order_acquire) != 0) sched_yield();
  } else if (job.remaining.load(std::memory_order_acquire) != 0) {
    job.caller_sleeps.store(true);
    for (;;) {
      uint32_t r = job.remaining.load();
      if (r == 0) break;
      futex_wait(job.remaining, r);
    }
  }
  job_.store(nullptr);
  // Workers leaving run_chunks: a few instructions, unless one was preempted right there.
  for (int i = 0; active_.load() != 0; ++i) {
    if (i < 1024) BASALT_CPU_RELAX();
    else std::this_thread::yield();
  }
  if (job.err) std::rethrow_exception(job.err);
}

}  // namespace basalt
