// Reference kernels: recurrent ops (RNN, GRU, LSTM).
//
// One generic driver handles the three ops: for every direction and time step it computes the
// gate pre-activations  X_t * W^T + Wb + H_{t-1} * R^T + Rb  and then applies the op's cell
// equations (ONNX operator spec). Computation runs in float (double for double inputs).
#include "ops/common.hpp"

#include "kernels/eltwise.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace basalt {

namespace {

enum class ActKind { Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus };

struct Activation {
  ActKind kind = ActKind::Tanh;
  double alpha = 0, beta = 0;

  template <class C>
  C operator()(C x) const {
    switch (kind) {
      case ActKind::Relu: return x > C(0) ? x : C(0);
      case ActKind::Tanh: return std::tanh(x);
      case ActKind::Sigmoid: return C(1) / (C(1) + std::exp(-x));
      case ActKind::Affine: return C(alpha) * x + C(beta);
      case ActKind::LeakyRelu: return x >= C(0) ? x : C(alpha) * x;
      case ActKind::ThresholdedRelu: return x > C(alpha) ? x : C(0);
      case ActKind::ScaledTanh: return C(alpha) * std::tanh(C(beta) * x);
      case ActKind::HardSigmoid: return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
      case ActKind::Elu: return x >= C(0) ? x : C(alpha) * (std::exp(x) - C(1));
      case ActKind::Softsign: return x / (C(1) + std::abs(x));
      case ActKind::Softplus: return x > C(30) ? x : std::log1p(std::exp(x));
    }
    return x;
  }
};

enum class RnnKind { Rnn, Gru, Lstm };

struct RnnConfig {
  RnnKind kind = RnnKind::Rnn;
  int gates = 1;             // 1 (RNN), 3 (GRU), 4 (LSTM)
  int64_t hidden = -1;       // -1: infer from W
  int num_dir = 1;
  bool reverse_only = false; // direction == "reverse"
  bool has_clip = false;
  double clip = 0;
  int64_t layout = 0;
  bool input_forget = false;
  bool linear_before_reset = false;
  std::vector<Activation> acts;  // per direction: acts_per_dir entries
  int acts_per_dir = 1;
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

RnnConfig parse_config(const Node& n, RnnKind kind) {
  RnnConfig cfg;
  cfg.kind = kind;
  cfg.gates = kind == RnnKind::Rnn ? 1 : kind == RnnKind::Gru ? 3 : 4;
  cfg.acts_per_dir = kind == RnnKind::Rnn ? 1 : kind == RnnKind::Gru ? 2 : 3;
  if (n.has_attr("hidden_size")) {
    cfg.hidden = n.attr_int("hidden_size");
    if (cfg.hidden <= 0 || cfg.hidden > INT32_MAX)
      n.fail(ErrorCode::InvalidModel, "hidden_size must be in [1, 2^31), got " + std::to_string(cfg.hidden));
  }
  std::string dir = n.attr_string("direction", "forward");
  if (dir == "forward") cfg.num_dir = 1;
  else if (dir == "reverse") { cfg.num_dir = 1; cfg.reverse_only = true; }
  else if (dir == "bidirectional") cfg.num_dir = 2;
  else n.fail(ErrorCode::InvalidModel, "direction must be forward, reverse or bidirectional, got '" + dir + "'");
  if (n.has_attr("clip")) {
    cfg.has_clip = true;
    cfg.clip = n.attr_float("clip");
    if (!(cfg.clip > 0)) n.fail(ErrorCode::InvalidModel, "clip must be positive");
  }
  cfg.layout = n.opset >= 14 ? n.attr_int("layout", 0) : 0;
  if (cfg.layout != 0 && cfg.layout != 1) n.fail(ErrorCode::InvalidModel, "layout must be 0 or 1, got " + std::to_string(cfg.layout));
  if (kind == RnnKind::Lstm) cfg.input_forget = n.attr_int("input_forget", 0) != 0;
  if (kind == RnnKind::Gru) cfg.linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;

  std::vector<std::string> names = n.attr_strings("activations", {});
  if (names.empty()) {
    if (kind == RnnKind::Rnn) names = {"Tanh"};
    else if (kind == RnnKind::Gru) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  size_t want = size_t(cfg.acts_per_dir * cfg.num_dir);
  if (names.size() == size_t(cfg.acts_per_dir) && cfg.num_dir == 2) {
    std::vector<std::string> twice = names;
    twice.insert(twice.end(), names.begin(), names.end());
    names = twice;
  }
  if (names.size() != want)
    n.fail(ErrorCode::InvalidModel, "expected " + std::to_string(want) + " activations, got " + std::to_string(names.size()));
  std::vector<float> alphas = n.attr_floats("activation_alpha", {});
  std::vector<float> betas = n.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  for (const std::string& name : names) {
    std::string l = lower(name);
    Activation a;
    bool uses_alpha = false, uses_beta = false;
    if (l == "relu") a.kind = ActKind::Relu;
    else if (l == "tanh") a.kind = ActKind::Tanh;
    else if (l == "sigmoid") a.kind = ActKind::Sigmoid;
    else if (l == "affine") { a.kind = ActKind::Affine; a.alpha = 1.0; a.beta = 0.0; uses_alpha = uses_beta = true; }
    else if (l == "leakyrelu") { a.kind = ActKind::LeakyRelu; a.alpha = 0.01; uses_alpha = true; }
    else if (l == "thresholdedrelu") { a.kind = ActKind::ThresholdedRelu; a.alpha = 1.0; uses_alpha = true; }
    else if (l == "scaledtanh") { a.kind = ActKind::ScaledTanh; a.alpha = 1.0; a.beta = 1.0; uses_alpha = uses_beta = true; }
    else if (l == "hardsigmoid") { a.kind = ActKind::HardSigmoid; a.alpha = 0.2; a.beta = 0.5; uses_alpha = uses_beta = true; }
    else if (l == "elu") { a.kind = ActKind::Elu; a.alpha = 1.0; uses_alpha = true; }
    else if (l == "softsign") a.kind = ActKind::Softsign;
    else if (l == "softplus") a.kind = ActKind::Softplus;
    else n.fail(ErrorCode::Unsupported, "unknown activation function '" + name + "'");
    if (uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (uses_beta && bi < betas.size()) a.beta = betas[bi++];
    cfg.acts.push_back(a);
  }
  return cfg;
}

template <class C>
std::vector<C> load(const KernelContext& ctx, int i, DType want) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != want)
    ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " has type " + dtype_name(t.dtype()) + ", expected " + dtype_name(want));
  std::vector<C> v(size_t(t.numel()));
  visit_float(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (size_t k = 0; k < v.size(); ++k) {
      if constexpr (std::is_same_v<T, double>) v[k] = C(p[k]);
      else v[k] = C(float(p[k]));
    }
  });
  return v;
}

