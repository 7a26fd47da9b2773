#include "runtime/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/resource.h>

using basalt::ThreadPool;

// Every index is visited exactly once, whatever the thread count, grain and spin setting.
TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 4})
    for (int spin : {0, 50})
      for (int64_t n : {1, 2, 7, 64, 1000})
        for (int64_t grain : {1, 3, 64}) {
          ThreadPool pool(threads, spin);
          std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
          pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
            ASSERT_LT(b, e);
            ASSERT_EQ(b % grain, 0);
            ASSERT_TRUE(e == n || e % grain == 0);
            for (int64_t i = b; i < e; ++i) hit[size_t(i)]++;
          });
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hit[size_t(i)].load(), 1) << threads << " " << n << " " << grain;
        }
}

TEST(ThreadPool, UsesMoreThanOneThread) {
  ThreadPool pool(2, 1000);
  std::atomic<int> distinct{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int rep = 0; rep < 50 && ids.size() < 2; ++rep)
    pool.parallel_for(64, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    });
  (void)distinct;
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPool, ExceptionReachesCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [&](int64_t b, int64_t) {
                                   if (b == 37) throw std::runtime_error("chunk 37");
                                 }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedAndConcurrentCallersRunInline) {
  ThreadPool pool(2, 0);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            pool.parallel_for(10, 2, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 8 * 10);
}

// An idle pool sleeps: its threads use (almost) no CPU while nobody calls parallel_for.
TEST(ThreadPool, IdlePoolUsesNoCpu) {
  ThreadPool pool(2, 100);
  pool.parallel_for(4, 1, [](int64_t, int64_t) {});
  rusage a{}, b{};
  getrusage(RUSAGE_SELF, &a);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  getrusage(RUSAGE_SELF, &b);
  double cpu_ms = (b.ru_utime.tv_sec - a.ru_utime.tv_sec) * 1e3 + (b.ru_utime.tv_usec - a.ru_utime.tv_usec) / 1e3 +
                  (b.ru_stime.tv_sec - a.ru_stime.tv_sec) * 1e3 + (b.ru_stime.tv_usec - a.ru_stime.tv_usec) / 1e3;
  EXPECT_LT(cpu_ms, 20.0);
}
