#include "opt/quantize.hpp"

#include "opt/match_util.hpp"
#include "opt/passes.hpp"

#include <algorithm>
#include <cmath>
#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

namespace basalt {

namespace {

struct QParams {
  float scale = 1.f;
  uint8_t zp = 0;
};

// uint8 asymmetric parameters for a range (widened to contain 0, so 0.0 is exact).
QParams activation_params(ActivationRange r) {
  const float lo = std::min(r.lo, 0.f), hi = std::max(r.hi, 0.f);
  QParams p;
  if (!(hi - lo > 0.f) || !std::isfinite(hi - lo)) return p;  // empty or broken range: scale 1
  p.scale = (hi - lo) / 255.f;
  p.zp = uint8_t(std::clamp(std::nearbyint(-lo / p.scale), 0.f, 255.f));
  return p;
}

// int8 symmetric weights: per channel (channels of `channels` slices of `inner` elements each,
// element (c, i) at c * cstride + i * istride) or per tensor.
struct QWeights {
  Tensor q, scale, zp;
};
// floor (may be null): per-channel lower bounds of the scales (a bias that must fit int32).
QWeights quantize_weights(const Tensor& w, int64_t channels, int64_t cstride, int64_t istride, bool per_channel,
                          const std::vector<float>* floor = nullptr) {
  const int64_t inner = channels ? w.numel() / channels : 0;
  const float* p = w.data<float>();
  const int64_t ns = per_channel ? channels : 1;
  std::vector<float> s(size_t(ns), 0.f);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < inner; ++i) {
      float& m = s[size_t(per_channel ? c : 0)];
      m = std::max(m, std::fabs(p[c * cstride + i * istride]));
    }
  for (float& v : s) v = v > 0.f && std::isfinite(v) ? v / 127.f : 0.f;
  if (floor)
    for (int64_t c = 0; c < channels; ++c) {
      float& v = s[size_t(per_channel ? c : 0)];
      v = std::max(v, (*floor)[size_t(c)]);
    }
  for (float& v : s)
    if (!(v > 0.f)) v = 1.f;  // all-zero weights and no bias: any scale
  QWeights r;
  r.q = Tensor(DType::Int8, w.shape());
  int8_t* q = r.q.data<int8_t>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t e = c * cstride + i * istride;
      q[e] = int8_t(std::clamp(std::nearbyint(p[e] / s[size_t(per_channel ? c : 0)]), -127.f, 127.f));
    }
  r.scale = per_channel ? Tensor::from_vector(s, {ns}) : Tensor::scalar(s[0]);
  r.zp = per_channel ? Tensor(DType::Int8, {ns}) : Tensor::scalar<int8_t>(0);
  std::memset(r.zp.raw(), 0, size_t(ns));
  return r;
}

class Rewriter {
 public:
  Rewriter(Model& m, const QuantizeOptions& o, QuantizeReport& r) : m_(m), g_(*m.graph), opts_(o), rep_(r) {
    opset_ = int(m.opsets.count("") ? m.opsets.at("") : 0);
  }

  void run() {
    std::vector<Node> old = std::move(g_.nodes);
    g_.nodes.clear();
    consumers_.assign(g_.values.size(), 0);
    for (const Node& n : old)
      for (int v : n.inputs)
        if (v >= 0) ++consumers_[size_t(v)];
    for (int v : g_.outputs) consumers_[size_t(v)] += 1 << 20;  // a graph output is never folded away
    std::set<size_t> folded;  // Relu nodes merged into the op before them
    for (size_t i = 0; i < old.size(); ++i) {
      if (folded.count(i)) continue;
      Node& n = old[i];
      // state to restore when the node turns out not to be quantizable halfway through
      const size_t before = g_.nodes.size();
      const auto twin0 = twin_;
      const auto params0 = params_;
      const auto folded0 = folded;
      bool done = false;
      try {
        done = opts_.dynamic ? dynamic_node(n) : static_node(n, old, i, folded);
      } catch (const Skip& s) {
        g_.nodes.erase(g_.nodes.begin() + std::ptrdiff_t(before), g_.nodes.end());  // nothing half-written stays
        twin_ = twin0;
        params_ = params0;
        folded = folded0;
        rep_.skipped.push_back({n.name, n.op_type, s.why});
      }
      if (!done) g_.nodes.push_back(std::move(n));
    }
    reindex(g_);
    // the DequantizeLinears nothing reads (and the float weights now unread) go
    OptimizeOptions oo;
    OptimizeReport rep;
    PassContext pc{m_, g_, oo, rep};
    remove_dead_nodes(pc);
  }

