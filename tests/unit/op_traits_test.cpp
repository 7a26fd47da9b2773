// The op registry as the one place that says what an operator is (ops/op_traits.hpp): every op
// declares its shape inference or says its output shapes depend on data, the traits are
// consistent with each other, and the planner and the optimizer read them.
#include "ops/kernel.hpp"
#include "opt/graph_util.hpp"
#include "runtime/planner.hpp"
#include "runtime/shape_infer.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace basalt {
namespace {

std::string key(const OpRegistry::Listed& l) { return l.domain.empty() ? l.op : l.domain + "::" + l.op; }

TEST(OpTraits, EveryOpDeclaresInference) {
  std::vector<std::string> missing;
  size_t n = 0;
  for (const auto& l : OpRegistry::instance().list()) {
    ++n;
    ASSERT_NE(l.traits, nullptr) << key(l);
    if (!l.traits->shape && !l.traits->data_dependent) missing.push_back(key(l));
  }
  EXPECT_GT(n, 200u);
  std::string names;
  for (auto& m : missing) names += " " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " ops declare neither shape inference nor data_dependent_shape():"
                               << names;
}

TEST(OpTraits, TraitsAreConsistent) {
  for (const auto& l : OpRegistry::instance().list()) {
    const OpTraits& t = *l.traits;
    // A view or an in-place output is planned in the arena: its shape must be inferable.
    if (t.alias_kind == Alias::View || t.in_place_fn) EXPECT_NE(t.shape, nullptr) << key(l);
    if (t.symbolic) EXPECT_NE(t.shape, nullptr) << key(l);
    EXPECT_FALSE(l.opsets.empty()) << key(l);
    for (auto [since, until] : l.opsets) EXPECT_LE(since, until) << key(l);
  }
}

TEST(OpTraits, DeclaringTraitsForAnUnregisteredOpIsAnError) {
  OpRegistry r;
  r.add("Relu", 6, [](const Node&) -> std::unique_ptr<OpKernel> { return nullptr; });
  r.def("Relu").infer(shapes::same);
  EXPECT_NO_THROW(r.check_traits());
  r.def("Rleu").infer(shapes::same);  // a typo in a family file
  try {
    r.check_traits();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Rleu"), std::string::npos) << e.what();
  }
}

TEST(OpTraits, DomainsAreKeptApart) {
  const auto& reg = OpRegistry::instance();
  ASSERT_NE(reg.traits("", "Conv"), nullptr);
  EXPECT_EQ(reg.traits("ai.onnx", "Conv"), reg.traits("", "Conv"));  // the same domain
  EXPECT_EQ(reg.traits("com.example", "Conv"), nullptr);
  EXPECT_EQ(reg.traits("", "NoSuchOp"), nullptr);
  ASSERT_NE(reg.traits("basalt", "FusedConv"), nullptr);
  EXPECT_NE(reg.traits("basalt", "FusedConv")->shape, nullptr);
}

Node make_node(const std::string& op, int inputs, int outputs, std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = 17;
  for (int i = 0; i < inputs; ++i) n.inputs.push_back(i);
  for (int i = 0; i < outputs; ++i) n.outputs.push_back(inputs + i);
  n.attrs = std::move(attrs);
  return n;
}

InferredValue known(DType dt, Shape s) {
  InferredValue v;
  v.state = InferredValue::State::Known;
  v.dtype = dt;
  v.shape = std::move(s);
  return v;
}

// The rules on symbolic dims: broadcasting keeps a symbol against 1 and itself, gives up against
// another size; a window turns a symbol into one expression, the same for the same window.
TEST(OpTraits, SymbolicRules) {
  SymbolTable sym;
  const int64_t H = sym.intern("$H"), W = sym.intern("$W");
  EXPECT_EQ(sym.intern("$H"), H);
  EXPECT_EQ(sym.name(W), "$W");
  Shape r;
  EXPECT_TRUE(shapes::broadcast2({1, H, 1}, {3, H, W}, r));
  EXPECT_EQ(r, (Shape{3, H, W}));
  EXPECT_FALSE(shapes::broadcast2({H}, {5}, r));
  EXPECT_FALSE(shapes::broadcast2({H}, {W}, r));

  auto x = known(DType::Float, {1, 3, H, W});
  auto w = known(DType::Float, {8, 3, 3, 3});
  ShapeInputs in;
  in.v = {&x, &w};
  in.symbols = &sym;
  Attribute strides;
  strides.name = "strides";
  strides.type = Attribute::Type::Ints;
  strides.ints = {2, 2};
  Node conv = make_node("Conv", 2, 1, {strides});
  ShapeOutputs out(1);
  ASSERT_TRUE(shapes::conv(conv, in, out));
  ASSERT_EQ(out[0].shape.size(), 4u);
  EXPECT_EQ(out[0].shape[0], 1);
  EXPECT_EQ(out[0].shape[1], 8);
  EXPECT_TRUE(is_symbol(out[0].shape[2]));
  EXPECT_EQ(sym.name(out[0].shape[2]), "floor(($H-3)/2)+1");
  ShapeOutputs again(1);
  ASSERT_TRUE(shapes::conv(conv, in, again));
  EXPECT_EQ(again[0].shape, out[0].shape);  // the same expression, the same symbol

  // Without a symbol table (the planner's concrete shapes) a negative dim is never guessed at.
  in.symbols = nullptr;
  EXPECT_FALSE(shapes::conv(conv, in, out));
}

// Rules that are not declared symbolic never see symbols in the optimizer's inference: a
// Reshape of a symbolic input stays unknown instead of computing with negative dims.
TEST(OpTraits, StaticInferenceUsesTheDeclaredRules) {
  Graph g;
  auto add_value = [&](const std::string& name) {
    ValueDef d;
    d.name = name;
    g.values.push_back(d);
    return int(g.values.size() - 1);
  };
  int x = add_value("x"), y = add_value("y"), z = add_value("z");
  ValueDef& xd = g.values[size_t(x)];
  xd.is_graph_input = true;
  xd.type.kind = TypeInfo::Kind::Tensor;
  xd.type.elem = DType::Float;
  xd.type.has_shape = true;
  DimInfo n;
  n.param = "N";
  DimInfo c;
  c.value = 4;
  xd.type.dims = {n, c};
  g.inputs.push_back(x);
  Node relu = make_node("Relu", 0, 0);
  relu.inputs = {x};
  relu.outputs = {y};
  Node cast = make_node("Cast", 0, 0);
  Attribute to;
  to.name = "to";
  to.type = Attribute::Type::Int;
  to.i = int64_t(DType::Int64);
  cast.attrs = {to};
  cast.inputs = {y};
  cast.outputs = {z};
  g.values[size_t(y)].producer = 0;
  g.values[size_t(z)].producer = 1;
  g.nodes.push_back(std::move(relu));
  g.nodes.push_back(std::move(cast));
  StaticShapes st = infer_static_shapes(g);
  Shape s;
  ASSERT_TRUE(st.get_symbolic(z, s));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(st.dim_str(s[0]), "$N");
  EXPECT_EQ(s[1], 4);
  EXPECT_FALSE(st.get(z, s));  // symbolic: not a numeric shape
}

// The planner takes aliasing and in place from the traits.
TEST(OpTraits, PlannerReadsInPlaceFromTraits) {
  const std::pair<DType, Shape> f{DType::Float, {2, 8}};
  const std::vector<std::pair<DType, Shape>> one{f}, two{f, f};
  EXPECT_EQ(in_place_inputs(make_node("Relu", 1, 1), one, f), (std::vector<int>{0}));
  EXPECT_EQ(in_place_inputs(make_node("Add", 2, 1), two, f), (std::vector<int>{0, 1}));
  // A broadcast operand is never overwritten.
  const std::vector<std::pair<DType, Shape>> bc{f, {DType::Float, {8}}};
  EXPECT_EQ(in_place_inputs(make_node("Add", 2, 1), bc, f), (std::vector<int>{0}));
  // Not float, or an op that declares nothing: no in place.
  const std::pair<DType, Shape> i{DType::Int32, {2, 8}};
  EXPECT_TRUE(in_place_inputs(make_node("Relu", 1, 1), std::vector<std::pair<DType, Shape>>{i}, i).empty());
  EXPECT_TRUE(in_place_inputs(make_node("Pow", 2, 1), two, f).empty());
  Node other = make_node("Relu", 1, 1);
  other.domain = "com.example";
  EXPECT_TRUE(in_place_inputs(other, one, f).empty());
}

// Shapes from a hostile model (fuzz_load found Reshape's product overflowing in the optimizer's
// static inference): a rule whose arithmetic would overflow gives up instead, and no rule reports
// a known result whose element count does not fit int64.
TEST(OpTraits, AbsurdShapesMakeRulesGiveUp) {
  const int64_t big = int64_t(1) << 40;
  auto x = known(DType::Float, {big, 4});
  InferredValue target = known(DType::Int64, {3});
  target.value = Tensor::from_vector<int64_t>({805306365, 68719476735, -1}, {3});
  ShapeInputs in;
  in.v = {&x, &target};
  ShapeOutputs out(1);
  Node reshape = make_node("Reshape", 2, 1);
  EXPECT_FALSE(shapes::reshape(reshape, in, out));
  target.value = Tensor::from_vector<int64_t>({4, big}, {2});
  EXPECT_TRUE(shapes::reshape(reshape, in, out));  // the element count fits: known
  EXPECT_EQ(out[0].shape, (Shape{4, big}));

  auto huge = known(DType::Float, {big, big, big});
  ShapeInputs one;
  one.v = {&huge};
  ShapeOutputs f(1);
  EXPECT_FALSE(shapes::flatten(make_node("Flatten", 1, 1), one, f));
  EXPECT_FALSE(f[0].known());
  ShapeOutputs sz(1);
  EXPECT_FALSE(shapes::size_op(make_node("Size", 1, 1), one, sz));

  InferredValue reps = known(DType::Int64, {2});
  reps.value = Tensor::from_vector<int64_t>({big, big}, {2});
  ShapeInputs tin;
  tin.v = {&x, &reps};
  ShapeOutputs t(1);
  EXPECT_FALSE(shapes::tile(make_node("Tile", 2, 1), tin, t));
  reps.value = Tensor::from_vector<int64_t>({1, -3}, {2});
  EXPECT_FALSE(shapes::tile(make_node("Tile", 2, 1), tin, t));

  // A symbolic batch survives Flatten among 1s; two symbols on one side give up.
  SymbolTable sym;
  const int64_t N = sym.intern("$N"), M = sym.intern("$M");
  auto s1 = known(DType::Float, {N, 1, 1, 7});
  ShapeInputs sin;
  sin.v = {&s1};
  sin.symbols = &sym;
  Attribute axis;
  axis.name = "axis";
  axis.type = Attribute::Type::Int;
  axis.i = 3;
  ShapeOutputs fs(1);
  ASSERT_TRUE(shapes::flatten(make_node("Flatten", 1, 1, {axis}), sin, fs));
  EXPECT_EQ(fs[0].shape, (Shape{N, 7}));
  auto s2 = known(DType::Float, {N, M, 7});
  sin.v = {&s2};
  axis.i = 2;
  EXPECT_FALSE(shapes::flatten(make_node("Flatten", 1, 1, {axis}), sin, fs));
}

}  // namespace
}  // namespace basalt
