// Memory plan tests (issue 4): the offset planner, shape inference, arena runs (no new
// allocations on repeated shapes, same results as heap runs), the plan cache bounds and
// counters, and the memory limit. Models are written with a tiny protobuf encoder below.
#include <basalt/basalt.hpp>
#include <gtest/gtest.h>

#include "pb_writer.hpp"

#include "core/pages.hpp"
#include "core/arena.hpp"
#include "graph/model.hpp"
#include "runtime/planner.hpp"
#include "core/thread_pool.hpp"
#include "core/storage.hpp"

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>
#include "runtime/session_access.hpp"

using namespace basalt;

namespace {

using test::Pb;

constexpr int kFloat = 1, kInt64 = 7;

// A negative dim is symbolic: -1 -> "N", -2 -> "H", -3 -> "W".
Pb value_info(const std::string& name, int elem, const std::vector<int64_t>& dims) {
  static const char* sym[] = {"", "N", "H", "W"};
  Pb shape;
  for (int64_t d : dims) {
    Pb dd;
    if (d < 0) dd.s(2, sym[-d]);
    else dd.u(1, uint64_t(d));
    shape.m(1, dd);
  }
  Pb tt;
  tt.u(1, uint64_t(elem)).m(2, shape);
  Pb type;
  type.m(1, tt);
  return Pb().s(1, name).m(2, type);
}

Pb attr_ints(const std::string& name, const std::vector<int64_t>& v) {
  Pb a;
  a.s(1, name);
  for (int64_t x : v) a.u(8, uint64_t(x));
  a.u(20, 7);  // INTS
  return a;
}

// A node named after its first output.
Pb node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
        const std::vector<Pb>& attrs = {}) {
  return test::onnx_node(op, in, out, out[0] + "_node", attrs);
}

Pb tensor(const std::string& name, int elem, const std::vector<int64_t>& dims, const std::string& raw) {
  Pb t;
  for (auto d : dims) t.u(1, uint64_t(d));
  t.u(2, uint64_t(elem)).s(8, name).s(9, raw);
  return t;
}

Pb floats(const std::string& name, const std::vector<int64_t>& dims, float scale) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float((i * 37) % 19 - 9);
  return tensor(name, kFloat, dims, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

Pb int64s(const std::string& name, const std::vector<int64_t>& v) {
  return tensor(name, kInt64, {int64_t(v.size())}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8));
}

std::string model(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& outputs,
                  const std::vector<Pb>& inits) {
  Pb g;
  for (auto& n : nodes) g.m(1, n);
  g.s(2, "g");
  for (auto& t : inits) g.m(5, t);
  for (auto& i : inputs) g.m(11, i);
  for (auto& o : outputs) g.m(12, o);
  Pb op;
  op.s(1, "").u(2, 17);
  Pb m;
  m.u(1, 8).m(7, g).m(8, op);
  return m.b;
}

// x [N,4,H,W] -> Conv -> Relu -> Conv -> Add(residual) -> Relu -> Shape/Reshape round trip ->
// GlobalAveragePool -> Flatten -> Gemm -> Softmax -> y [N,5]. Exercises planned tensors, a view
// op (Reshape, whose target comes from a Shape chain: value propagation), and workspaces.
std::string conv_model() {
  return model(
      {node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})}), node("Relu", {"c1"}, {"r1"}),
       node("Conv", {"r1", "w2"}, {"c2"}, {attr_ints("pads", {1, 1, 1, 1})}), node("Add", {"c2", "r1"}, {"a"}),
       node("Relu", {"a"}, {"r2"}), node("Shape", {"r2"}, {"s"}), node("Reshape", {"r2", "flat"}, {"rf"}),
       node("Reshape", {"rf", "s"}, {"r3"}), node("GlobalAveragePool", {"r3"}, {"g"}), node("Flatten", {"g"}, {"f"}),
       node("Gemm", {"f", "wf", "bf"}, {"l"}), node("Softmax", {"l"}, {"y"})},
      {value_info("x", kFloat, {-1, 4, -2, -3})}, {value_info("y", kFloat, {-1, 5})},
      {floats("w1", {4, 4, 3, 3}, 0.05f), floats("b1", {4}, 0.1f), floats("w2", {4, 4, 3, 3}, 0.04f),
       int64s("flat", {0, -1}), floats("wf", {4, 5}, 0.2f), floats("bf", {5}, 0.1f)});
}

std::unique_ptr<Session> open(const std::string& bytes, SessionOptions o = {}) {
  o.threads = o.threads ? o.threads : 2;
  return Session::from_bytes(bytes.data(), bytes.size(), o);
}

Tensor image(int64_t n, int64_t h, int64_t w) {
  Tensor x(DType::Float, {n, 4, h, w});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 13) % 23) / 7.0f - 1.5f;
  return x;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Random blocks; checks the planner's one invariant (live blocks never overlap in memory).
void check_no_overlap(const std::vector<PlanBlock>& blocks, const std::vector<uint64_t>& off, uint64_t total) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(off[i] % kArenaAlign, 0u);
    EXPECT_LE(off[i] + blocks[i].bytes, total);
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      bool live_together = blocks[i].first <= blocks[j].last && blocks[j].first <= blocks[i].last;
      bool apart = off[i] + blocks[i].bytes <= off[j] || off[j] + blocks[j].bytes <= off[i];
      if (live_together) {
        EXPECT_TRUE(apart) << "blocks " << i << " and " << j << " overlap";
      }
    }
  }
}

}  // namespace

TEST(MemoryPlan, OffsetsNeverOverlapForLiveBlocks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PlanBlock> blocks(static_cast<size_t>(1 + rng() % 40));
    for (auto& b : blocks) {
      b.bytes = 1 + rng() % 5000;
      b.first = int(rng() % 30);
      b.last = b.first + int(rng() % 10);
    }
    uint64_t total = 0, naive = 0;
    auto off = plan_offsets(blocks, &total);
    check_no_overlap(blocks, off, total);
    plan_offsets(blocks, &naive, true);
    EXPECT_LE(total, naive);
  }
}

TEST(MemoryPlan, ChainReusesMemory) {
  // A chain a -> b -> c -> d: each block dies when the next one is made, so two slots suffice.
  std::vector<PlanBlock> blocks = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  uint64_t total = 0;
  auto off = plan_offsets(blocks, &total);
  check_no_overlap(blocks, off, total);
  EXPECT_EQ(total, 2 * 1024u);
  EXPECT_EQ(off[0], off[2]);
  // A small block fits into the gap a larger dead one left (best fit).
  std::vector<PlanBlock> b2 = {{4096, 0, 0}, {4096, 0, 3}, {64, 2, 3}};
  auto off2 = plan_offsets(b2, &total);
  EXPECT_EQ(total, 8192u);
  EXPECT_EQ(off2[2], off2[0]);
}