 private:
  struct Skip {
    std::string why;
  };

  int value(const std::string& hint) { return g_.add_value(unique_value_name(g_, hint)); }
  int constant(const std::string& hint, Tensor t) { return add_constant(g_, hint, std::move(t)); }
  Node& emit(const std::string& op, const std::string& name, std::vector<int> in, std::vector<int> out,
             const std::string& domain = "") {
    Node n;
    n.op_type = op;
    n.domain = domain;
    n.opset = domain.empty() ? opset_ : 1;
    n.name = name;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    g_.nodes.push_back(std::move(n));
    if (!domain.empty() && !m_.opsets.count(domain)) m_.opsets[domain] = 1;
    return g_.nodes.back();
  }
  // A copy (sharing the storage) of constant v when it is a non-empty float tensor of that rank: a
  // copy, because adding constants grows g_.values and moves the ValueDefs.
  std::optional<Tensor> float_constant(int v, int rank) const {
    const Tensor* t = v >= 0 ? constant_of(g_, v) : nullptr;
    if (t && t->dtype() == DType::Float && t->rank() == rank && t->numel() > 0) return *t;
    return std::nullopt;
  }
  const std::string& name(int v) const { return g_.values[size_t(v)].name; }
  void count(const char* op) { ++rep_.quantized[op]; }

  // ---- dynamic ---------------------------------------------------------------------------
  bool dynamic_node(const Node& n) {
    if (!is_op(n, "MatMul") || n.inputs.size() != 2) return false;
    const std::optional<Tensor> b = float_constant(n.inputs[1], 2);
    if (!b) throw Skip{"B " + name(n.inputs[1]) + " is not a constant 2-D float matrix"};
    const int64_t K = b->dim(0), N = b->dim(1);
    const int a = n.inputs[0];
    auto it = dql_.find(a);
    if (it == dql_.end()) {
      const int aq = value(name(a) + "_quantized"), as = value(name(a) + "_scale"), az = value(name(a) + "_zero_point");
      emit("DynamicQuantizeLinear", name(a) + "_DynamicQuantizeLinear", {a}, {aq, as, az});
      it = dql_.emplace(a, std::array<int, 3>{aq, as, az}).first;
    }
    const auto [aq, as, az] = it->second;
    QWeights w = quantize_weights(*b, N, 1, N, opts_.per_channel);  // column j: elements j + k * N
    rep_.float_weight_bytes += size_t(b->numel()) * 4;
    rep_.int8_weight_bytes += size_t(b->numel());
    const int bq = constant(name(n.inputs[1]) + "_quantized", std::move(w.q));
    const int bs = constant(name(n.inputs[1]) + "_scale", std::move(w.scale));
    const int bz = constant(name(n.inputs[1]) + "_zero_point", std::move(w.zp));
    (void)K;
    const int yi = value(n.name + "_int32"), yf = value(n.name + "_float"), s = value(n.name + "_scale");
    emit("MatMulInteger", n.name + "_MatMulInteger", {aq, bq, az, bz}, {yi});
    Node& cast = emit("Cast", n.name + "_Cast", {yi}, {yf});
    cast.attrs.push_back(make_attr_int("to", int64_t(DType::Float)));
    emit("Mul", n.name + "_scales_mul", {as, bs}, {s});
    emit("Mul", n.name + "_output_mul", {yf, s}, {n.outputs[0]});
    count("MatMul");
    return true;
  }

