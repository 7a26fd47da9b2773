// Misaligned weights (issue 4; contract in src/onnx/tensor_proto.hpp). protobuf places raw_data at
// any byte offset, so a weight in the mapped file is often not aligned for its element type. A
// large one stays in place when every reader copies it bytewise (Gather's data input), and counts
// in weights_in_place_bytes; any other reader gets an aligned copy, so no kernel makes a typed load
// from a misaligned address (UBSan's alignment check in CI). The models below are written by hand
// with their raw_data placed at a chosen misaligned offset, and the tests check that it is.
#include <basalt/basalt.hpp>
#include <gtest/gtest.h>

#include "pb_writer.hpp"

#include "ops/kernel.hpp"
#include "graph/model.hpp"
#include "core/storage.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace basalt;

namespace {

using test::Pb;

constexpr int kFloat = 1, kInt64 = 7;

Pb value_info(const std::string& name, int elem, const std::vector<int64_t>& dims) {
  Pb shape;
  for (int64_t d : dims) shape.m(1, Pb().u(1, uint64_t(d)));
  Pb tt;
  tt.u(1, uint64_t(elem)).m(2, shape);
  return Pb().s(1, name).m(2, Pb().m(1, tt));
}

Pb attr_int(const std::string& name, int64_t v) { return Pb().s(1, name).u(3, uint64_t(v)).u(20, 2); }

// A node named after its first output.
Pb node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
        const std::vector<Pb>& attrs = {}) {
  return test::onnx_node(op, in, out, out[0] + "_node", attrs);
}

// Distinct values (no two rows alike), so a wrong row or a shifted read shows.
std::vector<float> table_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 9973) * 0.25f - float(i / 9973);
  return v;
}

struct Init {
  std::string name;
  int elem;
  std::vector<int64_t> dims;
  std::string raw;
};

Init float_init(const std::string& name, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  auto v = table_values(n);
  return {name, kFloat, dims, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
}

Init int64_init(const std::string& name, const std::vector<int64_t>& v) {
  return {name, kInt64, {int64_t(v.size())}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8)};
}

std::string model_bytes(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& outputs,
                        const std::vector<Init>& inits, const std::string& graph_name) {
  Pb g;
  for (auto& n : nodes) g.m(1, n);
  g.s(2, graph_name);
  for (auto& t : inits) {
    Pb p;
    for (auto d : t.dims) p.u(1, uint64_t(d));
    p.u(2, uint64_t(t.elem)).s(8, t.name).s(9, t.raw);
    g.m(5, p);
  }
  for (auto& i : inputs) g.m(11, i);
  for (auto& o : outputs) g.m(12, o);
  Pb op;
  op.s(1, "").u(2, 17);
  Pb m;
  m.u(1, 8).m(7, g).m(8, op);
  return m.b;
}

// A model whose first initializer's raw_data starts at a byte offset that is `misalign` past a
// multiple of 8 (the graph name is padded until it is). Offsets in the bytes are offsets from the
// page-aligned mapping (a file) or from basalt's 64-byte-aligned copy (from_bytes).
std::string misaligned_model(const std::vector<Pb>& nodes, const std::vector<Pb>& inputs, const std::vector<Pb>& outputs,
                             const std::vector<Init>& inits, size_t misalign) {
  for (size_t pad = 0; pad < 16; ++pad) {
    std::string b = model_bytes(nodes, inputs, outputs, inits, "g" + std::string(pad, '_'));
    size_t off = b.find(inits[0].raw);
    if (off != std::string::npos && off % 8 == misalign) return b;
  }
  ADD_FAILURE() << "could not place raw_data at offset " << misalign << " mod 8";
  return {};
}

size_t raw_offset(const std::string& model, const Init& w) { return model.find(w.raw); }

std::string write_temp(const std::string& bytes, const std::string& name) {
  std::string path = testing::TempDir() + "basalt_weights_inplace_" + name + ".onnx";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

SessionOptions opts(int level = 3) {
  SessionOptions o;
  o.threads = 2;
  o.optimization_level = level;
  return o;
}

const float* f32(const Value& v) { return v.tensor.data<float>(); }

}  // namespace