TEST(MemoryPlan, ShapeKeyIsExactAndCanonical) {
  std::vector<std::pair<DType, Shape>> a = {{DType::Float, {1, 3, 64, 64}}}, b = {{DType::Float, {1, 3, 6, 464}}},
                                       c = {{DType::Int64, {1, 3, 64, 64}}};
  EXPECT_NE(shape_key(a), shape_key(b));
  EXPECT_NE(shape_key(a), shape_key(c));
  EXPECT_EQ(shape_key(a), shape_key(std::vector<std::pair<DType, Shape>>{{DType::Float, {1, 3, 64, 64}}}));
}

TEST(MemoryPlan, PlanPredictsEveryTensor) {
  auto s = open(conv_model());
  MemoryPlanReport r = s->plan_memory({{"x", {2, 4, 16, 16}}});
  EXPECT_TRUE(r.dynamic_values.empty()) << r.dynamic_values.size() << " dynamic, first " << r.dynamic_values[0];
  // The optimizer may fuse Conv+Relu(+Add) and fold the Reshape pair; what stays: the conv
  // activations, Shape, pool and Gemm outputs in the arena, Reshape and Flatten as views.
  EXPECT_GE(r.planned_tensors, 4);
  EXPECT_GE(r.aliased_tensors, 2);
  const uint64_t act = 2 * 4 * 16 * 16 * 4;  // one activation
  EXPECT_GE(r.arena_bytes, 2 * act);         // c1/r1 and c2 live together
  EXPECT_LT(r.arena_bytes, r.tensor_bytes + r.workspace_bytes);  // reuse happened
  EXPECT_EQ(r.inputs_bytes, act);
  EXPECT_EQ(r.outputs_bytes, 2u * 5u * 4u);
  EXPECT_EQ(r.peak_bytes, r.weights_bytes + r.packed_weights_bytes + r.arena_bytes + r.inputs_bytes + r.outputs_bytes);
  // Same plan when the run happens: the arena the run used is the planned one, and nothing
  // planned came from the heap.
  s->run({{"x", Value(image(2, 16, 16))}});
  MemoryStats m = s->memory_stats();
  EXPECT_EQ(m.last_run_arena_bytes, r.arena_bytes);
  EXPECT_EQ(m.heap_fallbacks, 0u);
  EXPECT_EQ(m.unplanned_alias_runs, 0u);
  EXPECT_EQ(m.plan_cache_hits, 1u);  // plan_memory cached the plan the run then used
}

TEST(MemoryPlan, ArenaRunsMatchHeapRuns) {
  SessionOptions heap;
  heap.memory_plan = false;
  auto a = open(conv_model()), h = open(conv_model(), heap);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> sizes = {{1, 8, 8}, {2, 17, 5}, {1, 8, 8}, {3, 32, 32}};
  for (auto [n, hh, ww] : sizes) {
    Tensor x = image(n, hh, ww);
    auto ya = a->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
    EXPECT_TRUE(same(ya[0].tensor, yh[0].tensor)) << n << "x" << hh << "x" << ww;
  }
  EXPECT_EQ(a->memory_stats().heap_fallbacks, 0u);
  EXPECT_EQ(h->memory_stats().arena_maps, 0u);
}

// Acceptance (c): after the first run of a shape, runs of that shape allocate nothing but the
// outputs they return.
TEST(MemoryPlan, RepeatedRunsAllocateNothingNew) {
  auto s = open(conv_model());
  Tensor x = image(2, 24, 24);
  s->run({{"x", Value(x)}});
  for (int rep = 0; rep < 3; ++rep) {
    uint64_t before = allocation_count();
    auto y = s->run({{"x", Value(x)}});
    uint64_t allocs = allocation_count() - before;
    // The returned output is the dynamic pool's block the previous run's output gave back.
    EXPECT_EQ(allocs, 0u) << "run " << rep << ": no allocation expected";
    EXPECT_TRUE(y[0].tensor.storage()->exclusive);
  }
  MemoryStats m = s->memory_stats();
  EXPECT_EQ(m.arena_maps, 1u);
  EXPECT_EQ(m.plan_cache_misses, 1u);
  EXPECT_EQ(m.plan_cache_hits, 3u);
  // A smaller shape reuses the larger arena: no new mapping.
  s->run({{"x", Value(image(1, 8, 8))}});
  EXPECT_EQ(s->memory_stats().arena_maps, 1u);
}

// A larger input size grows the session's idle arena in place (its pages kept) instead of mapping
// a new one: ever larger sizes, from a few KB into the huge-page range, map one arena and grow it,
// with results equal to a session without arenas; arena_bytes follows the largest plan. With huge
// pages off (the default: populated 4 KB pages) and on (BASALT_HUGE_PAGES=1).
TEST(MemoryPlan, LargerSizesGrowTheArena) {
  const bool was = basalt::huge_pages_wanted();
  for (bool huge : {false, true}) {
  SCOPED_TRACE(huge ? "huge pages" : "4 KB pages");
  basalt::set_huge_pages_wanted(huge);
  SessionOptions heap;
  heap.memory_plan = false;
  auto s = open(conv_model()), h = open(conv_model(), heap);
  uint64_t grows = 0, largest = 0;
  for (int64_t side : {8, 24, 64, 160, 320, 512, 96}) {
    Tensor x = image(1, side, side + 3);
    auto y = s->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
    EXPECT_TRUE(same(y[0].tensor, yh[0].tensor)) << side;
    MemoryStats m = s->memory_stats();
    EXPECT_EQ(m.arena_maps, 1u) << side;
    if (m.last_run_arena_bytes > largest) {
      largest = m.last_run_arena_bytes;
      if (side != 8) ++grows;
    }
    EXPECT_EQ(m.arena_grows, grows) << side;
    EXPECT_GE(m.arena_bytes, largest) << side;
    EXPECT_LT(m.arena_bytes, largest + (uint64_t(4) << 20)) << side;  // one arena, rounded to a huge page
  }
  EXPECT_GE(grows, 3u);
  EXPECT_GT(largest, uint64_t(4) << 20);  // the last growths were in the huge-page range
  EXPECT_EQ(s->memory_stats().heap_fallbacks, 0u);
  }
  basalt::set_huge_pages_wanted(was);
}

// ArenaPool: a larger plan grows the idle arena (its contents move with it, maps stays 1), but not
// one still held elsewhere (a view a kernel kept past its run): that one keeps its memory, valid,
// and a new arena is mapped instead; mapped_bytes counts both while both live.
TEST(MemoryPlan, ArenaPoolGrowsOnlyArenasNobodyElseHolds) {
  ArenaPool pool;
  auto a = pool.acquire(100000);
  std::memset(a->data(), 0x5a, 100000);
  pool.release(std::move(a));
  auto b = pool.acquire(3000000);  // grown in place
  EXPECT_EQ(pool.maps(), 1u);
  EXPECT_EQ(pool.grows(), 1u);
  EXPECT_EQ(static_cast<unsigned char>(b->data()[99999]), 0x5a);
  EXPECT_EQ(static_cast<unsigned char>(b->data()[2999999]), 0);
  EXPECT_EQ(pool.mapped_bytes(), b->size());
  std::shared_ptr<Arena> escaped = b;  // a view kept past the run
  pool.release(std::move(b));
  auto c = pool.acquire(6000000);
  EXPECT_EQ(pool.grows(), 1u);  // not grown: someone holds it
  EXPECT_EQ(pool.maps(), 2u);
  EXPECT_NE(c->data(), escaped->data());
  EXPECT_EQ(static_cast<unsigned char>(escaped->data()[99999]), 0x5a);  // still mapped, contents kept
  EXPECT_GE(c->size(), 6000000u);
  EXPECT_EQ(pool.mapped_bytes(), c->size());  // the escaped one left the pool's account
  pool.release(std::move(c));
  escaped.reset();
}