  // ---- static ----------------------------------------------------------------------------
  const ActivationRange* range_of(int v) const {
    auto it = opts_.ranges.find(name(v));
    return it == opts_.ranges.end() ? nullptr : &it->second;
  }
  // The uint8 twin of float value v: one made before, or a QuantizeLinear of v with its range.
  int quantized(int v, const char* what) {
    if (auto it = twin_.find(v); it != twin_.end()) return it->second;
    const ActivationRange* r = range_of(v);
    if (!r) throw Skip{std::string(what) + " " + name(v) + " has no calibrated range"};
    const QParams p = activation_params(*r);
    const int q = value(name(v) + "_quantized");
    const int s = constant(name(v) + "_scale", Tensor::scalar(p.scale)), z = constant(name(v) + "_zero_point", Tensor::scalar(p.zp));
    emit("QuantizeLinear", name(v) + "_QuantizeLinear", {v, s, z}, {q});
    twin_[v] = q;
    params_[q] = {s, z};
    return q;
  }
  // A uint8 output value for float value `out` (range known), with its scale and zero point.
  int quant_output(int out, bool relu) {
    const ActivationRange* r = range_of(out);
    if (!r) throw Skip{"output " + name(out) + " has no calibrated range"};
    ActivationRange rr = *r;
    if (relu) {
      rr.lo = 0.f;  // zero point 0: the uint8 floor is the activation's floor
      rr.hi = std::min(rr.hi, fold_hi_);
    }
    const QParams p = activation_params(rr);
    const int q = value(name(out) + "_quantized");
    params_[q] = {constant(name(out) + "_scale", Tensor::scalar(p.scale)), constant(name(out) + "_zero_point", Tensor::scalar(p.zp))};
    return q;
  }
  // DequantizeLinear of q back into the float value `out` (removed later if nothing reads it).
  void dequantize(int q, int out) {
    const auto [s, z] = params_.at(q);
    emit("DequantizeLinear", name(out) + "_DequantizeLinear", {q, s, z}, {out});
    twin_[out] = q;
  }
  // The upper bound of a Clip(0, hi) (ReLU6 and the like), or false when c is no such Clip.
  bool clip_from_zero(const Node& c, float& hi) const {
    if (!is_op(c, "Clip")) return false;
    float lo = -std::numeric_limits<float>::infinity();
    hi = std::numeric_limits<float>::infinity();
    if (c.opset < 11) {
      lo = c.attr_float("min", lo);
      hi = c.attr_float("max", hi);
    } else {
      for (int k : {1, 2}) {
        if (int(c.inputs.size()) <= k || c.inputs[size_t(k)] < 0) continue;
        const Tensor* t = constant_of(g_, c.inputs[size_t(k)]);
        if (!t || t->numel() != 1 || t->dtype() != DType::Float) return false;
        (k == 1 ? lo : hi) = t->data<float>()[0];
      }
    }
    return lo == 0.f && hi > 0.f;
  }
  // The node's output, or the output of a Relu or Clip(0, hi) right after it that can be folded
  // in (the output is then quantized from 0, and to at most hi).
  int output_with_relu(const Node& n, std::vector<Node>& old, size_t i, std::set<size_t>& folded, bool& relu) {
    relu = false;
    fold_hi_ = std::numeric_limits<float>::infinity();
    const int y = n.outputs[0];
    if (consumers_[size_t(y)] != 1) return y;
    for (size_t k = i + 1; k < old.size(); ++k) {
      const Node& c = old[k];
      if (std::find(c.inputs.begin(), c.inputs.end(), y) == c.inputs.end()) continue;
      float hi = 0.f;
      if ((is_op(c, "Relu") || (clip_from_zero(c, hi) && c.inputs[0] == y)) && range_of(c.outputs[0])) {
        folded.insert(k);
        relu = true;
        if (is_op(c, "Clip")) fold_hi_ = hi;
        return c.outputs[0];
      }
      break;
    }
    return y;
  }

  bool static_node(const Node& n, std::vector<Node>& old, size_t i, std::set<size_t>& folded) {
    if (is_op(n, "Conv")) return conv(n, old, i, folded);
    if (is_op(n, "MatMul") && n.inputs.size() == 2) return matmul(n, old, i, folded);
    if ((is_op(n, "Add") || is_op(n, "Sum")) && n.inputs.size() == 2) return add(n, old, i, folded);
    static const std::set<std::string> moves = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"};
    if (canonical_domain(n.domain).empty() && moves.count(n.op_type) && !n.inputs.empty() && twin_.count(n.inputs[0]) &&
        (n.op_type != "MaxPool" || ((n.outputs.size() == 1 || n.outputs[1] < 0) && n.opset >= 12))) {  // 8-bit MaxPool: opset 12
      const int q = twin_.at(n.inputs[0]);
      const int y = value(name(n.outputs[0]) + "_quantized");
      Node c;
      c.op_type = n.op_type;
      c.domain = n.domain;
      c.opset = n.opset;
      c.name = n.name;
      c.attrs = n.attrs;
      c.inputs = n.inputs;
      c.inputs[0] = q;
      c.outputs = {y};
      g_.nodes.push_back(std::move(c));
      params_[y] = params_.at(q);
      dequantize(y, n.outputs[0]);
      count(n.op_type.c_str());
      return true;
    }
    return false;
  }