void check_shape(const KernelContext& ctx, int i, const Shape& want, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.shape() != want)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " has shape " + shape_str(t.shape()) + ", expected " + shape_str(want));
}

// The generic GRU cell (any activations, clip): gate order z, r, h; xw = x W + Wb and hr = h R + Rb
// per gate row; r is scratch for the reset gate.
template <class C, class Clip>
void gru_cell(const RnnConfig& cfg, const Activation* act, const C* xw, const C* hr, const C* Rd, const C* Rb, const C* h,
              int64_t H, C* r, C* hnew, Clip clipv) {
  for (int64_t k = 0; k < H; ++k) r[k] = act[0](clipv(xw[H + k] + hr[H + k]));
  for (int64_t k = 0; k < H; ++k) {
    C z = act[0](clipv(xw[k] + hr[k]));
    C pre;
    if (cfg.linear_before_reset) {
      pre = xw[2 * H + k] + r[k] * hr[2 * H + k];
    } else {
      C acc = Rb[2 * H + k];
      const C* rr = Rd + (2 * H + k) * H;
      for (int64_t j = 0; j < H; ++j) acc += rr[j] * (r[j] * h[j]);
      pre = xw[2 * H + k] + acc;
    }
    C hh = act[1](clipv(pre));
    hnew[k] = (C(1) - z) * hh + z * h[k];
  }
}

// The generic LSTM cell (any activations, clip, peepholes P = [Pi, Po, Pf] or null, input_forget):
// gate order i, o, f, c; updates the cell state c in place.
template <class C, class Clip>
void lstm_cell(const RnnConfig& cfg, const Activation* act, const C* xw, const C* hr, const C* P, int64_t H, C* c,
               C* hnew, Clip clipv) {
  for (int64_t k = 0; k < H; ++k) {
    C pi = P ? P[k] : C(0);
    C po = P ? P[H + k] : C(0);
    C pf = P ? P[2 * H + k] : C(0);
    C ig = act[0](clipv(xw[k] + hr[k] + pi * c[k]));
    C fg = cfg.input_forget ? C(1) - ig : act[0](clipv(xw[2 * H + k] + hr[2 * H + k] + pf * c[k]));
    C cc = act[1](clipv(xw[3 * H + k] + hr[3 * H + k]));
    C cn = fg * c[k] + ig * cc;
    C og = act[0](clipv(xw[H + k] + hr[H + k] + po * cn));
    c[k] = cn;
    hnew[k] = og * act[2](cn);
  }
}