// An ArenaPool given a thread pool has the pages of a new or grown arena faulted in by the pool's
// threads (Arena::populate): all resident at once, zero where new, contents kept where grown;
// the same with 1, 2 and 3 threads and for sizes under the parallel threshold.
TEST(MemoryPlan, ArenaPoolPopulatesWithThePoolsThreads) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto resident = [&](const Arena& a) {
    std::vector<unsigned char> v((a.size() + page - 1) / page);
    EXPECT_EQ(mincore(a.data(), a.size(), v.data()), 0);
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n * page;
  };
  const bool was = basalt::huge_pages_wanted();
  basalt::set_huge_pages_wanted(false);  // huge arenas fault in on first touch instead
  for (int threads : {1, 2, 3}) {
    basalt::ThreadPool tp(threads);
    ArenaPool pool;
    auto a = pool.acquire(300000, &tp);  // under the parallel threshold
    EXPECT_EQ(resident(*a), a->size()) << threads;
    std::memset(a->data(), 0x3c, 300000);
    pool.release(std::move(a));
    auto b = pool.acquire((size_t(5) << 20) + 12345, &tp);  // grown: the added pages in parallel
    EXPECT_EQ(pool.grows(), 1u) << threads;
    EXPECT_EQ(resident(*b), b->size()) << threads;
    EXPECT_EQ(static_cast<unsigned char>(b->data()[299999]), 0x3c) << threads;
    for (uint64_t i = 300000; i < b->size(); i += 4099) ASSERT_EQ(b->data()[i], 0) << threads << " at " << i;
    ArenaPool other;
    auto c = other.acquire(size_t(7) << 20, &tp);  // a new arena, populated in parallel
    EXPECT_EQ(resident(*c), c->size()) << threads;
    for (uint64_t i = 0; i < c->size(); i += 4099) ASSERT_EQ(c->data()[i], 0) << threads << " at " << i;
    other.release(std::move(c));
    pool.release(std::move(b));
  }
  basalt::set_huge_pages_wanted(was);
}

TEST(MemoryPlan, PlanCacheBoundAndCounters) {
  SessionOptions o;
  o.plan_cache_entries = 3;
  auto s = open(conv_model(), o);
  for (int64_t h = 4; h < 10; ++h) s->run({{"x", Value(image(1, h, 4))}});
  MemoryStats m = s->memory_stats();
  EXPECT_EQ(m.plan_cache_misses, 6u);
  EXPECT_EQ(m.plan_cache_hits, 0u);
  EXPECT_EQ(m.plan_cache_entries, 3u);
  EXPECT_EQ(m.plan_cache_evictions, 3u);
  s->run({{"x", Value(image(1, 9, 4))}});  // most recent: still cached
  s->run({{"x", Value(image(1, 4, 4))}});  // evicted long ago
  m = s->memory_stats();
  EXPECT_EQ(m.plan_cache_hits, 1u);
  EXPECT_EQ(m.plan_cache_misses, 7u);
  EXPECT_LE(m.plan_cache_entries, 3u);

  // A byte bound: the resident bytes each cached plan keeps count; the cache never holds more.
  SessionOptions ob;
  {
    auto probe = open(conv_model());
    probe->run({{"x", Value(image(1, 16, 16))}});
    ob.plan_cache_bytes = probe->memory_stats().plan_cache_bytes * 5 / 2;  // two and a half plans
  }
  auto sb = open(conv_model(), ob);
  for (int64_t h = 8; h <= 16; h += 2) {
    sb->run({{"x", Value(image(1, h, 16))}});
    EXPECT_LE(sb->memory_stats().plan_cache_bytes, ob.plan_cache_bytes);
  }
  EXPECT_GT(sb->memory_stats().plan_cache_evictions, 0u);

  // No cache: every run plans, nothing is held.
  SessionOptions o0;
  o0.plan_cache_entries = 0;
  auto s0 = open(conv_model(), o0);
  s0->run({{"x", Value(image(1, 4, 4))}});
  s0->run({{"x", Value(image(1, 4, 4))}});
  EXPECT_EQ(s0->memory_stats().plan_cache_entries, 0u);
  EXPECT_EQ(s0->memory_stats().plan_cache_misses, 2u);
}

// Acceptance (d): a run over the limit fails before allocating, naming bytes needed and allowed;
// the session still runs a smaller input.
TEST(MemoryPlan, MemoryLimitRefusesBeforeAllocating) {
  auto probe = open(conv_model());
  uint64_t small = probe->plan_memory({{"x", {1, 4, 8, 8}}}).peak_bytes;
  uint64_t big = probe->plan_memory({{"x", {4, 4, 128, 128}}}).peak_bytes;
  ASSERT_LT(small, big);
  SessionOptions o;
  o.memory_limit = (small + big) / 2;
  auto s = open(conv_model(), o);
  Tensor xb = image(4, 128, 128);
  // Planning itself computes small shape values; plan first so that the run is all we count.
  EXPECT_EQ(s->plan_memory({{"x", {4, 4, 128, 128}}}).peak_bytes, big);
  uint64_t before = allocation_count();
  try {
    s->run({{"x", Value(xb)}});
    ADD_FAILURE() << "no MemoryLimit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::MemoryLimit);
    std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(big)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(o.memory_limit)), std::string::npos) << msg;
    EXPECT_NE(msg.find("x=[4,4,128,128]"), std::string::npos) << msg;
  }
  EXPECT_EQ(allocation_count(), before) << "the refused run allocated";
  EXPECT_EQ(s->memory_stats().arena_maps, 0u);
  auto y = s->run({{"x", Value(image(1, 8, 8))}});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{1, 5}));
}