// An embedding table [1024, 64] (256 KiB) at an odd offset, read only by Gather: used in place
// (from a file and from bytes), counted in weights_in_place_bytes, and the gathered rows are right.
TEST(WeightsInPlace, MisalignedTableFeedingGatherStaysInPlace) {
  const int64_t rows = 1024, cols = 64;
  Init table = float_init("table", {rows, cols});
  std::string bytes = misaligned_model({node("Gather", {"table", "ids"}, {"y"})}, {value_info("ids", kInt64, {5})},
                                       {value_info("y", kFloat, {5, cols})}, {table}, 1);
  ASSERT_FALSE(bytes.empty());
  ASSERT_NE(raw_offset(bytes, table) % 4, 0u) << "the test needs a misaligned table";
  const std::vector<int64_t> ids = {0, 1023, 7, -1, 512};
  const auto expect = table_values(rows * cols);
  std::string path = write_temp(bytes, "gather");
  for (int from_file = 0; from_file < 2; ++from_file) {
    for (int level : {0, 3}) {
      SCOPED_TRACE(std::string(from_file ? "file" : "bytes") + ", opt level " + std::to_string(level));
      auto s = from_file ? Session::open(path, opts(level)) : Session::from_bytes(bytes.data(), bytes.size(), opts(level));
      MemoryStats ms = s->memory_stats();
      EXPECT_EQ(ms.weights_bytes, uint64_t(rows * cols * 4));
      EXPECT_EQ(ms.weights_in_place_bytes, uint64_t(rows * cols * 4));
      auto out = s->run({{"ids", Value(Tensor::from_vector(ids))}});
      ASSERT_EQ(out[0].tensor.shape(), (Shape{5, cols}));
      for (size_t j = 0; j < ids.size(); ++j) {
        int64_t r = ids[j] < 0 ? ids[j] + rows : ids[j];
        EXPECT_EQ(std::memcmp(f32(out[0]) + j * size_t(cols), expect.data() + size_t(r * cols), size_t(cols) * 4), 0)
            << "row " << r;
      }
    }
  }
  std::remove(path.c_str());
}

// The view of a file records the file and its offset there, so Gather reads rows with pread
// (Tensor::read_bytes) and never maps their pages; read_bytes gives the bytes memcpy would.
TEST(WeightsInPlace, FileViewRecordsItsFileForByteReads) {
  const int64_t rows = 1024, cols = 64;
  Init table = float_init("table", {rows, cols});
  std::string bytes = misaligned_model({node("Gather", {"table", "ids"}, {"y"})}, {value_info("ids", kInt64, {5})},
                                       {value_info("y", kFloat, {5, cols})}, {table}, 3);
  ASSERT_FALSE(bytes.empty());
  std::string path = write_temp(bytes, "fileview");
  const auto expect = table_values(rows * cols);
  {
    auto m = load_model_file(path);
    const Tensor& w = m->graph->values[size_t(m->graph->find_value("table"))].initializer;
    ASSERT_TRUE(w.storage());
    EXPECT_FALSE(w.storage()->owned);
    EXPECT_FALSE(w.is_aligned());
    EXPECT_GE(w.storage()->file_fd, 0);
    EXPECT_EQ(w.storage()->file_offset, raw_offset(bytes, table));
    for (size_t off : {size_t(0), size_t(4), size_t(1000 * cols * 4)}) {
      std::vector<float> got(static_cast<size_t>(cols));
      w.read_bytes(off, got.size() * 4, got.data());
      EXPECT_EQ(std::memcmp(got.data(), reinterpret_cast<const char*>(expect.data()) + off, got.size() * 4), 0) << off;
    }
  }
  // From memory there is no file to read: plain copies.
  auto mb = load_model_bytes(bytes.data(), bytes.size());
  const Tensor& wb = mb->graph->values[size_t(mb->graph->find_value("table"))].initializer;
  EXPECT_EQ(wb.storage()->file_fd, -1);
  std::remove(path.c_str());
}

// A gather that reads much of a table copies from the mapping instead of a system call per row;
// the result is the same.
TEST(WeightsInPlace, LargeGatherFromFileView) {
  const int64_t rows = 1024, cols = 64, n = 600;
  Init table = float_init("table", {rows, cols});
  std::string bytes = misaligned_model({node("Gather", {"table", "ids"}, {"y"})}, {value_info("ids", kInt64, {n})},
                                       {value_info("y", kFloat, {n, cols})}, {table}, 1);
  ASSERT_FALSE(bytes.empty());
  std::string path = write_temp(bytes, "large");
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 389) % rows;
  auto s = Session::open(path, opts());
  EXPECT_EQ(s->memory_stats().weights_in_place_bytes, uint64_t(rows * cols * 4));
  auto out = s->run({{"ids", Value(Tensor::from_vector(ids))}});
  const auto expect = table_values(rows * cols);
  for (int64_t j = 0; j < n; ++j)
    ASSERT_EQ(std::memcmp(f32(out[0]) + j * cols, expect.data() + ids[size_t(j)] * cols, size_t(cols) * 4), 0) << j;
  std::remove(path.c_str());
}