  bool conv(const Node& n, std::vector<Node>& old, size_t i, std::set<size_t>& folded) {
    const std::optional<Tensor> w = n.inputs.size() > 1 ? float_constant(n.inputs[1], 4) : std::nullopt;
    if (!w) throw Skip{"W is not a constant 4-D float tensor (only 2-D convolutions are quantized)"};
    const int64_t M = w->dim(0), inner = w->numel() / M;
    const std::optional<Tensor> b = n.inputs.size() > 2 && n.inputs[2] >= 0 ? float_constant(n.inputs[2], 1) : std::nullopt;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && (!b || b->numel() != M)) throw Skip{"B is not a constant float vector"};
    const int xq = quantized(n.inputs[0], "input");
    bool relu = false;
    const int out = output_with_relu(n, old, i, folded, relu);
    const int yq = quant_output(out, relu);
    const auto [xs, xz] = params_.at(xq);
    const float xsv = constant_of(g_, xs)->data<float>()[0];  // read now: later constants move the ValueDefs
    // the int32 bias is B / (x_scale * w_scale): a channel whose weights are all but zero (a dead
    // channel after BatchNormalization folding) gets a weight scale large enough that its bias
    // stays within 2^30, instead of a bias saturated at the int32 limit
    std::vector<float> floor(static_cast<size_t>(M), 0.f);
    if (b)
      for (int64_t m = 0; m < M; ++m) floor[size_t(m)] = float(std::fabs(double(b->data<float>()[m])) / (double(xsv) * 1073741824.0));
    QWeights qw = quantize_weights(*w, M, inner, 1, opts_.per_channel, &floor);
    rep_.float_weight_bytes += size_t(w->numel()) * 4;
    rep_.int8_weight_bytes += size_t(w->numel());
    std::vector<int> in = {xq, xs, xz, -1, -1, -1, params_.at(yq).first, params_.at(yq).second};
    if (b) {
      Tensor bq(DType::Int32, {M});
      for (int64_t m = 0; m < M; ++m) {
        const double s = double(xsv) * double(qw.scale.data<float>()[qw.scale.numel() == 1 ? 0 : m]);
        bq.data<int32_t>()[m] = int32_t(std::clamp(std::nearbyint(double(b->data<float>()[m]) / s), -2147483647.0, 2147483647.0));
      }
      in.push_back(constant(name(n.inputs[2]) + "_quantized", std::move(bq)));
    }
    in[3] = constant(name(n.inputs[1]) + "_quantized", std::move(qw.q));
    in[4] = constant(name(n.inputs[1]) + "_scale", std::move(qw.scale));
    in[5] = constant(name(n.inputs[1]) + "_zero_point", std::move(qw.zp));
    Node& q = emit("QLinearConv", n.name + "_quant", std::move(in), {yq});
    q.attrs = n.attrs;
    dequantize(yq, out);
    count(relu ? "Conv+Relu/Clip" : "Conv");
    return true;
  }

  bool matmul(const Node& n, std::vector<Node>& old, size_t i, std::set<size_t>& folded) {
    const std::optional<Tensor> b = float_constant(n.inputs[1], 2);
    if (!b) throw Skip{"B " + name(n.inputs[1]) + " is not a constant 2-D float matrix"};
    const int64_t N = b->dim(1);
    const int aq = quantized(n.inputs[0], "input");
    bool relu = false;
    const int out = output_with_relu(n, old, i, folded, relu);
    const int yq = quant_output(out, relu);
    QWeights qw = quantize_weights(*b, N, 1, N, opts_.per_channel);
    rep_.float_weight_bytes += size_t(b->numel()) * 4;
    rep_.int8_weight_bytes += size_t(b->numel());
    const auto [as, az] = params_.at(aq);
    const int bq = constant(name(n.inputs[1]) + "_quantized", std::move(qw.q));
    const int bs = constant(name(n.inputs[1]) + "_scale", std::move(qw.scale));
    const int bz = constant(name(n.inputs[1]) + "_zero_point", std::move(qw.zp));
    emit("QLinearMatMul", n.name + "_quant", {aq, as, az, bq, bs, bz, params_.at(yq).first, params_.at(yq).second}, {yq});
    dequantize(yq, out);
    count(relu ? "MatMul+Relu/Clip" : "MatMul");
    return true;
  }

  bool add(const Node& n, std::vector<Node>& old, size_t i, std::set<size_t>& folded) {
    const int a = n.inputs[0], b = n.inputs[1];
    if (constant_of(g_, a) || constant_of(g_, b)) return false;  // a bias: stays float
    if (!twin_.count(a) && !twin_.count(b)) return false;        // nothing quantized feeds it
    const int qa = quantized(a, "input"), qb = quantized(b, "input");
    bool relu = false;
    const int out = output_with_relu(n, old, i, folded, relu);
    const int yq = quant_output(out, relu);
    emit("QLinearAdd", n.name + "_quant",
         {qa, params_.at(qa).first, params_.at(qa).second, qb, params_.at(qb).first, params_.at(qb).second, params_.at(yq).first,
          params_.at(yq).second},
         {yq}, "com.microsoft");
    dequantize(yq, out);
    count(relu ? "Add+Relu/Clip" : "Add");
    return true;
  }

  Model& m_;
  Graph& g_;
  const QuantizeOptions& opts_;
  QuantizeReport& rep_;
  int opset_ = 0;
  float fold_hi_ = 0.f;  // the folded Clip's upper bound (infinity for a Relu)
  std::vector<int> consumers_;
  std::map<int, std::array<int, 3>> dql_;     // float A -> DynamicQuantizeLinear outputs
  std::map<int, int> twin_;                   // float value -> its uint8 twin
  std::map<int, std::pair<int, int>> params_;  // uint8 value -> (scale, zero point) constants
};

}  // namespace