// A model whose shapes claim an absurd size is refused the same way, not OOM-killed.
TEST(MemoryPlan, AbsurdSizesAreRefused) {
  // Expand of an input, so that no load-time folding computes it first.
  std::string m = model({node("Relu", {"x"}, {"r"}), node("Expand", {"r", "huge"}, {"e"}), node("Relu", {"e"}, {"y"})},
                        {value_info("x", kFloat, {1})}, {value_info("y", kFloat, {-1, -2})},
                        {int64s("huge", {int64_t(1) << 31, int64_t(1) << 31})});
  auto s = open(m);
  Tensor x(DType::Float, {1});
  try {
    s->run({{"x", Value(x)}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::MemoryLimit) << e.what();
    EXPECT_NE(std::string(e.what()).find("Expand"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// In-place reuse: element-wise outputs take the block of an input that dies at their node.

namespace {

Pb attr_int(const std::string& name, int64_t v) {
  Pb a;
  a.s(1, name).u(3, uint64_t(v)).u(20, 2);  // INT
  return a;
}

// x [N,4,H,W] -> Conv -> c1 -> Relu -> r1 -> Add(bias[4,1,1], r1) -> a1 -> Sigmoid -> s1 ->
// Mul(s1, a1) -> m -> Conv -> c2 -> Softmax(axis -1) -> sm -> Softmax(axis 1) -> sm2 -> Exp -> y.
// Run at optimization level none so that nothing is fused away. In place: r1 (over c1), a1 (over
// r1, its *second* input: the first is broadcast), m (over s1 or a1), sm (over c2). Not in place:
// s1 (a1 is still read by the Mul), sm2 (softmax over a non-last axis), y (a graph output).
std::string eltwise_model() {
  return model({node("Conv", {"x", "w1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})}), node("Relu", {"c1"}, {"r1"}),
                node("Add", {"bias", "r1"}, {"a1"}), node("Sigmoid", {"a1"}, {"s1"}), node("Mul", {"s1", "a1"}, {"m"}),
                node("Conv", {"m", "w2"}, {"c2"}, {attr_ints("pads", {1, 1, 1, 1})}),
                node("Softmax", {"c2"}, {"sm"}, {attr_int("axis", -1)}),
                node("Softmax", {"sm"}, {"sm2"}, {attr_int("axis", 1)}), node("Exp", {"sm2"}, {"y"})},
               {value_info("x", kFloat, {-1, 4, -2, -3})}, {value_info("y", kFloat, {-1, 4, -2, -3})},
               {floats("w1", {4, 4, 3, 3}, 0.05f), floats("w2", {4, 4, 3, 3}, 0.04f), floats("bias", {4, 1, 1}, 0.1f)});
}

SessionOptions no_fusion() {
  SessionOptions o;
  o.optimization_level = 0;
  return o;
}

int value_id(const Graph& g, const std::string& name) {
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].name == name) return int(v);
  return -1;
}

}  // namespace

TEST(MemoryPlanInPlace, ElementwiseOutputsTakeTheirDyingInput) {
  auto s = open(eltwise_model(), no_fusion());
  const Graph& g = *session_model(*s).graph;
  std::vector<std::pair<DType, Shape>> sig = {{DType::Float, {2, 4, 16, 16}}};
  MemoryPlan p = build_memory_plan(g, sig, 2, 0, 0);
  auto of = [&](const char* name) {
    int v = value_id(g, name);
    EXPECT_GE(v, 0) << name;
    return v < 0 ? -2 : p.in_place_of[size_t(v)];
  };
  EXPECT_EQ(of("r1"), value_id(g, "c1"));
  EXPECT_EQ(of("a1"), value_id(g, "r1"));  // the full-size operand, not the broadcast one
  EXPECT_TRUE(of("m") == value_id(g, "s1") || of("m") == value_id(g, "a1"));
  EXPECT_EQ(of("sm"), value_id(g, "c2"));
  EXPECT_EQ(of("s1"), -1) << "a1 is read again by the Mul";
  EXPECT_EQ(of("sm2"), -1) << "softmax over axis 1 of 4 is not contiguous rows";
  EXPECT_EQ(p.in_place_tensors, 4);
  // Same offsets for a value and the input it overwrites.
  EXPECT_EQ(p.value_slot[size_t(value_id(g, "r1"))].offset, p.value_slot[size_t(value_id(g, "c1"))].offset);
  EXPECT_EQ(p.value_slot[size_t(value_id(g, "a1"))].offset, p.value_slot[size_t(value_id(g, "c1"))].offset);
  // Without in-place reuse the tensors need more arena: at the Mul, s1, a1 and m are live (three
  // blocks; two in place). At 1x4x256x256 (1 MiB a tensor) the tensors, not the bounded conv
  // workspace, set the arena size.
  MemoryPlan q = build_memory_plan(g, sig, 2, 0, 0, false);
  EXPECT_EQ(q.in_place_tensors, 0);
  EXPECT_LE(p.arena_bytes, q.arena_bytes);
  std::vector<std::pair<DType, Shape>> big = {{DType::Float, {1, 4, 256, 256}}};
  MemoryPlan pb = build_memory_plan(g, big, 2, 0, 0), qb = build_memory_plan(g, big, 2, 0, 0, false);
  EXPECT_EQ(pb.in_place_tensors, 4);
  EXPECT_LT(pb.arena_bytes, qb.arena_bytes) << pb.workspace_bytes;
  EXPECT_EQ(p.tensor_bytes, q.tensor_bytes);
  EXPECT_EQ(s->plan_memory({{"x", {2, 4, 16, 16}}}).in_place_tensors, 4);
}

TEST(MemoryPlanInPlace, ResultsMatchHeapRunsAndNothingFallsBack) {
  SessionOptions heap = no_fusion();
  heap.memory_plan = false;
  auto a = open(eltwise_model(), no_fusion()), h = open(eltwise_model(), heap);
  for (auto [n, hh, ww] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 8, 8}, {2, 17, 5}, {3, 33, 31}}) {
    Tensor x = image(n, hh, ww);
    auto ya = a->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
    EXPECT_TRUE(same(ya[0].tensor, yh[0].tensor)) << n << "x" << hh << "x" << ww;
    MemoryStats m = a->memory_stats();
    EXPECT_EQ(m.heap_fallbacks, 0u);
    EXPECT_EQ(m.unplanned_alias_runs, 0u);
    EXPECT_EQ(m.last_run_arena_bytes, a->plan_memory({{"x", {n, 4, hh, ww}}}).arena_bytes);
  }
  // The fused model (Conv+Relu fused, the rest as before) agrees too.
  auto f = open(eltwise_model());
  Tensor x = image(2, 12, 12);
  auto yf = f->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
  ASSERT_EQ(yf[0].tensor.shape(), yh[0].tensor.shape());
  for (int64_t i = 0; i < yf[0].tensor.numel(); ++i)
    ASSERT_NEAR(yf[0].tensor.data<float>()[i], yh[0].tensor.data<float>()[i], 1e-5f) << i;
  EXPECT_EQ(f->memory_stats().heap_fallbacks, 0u);
}

// DenseNet's pattern: Concat of a Concat. x -> Conv -> Relu (r0) -> Conv (a); cat1 = Concat(r0, a);
// Conv(cat1) (b); cat2 = Concat(cat1, b); y = Sigmoid(cat2).
std::string dense_model() {
  return model({node("Conv", {"x", "w1"}, {"c0"}, {attr_ints("pads", {1, 1, 1, 1})}), node("Relu", {"c0"}, {"r0"}),
                node("Conv", {"r0", "w2"}, {"a"}, {attr_ints("pads", {1, 1, 1, 1})}),
                node("Concat", {"r0", "a"}, {"cat1"}, {attr_int("axis", 1)}),
                node("Conv", {"cat1", "w3"}, {"b"}, {attr_ints("pads", {1, 1, 1, 1})}),
                node("Concat", {"cat1", "b"}, {"cat2"}, {attr_int("axis", 1)}), node("Sigmoid", {"cat2"}, {"y"})},
               {value_info("x", kFloat, {-1, 4, -2, -3})}, {value_info("y", kFloat, {-1, 12, -2, -3})},
               {floats("w1", {4, 4, 3, 3}, 0.05f), floats("w2", {4, 4, 3, 3}, 0.04f), floats("w3", {4, 8, 3, 3}, 0.03f)});
}

// Concat in place: with N = 1 and 64-byte aligned pieces, the producers write into the Concat's
// output (nested for the Concat of a Concat) and results equal heap runs bitwise; with N = 2 or
// unaligned pieces the Concats copy as before.
TEST(MemoryPlanInPlace, ConcatInputsAreWrittenIntoTheOutput) {
  SessionOptions heap = no_fusion();
  heap.memory_plan = false;
  auto a = open(dense_model(), no_fusion()), h = open(dense_model(), heap);
  const Graph& g = *session_model(*a).graph;
  MemoryPlan p = build_memory_plan(g, std::vector<std::pair<DType, Shape>>{{DType::Float, {1, 4, 16, 16}}}, 2, 0, 0);
  EXPECT_EQ(p.concat_in_place, 2);
  auto off = [&](const char* name) { return p.value_slot[size_t(value_id(g, name))].offset; };
  const uint64_t piece = 4 * 16 * 16 * 4;  // one 4-channel tensor
  EXPECT_EQ(off("cat1"), off("cat2"));
  EXPECT_EQ(off("r0"), off("cat2"));
  EXPECT_EQ(off("c0"), off("cat2"));  // r0 is Relu in place over c0
  EXPECT_EQ(off("a"), off("cat2") + piece);
  EXPECT_EQ(off("b"), off("cat2") + 2 * piece);
  for (auto [n, hh, ww, in_place] : std::vector<std::tuple<int64_t, int64_t, int64_t, int>>{
           {1, 8, 8, 2}, {1, 16, 16, 2}, {1, 17, 5, 0}, {2, 8, 8, 0}}) {
    EXPECT_EQ(a->plan_memory({{"x", {n, 4, hh, ww}}}).concat_in_place, in_place) << n << "x" << hh << "x" << ww;
    Tensor x = image(n, hh, ww);
    auto ya = a->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
    EXPECT_TRUE(same(ya[0].tensor, yh[0].tensor)) << n << "x" << hh << "x" << ww;
    EXPECT_EQ(a->memory_stats().heap_fallbacks, 0u);
  }
}

// The contract's guard: a zero-filled request (KernelContext::output) for an in-place slot would
// wipe the input before the kernel read it, so it is refused (heap, counted); output_uninit gets it.
TEST(MemoryPlanInPlace, ZeroFilledRequestForAnInPlaceSlotIsRefused) {
  auto s = open(eltwise_model(), no_fusion());
  const Graph& g = *session_model(*s).graph;
  std::vector<std::pair<DType, Shape>> sig = {{DType::Float, {1, 4, 8, 8}}};
  MemoryPlan p = build_memory_plan(g, sig, 2, 0, 0);
  std::vector<char> mem(size_t(p.arena_bytes) + 64);
  ArenaRun ar;
  ar.plan = &p;
  ar.graph = &g;
  ar.base = mem.data();
  ar.size = p.arena_bytes;
  const Node* relu = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == "Relu") relu = &n;
  ASSERT_NE(relu, nullptr);
  const Shape shape = {1, 4, 8, 8};
  EXPECT_EQ(ar.output(*relu, 0, DType::Float, shape, /*zero=*/true), nullptr);
  EXPECT_EQ(ar.fallbacks, 1u);
  EXPECT_EQ(ar.output(*relu, 0, DType::Float, shape, /*zero=*/false),
            mem.data() + p.value_slot[size_t(value_id(g, "c1"))].offset);
}

// ---------------------------------------------------------------------------------------------
// The bounded pool for tensors whose size depends on data.

namespace {

// x [4,4] float -> NonZero -> nz [2,K] -> Transpose -> t [K,2] -> ReduceSum(axes 0) -> y [2]:
// the sums of the row and of the column indices of the nonzero elements. nz and t have
// data-dependent sizes: they come from the session's pool.
std::string nonzero_model(int64_t side = 4) {
  return model({node("NonZero", {"x"}, {"nz"}), node("Transpose", {"nz"}, {"t"}, {attr_ints("perm", {1, 0})}),
                node("ReduceSum", {"t", "ax"}, {"y"}, {attr_int("keepdims", 0)})},
               {value_info("x", kFloat, {side, side})}, {value_info("y", kInt64, {2})}, {int64s("ax", {0})});
}

// Nonzero where (i * 7 + j * 3) % mod == 0, and the expected y.
Tensor pattern(int64_t side, int64_t mod, int64_t* rows, int64_t* cols) {
  Tensor x(DType::Float, {side, side});
  *rows = *cols = 0;
  for (int64_t i = 0; i < side; ++i)
    for (int64_t j = 0; j < side; ++j)
      if ((i * 7 + j * 3) % mod == 0) {
        x.data<float>()[i * side + j] = 1.5f;
        *rows += i;
        *cols += j;
      }
  return x;
}

}  // namespace

TEST(DynamicPool, SizeClassesAndBound) {
  EXPECT_EQ(DynamicPool::size_class(1), 64u);
  EXPECT_EQ(DynamicPool::size_class(200), 256u);
  EXPECT_EQ(DynamicPool::size_class(1025), 1280u);  // 1.25 x 1024
  EXPECT_EQ(DynamicPool::size_class(1280), 1280u);
  for (uint64_t b : {300u, 5000u, 70000u, 1000000u}) {
    uint64_t c = DynamicPool::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LT(c, b + b / 4 + 4096) << b;  // under a quarter wasted (plus page rounding)
  }
  auto p = std::make_shared<DynamicPool>(4096);
  uint64_t a0 = allocation_count();
  {
    auto b1 = p->acquire(1000), b2 = p->acquire(3000);
    EXPECT_EQ(p->stats().misses, 2u);
    EXPECT_EQ(p->stats().in_use_bytes, b1.bytes + b2.bytes);
  }
  // b1 (1024) and b2 (3072) went back; together they fit the 4096-byte bound.
  DynamicPool::Stats st = p->stats();
  EXPECT_EQ(st.idle_bytes, 1024u + 3072u);
  EXPECT_EQ(st.in_use_bytes, 0u);
  { auto b = p->acquire(1000); }  // a hit: no allocation
  EXPECT_EQ(p->stats().hits, 1u);
  EXPECT_EQ(allocation_count() - a0, 2u);
  // A smaller request takes an idle block up to twice its class (2048 -> the 3072 block), not a
  // larger one: 320 bytes do not take the 1024 block.
  {
    auto b = p->acquire(2000);
    EXPECT_EQ(b.bytes, 3072u);
    EXPECT_EQ(p->stats().hits, 2u);
  }
  {
    auto b = p->acquire(300);
    EXPECT_EQ(b.bytes, 320u);
    EXPECT_EQ(p->stats().misses, 3u);
  }
  EXPECT_EQ(allocation_count() - a0, 3u);
  { auto b = p->acquire(4000); }  // 4096: a miss; older idle blocks go to stay in bound
  st = p->stats();
  EXPECT_LE(st.idle_bytes, 4096u);
  EXPECT_GE(st.frees, 1u);
  { auto b = p->acquire(10000); }  // larger than the bound: freed when it comes back
  EXPECT_LE(p->stats().idle_bytes, 4096u);
  p->trim(0);
  EXPECT_EQ(p->stats().idle_bytes, 0u);
  // A block may outlive its pool: it is then freed by its last holder.
  auto b = p->acquire(100000);
  std::memset(b.data, 1, 100000);
  p.reset();
  b.keep.reset();
}

// Acceptance (c) for data-dependent tensors: repeated runs reuse the pool's blocks (hits grow,
// misses do not) and allocate nothing new; the output is written into the caller's tensor.
TEST(DynamicPool, RepeatedRunsReuseBlocksAndAllocateNothing) {
  auto s = open(nonzero_model());
  int64_t rs = 0, cs = 0;
  Tensor x = pattern(4, 2, &rs, &cs);
  MemoryPlanReport r = s->plan_memory({{"x", {4, 4}}});
  EXPECT_GE(r.dynamic_values.size(), 2u);
  Tensor y(DType::Int64, {2});
  s->run_into({{"x", Value(x)}}, {{"y", y}});
  EXPECT_EQ(y.data<int64_t>()[0], rs);
  EXPECT_EQ(y.data<int64_t>()[1], cs);
  MemoryStats m1 = s->memory_stats();
  EXPECT_GE(m1.dynamic_pool_misses, 2u);  // nz and t
  EXPECT_EQ(m1.dynamic_pool_in_use_bytes, 0u);
  EXPECT_GT(m1.dynamic_pool_held_bytes, 0u);
  for (int rep = 1; rep <= 3; ++rep) {
    y.data<int64_t>()[0] = y.data<int64_t>()[1] = -1;
    uint64_t before = allocation_count();
    s->run_into({{"x", Value(x)}}, {{"y", y}});
    EXPECT_EQ(allocation_count() - before, 0u) << "run " << rep;
    EXPECT_EQ(y.data<int64_t>()[0], rs);
    EXPECT_EQ(y.data<int64_t>()[1], cs);
    MemoryStats m = s->memory_stats();
    EXPECT_EQ(m.dynamic_pool_misses, m1.dynamic_pool_misses);
    EXPECT_EQ(m.dynamic_pool_hits, uint64_t(rep) * m1.dynamic_pool_misses);
    EXPECT_EQ(m.dynamic_pool_held_bytes, m1.dynamic_pool_held_bytes);
  }
  // Other data, other sizes: correct results, and the pool stays within its bound.
  for (int64_t mod : {1, 3, 5}) {
    Tensor x2 = pattern(4, mod, &rs, &cs);
    auto out = s->run({{"x", Value(x2)}});
    EXPECT_EQ(out[0].tensor.data<int64_t>()[0], rs) << mod;
    EXPECT_EQ(out[0].tensor.data<int64_t>()[1], cs) << mod;
  }
  MemoryStats m = s->memory_stats();
  EXPECT_LE(m.dynamic_pool_held_bytes, s->options().dynamic_pool_bytes);
  EXPECT_GE(m.dynamic_pool_peak_bytes, m.dynamic_pool_held_bytes);
}

TEST(DynamicPool, BoundIsRespected) {
  for (uint64_t bound : {uint64_t(0), uint64_t(300), uint64_t(2000)}) {
    SessionOptions o;
    o.dynamic_pool_bytes = bound;
    auto s = open(nonzero_model(16), o);
    for (int64_t mod : {1, 2, 3, 1, 2, 3}) {
      int64_t rs = 0, cs = 0;
      {
        auto out = s->run({{"x", Value(pattern(16, mod, &rs, &cs))}});
        EXPECT_EQ(out[0].tensor.data<int64_t>()[0], rs);
        EXPECT_GT(s->memory_stats().dynamic_pool_in_use_bytes, 0u);  // the output's block
      }
      MemoryStats m = s->memory_stats();
      EXPECT_LE(m.dynamic_pool_held_bytes, bound) << "bound " << bound;
      EXPECT_EQ(m.dynamic_pool_in_use_bytes, 0u);
    }
    MemoryStats m = s->memory_stats();
    if (bound == 0) {
      EXPECT_EQ(m.dynamic_pool_hits, 0u);
      EXPECT_EQ(m.dynamic_pool_frees, m.dynamic_pool_misses);  // every block went back to the OS
    }
  }
}

// The memory limit counts the pool's blocks: a run whose data-dependent tensors exceed it fails
// with MemoryLimit, and the session then runs smaller data.
TEST(DynamicPool, MemoryLimitCountsPoolTensors) {
  const int64_t side = 256;  // all nonzero: nz and t are 2 * 65536 int64 = 1 MiB each
  auto probe = open(nonzero_model(side));
  uint64_t peak = probe->plan_memory({{"x", {side, side}}}).peak_bytes;
  SessionOptions o;
  o.memory_limit = peak + (uint64_t(3) << 19);  // 1.5 MiB beyond the plan: nz fits, nz + t does not
  auto s = open(nonzero_model(side), o);
  Tensor full(DType::Float, {side, side});
  for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = 1.0f;
  try {
    s->run({{"x", Value(full)}});
    ADD_FAILURE() << "no MemoryLimit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::MemoryLimit) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(o.memory_limit)), std::string::npos) << e.what();
  }
  EXPECT_LE(s->memory_stats().dynamic_pool_held_bytes + peak, o.memory_limit);
  int64_t rs = 0, cs = 0;
  auto out = s->run({{"x", Value(pattern(side, 5, &rs, &cs))}});  // a fifth nonzero: fits
  EXPECT_EQ(out[0].tensor.data<int64_t>()[0], rs);
  EXPECT_EQ(out[0].tensor.data<int64_t>()[1], cs);
}

// Concurrent runs share the pool (and each has its own arena): results stay right.
TEST(DynamicPool, ConcurrentRunsShareThePool) {
  auto s = open(nonzero_model(16));
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        int64_t rs = 0, cs = 0;
        Tensor x = pattern(16, 1 + (t + i) % 4, &rs, &cs);
        auto out = s->run({{"x", Value(x)}});
        if (out[0].tensor.data<int64_t>()[0] != rs || out[0].tensor.data<int64_t>()[1] != cs) ++wrong;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  MemoryStats m = s->memory_stats();
  EXPECT_EQ(m.dynamic_pool_in_use_bytes, 0u);
  EXPECT_GT(m.dynamic_pool_hits, m.dynamic_pool_misses);
  EXPECT_LE(m.dynamic_pool_held_bytes, s->options().dynamic_pool_bytes);
}

namespace {

// x [4] -> Loop (5 iterations; body: s2 = s + one, sc = s2 * s2 scanned) -> final [4], scans [5,4].
// Every tensor inside the body comes from the pool.
// With neg_of_scans the scan output feeds a Neg whose output "y" is the second graph output.
std::string loop_model(bool neg_of_scans = false) {
  Pb body;
  body.m(1, node("Identity", {"cin"}, {"cout"}));
  body.m(1, node("Add", {"s", "one"}, {"s2"}));
  body.m(1, node("Mul", {"s2", "s2"}, {"sc"}));
  body.s(2, "body");
  body.m(11, value_info("i", kInt64, {})).m(11, value_info("cin", 9, {})).m(11, value_info("s", kFloat, {4}));
  body.m(12, value_info("cout", 9, {})).m(12, value_info("s2", kFloat, {4})).m(12, value_info("sc", kFloat, {4}));
  Pb g;
  g.s(1, "body").m(6, body).u(20, 5);  // GRAPH
  int64_t five = 5;
  std::vector<Pb> nodes = {node("Loop", {"M", "c0", "x"}, {"final", "scans"}, {g})};
  if (neg_of_scans) nodes.push_back(node("Neg", {"scans"}, {"y"}));
  return model(nodes, {value_info("x", kFloat, {4})},
               {value_info("final", kFloat, {4}), value_info(neg_of_scans ? "y" : "scans", kFloat, {5, 4})},
               {tensor("M", kInt64, {}, std::string(reinterpret_cast<const char*>(&five), 8)),
                tensor("c0", 9, {}, std::string(1, '\1')), floats("one", {4}, 0.f)});
}

}  // namespace

// Tensors made inside a Loop body come from the pool: after the first run, repeated runs hit.
TEST(DynamicPool, LoopBodyTensorsAreReused) {
  auto s = open(loop_model(), no_fusion());
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4});
  auto y0 = s->run({{"x", Value(x)}});
  MemoryStats m1 = s->memory_stats();
  EXPECT_GT(m1.dynamic_pool_misses, 0u);
  for (int rep = 0; rep < 3; ++rep) {
    auto y = s->run({{"x", Value(x)}});
    EXPECT_TRUE(same(y[0].tensor, y0[0].tensor));
    EXPECT_TRUE(same(y[1].tensor, y0[1].tensor));
  }
  MemoryStats m = s->memory_stats();
  // y0 keeps its two output blocks: the first repeat takes two new ones, later repeats reuse them.
  EXPECT_EQ(m.dynamic_pool_misses, m1.dynamic_pool_misses + 2);
  EXPECT_GT(m.dynamic_pool_hits, m1.dynamic_pool_hits);
  // 'one' is all zeros (floats() with scale 0): final = x, scans[k] = x * x.
  ASSERT_EQ(y0[1].tensor.shape(), (Shape{5, 4}));
  EXPECT_EQ(y0[1].tensor.data<float>()[19], 16.f);
  EXPECT_GT(m.dynamic_pool_in_use_bytes, 0u);
  y0.clear();
  EXPECT_EQ(s->memory_stats().dynamic_pool_in_use_bytes, 0u);
}