// Rows gathered from a view of the file are read once per run of consecutive rows, and a row
// that occurs again is copied from the output: runs, repeats (also one inside a run, which ends
// the run), negative indices, axis 0 and axis 1, on 1 and 2 threads, give the table's rows.
TEST(WeightsInPlace, GatherFromFileViewCoalescesRunsAndRepeats) {
  for (int axis : {0, 1}) {
    // axis 0: 20 of 1024 rows of 64; axis 1: 7 of the 4096 columns of a 16-row table (both
    // 256 KiB, kept in place, and few enough of the table's rows and bytes to be read from the file)
    const int64_t rows = axis == 0 ? 1024 : 16, cols = axis == 0 ? 64 : 4096;
    const std::vector<int64_t> ids = axis == 0 ? std::vector<int64_t>{7, 8, 9, 10, 7, 500, 501, 8, 9, 1023, 0, 0, -1, 3,
                                                                      4, 500, 502, 501, 502, 503}
                                               : std::vector<int64_t>{40, 41, 42, 41, -1, 7, 8};
    const int64_t n = int64_t(ids.size()), dim = axis == 0 ? rows : cols;
    Init table = float_init("table", {rows, cols});
    const auto expect = table_values(rows * cols);
    const std::vector<int64_t> out_dims = axis == 0 ? std::vector<int64_t>{n, cols} : std::vector<int64_t>{rows, n};
    std::string bytes =
        misaligned_model({node("Gather", {"table", "ids"}, {"y"}, {attr_int("axis", axis)})},
                         {value_info("ids", kInt64, {n})}, {value_info("y", kFloat, out_dims)}, {table}, 1);
    ASSERT_FALSE(bytes.empty());
    std::string path = write_temp(bytes, "runs" + std::to_string(axis));
    for (int threads : {1, 2}) {
      SessionOptions o = opts();
      o.threads = threads;
      auto s = Session::open(path, o);
      EXPECT_EQ(s->memory_stats().weights_in_place_bytes, uint64_t(rows * cols * 4));
      auto out = s->run({{"ids", Value(Tensor::from_vector(ids))}});
      ASSERT_EQ(out[0].tensor.shape(), Shape(out_dims.begin(), out_dims.end()));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = ids[size_t(j)] < 0 ? ids[size_t(j)] + dim : ids[size_t(j)];
        if (axis == 0) {
          ASSERT_EQ(std::memcmp(f32(out[0]) + j * cols, expect.data() + k * cols, size_t(cols) * 4), 0)
              << "threads " << threads << " output row " << j;
        } else {
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(f32(out[0])[r * n + j], expect[size_t(r * cols + k)]) << "threads " << threads << " " << r << "," << j;
        }
      }
    }
    std::remove(path.c_str());
  }
}

// Gather on axis 1 copies short runs out of the middle of each row: still bytewise.
TEST(WeightsInPlace, GatherOnAxis1ReadsMisalignedTable) {
  const int64_t rows = 256, cols = 96;
  Init table = float_init("table", {rows, cols});
  std::string bytes =
      misaligned_model({node("Gather", {"table", "ids"}, {"y"}, {attr_int("axis", 1)})}, {value_info("ids", kInt64, {3})},
                       {value_info("y", kFloat, {rows, 3})}, {table}, 2);
  ASSERT_FALSE(bytes.empty());
  ASSERT_NE(raw_offset(bytes, table) % 4, 0u);
  auto s = Session::from_bytes(bytes.data(), bytes.size(), opts());
  EXPECT_EQ(s->memory_stats().weights_in_place_bytes, uint64_t(rows * cols * 4));
  const std::vector<int64_t> ids = {95, 0, 40};
  auto out = s->run({{"ids", Value(Tensor::from_vector(ids))}});
  const auto expect = table_values(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < ids.size(); ++j)
      ASSERT_EQ(f32(out[0])[size_t(r) * 3 + j], expect[size_t(r * cols + ids[j])]) << r << "," << j;
}

