// `basalt quantize MODEL -o OUT.onnx [--dynamic] [--calibration DIR] [--samples N]
//                   [--method minmax|percentile] [--percentile P] [--per-tensor] [--report]
//                   [input options for generated calibration inputs]`
//
// Writes a standard quantized ONNX model (opt/quantize.hpp) that basalt and ONNX Runtime both
// run. The float model is first cleaned up the way `basalt optimize --level basic
// --standard-ops` does it (BatchNormalization folded into Conv, constants folded), then:
// - dynamic: MatMul weights to int8, activations quantized at run time (transformers);
// - static (default): the model runs on calibration inputs (DIR holds one .npz per sample, its
//   arrays named after the model's inputs; without DIR, N generated samples from the input
//   options, a smoke run) with every activation the rewrite needs as an extra output, and each
//   one's range is taken by min-max or by the percentile method (the P-th percentile of |x|
//   over all samples, from a 2048-bin histogram, as the clipping bound) before the rewrite.
#include "graph/model.hpp"
#include "onnx/writer.hpp"
#include "opt/optimizer.hpp"
#include "opt/quantize.hpp"
#include "tools/cli.hpp"
#include "tools/npy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace basalt {

namespace {

struct Args {
  std::string model, out;
  bool dynamic = false, per_channel = true, report = false;
  std::string calibration;
  int64_t samples = 8;
  std::string method = "minmax";
  double percentile = 99.999;
  InputSpec spec;
};

Args parse(const std::vector<std::string>& args) {
  Args a;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    if (s == "-o" || s == "--output") a.out = next_value(args, i);
    else if (s == "--dynamic") a.dynamic = true;
    else if (s == "--static") a.dynamic = false;
    else if (s == "--per-tensor") a.per_channel = false;
    else if (s == "--report") a.report = true;
    else if (s == "--calibration") a.calibration = next_value(args, i);
    else if (s == "--samples") a.samples = parse_int_arg(s, next_value(args, i), 1);
    else if (s == "--method") {
      a.method = next_value(args, i);
      if (a.method != "minmax" && a.method != "percentile") throw UsageError("--method must be minmax or percentile, got '" + a.method + "'");
    } else if (s == "--percentile") {
      const std::string& v = next_value(args, i);
      char* end = nullptr;
      a.percentile = std::strtod(v.c_str(), &end);
      if (!end || *end || !(a.percentile > 50.0 && a.percentile <= 100.0))
        throw UsageError("--percentile must be a number in (50, 100], got '" + v + "'");
    } else if (parse_input_option(args, i, a.spec)) {
    } else take_model_arg(s, a.model);
  }
  if (a.model.empty()) throw UsageError("missing MODEL");
  if (a.out.empty()) throw UsageError("missing -o OUT.onnx");
  if (a.dynamic && !a.calibration.empty()) throw UsageError("--calibration is for static quantization (not with --dynamic)");
  return a;
}

// The calibration feeds: every .npz in DIR (sorted by name), or `samples` generated ones.
std::vector<std::vector<std::pair<std::string, Value>>> calibration_feeds(const Args& a, const Session& s) {
  std::vector<std::vector<std::pair<std::string, Value>>> feeds;
  if (!a.calibration.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(a.calibration, ec)) BASALT_THROW(Io, "--calibration: '" + a.calibration + "' is not a directory");
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(a.calibration))
      if (e.path().extension() == ".npz") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) BASALT_THROW(InvalidArgument, "--calibration: no .npz files in '" + a.calibration + "'");
    for (const std::string& f : files) {
      std::vector<std::pair<std::string, Value>> one;
      for (auto& [name, t] : read_npz(f)) one.emplace_back(name, Value(std::move(t)));
      feeds.push_back(std::move(one));
    }
    return feeds;
  }
  for (int64_t k = 0; k < a.samples; ++k) {
    InputSpec sp = a.spec;
    sp.seed = a.spec.seed + uint64_t(k);
    feeds.push_back(make_inputs(s, sp));
  }
  return feeds;
}