// A Loop's stacked scan output is made through the kernel context (not a plain heap tensor), and
// the iteration number and condition fed to the body are rewritten in place between iterations.
// With the outputs bound, a repeated run allocates only the first iteration's two scalars (8 and
// 1 bytes), not one block per iteration (it was 2 per iteration + 1 for the stacked output).
TEST(DynamicPool, LoopAllocatesNothingPerIteration) {
  auto s = open(loop_model(true), no_fusion());
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4});
  Tensor fin(DType::Float, {4}), y(DType::Float, {5, 4});
  s->run_into({{"x", Value(x)}}, {{"final", fin}, {"y", y}});
  for (int rep = 1; rep <= 3; ++rep) {
    y.data<float>()[19] = 0.f;
    uint64_t before = allocation_count();
    s->run_into({{"x", Value(x)}}, {{"final", fin}, {"y", y}});
    EXPECT_LE(allocation_count() - before, 2u) << "run " << rep;
    EXPECT_EQ(y.data<float>()[19], -16.f);  // 'one' is zeros: scans[k] = x * x
    EXPECT_EQ(fin.data<float>()[3], 4.f);
  }
}

// ---------------------------------------------------------------------------------------------
// The in-place contract, checked kernel by kernel: every op in_place_inputs lists must give
// bitwise the same result when its output overwrites its input as when it does not. Shapes are
// large and odd enough to split over threads and to leave SIMD tails. A kernel changed later so
// that it reads an input element after writing the output fails here.