// A misaligned weight read by kernels that make typed loads gets an aligned copy before they
// run: Add, MatMul and Conv give the results of the same weight stored aligned, and it is not
// counted as in place.
TEST(WeightsInPlace, MisalignedWeightFeedingTypedKernelsIsCopied) {
  struct Case {
    const char* name;
    Pb node;
    std::vector<int64_t> w_dims, x_dims, y_dims;
  };
  const std::vector<Case> cases = {
      {"Add", node("Add", {"x", "w"}, {"y"}), {256, 64}, {256, 64}, {256, 64}},
      {"MatMul", node("MatMul", {"x", "w"}, {"y"}), {256, 96}, {3, 256}, {3, 96}},
      {"Conv", node("Conv", {"x", "w"}, {"y"}), {64, 64, 2, 2}, {1, 64, 5, 5}, {1, 64, 4, 4}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Init w = float_init("w", c.w_dims);
    std::vector<Init> inits = {w};
    std::vector<Pb> in = {value_info("x", kFloat, c.x_dims)}, out = {value_info("y", kFloat, c.y_dims)};
    std::string bad = misaligned_model({c.node}, in, out, inits, 1);
    std::string good = misaligned_model({c.node}, in, out, inits, 0);
    ASSERT_FALSE(bad.empty());
    ASSERT_FALSE(good.empty());
    ASSERT_NE(raw_offset(bad, w) % 4, 0u);
    ASSERT_EQ(raw_offset(good, w) % 4, 0u);
    int64_t nx = 1;
    for (auto d : c.x_dims) nx *= d;
    Tensor x(DType::Float, c.x_dims);
    for (int64_t i = 0; i < nx; ++i) x.data<float>()[i] = float((i * 7) % 13) * 0.1f - 0.6f;
    std::string path = write_temp(bad, c.name);
    for (int level : {0, 3}) {
      auto ref = Session::from_bytes(good.data(), good.size(), opts(level));
      auto want = ref->run({{"x", Value(x)}});
      for (int from_file = 0; from_file < 2; ++from_file) {
        SCOPED_TRACE(std::string(from_file ? "file" : "bytes") + ", opt level " + std::to_string(level));
        auto s = from_file ? Session::open(path, opts(level)) : Session::from_bytes(bad.data(), bad.size(), opts(level));
        EXPECT_EQ(s->memory_stats().weights_in_place_bytes, 0u);
        auto got = s->run({{"x", Value(x)}});
        ASSERT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
        EXPECT_EQ(std::memcmp(got[0].tensor.raw(), want[0].tensor.raw(), want[0].tensor.nbytes()), 0);
      }
    }
    std::remove(path.c_str());
  }
}

// One table read by Gather and by Add: not every reader is bytewise, so it is copied (once), and
// both readers see the right values. A table that is itself a graph output is copied too.
TEST(WeightsInPlace, MixedReadersAndGraphOutputsGetAlignedCopy) {
  const int64_t rows = 512, cols = 64;
  Init table = float_init("table", {rows, cols});
  std::string bytes = misaligned_model(
      {node("Gather", {"table", "ids"}, {"g"}), node("Add", {"table", "table"}, {"d"})},
      {value_info("ids", kInt64, {2})}, {value_info("g", kFloat, {2, cols}), value_info("d", kFloat, {rows, cols})}, {table},
      3);
  ASSERT_FALSE(bytes.empty());
  ASSERT_NE(raw_offset(bytes, table) % 4, 0u);
  const auto expect = table_values(rows * cols);
  for (int level : {0, 3}) {
    SCOPED_TRACE(level);
    auto s = Session::from_bytes(bytes.data(), bytes.size(), opts(level));
    EXPECT_EQ(s->memory_stats().weights_in_place_bytes, 0u);
    auto out = s->run({{"ids", Value(Tensor::from_vector(std::vector<int64_t>{3, 500}))}});
    EXPECT_EQ(std::memcmp(f32(out[0]), expect.data() + 3 * cols, size_t(cols) * 4), 0);
    EXPECT_EQ(std::memcmp(f32(out[0]) + cols, expect.data() + 500 * cols, size_t(cols) * 4), 0);
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(f32(out[1])[i], expect[size_t(i)] * 2) << i;
  }

  // The table is a graph output and a Gather input: the caller must get aligned data.
  std::string out_bytes = misaligned_model({node("Gather", {"table", "ids"}, {"g"})}, {value_info("ids", kInt64, {1})},
                                           {value_info("g", kFloat, {1, cols}), value_info("table", kFloat, {rows, cols})},
                                           {table}, 5);
  ASSERT_FALSE(out_bytes.empty());
  auto s = Session::from_bytes(out_bytes.data(), out_bytes.size(), opts());
  EXPECT_EQ(s->memory_stats().weights_in_place_bytes, 0u);
  auto out = s->run({{"ids", Value(Tensor::from_vector(std::vector<int64_t>{9}, {1}))}});
  EXPECT_TRUE(out[1].tensor.is_aligned());
  EXPECT_EQ(std::memcmp(f32(out[1]), expect.data(), expect.size() * 4), 0);
}

// Indices that are constants: constant folding runs Gather over the misaligned table at optimize
// time (a byte reader, so allowed) and the result is right.
TEST(WeightsInPlace, ConstantFoldedGatherOverMisalignedTable) {
  const int64_t rows = 512, cols = 64;
  Init table = float_init("table", {rows, cols});
  Init ids = int64_init("ids", {4, 2});
  std::string bytes = misaligned_model({node("Gather", {"table", "ids"}, {"g"}), node("Add", {"g", "x"}, {"y"})},
                                       {value_info("x", kFloat, {2, cols})}, {value_info("y", kFloat, {2, cols})},
                                       {table, ids}, 1);
  ASSERT_FALSE(bytes.empty());
  ASSERT_NE(raw_offset(bytes, table) % 4, 0u);
  const auto expect = table_values(rows * cols);
  Tensor x(DType::Float, {2, cols});
  for (int64_t i = 0; i < 2 * cols; ++i) x.data<float>()[i] = float(i);
  for (int level : {0, 3}) {
    SCOPED_TRACE(level);
    auto s = Session::from_bytes(bytes.data(), bytes.size(), opts(level));
    auto out = s->run({{"x", Value(x)}});
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(f32(out[0])[c], expect[size_t(4 * cols + c)] + float(c));
      EXPECT_EQ(f32(out[0])[cols + c], expect[size_t(2 * cols + c)] + float(cols + c));
    }
  }
}