// Ranges of the named float values over the calibration runs.
ActivationRanges calibrate(const Args& a, Model& m, const std::vector<std::string>& names) {
  // the model, serialized with every wanted value as an extra output (then the outputs are put back)
  Graph* g = m.graph.get();
  const std::vector<int> outputs0 = g->outputs;
  std::vector<std::string> wanted;
  for (const std::string& n : names) {
    const int v = g->find_value(n);
    if (v < 0 || std::find(g->outputs.begin(), g->outputs.end(), v) != g->outputs.end()) {
      if (v >= 0) wanted.push_back(n);
      continue;
    }
    g->outputs.push_back(v);
    wanted.push_back(n);
  }
  std::string bytes;
  try {
    bytes = save_model_bytes(m);
  } catch (...) {
    g->outputs = outputs0;
    throw;
  }
  g->outputs = outputs0;
  SessionOptions so;
  so.optimization_level = 0;  // the values stay as they are in the graph being quantized
  auto s = Session::from_bytes(bytes.data(), bytes.size(), so);
  const auto feeds = calibration_feeds(a, *s);
  std::map<std::string, ActivationRange> r;
  std::map<std::string, std::vector<double>> hist;  // percentile: |x| histograms over [0, max |x|]
  constexpr int kBins = 2048;
  for (int pass = 0; pass < (a.method == "percentile" ? 2 : 1); ++pass)
    for (const auto& f : feeds) {
      const std::vector<Value> outs = s->run(f, wanted);
      for (size_t k = 0; k < wanted.size(); ++k) {
        const Tensor& t = outs[k].tensor;
        if (t.dtype() != DType::Float || t.numel() == 0) continue;
        const float* p = t.data<float>();
        if (pass == 0) {
          ActivationRange& range = r.try_emplace(wanted[k], ActivationRange{p[0], p[0]}).first->second;
          for (int64_t i = 0; i < t.numel(); ++i)
            if (std::isfinite(p[i])) {
              range.lo = std::min(range.lo, p[i]);
              range.hi = std::max(range.hi, p[i]);
            }
        } else {
          const ActivationRange& mm = r.at(wanted[k]);
          const double top = std::max(std::fabs(double(mm.lo)), std::fabs(double(mm.hi)));
          auto& h = hist[wanted[k]];
          h.resize(kBins, 0.0);
          if (top <= 0) continue;
          for (int64_t i = 0; i < t.numel(); ++i)
            if (std::isfinite(p[i])) h[size_t(std::min<double>(kBins - 1, std::fabs(double(p[i])) / top * kBins))] += 1.0;
        }
      }
    }
  if (a.method == "percentile")
    for (auto& [name, range] : r) {
      const auto& h = hist[name];
      double total = 0;
      for (double c : h) total += c;
      if (total <= 0) continue;
      const double top = std::max(std::fabs(double(range.lo)), std::fabs(double(range.hi)));
      double acc = 0;
      int bin = kBins - 1;
      for (int b = 0; b < kBins; ++b) {
        acc += h[size_t(b)];
        if (acc >= total * a.percentile / 100.0) {
          bin = b;
          break;
        }
      }
      const float clip = float(top * double(bin + 1) / kBins);
      range.lo = std::max(range.lo, -clip);
      range.hi = std::min(range.hi, clip);
    }
  return r;
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& args) {
  const Args a = parse(args);
  auto m = load_model_file(a.model);
  OptimizeOptions oo;
  oo.level = OptLevel::Basic;
  oo.standard_ops = true;
  optimize_model(*m, oo);
  QuantizeOptions qo;
  qo.dynamic = a.dynamic;
  qo.per_channel = a.per_channel;
  if (!a.dynamic) qo.ranges = calibrate(a, *m, calibration_values(*m));
  QuantizeReport rep;
  quantize_model(*m, qo, rep);
  save_model_file(*m, a.out);
  int total = 0;
  for (const auto& [op, n] : rep.quantized) total += n;
  std::printf("quantized %d nodes (%s)", total, a.dynamic ? "dynamic" : a.method.c_str());
  for (const auto& [op, n] : rep.quantized) std::printf("%s %s x%d", op == rep.quantized.begin()->first ? ":" : ",", op.c_str(), n);
  std::printf("\nweights rewritten: %.1f MB float -> %.1f MB int8; %zu nodes left float; wrote %s\n",
              double(rep.float_weight_bytes) / 1e6, double(rep.int8_weight_bytes) / 1e6, rep.skipped.size(), a.out.c_str());
  if (a.report)
    for (const auto& s : rep.skipped) std::printf("  left float: %s (%s): %s\n", s.node.c_str(), s.op.c_str(), s.reason.c_str());
  return 0;
}

}  // namespace basalt