namespace {

std::string model_opset(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& outputs,
                        const std::vector<Pb>& inits, int opset) {
  std::string m = model(nodes, inputs, outputs, inits);
  // model() writes opset 17 as the last bytes (u(2, 17) inside the opset import): patch it.
  Pb op17, opn;
  op17.s(1, "").u(2, 17);
  opn.s(1, "").u(2, uint64_t(opset));
  Pb a, b;
  a.m(8, op17);
  b.m(8, opn);
  size_t at = m.rfind(a.b);
  if (at != std::string::npos) m.replace(at, a.b.size(), b.b);
  return m;
}

Pb attr_float(const std::string& name, float v) {
  Pb a;
  a.s(1, name);
  a.varint((2 << 3) | 5);  // f: fixed32
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  for (int k = 0; k < 4; ++k) a.b.push_back(char((bits >> (8 * k)) & 0xFF));
  a.u(20, 1);  // FLOAT
  return a;
}

Pb attr_str(const std::string& name, const std::string& v) {
  Pb a;
  a.s(1, name).s(4, v).u(20, 3);  // STRING
  return a;
}

struct InPlaceCase {
  std::string name;
  Pb op;                  // reads "a" (and constants), writes "b"
  std::vector<Pb> inits;  // its constants
};

}  // namespace