// Writes Y (internal layout [S][nd][B][H], null when not wanted) and the final states (internal
// [nd][B][H]) in the op's layout (0: [S, nd, B, H] / [nd, B, H]; 1: [B, S, nd, H] / [B, nd, H]).
template <class C>
void store_rnn_outputs(KernelContext& ctx, const RnnConfig& cfg, DType dt, bool bf, int64_t S, int nd, int64_t Bn,
                       int64_t H, const std::vector<C>* Y, const std::vector<C>& Hs, const std::vector<C>& Cs) {
  auto store = [&](int oi, const Shape& shape, auto&& value_at) {
    Tensor& out = ctx.output(oi, dt, shape);
    visit_float(dt, [&]<class T>() {
      T* p = out.data<T>();
      for (int64_t k = 0; k < out.numel(); ++k) p[k] = T(value_at(k));
    });
  };
  if (Y) {
    Shape ys = bf ? Shape{Bn, S, nd, H} : Shape{S, nd, Bn, H};
    store(0, ys, [&](int64_t k) {
      if (!bf) return (*Y)[size_t(k)];
      int64_t h = k % H, r = k / H;
      int64_t d = r % nd; r /= nd;
      int64_t t = r % S, b = r / S;
      return (*Y)[size_t(((t * nd + d) * Bn + b) * H + h)];
    });
  }
  const Shape state_shape = bf ? Shape{Bn, nd, H} : Shape{nd, Bn, H};
  auto store_state = [&](int oi, const std::vector<C>& st) {
    store(oi, state_shape, [&](int64_t k) {
      if (!bf) return st[size_t(k)];
      int64_t h = k % H, r = k / H;
      int64_t d = r % nd, b = r / nd;
      return st[size_t((d * Bn + b) * H + h)];
    });
  };
  if (ctx.has_output(1)) store_state(1, Hs);
  if (cfg.kind == RnnKind::Lstm && ctx.has_output(2)) store_state(2, Cs);
}

// Input 4 (sequence_lens, [B] integers in [0, S]) or S for every batch entry.
std::vector<int64_t> sequence_lens(const KernelContext& ctx, int64_t Bn, int64_t S) {
  std::vector<int64_t> lens(size_t(Bn), S);
  if (!ctx.has_input(4)) return lens;
  const Tensor& sl = ctx.input(4);
  if (sl.numel() != Bn || sl.rank() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "sequence_lens has shape " + shape_str(sl.shape()) + ", expected [" + std::to_string(Bn) + "]");
  if (!dtype_is_integer(sl.dtype())) unsupported_dtype(ctx, 4, sl.dtype());
  lens = sl.to_int64_vector();
  for (int64_t l : lens)
    if (l < 0 || l > S)
      ctx.fail(ErrorCode::InvalidArgument, "sequence_lens value " + std::to_string(l) + " is outside [0, " + std::to_string(S) + "]");
  return lens;
}

// An LSTM with the default activations, no clip, no peepholes and no input_forget: the
// vectorized cell applies.
bool plain_lstm(const RnnConfig& cfg, int nd, bool has_p) {
  if (cfg.kind != RnnKind::Lstm || cfg.has_clip || cfg.input_forget || has_p) return false;
  for (int d = 0; d < nd; ++d) {
    const Activation* a = cfg.acts.data() + size_t(d * cfg.acts_per_dir);
    if (a[0].kind != ActKind::Sigmoid || a[1].kind != ActKind::Tanh || a[2].kind != ActKind::Tanh) return false;
  }
  return true;
}

