// Layout pass (level All): chains of convolutions and pools run on blocked tensors (kernels/
// nchwc.hpp), converted only where a chain meets an op that wants NCHW.
//
// Rewrites (docs/fused_ops.md, "Blocked layout"), for chains of at least two convs with at most
// one reorder per two convs, and for a stem conv (plain input) alone with at most one reorder:
//   Conv / basalt::FusedConv (2-D, float, constant W and B, group 1 or depthwise, explicit pads)
//       -> basalt::NchwcConv; its input is blocked when the producer's output is, plain NCHW for
//          an input with few channels (<= 8: the first conv), else a basalt::ReorderToNchwc
//          in front. 3x3 stride-1 convs that Winograd wins run it on the blocked tensors from 64
//          inputs and 32 outputs, and on CPUs with one 512-bit FMA per cycle also from 16 inputs
//          with 64+ outputs (kernels::nchwc::winograd_tile); narrower ones stay NCHW
//          (nchw_winograd), where Winograd is faster.
//   MaxPool / AveragePool (2-D, blocked input, no indices) -> basalt::NchwcMaxPool / NchwcAveragePool
//   GlobalAveragePool / GlobalMaxPool (blocked input) -> basalt::NchwcGlobalAveragePool / ...MaxPool
//       with an NCHW output (the chain ends there without a reorder)
//   BatchNormalization / basalt::FusedBatchNormalization (inference, constant parameters, an
//       activation with act(0) = 0; blocked input) -> basalt::NchwcBatchNormalization
//   Concat on channels (blocked inputs, every channel count a multiple of 16) -> Concat axis 1 of
//       the blocked tensors; Add of two blocked tensors of the same shape, Relu -> the same op on
//       the blocked tensors.
// A blocked value read by anything else (or a graph output) gets one basalt::ReorderFromNchwc.
#include "kernels/cpu.hpp"
#include "core/config.hpp"
#include "kernels/nchwc.hpp"
#include "kernels/winograd.hpp"
#include "opt/passes.hpp"
#include "ops/common.hpp"

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>

namespace basalt {

namespace {

bool std_op(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

bool env_disabled() {
  return !env_config().nchwc;
}

// Explicit 2-D pads of a conv or pool: auto_pad NOTSET / VALID only.
bool explicit_pads(const Node& n, std::string& why) {
  const std::optional<AutoPad> ap = auto_pad_of(n);
  if (!ap || (*ap != AutoPad::NotSet && *ap != AutoPad::Valid)) {
    why = "auto_pad " + n.attr_string("auto_pad", "");
    return false;
  }
  return true;
}

bool two_d(const Node& n, const char* attr, size_t want) {
  if (!n.has_attr(attr)) return true;
  return n.attr_ints(attr).size() == want;
}

}  // namespace

namespace {

// The layout pass's state over one graph: which nodes convert (kind), the logical channel count
// of every value that will be blocked (channels), and the nodes that must stay NCHW because their
// chain of blocked ops is not worth its reorders (forbidden).
struct NchwcLayout {
  static constexpr const char* kPattern = "NCHWc layout";
  PassContext& ctx;
  Graph& g;
  GraphIndex idx;
  const StaticShapes st;
  const size_t nv;
  std::vector<int64_t> channels;  // channels[v] > 0: value v will be blocked (its logical channel count)
  std::vector<int> kind;          // 0 = unchanged, 1 = converted
  std::vector<bool> plain_input, forbidden;
  std::vector<char> is_conv;
  bool first_round = true;        // a candidate's reasons are reported in the first round only

  explicit NchwcLayout(PassContext& c)
      : ctx(c), g(c.graph), idx(c.graph), st(infer_static_shapes(c.graph)), nv(c.graph.values.size()), channels(nv, 0),
        kind(g.nodes.size(), 0), plain_input(g.nodes.size(), false), forbidden(g.nodes.size(), false),
        is_conv(g.nodes.size(), 0) {}