namespace {

// Raises an ai.onnx import below 12 to 12 (the quantization ops need 10 and 11, an 8-bit MaxPool
// 12), as ONNX Runtime's quantizer raises old models to 11, where every op of the graph means the
// same at 12 as at its opset (those below, from the opset changelog: the changes up to 12 add
// types, negative axes or optional attributes with the old default). A model at 11 with another
// op stays at 11 (its MaxPools stay float); below 11 that is an error naming the op.
void upgrade_opset(Model& m, QuantizeReport& report) {
  const int64_t opset = m.opsets.count("") ? m.opsets.at("") : 0;
  if (opset >= 12) return;
  static const std::set<std::string> same_at_12 = {
      "Abs", "Add", "And", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Concat", "Constant",
      "Conv", "ConvTranspose", "Div", "Elu", "Equal", "Erf", "Exp", "Flatten", "Floor", "Gather", "Gemm",
      "GlobalAveragePool", "GlobalMaxPool", "Greater", "HardSigmoid", "Identity", "InstanceNormalization", "LRN",
      "LeakyRelu", "Less", "Log", "LogSoftmax", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Not", "Or",
      "PRelu", "Pow", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "Relu", "Reshape", "Selu",
      "Shape", "Sigmoid", "Sign", "Sin", "Cos", "Size", "Softmax", "Softplus", "Softsign", "Sqrt", "Squeeze", "Sub",
      "Sum", "Tanh", "Tile", "Transpose", "Unsqueeze", "Where", "Xor"};
  for (const Node& n : m.graph->nodes)
    if (canonical_domain(n.domain).empty() && !same_at_12.count(n.op_type)) {
      if (opset >= 11) return;
      BASALT_THROW(InvalidModel, "quantization needs ai.onnx opset 11 or newer; the model imports " + std::to_string(opset) +
                                     ", and its node '" + n.name + "' (" + n.op_type +
                                     ") may mean something else at 11: convert the model to opset 11 first");
    }
  for (Node& n : m.graph->nodes)
    if (canonical_domain(n.domain).empty()) n.opset = 12;
  m.opsets[""] = 12;
  report.opset_upgraded_from = opset;
}

}  // namespace

void quantize_model(Model& m, const QuantizeOptions& opts, QuantizeReport& report) {
  if (!m.graph) BASALT_THROW(InvalidModel, "the model has no graph");
  upgrade_opset(m, report);
  Rewriter(m, opts, report).run();
}

std::vector<std::string> calibration_values(const Model& m) {
  std::set<std::string> names;
  const Graph& g = *m.graph;
  for (int v : g.inputs)
    if (!g.values[size_t(v)].is_initializer) names.insert(g.values[size_t(v)].name);
  for (const Node& n : g.nodes) {
    const bool wanted = canonical_domain(n.domain).empty() &&
                        (n.op_type == "Conv" || n.op_type == "MatMul" || n.op_type == "Add" || n.op_type == "Sum" || n.op_type == "Relu" ||
                         n.op_type == "Clip");
    if (!wanted) continue;
    for (int v : n.inputs)
      if (v >= 0 && !constant_of(g, v)) names.insert(g.values[size_t(v)].name);
    for (int v : n.outputs)
      if (v >= 0) names.insert(g.values[size_t(v)].name);
  }
  return {names.begin(), names.end()};
}

}  // namespace basalt