// create_kernels checks again with the final kernels: if a pass had rewired a byte-only weight
// to a reader that makes typed loads, that reader gets an aligned copy before prepare/compute.
TEST(WeightsInPlace, CreateKernelsAlignsWeightsForRewiredReaders) {
  const int64_t rows = 512, cols = 64;
  Init table = float_init("table", {rows, cols});
  std::string bytes = misaligned_model({node("Gather", {"table", "ids"}, {"g"}), node("Relu", {"x"}, {"y"})},
                                       {value_info("ids", kInt64, {2}), value_info("x", kFloat, {rows, cols})},
                                       {value_info("g", kFloat, {2, cols}), value_info("y", kFloat, {rows, cols})}, {table},
                                       1);
  ASSERT_FALSE(bytes.empty());
  auto m = load_model_bytes(bytes.data(), bytes.size());
  Graph& g = *m->graph;
  int t = g.find_value("table");
  ASSERT_GE(t, 0);
  EXPECT_FALSE(g.values[size_t(t)].initializer.is_aligned()) << "the loader keeps the table in place for Gather";
  // Rewire: Relu now reads the table (as an optimizer pass might rewire a reader).
  for (auto& n : g.nodes)
    if (n.op_type == "Relu") n.inputs[0] = t;
  g.finalize();
  create_kernels(*m, LoadOptions{}, 1);
  const Tensor& w = g.values[size_t(t)].initializer;
  EXPECT_TRUE(w.is_aligned());
  ASSERT_EQ(w.shape(), (Shape{rows, cols}));
  const auto expect = table_values(rows * cols);
  EXPECT_EQ(std::memcmp(w.raw(), expect.data(), expect.size() * 4), 0);
  EXPECT_EQ(m->weight_bytes_in_place, 0u);
}

// Only Gather's data input is declared bytewise; its indices and other kernels' inputs are not.
TEST(WeightsInPlace, KernelsDeclareBytewiseInputs) {
  const OpRegistry& reg = OpRegistry::instance();
  Node gather;
  gather.op_type = "Gather";
  gather.opset = 13;
  auto k = (*reg.find("", "Gather", 13))(gather);
  EXPECT_TRUE(k->reads_bytes_only(0));
  EXPECT_FALSE(k->reads_bytes_only(1));
  Node add;
  add.op_type = "Add";
  add.opset = 14;
  auto a = (*reg.find("", "Add", 14))(add);
  EXPECT_FALSE(a->reads_bytes_only(0));
  EXPECT_FALSE(a->reads_bytes_only(1));
}
