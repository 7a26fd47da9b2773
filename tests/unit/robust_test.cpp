// Robustness tests (issue 9): concurrent runs and session churn, models that claim enormous
// tensors, deeply nested subgraphs, huge graphs and huge attributes. Each test is bounded to a
// few seconds. Models are written with a tiny protobuf encoder below, so the tests need no
// Python and no files.
#include <basalt/basalt.hpp>
#include <gtest/gtest.h>

#include "pb_writer.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/sysinfo.h>

using namespace basalt;

namespace {

// Prefix + number (or string), written as an append: GCC 12 gives a false -Wrestrict warning for
// const char* + std::string&&.
std::string nm(const char* prefix, int64_t i) {
  std::string r(prefix);
  r += std::to_string(i);
  return r;
}
std::string nm(const char* prefix, const std::string& rest) {
  std::string r(prefix);
  r += rest;
  return r;
}

using test::Pb;

constexpr int kFloat = 1, kInt64 = 7, kBool = 9;

// ValueInfoProto of a tensor; a negative dim is symbolic ("d0", "d1", ...).
Pb value_info(const std::string& name, int elem, const std::vector<int64_t>& dims, bool with_shape = true) {
  Pb shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    Pb d;
    if (dims[i] < 0) d.s(2, nm("d", i));
    else d.u(1, uint64_t(dims[i]));
    shape.m(1, d);
  }
  Pb tt;
  tt.u(1, uint64_t(elem));
  if (with_shape) tt.m(2, shape);
  Pb type;
  type.m(1, tt);
  return Pb().s(1, name).m(2, type);
}

Pb node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
        const std::string& name, const std::vector<Pb>& attrs = {}) {
  return test::onnx_node(op, in, out, name, attrs);
}

Pb tensor_int64(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& vals) {
  Pb t;
  for (auto d : dims) t.u(1, uint64_t(d));
  t.u(2, kInt64).s(8, name);
  std::string raw(vals.size() * 8, '\0');
  std::memcpy(raw.data(), vals.data(), raw.size());
  t.s(9, raw);
  return t;
}

Pb tensor_float(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& vals) {
  Pb t;
  for (auto d : dims) t.u(1, uint64_t(d));
  t.u(2, kFloat).s(8, name);
  std::string raw(vals.size() * 4, '\0');
  std::memcpy(raw.data(), vals.data(), raw.size());
  t.s(9, raw);
  return t;
}

Pb graph(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& outputs,
         const std::vector<Pb>& inits = {}, const std::string& name = "g") {
  Pb g;
  for (auto& n : nodes) g.m(1, n);
  g.s(2, name);
  for (auto& t : inits) g.m(5, t);
  for (auto& i : inputs) g.m(11, i);
  for (auto& o : outputs) g.m(12, o);
  return g;
}

std::string model(const Pb& g, int opset = 17) {
  Pb op;
  op.s(1, "").u(2, uint64_t(opset));
  Pb m;
  m.u(1, 8).m(7, g).m(8, op);
  return m.b;
}

std::unique_ptr<Session> open_bytes(const std::string& bytes) { return Session::from_bytes(bytes.data(), bytes.size()); }

