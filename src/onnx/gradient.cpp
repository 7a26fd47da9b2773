// Expands ai.onnx.preview.training Gradient nodes into ordinary nodes (reverse-mode, symbolic):
// the forward nodes on the paths from `xs` to `y` get their derivative rules emitted in reverse
// order, starting from dY = ones_like(Y). Broadcasting is undone by basalt's SumToShape op.
// Done on the protobuf nodes before the graph is built, so the result is an ordinary graph.
#include "onnx/gradient.hpp"

#include <basalt/error.hpp>

#include <map>
#include <set>

namespace basalt {
namespace {

pb::AttributeProto attr_tensor_float(const std::string& name, float v) {
  pb::AttributeProto a;
  a.name = name;
  a.type = 4;
  a.has_t = true;
  a.t.data_type = 1;
  a.t.dims = {1};
  a.t.float_data = {v};
  return a;
}

struct Emitter {
  std::vector<pb::NodeProto>& out;
  std::shared_ptr<std::vector<pb::OpsetId>> opsets;
  std::string prefix;
  int n = 0;
  std::string fresh(const std::string& hint) { return prefix + hint + "_" + std::to_string(n++); }
  std::string node(const std::string& op, std::vector<std::string> in, const std::string& domain = "",
                   std::vector<pb::AttributeProto> attrs = {}) {
    pb::NodeProto p;
    p.op_type = op;
    p.domain = domain;
    p.input = std::move(in);
    std::string o = fresh(op);
    p.output = {o};
    p.name = o;
    p.attribute = std::move(attrs);
    p.fn_opsets = opsets;
    out.push_back(std::move(p));
    return o;
  }
  std::string ones_like(const std::string& v) {
    return node("ConstantOfShape", {node("Shape", {v})}, "", {attr_tensor_float("value", 1.0f)});
  }
  std::string zeros_like(const std::string& v) {
    return node("ConstantOfShape", {node("Shape", {v})}, "", {attr_tensor_float("value", 0.0f)});
  }
  std::string sum_to(const std::string& g, const std::string& like) { return node("SumToShape", {g, like}, "basalt"); }
};

void expand_one(const pb::NodeProto& gn, const std::vector<pb::NodeProto>& nodes, int64_t opset, Emitter& em) {
  std::string desc = "node '" + gn.name + "' (Gradient)";
  std::vector<std::string> xs;
  std::string y;
  for (auto& a : gn.attribute) {
    if (a.name == "xs") for (auto& s : a.strings) xs.push_back(s.str());
    if (a.name == "y") y = a.s.str();
  }
  if (xs.empty() || y.empty()) BASALT_THROW(InvalidModel, desc + ": needs attributes xs and y");
  if (gn.output.size() != xs.size()) BASALT_THROW(InvalidModel, desc + ": needs one output per entry of xs");
  // Values that depend on some x, and values y depends on.
  std::set<std::string> active(xs.begin(), xs.end()), needed{y};
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& n : nodes) {
      bool any = false;
      for (auto& i : n.input) any |= active.count(i) > 0;
      if (any)
        for (auto& o : n.output) changed |= active.insert(o).second;
      bool want = false;
      for (auto& o : n.output) want |= needed.count(o) > 0;
      if (want)
        for (auto& i : n.input) changed |= !i.empty() && needed.insert(i).second;
    }
  }
  // Forward nodes on a path, in topological order.
  std::vector<const pb::NodeProto*> path;
  std::set<std::string> done(xs.begin(), xs.end());
  std::vector<const pb::NodeProto*> pending;
  for (auto& n : nodes) {
    bool on = false;
    for (auto& o : n.output) on |= active.count(o) && needed.count(o);
    if (on) pending.push_back(&n);
  }
  while (!pending.empty()) {
    size_t before = pending.size();
    for (size_t k = 0; k < pending.size();) {
      bool ready = true;
      for (auto& i : pending[k]->input) ready &= !(active.count(i) && needed.count(i)) || done.count(i);
      if (ready) {
        path.push_back(pending[k]);
        for (auto& o : pending[k]->output) done.insert(o);
        pending.erase(pending.begin() + long(k));
      } else {
        ++k;
      }
    }
    if (pending.size() == before) BASALT_THROW(InvalidModel, desc + ": the forward graph has a cycle");
  }
  std::map<std::string, std::vector<std::string>> grads;
  grads[y].push_back(em.ones_like(y));
  auto total = [&](const std::string& v) -> std::string {
    auto& g = grads[v];
    if (g.empty()) return "";
    if (g.size() == 1) return g[0];
    return em.node("Sum", g);
  };
  auto wants = [&](const std::string& v) { return active.count(v) && needed.count(v); };
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const pb::NodeProto& n = **it;
    if (n.output.empty()) continue;
    std::string g = total(n.output[0]);
    if (g.empty()) continue;
    const std::string& op = n.op_type;
    auto in = [&](size_t i) { return i < n.input.size() ? n.input[i] : std::string(); };
    auto add = [&](size_t i, const std::string& contrib, bool unbroadcast) {
      if (!wants(in(i))) return;
      grads[in(i)].push_back(unbroadcast ? em.sum_to(contrib, in(i)) : contrib);
    };
    std::string what = desc + ": forward node '" + n.name + "' (" + op + ")";
    if (!n.domain.empty() && n.domain != "ai.onnx") BASALT_THROW(Unsupported, what + " has no derivative rule");
    if (op == "Add") {
      add(0, g, true);
      add(1, g, true);
    } else if (op == "Sub") {
      add(0, g, true);
      if (wants(in(1))) add(1, em.node("Neg", {g}), true);
    } else if (op == "Mul") {
      if (wants(in(0))) add(0, em.node("Mul", {g, in(1)}), true);
      if (wants(in(1))) add(1, em.node("Mul", {g, in(0)}), true);
    } else if (op == "Div") {
      if (wants(in(0))) add(0, em.node("Div", {g, in(1)}), true);
      if (wants(in(1))) {  // d(a/b)/db = -a / b^2
        std::string b2 = em.node("Mul", {in(1), in(1)});
        add(1, em.node("Neg", {em.node("Div", {em.node("Mul", {g, in(0)}), b2})}), true);
      }
    } else if (op == "Neg") {
      add(0, em.node("Neg", {g}), false);
    } else if (op == "Identity") {
      add(0, g, false);
    } else if (op == "Exp") {
      add(0, em.node("Mul", {g, n.output[0]}), false);
    } else if (op == "Log") {
      add(0, em.node("Div", {g, in(0)}), false);
    } else if (op == "Tanh") {  // 1 - y^2
      std::string y2 = em.node("Mul", {n.output[0], n.output[0]});
      add(0, em.node("Mul", {g, em.node("Sub", {em.ones_like(y2), y2})}), false);
    } else if (op == "Sigmoid") {  // y (1 - y)
      std::string one_minus = em.node("Sub", {em.ones_like(n.output[0]), n.output[0]});
      add(0, em.node("Mul", {g, em.node("Mul", {n.output[0], one_minus})}), false);
    } else if (op == "Relu") {
      std::string pos = em.node("Cast", {em.node("Greater", {in(0), em.zeros_like(in(0))})}, "",
                                {[] { pb::AttributeProto a; a.name = "to"; a.type = 2; a.i = 1; a.has_i = true; return a; }()});
      add(0, em.node("Mul", {g, pos}), false);
    } else if (op == "MatMul") {  // 2-D: dA = G B^T, dB = A^T G
      if (wants(in(0))) add(0, em.node("MatMul", {g, em.node("Transpose", {in(1)})}), false);
      if (wants(in(1))) add(1, em.node("MatMul", {em.node("Transpose", {in(0)}), g}), false);
    } else {
      BASALT_THROW(Unsupported, what + " has no derivative rule (supported: Add, Sub, Mul, Div, Neg, Identity, Exp, Log, "
                                       "Tanh, Sigmoid, Relu, MatMul)");
    }
  }
  (void)opset;
  for (size_t i = 0; i < xs.size(); ++i) {
    std::string g = total(xs[i]);
    if (gn.output[i].empty()) continue;
    pb::NodeProto id;
    id.op_type = "Identity";
    id.input = {g.empty() ? em.zeros_like(xs[i]) : g};
    id.output = {gn.output[i]};
    id.name = em.fresh("out");
    id.fn_opsets = em.opsets;
    em.out.push_back(std::move(id));
  }
}

}  // namespace

void expand_gradient_nodes(std::vector<pb::NodeProto>& nodes, int64_t ai_onnx_opset) {
  bool any = false;
  for (auto& n : nodes) any |= n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training";
  if (!any) return;
  std::vector<pb::NodeProto> out;
  std::vector<pb::NodeProto> forward;
  for (auto& n : nodes)
    if (!(n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training")) forward.push_back(n);
  int k = 0;
  for (auto& n : nodes) {
    if (!(n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training")) {
      out.push_back(n);
      continue;
    }
    auto opsets = std::make_shared<std::vector<pb::OpsetId>>();
    opsets->push_back({"", std::max<int64_t>(ai_onnx_opset, 13)});
    opsets->push_back({"basalt", 1});
    Emitter em{out, opsets, "__grad" + std::to_string(k++) + "_" + n.name + "/"};
    expand_one(n, forward, ai_onnx_opset, em);
  }
  nodes = std::move(out);
}

}  // namespace basalt