  bool blocked(int v) const { return v >= 0 && size_t(v) < nv && channels[size_t(v)] > 0; }
  void reject(const Node& n, const std::string& why) {
    if (first_round) ctx.reject(kPattern, n, why);
  }

  // Marks every node that can run blocked, given which of its inputs are (node order).
  void mark_candidates() {
    std::fill(channels.begin(), channels.end(), 0);
    std::fill(kind.begin(), kind.end(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (forbidden[i] || n.outputs.empty() || n.outputs[0] < 0) continue;
      if (std_op(n, "Conv") || (n.domain == "basalt" && n.op_type == "FusedConv")) conv_candidate(i, n);
      else other_candidate(i, n);
    }
  }

  void conv_candidate(size_t i, const Node& n) {
    const int out = n.outputs[0];
    std::string why;
    const Tensor* w = n.inputs.size() > 1 ? constant_of(g, n.inputs[1]) : nullptr;
    if (!w || w->dtype() != DType::Float || w->rank() != 4 || !w->raw()) {
      reject(n, "W is not a constant float32 4-D tensor");
      return;
    }
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      const Tensor* b = constant_of(g, n.inputs[2]);
      if (!b || b->dtype() != DType::Float || b->numel() != w->dim(0) || !b->raw()) {
        reject(n, "B is not a constant float32 vector");
        return;
      }
    }
    if (!explicit_pads(n, why) || !two_d(n, "strides", 2) || !two_d(n, "dilations", 2) || !two_d(n, "pads", 4)) {
      reject(n, why.empty() ? "not a 2-D window" : why);
      return;
    }
    if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != std::vector<int64_t>{w->dim(2), w->dim(3)}) {
      reject(n, "kernel_shape does not match W");  // the Conv kernel reports it
      return;
    }
    kernels::Conv2dShape s;
    s.G = n.attr_int("group", 1);
    s.M = w->dim(0);
    s.C = w->dim(1) * s.G;
    s.KH = w->dim(2);
    s.KW = w->dim(3);
    auto st2 = n.attr_ints("strides", {1, 1}), di = n.attr_ints("dilations", {1, 1});
    s.sh = st2[0], s.sw = st2[1], s.dh = di[0], s.dw = di[1];
    const bool input_blocked = blocked(n.inputs[0]);
    const bool plain = !input_blocked && s.C <= 8 && s.G == 1;
    if (!kernels::nchwc::conv_supported(s, plain)) {
      reject(n, "grouped conv that is not depthwise");
      return;
    }
    if (input_blocked && channels[size_t(n.inputs[0])] != s.C) return;  // malformed: leave to the kernel
    Shape xs;
    const int64_t pixels = st.get(n.inputs[0], xs) && xs.size() == 4 ? xs[2] * xs[3] : -1;
    if (ctx.opts.winograd && kernels::nchwc::nchw_winograd(s, plain, pixels)) {
      reject(n, "3x3 conv left to Winograd in NCHW (too few channels for blocked Winograd)");
      return;
    }
    kind[i] = 1;
    plain_input[i] = plain;
    is_conv[i] = 1;
    channels[size_t(out)] = s.M;
  }