TEST(MemoryPlanInPlace, EveryListedKernelIsSafeInPlace) {
  const int64_t N = 2, C = 6, H = 37, W = 301;  // 133164 elements: several chunks, odd rows
  std::vector<InPlaceCase> cases;
  for (const char* op : {"Relu", "Sigmoid", "HardSwish", "Tanh", "Exp", "Sqrt", "Erf", "Reciprocal", "Abs", "Neg"})
    cases.push_back({op, node(op, {"a"}, {"b"}), {}});
  cases.push_back({"LeakyRelu", node("LeakyRelu", {"a"}, {"b"}, {attr_float("alpha", 0.3f)}), {}});
  cases.push_back({"HardSigmoid", node("HardSigmoid", {"a"}, {"b"}, {attr_float("alpha", 0.3f)}), {}});
  cases.push_back({"Gelu", node("Gelu", {"a"}, {"b"}), {}});
  cases.push_back({"Gelu tanh", node("Gelu", {"a"}, {"b"}, {attr_str("approximate", "tanh")}), {}});
  // Swish is listed too, but shape inference has no rule for it yet (its output is dynamic, so
  // it never gets a slot to share).
  cases.push_back({"Clip", node("Clip", {"a", "lo", "hi"}, {"b"}), {floats("lo", {}, 0.05f), floats("hi", {}, 0.1f)}});
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    cases.push_back({std::string(op) + " full,bcast", node(op, {"a", "k"}, {"b"}), {floats("k", {C, 1, 1}, 0.3f)}});
    cases.push_back({std::string(op) + " bcast,full", node(op, {"k", "a"}, {"b"}), {floats("k", {1, W}, 0.3f)}});
    cases.push_back({std::string(op) + " full,full", node(op, {"a", "k"}, {"b"}), {floats("k", {N, C, H, W}, 0.01f)}});
    cases.push_back({std::string(op) + " scalar", node(op, {"a", "k"}, {"b"}), {floats("k", {}, 0.7f)}});
  }
  cases.push_back({"BatchNormalization", node("BatchNormalization", {"a", "sc", "bi", "mu", "var"}, {"b"}),
                   {floats("sc", {C}, 0.2f), floats("bi", {C}, 0.1f), floats("mu", {C}, 0.05f), floats("var", {C}, 0.f)}});
  cases.push_back({"Softmax", node("Softmax", {"a"}, {"b"}, {attr_int("axis", -1)}), {}});
  cases.push_back({"LogSoftmax", node("LogSoftmax", {"a"}, {"b"}, {attr_int("axis", 3)}), {}});
  cases.push_back({"LayerNormalization", node("LayerNormalization", {"a", "g", "be"}, {"b"}, {attr_int("axis", -1)}),
                   {floats("g", {W}, 0.1f), floats("be", {W}, 0.05f)}});
  cases.push_back({"LayerNormalization no beta", node("LayerNormalization", {"a", "g"}, {"b"}, {attr_int("axis", 2)}),
                   {floats("g", {H, W}, 0.1f)}});

  Tensor x(DType::Float, {N, C, H, W});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  // BatchNormalization's var must be positive: floats() with scale 0 gives 0; eps keeps it finite.
  for (const InPlaceCase& c : cases) {
    SCOPED_TRACE(c.name);
    // x -> Mul(x, one) -> a (an arena tensor) -> op -> b (in place over a) -> Identity-free tail:
    // Mul(b, one) -> y (a graph output). `one` is a [1] constant of 1.0.
    std::vector<Pb> inits = c.inits;
    Pb one = tensor("one", kFloat, {1}, std::string("\0\0\x80\x3f", 4));
    inits.push_back(one);
    std::string m = model_opset({node("Mul", {"x", "one"}, {"a"}), c.op, node("Mul", {"b", "one"}, {"y"})},
                                {value_info("x", kFloat, {N, C, H, W})}, {value_info("y", kFloat, {N, C, H, W})},
                                inits, 24);
    SessionOptions in_place = no_fusion(), heap = no_fusion();
    heap.memory_plan = false;
    auto s = open(m, in_place), h = open(m, heap);
    const Graph& g = *session_model(*s).graph;
    MemoryPlan p = build_memory_plan(g, std::vector<std::pair<DType, Shape>>{{DType::Float, {N, C, H, W}}}, 2, 0, 0);
    int b = value_id(g, "b");
    ASSERT_GE(b, 0);
    EXPECT_EQ(p.in_place_of[size_t(b)], value_id(g, "a")) << "the op does not run in place";
    auto ys = s->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
    EXPECT_TRUE(same(ys[0].tensor, yh[0].tensor)) << "in-place result differs";
    EXPECT_EQ(s->memory_stats().heap_fallbacks, 0u);
  }
}

