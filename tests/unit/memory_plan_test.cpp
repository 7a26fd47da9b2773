// Memory plan tests (issue 4): the offset planner, shape inference, arena runs (no new
// allocations on repeated shapes, same results as heap runs), the plan cache bounds and
// counters, and the memory limit. Models are written with a tiny protobuf encoder below.
#include <basalt/basalt.hpp>
#include <gtest/gtest.h>

#include "runtime/planner.hpp"

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace basalt;

namespace {

struct Pb {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(char(v | 0x80));
      v >>= 7;
    }
    b.push_back(char(v));
  }
  Pb& u(int field, uint64_t v) {
    varint(uint64_t(field) << 3);
    varint(v);
    return *this;
  }
  Pb& s(int field, const std::string& v) {
    varint((uint64_t(field) << 3) | 2);
    varint(v.size());
    b += v;
    return *this;
  }
  Pb& m(int field, const Pb& v) { return s(field, v.b); }
};

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

Pb node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
        const std::vector<Pb>& attrs = {}) {
  Pb n;
  for (auto& i : in) n.s(1, i);
  for (auto& o : out) n.s(2, o);
  n.s(3, out[0] + "_node").s(4, op);
  for (auto& a : attrs) n.m(5, a);
  return n;
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
    EXPECT_EQ(allocs, 1u) << "run " << rep << ": one allocation (the returned output) expected";
  }
  MemoryStats m = s->memory_stats();
  EXPECT_EQ(m.arena_maps, 1u);
  EXPECT_EQ(m.plan_cache_misses, 1u);
  EXPECT_EQ(m.plan_cache_hits, 3u);
  // A smaller shape reuses the larger arena: no new mapping.
  s->run({{"x", Value(image(1, 8, 8))}});
  EXPECT_EQ(s->memory_stats().arena_maps, 1u);
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

  // A byte bound: each plan's arena counts; the cache never holds more.
  SessionOptions ob;
  ob.plan_cache_bytes = open(conv_model())->plan_memory({{"x", {1, 4, 16, 16}}}).arena_bytes * 5 / 2;
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
