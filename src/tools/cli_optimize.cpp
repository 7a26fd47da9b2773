// `basalt optimize MODEL [--level L] [--standard-ops] [-o OUT.onnx] [--report] [--json]
//                        [--check [--tol T] [input options]]`
//
// Runs the graph optimizer (src/opt) the way a session does (load -> optimize -> create
// kernels), prints what it did (fusions per pattern, rejected candidates with reasons, time per
// pass, session-creation time split by phase) and optionally saves the optimized model.
// --check runs the original model at level none and the optimized model (serialized and loaded
// back, so the saved file's content is what is checked) on the same seeded inputs and compares
// every output (relative L2 for floats, exact otherwise); exit 1 when one is off by more than
// --tol (default 1e-5).
#include "onnx/writer.hpp"
#include "opt/optimizer.hpp"
#include "graph/model.hpp"
#include "core/thread_pool.hpp"
#include "tools/cli.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace basalt {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct OutputDiff {
  std::string name;
  double rel_l2 = 0;  // floats; for other types 0 (equal) or 1 (different)
  std::string note;
};

double tensor_rel_l2(const Tensor& a, const Tensor& b, std::string& note) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    note = "dtype/shape differ: " + std::string(dtype_name(a.dtype())) + shape_str(a.shape()) + " vs " +
           dtype_name(b.dtype()) + shape_str(b.shape());
    return INFINITY;
  }
  DType dt = a.dtype();
  if (dt == DType::Float || dt == DType::Double || dt == DType::Float16 || dt == DType::BFloat16) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = a.get_double(i), y = b.get_double(i);
      if (std::isnan(x) != std::isnan(y)) return INFINITY;
      if (std::isnan(x)) continue;
      num += (x - y) * (x - y);
      den += y * y;
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  if (dt == DType::String) {
    for (int64_t i = 0; i < a.numel(); ++i)
      if (a.data<std::string>()[i] != b.data<std::string>()[i]) return 1;
    return 0;
  }
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.get_int(i) != b.get_int(i)) return 1;
  return 0;
}

std::vector<OutputDiff> compare(const Session& ref, const std::vector<Value>& ra, const std::vector<Value>& rb) {
  std::vector<OutputDiff> d;
  for (size_t i = 0; i < ra.size(); ++i) {
    OutputDiff o;
    o.name = ref.outputs()[i].name;
    if (i >= rb.size()) {
      o.rel_l2 = INFINITY;
      o.note = "missing in the optimized model";
    } else if (ra[i].is_tensor() && rb[i].is_tensor()) {
      o.rel_l2 = tensor_rel_l2(rb[i].tensor, ra[i].tensor, o.note);
    } else if (ra[i].is_sequence() && rb[i].is_sequence()) {
      if (ra[i].sequence->size() != rb[i].sequence->size()) {
        o.rel_l2 = INFINITY;
        o.note = "sequence lengths differ";
      } else {
        for (size_t k = 0; k < ra[i].sequence->size(); ++k)
          o.rel_l2 = std::max(o.rel_l2, tensor_rel_l2((*rb[i].sequence)[k], (*ra[i].sequence)[k], o.note));
      }
    } else if (ra[i].kind != rb[i].kind) {
      o.rel_l2 = INFINITY;
      o.note = "value kinds differ";
    }
    d.push_back(o);
  }
  return d;
}

}  // namespace