template <class C>
void run_rnn(KernelContext& ctx, const RnnConfig& cfg) {
  const Tensor& X = ctx.input(0);
  DType dt = X.dtype();
  if (X.rank() != 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank 3, got shape " + shape_str(X.shape()));
  const bool bf = cfg.layout == 1;
  const int64_t S = bf ? X.dim(1) : X.dim(0);
  const int64_t Bn = bf ? X.dim(0) : X.dim(1);
  const int64_t I = X.dim(2);
  const int nd = cfg.num_dir;
  const int G = cfg.gates;
  const Tensor& Wt = ctx.input(1);
  if (Wt.rank() != 3 || Wt.dim(0) != nd || Wt.dim(1) % G != 0 || Wt.dim(2) != I)
    ctx.fail(ErrorCode::InvalidArgument, "W has shape " + shape_str(Wt.shape()) + ", incompatible with X " + shape_str(X.shape()) +
                                             " and " + std::to_string(nd) + " direction(s)");
  const int64_t H = cfg.hidden > 0 ? cfg.hidden : Wt.dim(1) / G;
  const int64_t GH = G * H;
  check_shape(ctx, 1, {nd, GH, I}, "W");
  check_shape(ctx, 2, {nd, GH, H}, "R");
  // float inputs are read in place; other types are converted into W / R (and x below).
  // (A W or R of another type takes load(), which names the mismatch.)
  const bool in_place = std::is_same_v<C, float> && dt == DType::Float && Wt.dtype() == DType::Float &&
                        ctx.input(2).dtype() == DType::Float;
  std::vector<C> W, R;
  if (!in_place) W = load<C>(ctx, 1, dt), R = load<C>(ctx, 2, dt);
  const C* Wp = in_place ? reinterpret_cast<const C*>(Wt.data<float>()) : W.data();
  const C* Rp = in_place ? reinterpret_cast<const C*>(ctx.input(2).data<float>()) : R.data();
  std::vector<C> Bias(size_t(nd * 2 * GH), C(0));
  if (ctx.has_input(3)) {
    check_shape(ctx, 3, {nd, 2 * GH}, "B");
    Bias = load<C>(ctx, 3, dt);
  }
  const std::vector<int64_t> lens = sequence_lens(ctx, Bn, S);
  // State shapes: layout 0 [nd, B, H], layout 1 [B, nd, H]. Internally [nd][B][H].
  Shape state_shape = bf ? Shape{Bn, nd, H} : Shape{nd, Bn, H};
  auto load_state = [&](int i, const char* what) {
    std::vector<C> s(size_t(nd * Bn * H), C(0));
    if (!ctx.has_input(i)) return s;
    check_shape(ctx, i, state_shape, what);
    std::vector<C> raw = load<C>(ctx, i, dt);
    for (int d = 0; d < nd; ++d)
      for (int64_t b = 0; b < Bn; ++b)
        for (int64_t h = 0; h < H; ++h)
          s[size_t((d * Bn + b) * H + h)] = raw[size_t(bf ? (b * nd + d) * H + h : (d * Bn + b) * H + h)];
    return s;
  };
  std::vector<C> Hs = load_state(5, "initial_h");
  std::vector<C> Cs;
  std::vector<C> P;
  bool has_p = false;
  if (cfg.kind == RnnKind::Lstm) {
    Cs = load_state(6, "initial_c");
    if (ctx.has_input(7)) {
      check_shape(ctx, 7, {nd, 3 * H}, "P");
      P = load<C>(ctx, 7, dt);
      has_p = true;
    }
  }
  std::vector<C> x;
  if (!in_place) {
    x.resize(size_t(X.numel()));
    visit_float(dt, [&]<class T>() {
      const T* p = X.data<T>();
      for (size_t k = 0; k < x.size(); ++k) {
        if constexpr (std::is_same_v<T, double>) x[k] = C(p[k]);
        else x[k] = C(float(p[k]));
      }
    });
  }
  const C* xp = in_place ? reinterpret_cast<const C*>(X.data<float>()) : x.data();

  std::vector<C> Y;
  bool want_y = ctx.has_output(0);
  if (want_y) Y.assign(size_t(S * nd * Bn * H), C(0));  // internal layout [S][nd][B][H]

  std::vector<C> xw(static_cast<size_t>(GH)), hr(static_cast<size_t>(GH)), hnew(static_cast<size_t>(H)), rh(static_cast<size_t>(H));
  const kernels::VecOps& vk = kernels::vec_ops();
  const bool lstm_plain = plain_lstm(cfg, nd, has_p);
  // LSTM with the default activations, no clip, no peepholes, no input_forget, in float: gate
  // pre-activations in one buffer (order i, o, f, c), sigmoid over i/o/f and tanh over c
  // vectorized, then the cell update. Returns false where the generic cell code must run.
  auto plain_lstm_step = [&](C* gt, const C* hrp, C* cf, C* hn) {
    if constexpr (std::is_same_v<C, float>) {
      if (!lstm_plain) return false;
      for (int64_t k = 0; k < GH; ++k) gt[k] += hrp[k];
      vk.unary(kernels::UnaryOp::Sigmoid, {}, gt, gt, 3 * H);
      vk.unary(kernels::UnaryOp::Tanh, {}, gt + 3 * H, gt + 3 * H, H);
      for (int64_t k = 0; k < H; ++k) cf[k] = gt[2 * H + k] * cf[k] + gt[k] * gt[3 * H + k];
      vk.unary(kernels::UnaryOp::Tanh, {}, cf, hn, H);
      for (int64_t k = 0; k < H; ++k) hn[k] *= gt[H + k];
      return true;
    } else {
      return false;
    }
  };
  auto clipv = [&](C v) { return cfg.has_clip ? std::max(C(-cfg.clip), std::min(C(cfg.clip), v)) : v; };
  for (int d = 0; d < nd; ++d) {
    const bool rev = cfg.reverse_only || d == 1;
    const C* Wd = Wp + size_t(d) * size_t(GH * I);
    const C* Rd = Rp + size_t(d) * size_t(GH * H);
    const C* Wb = Bias.data() + size_t(d) * size_t(2 * GH);
    const C* Rb = Wb + GH;
    const Activation* act = cfg.acts.data() + size_t(d * cfg.acts_per_dir);
    for (int64_t b = 0; b < Bn; ++b) {
      C* h = Hs.data() + size_t((d * Bn + b) * H);
      C* c = cfg.kind == RnnKind::Lstm ? Cs.data() + size_t((d * Bn + b) * H) : nullptr;
      const int64_t len = lens[size_t(b)];
      if (len == 0) {  // an empty sequence yields zero final states (as ONNX Runtime does)
        std::fill(h, h + H, C(0));
        if (c) std::fill(c, c + H, C(0));
      }
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        const C* xt = xp + size_t(bf ? (b * S + t) * I : (t * Bn + b) * I);
        if constexpr (std::is_same_v<C, float>) {
          // float: vectorized matrix-vector products (4 gate rows per pass over x / h).
          vk.gemv(Wd, GH, I, I, xt, Wb, xw.data());
          vk.gemv(Rd, GH, H, H, h, Rb, hr.data());
        } else {
          for (int64_t g = 0; g < GH; ++g) {
            C acc = Wb[g];
            const C* wr = Wd + g * I;
            for (int64_t k = 0; k < I; ++k) acc += wr[k] * xt[k];
            xw[size_t(g)] = acc;
            C acc2 = Rb[g];
            const C* rr = Rd + g * H;
            for (int64_t k = 0; k < H; ++k) acc2 += rr[k] * h[k];
            hr[size_t(g)] = acc2;
          }
        }
        if (plain_lstm_step(xw.data(), hr.data(), c, hnew.data())) {
          // done: the vectorized LSTM cell
        } else if (cfg.kind == RnnKind::Rnn) {
          for (int64_t k = 0; k < H; ++k) hnew[size_t(k)] = act[0](clipv(xw[size_t(k)] + hr[size_t(k)]));
        } else if (cfg.kind == RnnKind::Gru) {
          gru_cell(cfg, act, xw.data(), hr.data(), Rd, Rb, h, H, rh.data(), hnew.data(), clipv);
        } else {
          lstm_cell(cfg, act, xw.data(), hr.data(), has_p ? P.data() + size_t(d * 3 * H) : nullptr, H, c, hnew.data(), clipv);
        }
        std::copy(hnew.begin(), hnew.end(), h);
        if (want_y) std::copy(hnew.begin(), hnew.end(), Y.begin() + ((t * nd + d) * Bn + b) * H);
      }
    }
  }

  store_rnn_outputs(ctx, cfg, dt, bf, S, nd, Bn, H, want_y ? &Y : nullptr, Hs, Cs);
}

void add_rnn_op(OpRegistry& r, const char* name, RnnKind kind, std::initializer_list<int> versions) {
  for (int v : versions) {
    r.add(name, v, [kind](const Node& n) {
      RnnConfig cfg = parse_config(n, kind);
      return kernel([cfg](KernelContext& ctx) {
        DType dt = ctx.input(0).dtype();
        if (dt == DType::Double) run_rnn<double>(ctx, cfg);
        else if (dt == DType::Float || dt == DType::Float16 || dt == DType::BFloat16) run_rnn<float>(ctx, cfg);
        else unsupported_dtype(ctx, 0, dt);
      });
    });
  }
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  add_rnn_op(r, "RNN", RnnKind::Rnn, {1, 7, 14, 22});
  add_rnn_op(r, "GRU", RnnKind::Gru, {1, 3, 7, 14, 22});
  add_rnn_op(r, "LSTM", RnnKind::Lstm, {1, 7, 14, 22});
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"GRU", "LSTM", "RNN"}) r.def(op).infer(shapes::rnn);
}

}  // namespace basalt