// An input that is a view (Reshape of an arena tensor) is written over like the tensor it views.
TEST(MemoryPlanInPlace, ViewInputsShareTheirStorage) {
  std::string m = model({node("Conv", {"x", "w1"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})}),
                         node("Reshape", {"c", "flat"}, {"rs"}), node("Sigmoid", {"rs"}, {"sg"}),
                         node("Reshape", {"sg", "back"}, {"sb"}),
                         node("Conv", {"sb", "w2"}, {"y"}, {attr_ints("pads", {1, 1, 1, 1})})},
                        {value_info("x", kFloat, {1, 4, 8, 8})}, {value_info("y", kFloat, {1, 4, 8, 8})},
                        {floats("w1", {4, 4, 3, 3}, 0.05f), floats("w2", {4, 4, 3, 3}, 0.04f), int64s("flat", {1, 4, 64}),
                         int64s("back", {1, 4, 8, 8})});
  auto s = open(m, no_fusion());
  const Graph& g = *session_model(*s).graph;
  MemoryPlan p = build_memory_plan(g, std::vector<std::pair<DType, Shape>>{{DType::Float, {1, 4, 8, 8}}}, 2, 0, 0);
  ASSERT_GE(value_id(g, "sg"), 0);
  EXPECT_EQ(p.in_place_of[size_t(value_id(g, "sg"))], value_id(g, "rs"));
  EXPECT_EQ(p.value_slot[size_t(value_id(g, "sg"))].offset, p.value_slot[size_t(value_id(g, "c"))].offset);
  SessionOptions heap = no_fusion();
  heap.memory_plan = false;
  auto h = open(m, heap);
  Tensor x = image(1, 8, 8);
  auto ya = s->run({{"x", Value(x)}}), yh = h->run({{"x", Value(x)}});
  EXPECT_TRUE(same(ya[0].tensor, yh[0].tensor));
  EXPECT_EQ(s->memory_stats().heap_fallbacks, 0u);
  EXPECT_EQ(s->memory_stats().unplanned_alias_runs, 0u);
}

// What a cached plan keeps is counted from its own blocks: at least its slots and packed shapes,
// and the cache's byte figure is the sum over the plans it holds.
TEST(MemoryPlan, HeldBytesCountWhatThePlanKeeps) {
  auto s = open(conv_model());
  s->run({{"x", Value(image(1, 8, 8))}});
  const uint64_t one = s->memory_stats().plan_cache_bytes;
  s->run({{"x", Value(image(1, 12, 8))}});
  const uint64_t two = s->memory_stats().plan_cache_bytes;
  EXPECT_GT(one, sizeof(MemoryPlan));
  EXPECT_NEAR(double(two), 2.0 * double(one), 0.2 * double(one));  // two plans of one graph
  Graph g;
  MemoryPlan p;
  p.value_slot.resize(100);
  p.dims.resize(400);
  p.held_bytes = p.compute_held_bytes();
  EXPECT_GE(p.held_bytes, 100 * sizeof(MemoryPlan::Slot) + 400 * sizeof(int64_t) + sizeof(MemoryPlan));
  EXPECT_LE(p.held_bytes, 100 * sizeof(MemoryPlan::Slot) + 400 * sizeof(int64_t) + sizeof(MemoryPlan) + 256);
}