int cmd_optimize(const std::vector<std::string>& args) {
  std::string model_path, out_path;
  OptimizeOptions oo;
  bool report = false, json = false, check = false;
  double tol = 1e-5;
  InputSpec spec;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-o" || a == "--output") {
      out_path = next_value(args, i);
    } else if (a == "--level") {
      std::string l = next_value(args, i);
      try {
        oo.level = parse_opt_level(l);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    } else if (a == "--standard-ops") {
      oo.standard_ops = true;
    } else if (a == "--no-winograd") {
      oo.winograd = false;  // the graph a session with SessionOptions::winograd = false runs
    } else if (a == "--report") {
      report = true;
    } else if (a == "--json") {
      report = json = true;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--tol") {
      std::string s = next_value(args, i);
      try {
        tol = std::stod(s);
      } catch (const std::exception&) {
        throw UsageError("--tol: '" + s + "' is not a number");
      }
    } else if (parse_input_option(args, i, spec)) {
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else if (model_path.empty()) {
      model_path = a;
    } else {
      throw UsageError("more than one model given ('" + model_path + "' and '" + a + "')");
    }
  }
  if (model_path.empty())
    throw UsageError("usage: basalt optimize MODEL [--level none|basic|extended|all] [--standard-ops] [--no-winograd] "
                     "[-o OUT.onnx] [--report] [--json] [--check [--tol T] [input options]]");
  if (out_path.empty() && !check) report = true;

  // The phases of session creation, as Session::create runs them.
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> m = load_model_file(model_path);
  double load_ms = ms_since(t0);
  OptimizeReport rep;
  t0 = std::chrono::steady_clock::now();
  optimize_model(*m, oo, &rep);
  double opt_ms = ms_since(t0);
  // Serialized before kernels exist: the same graph create_kernels sees.
  std::string bytes;
  if (!out_path.empty() || check) bytes = save_model_bytes(*m);
  t0 = std::chrono::steady_clock::now();
  LoadOptions lo;
  lo.winograd = oo.winograd;
  create_kernels(*m, lo, ThreadPool::available_cores());
  double prep_ms = ms_since(t0);
  if (!out_path.empty()) write_model_bytes(bytes, out_path);

  std::vector<OutputDiff> diffs;
  double worst = 0;
  if (check) {
    SessionOptions none;
    none.optimization_level = 0;
    none.winograd = oo.winograd;
    auto ref = Session::open(model_path, none);
    auto opt = Session::from_bytes(bytes.data(), bytes.size(), none);
    auto feeds = make_inputs(*ref, spec);
    auto ra = ref->run(feeds);
    auto rb = opt->run(feeds);
    diffs = compare(*ref, ra, rb);
    for (auto& d : diffs) worst = std::max(worst, d.rel_l2);
  }
  bool check_ok = !check || worst <= tol;

  if (json) {
    nlohmann::ordered_json j;
    j["model"] = model_path;
    j["level"] = opt_level_name(oo.level);
    j["standard_ops"] = oo.standard_ops;
    j["winograd"] = oo.winograd;
    j["nodes_before"] = rep.nodes_before;
    j["nodes_after"] = rep.nodes_after;
    j["fusions"] = nlohmann::ordered_json::object();
    for (auto& [p, c] : rep.fusions) j["fusions"][p] = c;
    j["rejected"] = nlohmann::ordered_json::array();
    for (auto& r : rep.rejected) j["rejected"].push_back({{"pattern", r.pattern}, {"node", r.node}, {"reason", r.reason}});
    j["passes"] = nlohmann::ordered_json::array();
    for (auto& p : rep.passes) j["passes"].push_back({{"name", p.name}, {"ms", p.ms}});
    // Plans are made per input-shape signature at the first run of that signature, not at
    // session creation, so session creation has no plan time.
    j["session_ms"] = {{"load", load_ms}, {"optimize", opt_ms}, {"plan", 0.0}, {"prepare", prep_ms},
                       {"total", load_ms + opt_ms + prep_ms}};
    if (!out_path.empty()) j["output"] = out_path;
    if (check) {
      nlohmann::ordered_json c;
      c["tolerance"] = tol;
      c["max_rel_l2"] = std::isfinite(worst) ? nlohmann::ordered_json(worst) : nlohmann::ordered_json("inf");
      c["passed"] = check_ok;
      c["outputs"] = nlohmann::ordered_json::array();
      for (auto& d : diffs) {
        nlohmann::ordered_json o = {{"name", d.name}};
        o["rel_l2"] = std::isfinite(d.rel_l2) ? nlohmann::ordered_json(d.rel_l2) : nlohmann::ordered_json("inf");
        if (!d.note.empty()) o["note"] = d.note;
        c["outputs"].push_back(o);
      }
      j["check"] = c;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    if (report) {
      std::printf("model %s, level %s%s: %d -> %d nodes\n", model_path.c_str(), opt_level_name(oo.level),
                  oo.standard_ops ? ", standard ops only" : "", rep.nodes_before, rep.nodes_after);
      std::printf("applied:\n");
      if (rep.fusions.empty()) std::printf("  (nothing)\n");
      for (auto& [p, c] : rep.fusions) std::printf("  %-40s %d\n", p.c_str(), c);
      std::printf("rejected: %zu\n", rep.rejected.size());
      for (auto& r : rep.rejected) {
        if (r.node.empty()) std::printf("  %s: %s\n", r.pattern.c_str(), r.reason.c_str());
        else std::printf("  %s at node '%s': %s\n", r.pattern.c_str(), r.node.c_str(), r.reason.c_str());
      }
      std::printf("passes:\n");
      for (auto& p : rep.passes) std::printf("  %-28s %8.3f ms\n", p.name.c_str(), p.ms);
      std::printf("session creation: load %.2f ms, optimize %.2f ms, plan 0 ms (per input shape, at first run), "
                  "prepare %.2f ms, total %.2f ms\n",
                  load_ms, opt_ms, prep_ms, load_ms + opt_ms + prep_ms);
    }
    if (!out_path.empty()) std::printf("saved %s (%zu bytes)\n", out_path.c_str(), bytes.size());
    if (check) {
      for (auto& d : diffs)
        std::printf("check %s: rel_l2 %.3g%s%s\n", d.name.c_str(), d.rel_l2, d.note.empty() ? "" : " ",
                    d.note.c_str());
      std::printf("check %s: max rel_l2 %.3g (tolerance %.3g)\n", check_ok ? "passed" : "FAILED", worst, tol);
    }
  }
  return check_ok ? 0 : 1;
}

}  // namespace basalt
