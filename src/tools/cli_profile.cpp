// `basalt profile MODEL [input options] [--iters K] [--warmup W] [--threads N] [--top N] [--profile FILE]`
//
// Runs the model W times unrecorded then K times recorded, and prints: the top ops by self time
// (a node's time minus the nodes its subgraphs ran), with GFLOP/s for Conv, ConvTranspose, MatMul
// and Gemm; the largest tensors; and the moment "tensor bytes in use" peaked (the node that had
// just run and the tensors alive then). Times are means over the K recorded runs.
#include "kernels/cpu.hpp"
#include "graph/model.hpp"
#include "runtime/profiler.hpp"
#include "tools/cli.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>
#include "runtime/session_access.hpp"

namespace basalt {

// Bytes as "12.50 MB" (KB below 1 MiB and B below 1 KiB, so small tensors do not read as zero).
static std::string mb(uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  else if (b < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.2f MB", double(b) / (1024.0 * 1024.0));
  return buf;
}

static std::string op_name(const Node& n) { return n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type; }

static std::string shape_of(const std::vector<int64_t>& s) { return shape_str(s); }

struct ProfileArgs {
  InputSpec spec;
  std::string model;
  SessionOptions opts;
  int64_t iters = 1;
  int64_t warmup = 1;
  int64_t top = 15;
};

// The command line of `profile`.
ProfileArgs parse_profile_args(const std::vector<std::string>& args) {
  InputSpec spec;
  std::string model;
  SessionOptions opts;
  opts.enable_profiling = true;
  int64_t iters = 1, warmup = 1, top = 15;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (parse_input_option(args, i, spec) || parse_session_option(args, i, opts)) continue;
    if (a == "--iters") {
      iters = parse_int_arg(a, next_value(args, i), 1);
    } else if (a == "--warmup") {
      warmup = parse_int_arg(a, next_value(args, i), 0);
    } else if (a == "--top") {
      top = parse_int_arg(a, next_value(args, i), 1);
    } else if (a == "--profile") {
      opts.profile_path = next_value(args, i);
      if (opts.profile_path.empty()) throw UsageError("--profile needs a file name");
    } else {
      take_model_arg(a, model);
    }
  }
  if (model.empty()) throw UsageError("missing MODEL");
  return {spec, model, opts, iters, warmup, top};
}

int cmd_profile(const std::vector<std::string>& args) {
  ProfileArgs parsed = parse_profile_args(args);
  InputSpec& spec = parsed.spec;
  const std::string& model = parsed.model;
  SessionOptions& opts = parsed.opts;
  const int64_t iters = parsed.iters, warmup = parsed.warmup, top = parsed.top;

  auto session = Session::open(model, opts);
  auto feeds = make_inputs(*session, spec);
  Profiler& prof = *session_profiler(*session);
  for (int64_t k = 0; k < warmup; ++k) session->run(feeds);
  prof.clear_runs();
  for (int64_t k = 0; k < iters; ++k) session->run(feeds);
  auto runs = prof.runs();
  const double K = double(runs.size());

  std::printf("model: %s\n", model.c_str());
  std::printf("kernels: %s, %d 512-bit FMA pipe(s) per core (kernels/cpu.hpp)\n", kernels::isa_name(kernels::best_isa()),
              kernels::fma512_pipes());
  for (auto& p : prof.phases()) std::printf("%-8s %9.2f ms  (%s)\n", p.name.c_str(), double(p.end_ns - p.start_ns) / 1e6, p.detail.c_str());
  double run_ns = 0, min_ns = 1e300;
  for (auto& r : runs) {
    run_ns += double(r->end_ns - r->start_ns);
    min_ns = std::min(min_ns, double(r->end_ns - r->start_ns));
  }
  std::printf("run      %9.2f ms  (mean of %zu recorded runs after %lld warm-up; min %.2f ms)\n", run_ns / K / 1e6,
              runs.size(), (long long)warmup, min_ns / 1e6);

  // --- ops by self time ---
  struct OpStat {
    double self_ns = 0, flops = 0;
    int64_t count = 0;
    bool has_flops = false;
  };
  std::map<std::string, OpStat> ops;
  size_t nested = 0;
  for (auto& rp : runs) {
    const RunProfile& r = *rp;
    std::vector<double> child(r.nodes.size(), 0);
    for (auto& n : r.nodes)
      if (n.parent >= 0) child[size_t(n.parent)] += double(n.end_ns - n.start_ns);
    for (size_t i = 0; i < r.nodes.size(); ++i) {
      const ProfNode& n = r.nodes[i];
      OpStat& s = ops[op_name(n.def())];
      s.self_ns += double(n.end_ns - n.start_ns) - child[i];
      s.count += 1;
      double f = node_flops(r, n);
      if (f > 0) {
        s.flops += f;
        s.has_flops = true;
      }
      if (rp == runs.front() && n.parent >= 0) ++nested;
    }
  }
  std::vector<std::pair<std::string, OpStat>> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.self_ns > b.second.self_ns; });
  std::printf("\nnodes per run: %zu (%zu inside subgraphs)\n", runs.front()->nodes.size(), nested);
  std::printf("top ops by self time (per run; a node's self time excludes the nodes its subgraphs ran):\n");
  std::printf("  %-28s %7s %10s %8s %9s\n", "op", "count", "total ms", "% run", "GFLOP/s");
  size_t shown = 0;
  double other_ns = 0;
  for (auto& [name, s] : sorted) {
    if (int64_t(shown) >= top) {
      other_ns += s.self_ns;
      continue;
    }
    ++shown;
    char gf[32] = "-";
    if (s.has_flops && s.self_ns > 0) std::snprintf(gf, sizeof gf, "%.2f", s.flops / s.self_ns);
    std::printf("  %-28s %7.0f %10.3f %7.1f%% %9s\n", name.c_str(), double(s.count) / K, s.self_ns / K / 1e6,
                100.0 * s.self_ns / run_ns, gf);
  }
  if (sorted.size() > shown)
    std::printf("  %-28s %7s %10.3f %7.1f%%\n", ("(" + std::to_string(sorted.size() - shown) + " other ops)").c_str(), "",
                other_ns / K / 1e6, 100.0 * other_ns / run_ns);

  // --- largest tensors (first recorded run; a subgraph value keeps its largest instance) ---
  const RunProfile& r0 = *runs.front();
  struct TensorStat {
    uint64_t bytes = 0;
    const ProfTensor* t = nullptr;
    int64_t times = 0;
  };
  std::map<std::pair<const Graph*, int32_t>, TensorStat> tensors;
  for (auto& n : r0.nodes)
    for (uint32_t k = 0; k < n.n_out; ++k) {
      const ProfTensor& t = r0.tensors[n.tensors_at + n.n_in + k];
      if (!t.present || t.value < 0) continue;
      TensorStat& s = tensors[{n.graph, t.value}];
      ++s.times;
      if (!s.t || t.bytes > s.bytes) {
        s.bytes = t.bytes;
        s.t = &t;
      }
    }
  std::vector<std::pair<std::pair<const Graph*, int32_t>, TensorStat>> tl(tensors.begin(), tensors.end());
  std::sort(tl.begin(), tl.end(), [](auto& a, auto& b) { return a.second.bytes > b.second.bytes; });
  auto value_label = [](const Graph* g, int32_t v) {
    const ValueDef& d = g->values[size_t(v)];
    std::string s = "'" + d.name + "'";
    if (d.producer >= 0) s += " from '" + g->nodes[size_t(d.producer)].name + "' (" + op_name(g->nodes[size_t(d.producer)]) + ")";
    else if (d.is_graph_input) s += " (input)";
    return s;
  };
  std::printf("\ntop tensors by size (node outputs, one run):\n");
  for (size_t i = 0; i < tl.size() && int64_t(i) < top; ++i) {
    auto& [key, s] = tl[i];
    std::string ty = s.t->is_sequence ? std::string("sequence(") + dtype_name(s.t->dtype) + ")"
                                      : std::string(dtype_name(s.t->dtype)) + " " + prof_shape_str(r0, *s.t);
    std::printf("  %12s  %-28s %s%s\n", mb(s.bytes).c_str(), ty.c_str(), value_label(key.first, key.second).c_str(),
                s.times > 1 ? (" x" + std::to_string(s.times)).c_str() : "");
  }

  // --- peak ---
  const RunProfile* pk = runs.front().get();
  for (auto& r : runs)
    if (r->peak_bytes > pk->peak_bytes) pk = r.get();
  std::printf("\npeak tensor bytes in use: %s ", mb(pk->peak_bytes).c_str());
  if (pk->peak_node < 0) {
    std::printf("(the inputs, before any node ran)\n");
  } else {
    const ProfNode& n = pk->nodes[size_t(pk->peak_node)];
    std::printf("after node '%s' (%s)", n.def().name.c_str(), op_name(n.def()).c_str());
    if (n.parent >= 0) std::printf(" inside '%s' (%s)", pk->nodes[size_t(n.parent)].def().name.c_str(),
                                   op_name(pk->nodes[size_t(n.parent)].def()).c_str());
    std::printf("\n");
  }
  std::vector<ProfAlive> alive = pk->peak_alive;
  std::sort(alive.begin(), alive.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  std::printf("alive then: %zu tensors, largest first:\n", alive.size());
  for (size_t i = 0; i < alive.size() && int64_t(i) < top; ++i) {
    const ProfAlive& a = alive[i];
    std::printf("  %12s  %-28s %s\n", mb(a.bytes).c_str(), (std::string(dtype_name(a.dtype)) + " " + shape_of(a.shape)).c_str(),
                value_label(a.graph, a.value).c_str());
  }
  if (alive.size() > size_t(top)) std::printf("  (%zu more)\n", alive.size() - size_t(top));
  if (!opts.profile_path.empty()) std::printf("\nprofile: wrote %s\n", session->end_profiling().c_str());
  return 0;
}

}  // namespace basalt