  // Pools, Concat along C, Add of two blocked tensors, inference BatchNormalization, Relu.
  void other_candidate(size_t i, const Node& n) {
    const int out = n.outputs[0];
    const bool in0_blocked = !n.inputs.empty() && blocked(n.inputs[0]);  // (a fuzzed node may have no input)
    std::string why;
    if ((std_op(n, "MaxPool") || std_op(n, "AveragePool")) && in0_blocked) {
      if (n.outputs.size() > 1 && n.outputs[1] >= 0) return;  // indices
      if (n.attr_int("storage_order", 0) != 0 || !explicit_pads(n, why) || n.attr_ints("kernel_shape", {}).size() != 2) return;
      kind[i] = 1;
      channels[size_t(out)] = channels[size_t(n.inputs[0])];
    } else if ((std_op(n, "GlobalAveragePool") || std_op(n, "GlobalMaxPool")) && in0_blocked) {
      kind[i] = 1;  // output stays NCHW
    } else if (std_op(n, "Concat") && !n.inputs.empty()) {
      int64_t ax = n.attr_int("axis", 0), total = 0;
      bool ok = ax == 1 || ax == -3;
      for (int v : n.inputs) {
        if (!ok) break;
        ok = blocked(v) && channels[size_t(v)] % kernels::nchwc::kBlock == 0;
        if (ok) total += channels[size_t(v)];
      }
      if (!ok) return;
      kind[i] = 1;
      channels[size_t(out)] = total;
    } else if (std_op(n, "Add") && n.inputs.size() == 2 && blocked(n.inputs[0]) && blocked(n.inputs[1])) {
      Shape a, b;
      if (!st.get_symbolic(n.inputs[0], a) || !st.get_symbolic(n.inputs[1], b) || a != b) return;
      kind[i] = 1;
      channels[size_t(out)] = channels[size_t(n.inputs[0])];
    } else if ((std_op(n, "BatchNormalization") || (n.domain == "basalt" && n.op_type == "FusedBatchNormalization")) &&
               in0_blocked) {
      // Inference batch norm (DenseNet's, after a concat, does not fold into a conv) with constant
      // float32 parameters, one per channel, and an activation that keeps 0 at 0.
      bool ok = n.inputs.size() == 5 && std::all_of(n.outputs.begin() + 1, n.outputs.end(), [](int o) { return o < 0; });
      if (n.domain.empty()) ok = ok && n.attr_int("training_mode", 0) == 0 && n.attr_int("spatial", 1) != 0;
      for (size_t k = 1; ok && k < 5; ++k) {
        const Tensor* t = constant_of(g, n.inputs[k]);
        ok = t && t->dtype() == DType::Float && t->rank() == 1 && t->numel() == channels[size_t(n.inputs[0])] && t->raw();
      }
      kernels::Activation act;
      std::string err;
      if (n.domain == "basalt")
        ok = ok && kernels::parse_activation(n.attr_string("activation", ""), n.attr_floats("activation_params", {}), act, &err) &&
             kernels::apply_activation(act, 0.f) == 0.f;
      if (!ok) return;
      kind[i] = 1;
      channels[size_t(out)] = channels[size_t(n.inputs[0])];
    } else if (std_op(n, "Relu") && in0_blocked) {
      kind[i] = 1;
      channels[size_t(out)] = channels[size_t(n.inputs[0])];
    }
  }

