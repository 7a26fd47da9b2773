// Profiling through the C++ API: SessionOptions::profile_path / enable_profiling, Session::profiler,
// Session::end_profiling. The CLI side is tests/cli/profile_test.py.
#include <basalt/basalt.hpp>

#include "runtime/profiler.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>
#include "runtime/session_access.hpp"

using namespace basalt;

static const char* kLoop11 = "/usr/share/libonnx-testdata/data/node/test_loop11/model.onnx";

static std::vector<std::pair<std::string, Value>> loop_feeds(int64_t trips) {
  std::vector<std::pair<std::string, Value>> feeds;
  feeds.emplace_back("trip_count", Value(Tensor::scalar<int64_t>(trips)));
  feeds.emplace_back("cond", Value(Tensor::scalar<bool>(true)));
  feeds.emplace_back("y", Value(Tensor::from_vector<float>({0.5f}, {1})));
  return feeds;
}

TEST(Profiler, OffByDefault) {
  if (!std::filesystem::exists(kLoop11)) GTEST_SKIP() << "libonnx-testdata not installed";
  auto s = Session::open(kLoop11);
  EXPECT_EQ(session_profiler(*s), nullptr);
  s->run(loop_feeds(3));
  EXPECT_THROW(s->end_profiling("x.json"), Error);
}

TEST(Profiler, RecordsEveryNodeOfConcurrentRuns) {
  if (!std::filesystem::exists(kLoop11)) GTEST_SKIP() << "libonnx-testdata not installed";
  SessionOptions o;
  o.enable_profiling = true;
  auto s = Session::open(kLoop11, o);
  ASSERT_NE(session_profiler(*s), nullptr);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int k = 0; k < 10; ++k) s->run(loop_feeds(3));
    });
  for (auto& t : th) t.join();
  auto runs = session_profiler(*s)->runs();
  ASSERT_EQ(runs.size(), 40u);
  for (auto& r : runs) {
    // Loop + 3 iterations x 7 body nodes (its two Constants are folded at load).
    ASSERT_EQ(r->nodes.size(), 1u + 3u * 7u);
    EXPECT_EQ(r->nodes[0].parent, -1);
    for (size_t i = 1; i < r->nodes.size(); ++i) {
      EXPECT_EQ(r->nodes[i].parent, 0);
      EXPECT_GE(r->nodes[i].start_ns, r->nodes[0].start_ns);
      EXPECT_LE(r->nodes[i].end_ns, r->nodes[0].end_ns);
    }
    EXPECT_GE(r->nodes[0].start_ns, r->start_ns);
    EXPECT_LE(r->nodes[0].end_ns, r->end_ns);
  }
  auto phases = session_profiler(*s)->phases();
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].name, "load");
  EXPECT_EQ(phases[1].name, "optimize");  // graph optimization, inside load (src/opt)
  EXPECT_EQ(phases[2].name, "prepare");
  // No profile_path: end_profiling needs one.
  EXPECT_THROW(s->end_profiling(), Error);
}

TEST(Profiler, ProfilePathWritesTraceAtEndOrDestruction) {
  if (!std::filesystem::exists(kLoop11)) GTEST_SKIP() << "libonnx-testdata not installed";
  auto dir = std::filesystem::temp_directory_path() / ("basalt_prof_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string p1 = (dir / "a.json").string(), p2 = (dir / "b.json").string();
  {
    SessionOptions o;
    o.profile_path = p1;
    auto s = Session::open(kLoop11, o);
    s->run(loop_feeds(2));
  }  // destroyed: writes p1
  ASSERT_TRUE(std::filesystem::exists(p1));
  std::ifstream f(p1);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(ss.str().find("\"parent\":\"Loop_0\""), std::string::npos);
  {
    SessionOptions o;
    o.profile_path = p2;
    auto s = Session::open(kLoop11, o);
    s->run(loop_feeds(1));
    EXPECT_EQ(s->end_profiling(), p2);
    EXPECT_THROW(s->end_profiling((dir / "no" / "such" / "c.json").string()), Error);
  }
  EXPECT_TRUE(std::filesystem::exists(p2));
  std::filesystem::remove_all(dir);
}