// Expects `f` to throw basalt::Error with `code` and a message containing `text`.
template <class F>
void expect_error(F&& f, ErrorCode code, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// y = Softmax(Relu(x @ W + b)), x: [N, 8] with N symbolic.
std::string mlp_model() {
  std::vector<float> w(64), bias(8);
  for (int i = 0; i < 64; ++i) w[size_t(i)] = float((i * 37) % 17 - 8) / 8.0f;
  for (int i = 0; i < 8; ++i) bias[size_t(i)] = float(i) / 10.0f;
  return model(graph({node("MatMul", {"x", "W"}, {"h"}, "mm"), node("Add", {"h", "b"}, {"a"}, "add"),
                      node("Relu", {"a"}, {"r"}, "relu"), node("Softmax", {"r"}, {"y"}, "softmax")},
                     {value_info("x", kFloat, {-1, 8})}, {value_info("y", kFloat, {-1, 8})},
                     {tensor_float("W", {8, 8}, w), tensor_float("b", {8}, bias)}));
}

Tensor input_rows(int64_t n) {
  Tensor x(DType::Float, {n, 8});
  for (int64_t i = 0; i < n * 8; ++i) x.data<float>()[i] = float((i * 13) % 11) / 3.0f - 1.5f;
  return x;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

uint64_t machine_memory() {
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return 0;
  return (uint64_t(si.totalram) + uint64_t(si.totalswap)) * si.mem_unit;
}

}  // namespace

// ---- concurrency

// 8 threads run one session with different batch sizes for ~1.5 s; every result must equal the
// single-threaded result for that batch size, bit for bit.
TEST(Robust, EightThreadsOneSessionMatchSingleThreaded) {
  auto s = open_bytes(mlp_model());
  std::vector<Tensor> ref;
  for (int64_t n = 1; n <= 8; ++n) ref.push_back(s->run({{"x", Value(input_rows(n))}})[0].tensor);
  std::atomic<int> mismatches{0}, runs{0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  std::vector<std::thread> th;
  for (int t = 0; t < 8; ++t)
    th.emplace_back([&, t] {
      for (int rep = 0; std::chrono::steady_clock::now() < deadline; ++rep) {
        int64_t n = (rep + t) % 8 + 1;
        auto out = s->run({{"x", Value(input_rows(n))}});
        if (!same(out[0].tensor, ref[size_t(n - 1)])) ++mismatches;
        ++runs;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(runs.load(), 8);
}

// Sessions are created, run and destroyed on some threads while others run a shared session.
TEST(Robust, SessionChurnWhileOtherSessionsRun) {
  const std::string bytes = mlp_model();
  auto shared = open_bytes(bytes);
  Tensor ref = shared->run({{"x", Value(input_rows(3))}})[0].tensor;
  std::atomic<int> mismatches{0}, created{0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      while (std::chrono::steady_clock::now() < deadline) {
        auto own = open_bytes(bytes);
        if (!same(own->run({{"x", Value(input_rows(3))}})[0].tensor, ref)) ++mismatches;
        ++created;
      }
    });
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      while (std::chrono::steady_clock::now() < deadline)
        if (!same(shared->run({{"x", Value(input_rows(3))}})[0].tensor, ref)) ++mismatches;
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(created.load(), 4);
}

// ---- memory pressure: never an OOM kill, always a MemoryLimit error

TEST(Robust, TensorLargerThanMachineMemoryIsRefused) {
  // 500 GB: under the 1 TiB cap, so only the machine-memory check (or a failed allocation)
  // stands between it and an OOM kill while zero-filling.
  const uint64_t bytes = uint64_t(500) << 30;
  if (machine_memory() >= bytes) GTEST_SKIP() << "this machine has more than 500 GiB of memory";
  expect_error([&] { Tensor t(DType::Float, {int64_t(bytes / 4)}); }, ErrorCode::MemoryLimit, "memory");
}

static std::string one_op_on_shape_const(const std::string& op, const std::vector<int64_t>& shape_vals,
                                         int out_elem = kFloat) {
  // shape constant -> op -> y (op-specific other inputs are initializers).
  std::vector<Pb> inits = {tensor_int64("shape", {int64_t(shape_vals.size())}, shape_vals)};
  std::vector<Pb> nodes;
  if (op == "ConstantOfShape") {
    nodes.push_back(node("ConstantOfShape", {"shape"}, {"y"}, "big"));
  } else if (op == "Expand") {
    inits.push_back(tensor_float("one", {1}, {1.0f}));
    nodes.push_back(node("Expand", {"one", "shape"}, {"y"}, "big"));
  } else if (op == "Tile") {
    inits.push_back(tensor_float("one", {1}, {1.0f}));
    nodes.push_back(node("Tile", {"one", "shape"}, {"y"}, "big"));
  }
  return model(graph(nodes, {}, {value_info("y", out_elem, {}, false)}, inits));
}

TEST(Robust, OpsThatClaimEnormousOutputsAreRefused) {
  const int64_t e15 = 1000000000000000;  // 1e15 elements
  for (std::string op : {"ConstantOfShape", "Expand", "Tile"}) {
    SCOPED_TRACE(op);
    expect_error([&] { open_bytes(one_op_on_shape_const(op, {e15}))->run({}); }, ErrorCode::MemoryLimit, "big");
  }
  // Range(0, 1e15, 1) in int64.
  std::string range = model(graph({node("Range", {"a", "b", "c"}, {"y"}, "big")}, {}, {value_info("y", kInt64, {}, false)},
                                  {tensor_int64("a", {}, {0}), tensor_int64("b", {}, {e15}), tensor_int64("c", {}, {1})}));
  try {
    open_bytes(range)->run({});
    ADD_FAILURE() << "Range to 1e15 ran";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::MemoryLimit || e.code() == ErrorCode::Unsupported ||
                e.code() == ErrorCode::InvalidArgument)
        << e.what();
  }
}

TEST(Robust, InitializerClaimingTerabytesIsRefusedAtLoad) {
  Pb t;
  t.u(1, 1000000).u(1, 1000000).u(1, 1000).u(2, kFloat).s(8, "w").s(9, std::string(16, '\0'));
  std::string m = model(graph({node("Identity", {"w"}, {"y"}, "id")}, {}, {value_info("y", kFloat, {}, false)}, {t}));
  try {
    open_bytes(m);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

TEST(Robust, InputShapeBeyondMemoryIsRefusedBeforeRunning) {
  // The caller cannot even build the tensor; the error is MemoryLimit, not a crash.
  expect_error([] { Tensor x(DType::Float, {int64_t(1) << 30, int64_t(1) << 12}); }, ErrorCode::MemoryLimit, "TiB");
}

// ---- deep or huge graphs

static std::string nested_if_model(int depth) {
  Pb inner = graph({node("Identity", {"x"}, {"o0"}, "leaf0")}, {}, {value_info("o0", kFloat, {1})}, {}, "g0");
  for (int d = 1; d <= depth; ++d) {
    std::string o = nm("o", d);
    Pb then_attr, else_attr;
    then_attr.s(1, "then_branch").m(6, inner).u(20, 5);
    Pb leaf = graph({node("Identity", {"x"}, {nm("e", o)}, "leaf")}, {}, {value_info(nm("e", o), kFloat, {1})}, {}, "e");
    else_attr.s(1, "else_branch").m(6, leaf).u(20, 5);
    inner = graph({node("If", {"c"}, {o}, nm("if", d), {then_attr, else_attr})}, {},
                  {value_info(o, kFloat, {1})}, {}, nm("g", d));
  }
  // Top level: the nested If chain with real inputs.
  Pb top;
  top.b = inner.b;
  top.m(11, value_info("c", kBool, {})).m(11, value_info("x", kFloat, {1}));
  return model(top);
}

TEST(Robust, NestingLimitIsStatedAndDeepNestingDoesNotOverflowTheStack) {
  // Within the limit: loads and runs (c = true takes the deep branch every time).
  auto s = open_bytes(nested_if_model(30));
  Tensor c = Tensor::scalar<bool>(true);
  Tensor x(DType::Float, {1});
  x.data<float>()[0] = 4.5f;
  auto out = s->run({{"c", Value(c)}, {"x", Value(x)}});
  EXPECT_EQ(out[0].tensor.data<float>()[0], 4.5f);
  // Beyond it, and far beyond it: refused with the stated limit, no stack overflow.
  for (int depth : {65, 2000}) {
    SCOPED_TRACE(depth);
    expect_error([&] { open_bytes(nested_if_model(depth)); }, ErrorCode::InvalidModel, "nested deeper than 64");
  }
}

TEST(Robust, HundredThousandNodeChainLoadsAndRunsQuickly) {
  const int n = 100000;
  std::vector<Pb> nodes;
  nodes.reserve(n);
  // Nodes in reverse order, so the loader has to sort them.
  for (int i = n - 1; i >= 0; --i)
    nodes.push_back(node("Relu", {i ? nm("t", i - 1) : "x"}, {i == n - 1 ? "y" : nm("t", i)},
                         nm("n", i)));
  std::string m = model(graph(nodes, {value_info("x", kFloat, {4})}, {value_info("y", kFloat, {4})}));
  auto t0 = std::chrono::steady_clock::now();
  auto s = open_bytes(m);
  Tensor x(DType::Float, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = float(i) - 1.5f;
  auto out = s->run({{"x", Value(x)}});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out[0].tensor.data<float>()[0], 0.0f);
  EXPECT_EQ(out[0].tensor.data<float>()[3], 1.5f);
  // Linear work is well under a second in Release; quadratic would be minutes. Generous bound
  // for sanitizer builds and busy machines.
  EXPECT_LT(secs, 30.0) << "100k-node chain took " << secs << " s";
  std::printf("100k-node chain: load + run %.2f s\n", secs);
}

// 50k parallel two-node chains: 50k nodes are ready at once during the topological sort. The
// loader used to re-sort its ready list after every push (quadratic: minutes); now a heap.
TEST(Robust, WideGraphLoadsQuickly) {
  const int n = 50000;
  std::vector<Pb> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back(node("Relu", {"x"}, {nm("a", i)}, nm("a", i)));
  for (int i = 0; i < n; ++i)
    nodes.push_back(node("Neg", {nm("a", i)}, {nm("b", i)}, nm("b", i)));
  std::string m = model(graph(nodes, {value_info("x", kFloat, {1})}, {value_info(nm("b", n - 1), kFloat, {1})}));
  auto t0 = std::chrono::steady_clock::now();
  auto s = open_bytes(m);
  Tensor x(DType::Float, {1});
  x.data<float>()[0] = 2.0f;
  auto out = s->run({{"x", Value(x)}});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out[0].tensor.data<float>()[0], -2.0f);
  EXPECT_LT(secs, 30.0) << "100k-node wide graph took " << secs << " s";
  std::printf("100k-node wide graph: load + run %.2f s\n", secs);
}

TEST(Robust, HugeAttributesRunOrAreRefused) {
  // Transpose with a 1M-entry perm on a rank-2 input: refused (perm must match the rank).
  Pb perm;
  perm.s(1, "perm").u(20, 7);
  {
    Pb tmp;
    for (int i = 0; i < 1000000; ++i) tmp.varint(uint64_t(i));
    perm.s(8, tmp.b);  // packed repeated int64
  }
  std::string m = model(graph({node("Transpose", {"x"}, {"y"}, "tr", {perm})}, {value_info("x", kFloat, {2, 3})},
                              {value_info("y", kFloat, {}, false)}));
  try {
    auto s = open_bytes(m);
    s->run({{"x", Value(Tensor(DType::Float, {2, 3}))}});
    ADD_FAILURE() << "ran a 1M-entry perm on a rank-2 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tr"), std::string::npos) << e.what();
  }
}