  // Keeps the chains worth converting; forbids the nodes of the others. Returns whether nothing
  // changed (the candidates are stable).
  bool prune_chains() {
    // Chains (nodes joined by blocked values) that are worth it: at least two convs and at most one
    // reorder (in or out) per two convs, or a stem alone (below). Measured on the benchmark models
    // (README): a single conv between grouped ones (ShuffleNet) runs slower blocked (as DenseNet's
    // two-conv chains did while its batch norms ran NCHW); longer chains run faster (ResNet-50 1t
    // 76 -> 73 ms, 2t 46 -> 40 ms; MobileNetV2, SqueezeNet, Inception v1).
    std::vector<int> root(g.nodes.size());
    for (size_t i = 0; i < root.size(); ++i) root[i] = int(i);
    std::function<int(int)> find = [&](int i) { return root[size_t(i)] == i ? i : root[size_t(i)] = find(root[size_t(i)]); };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!kind[i]) continue;
      for (int v : g.nodes[i].inputs)
        if (blocked(v)) root[size_t(find(int(i)))] = find(g.values[size_t(v)].producer);
  }
  std::vector<int> convs(g.nodes.size(), 0), reorders(g.nodes.size(), 0), stem(g.nodes.size(), 0);
  std::vector<int> to_seen(nv, -1);  // component that already counted a reorder of this plain value
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (kind[i]) {
      const Node& n = g.nodes[i];
      const int r = find(int(i));
      convs[size_t(r)] += is_conv[i];
      if (is_conv[i] && plain_input[i]) stem[size_t(r)] = 1;
      // reorders into the chain: NCHW inputs of convs (data unless plain_input, residual)
      if (is_conv[i])
        for (size_t k : {size_t(0), size_t(3)}) {
          if (k >= n.inputs.size() || n.inputs[k] < 0 || blocked(n.inputs[k]) || (k == 0 && plain_input[i])) continue;
          if (to_seen[size_t(n.inputs[k])] != r) ++reorders[size_t(r)];
          to_seen[size_t(n.inputs[k])] = r;
        }
      // and out of it: a blocked output read by a node left NCHW, a subgraph or the caller
      const int out = n.outputs[0];
      if (blocked(out)) {
        bool plain_reader = idx.is_graph_output(out) || idx.captured(out);
        for (int c : idx.consumers(out)) plain_reader = plain_reader || !kind[size_t(c)];
        reorders[size_t(r)] += plain_reader;
      }
    }
  bool stable = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!kind[i]) continue;
    const int r = find(int(i));
    if (convs[size_t(r)] >= 2 && 2 * reorders[size_t(r)] <= convs[size_t(r)]) continue;
    // A stem alone (one conv on a plain NCHW input of few channels, with at most one reorder in
    // or out): the blocked kernel reads the plain input in place, where the NCHW path packs an
    // im2col of K = 27 (3x3) or 147 (7x7) rows for a narrow GEMM. basalt profile / compare_nodes.py,
    // 1 thread: UNet-lite's 3 -> 16 3x3 at 256x256 1.42 -> 0.81 ms + 0.27 ms of reorder, Inception
    // v1's 3 -> 64 7x7 at 224x224 (with its max pool) 2.99 -> 2.21 ms + 0.02.
    if (convs[size_t(r)] == 1 && reorders[size_t(r)] <= 1 && stem[size_t(r)]) continue;
    forbidden[i] = true;
    stable = false;
    if (is_conv[i]) ctx.reject(kPattern, g.nodes[i], "its chain of blocked ops is not worth the reorders");
  }
  return stable;
  }

  // Rewrites the graph: converted nodes write new blocked values; reorders at the chains' ends.
  void rewrite() {
    std::vector<int> bval(nv, -1);       // blocked twin of a blocked value
    std::map<std::pair<int, int64_t>, int> to_blk;  // ReorderToNchwc output for (plain value, channels)
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size() + 16);
    int converted = 0;
    auto new_value = [&](const std::string& hint) {
      int id = g.add_value(unique_value_name(g, hint));
      ValueDef& d = g.values[size_t(id)];
      d.type.kind = TypeInfo::Kind::Tensor;
      d.type.elem = DType::Float;
      return id;
    };
    // Appends a basalt reorder node `op` (in -> out, with its `channels` attribute).
    auto add_reorder = [&](const char* op, const std::string& name, int in, int out, int64_t c) {
      Node r;
      r.name = unique_value_name(g, name);
      r.op_type = op;
      r.domain = "basalt";
      r.opset = 1;
      r.inputs = {in};
      r.outputs = {out};
      r.attrs.push_back(make_attr_int("channels", c));
      nodes.push_back(std::move(r));
    };
    // A blocked version of plain value v (a reorder node, made once), which must have `c` channels:
    // the reorder checks it (a blocked tensor no longer says how many of its last block's channels
    // are real, so a mismatch would otherwise go unnoticed).
    auto blocked_input = [&](int v, const Node& user, int64_t c) {
      if (blocked(v)) return bval[size_t(v)];
      auto it = to_blk.find({v, c});
      if (it != to_blk.end()) return it->second;
      const int b = new_value(g.values[size_t(v)].name + "_nchwc");
      add_reorder("ReorderToNchwc", user.name + "_to_nchwc", v, b, c);
      to_blk[{v, c}] = b;
      return b;
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node n = std::move(g.nodes[i]);
      if (!kind[i]) {
        nodes.push_back(std::move(n));
        continue;
      }
      ++converted;
      const int out = n.outputs[0];
      const bool global = n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool";
      if (n.op_type == "Conv" || n.op_type == "FusedConv") {
        const Tensor* w = constant_of(g, n.inputs[1]);  // (checked above: a 4-D float constant)
        const int64_t cin = w->dim(1) * n.attr_int("group", 1), cout = w->dim(0);
        if (!plain_input[i]) n.inputs[0] = blocked_input(n.inputs[0], n, cin);
        if (n.inputs.size() > 3 && n.inputs[3] >= 0) n.inputs[3] = blocked_input(n.inputs[3], n, cout);
        if (plain_input[i]) set_attr(n, make_attr_int("plain_input", 1));
        if (auto_pad_of(n) == AutoPad::Valid) remove_attr(n, "pads");
        remove_attr(n, "auto_pad");  // NOTSET or VALID: the pads say it
        n.op_type = "NchwcConv";
      } else if (global) {
        set_attr(n, make_attr_int("channels", channels[size_t(n.inputs[0])]));
        n.inputs[0] = bval[size_t(n.inputs[0])];
        n.op_type = n.op_type == "GlobalAveragePool" ? "NchwcGlobalAveragePool" : "NchwcGlobalMaxPool";
      } else if (n.op_type == "MaxPool" || n.op_type == "AveragePool") {
        n.inputs[0] = bval[size_t(n.inputs[0])];
        if (auto_pad_of(n) == AutoPad::Valid) remove_attr(n, "pads");
        remove_attr(n, "auto_pad");
        n.op_type = n.op_type == "MaxPool" ? "NchwcMaxPool" : "NchwcAveragePool";
      } else if (n.op_type == "BatchNormalization" || n.op_type == "FusedBatchNormalization") {
        n.inputs[0] = bval[size_t(n.inputs[0])];
        n.outputs.resize(1);
        for (const char* a : {"momentum", "spatial", "training_mode"}) remove_attr(n, a);
        n.op_type = "NchwcBatchNormalization";
      } else {  // Concat, Add, Relu: the same standard op on blocked tensors
        for (int& v : n.inputs) v = bval[size_t(v)];
        if (n.op_type == "Concat") set_attr(n, make_attr_int("axis", 1));
      }
      if (n.op_type != "Concat" && n.op_type != "Add" && n.op_type != "Relu") {
        n.domain = "basalt";
        n.opset = 1;
      }
      if (global) {
        nodes.push_back(std::move(n));
        continue;
      }
      const int b = new_value(g.values[size_t(out)].name + "_nchwc");
      bval[size_t(out)] = b;
      n.outputs[0] = b;
      const std::string name = n.name;
      nodes.push_back(std::move(n));
      // Consumers that stay NCHW (or a graph output / a subgraph capture) read a reorder.
      bool plain_reader = idx.is_graph_output(out) || idx.captured(out);
      for (int c : idx.consumers(out))
        if (!kind[size_t(c)]) plain_reader = true;
      if (plain_reader) {
        add_reorder("ReorderFromNchwc", name + "_from_nchwc", b, out, channels[size_t(out)]);
      }
  }
  g.nodes = std::move(nodes);
  reindex(g);
  for (int k = 0; k < converted; ++k) ctx.applied(kPattern);
  import_basalt_domain(ctx.model);
  }
};

}  // namespace

void layout_nchwc(PassContext& ctx) {
  if (env_disabled() || kernels::best_isa() < kernels::Isa::Avx2) return;
  NchwcLayout pass(ctx);
  for (bool stable = false; !stable; pass.first_round = false) {
    pass.mark_candidates();
    stable = pass.prune_chains();
  }
  if (std::find(pass.kind.begin(), pass.kind.end(), 1) == pass.kind.end()) return;
  pass.rewrite();
}

}  // namespace basalt
