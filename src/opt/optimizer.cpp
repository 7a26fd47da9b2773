// The pass list and the driver: runs each pass of the requested level over the main graph and
// every subgraph, timing it.
#include "opt/optimizer.hpp"

#include "opt/graph_util.hpp"
#include "opt/passes.hpp"

#include <chrono>

namespace basalt {

OptLevel parse_opt_level(const std::string& s) {
  if (s == "none" || s == "0") return OptLevel::None;
  if (s == "basic" || s == "1") return OptLevel::Basic;
  if (s == "extended" || s == "2") return OptLevel::Extended;
  if (s == "all" || s == "3") return OptLevel::All;
  BASALT_THROW(InvalidArgument, "unknown optimization level '" + s + "' (expected none, basic, extended, all or 0..3)");
}

const char* opt_level_name(OptLevel l) {
  switch (l) {
    case OptLevel::None: return "none";
    case OptLevel::Basic: return "basic";
    case OptLevel::Extended: return "extended";
    case OptLevel::All: return "all";
  }
  return "?";
}

namespace {

struct PassInfo {
  const char* name;
  OptLevel min_level;
  // Always introduces basalt-domain ops: skipped with standard_ops. Passes that can also emit
  // standard ops (LayerNormalization, Gelu) run and reject per candidate (ctx.nonstandard_ok()).
  bool needs_nonstandard_ops;
  void (*fn)(PassContext&);
};

// Order matters: cleanups first so that patterns see canonical graphs (no Identity between a
// Conv and its BatchNormalization, shape subgraphs folded into constants); Conv+BN before the
// Conv activation fusion; transposes folded into MatMul before the MatMul-based patterns;
// attention before MatMul+Add (attention's projections are MatMul+Add); a final cleanup drops
// what fusions left unused.
// Captured weights become constants of the subgraphs that use them, so the passes (constant
// folding first of all) see them there. Only values that are initializers of the enclosing graph
// and not graph inputs (which a feed may override) qualify; the subgraph's copy shares storage and
// is never written out as a subgraph initializer (writer.cpp skips captures).
void propagate_capture_constants(PassContext& ctx) {
  Graph& g = ctx.graph;
  for (auto& n : g.nodes)
    for (auto& a : n.attrs) {
      std::vector<Graph*> subs;
      if (a.g) subs.push_back(a.g.get());
      for (auto& sg : a.graphs) subs.push_back(sg.get());
      for (Graph* sg : subs)
        for (int c : sg->captures) {
          ValueDef& d = sg->values[size_t(c)];
          if (d.is_initializer) continue;
          int outer = g.find_value(d.name);
          if (outer < 0) continue;
          const ValueDef& o = g.values[size_t(outer)];
          if (!o.is_initializer || o.is_graph_input || !o.initializer.raw()) continue;
          d.is_initializer = true;
          d.initializer = o.initializer;
          sg->finalize();
        }
    }
}

const PassInfo kPasses[] = {
    {"remove_identity", OptLevel::Basic, false, remove_identity},
    {"propagate_capture_constants", OptLevel::Basic, false, propagate_capture_constants},
    {"fold_constants", OptLevel::Basic, false, fold_constants},
    {"fold_reshape_chains", OptLevel::Basic, false, fold_reshape_chains},
    {"fuse_conv_bn", OptLevel::Basic, false, fuse_conv_bn},
    {"fuse_conv_affine", OptLevel::Basic, false, fuse_conv_affine},
    {"remove_dead_nodes", OptLevel::Basic, false, remove_dead_nodes},
    {"fold_transpose_into_matmul", OptLevel::Extended, false, fold_transpose_into_matmul},
    {"fuse_dynamic_quant_matmul", OptLevel::Extended, true, fuse_dynamic_quant_matmul},
    {"fuse_layernorm", OptLevel::Extended, false, fuse_layernorm},
    {"fuse_gelu", OptLevel::Extended, false, fuse_gelu},
    {"fuse_attention", OptLevel::Extended, false, fuse_attention},
    {"fuse_matmul_add", OptLevel::Extended, false, fuse_matmul_add},
    {"fuse_hardswish", OptLevel::Extended, false, fuse_hardswish},
    {"fuse_conv_activation", OptLevel::Extended, true, fuse_conv_activation},
    {"fuse_conv_post_affine", OptLevel::Extended, true, fuse_conv_post_affine},
    {"fuse_gemm_activation", OptLevel::Extended, true, fuse_gemm_activation},
    {"fuse_bn_activation", OptLevel::Extended, true, fuse_bn_activation},
    {"remove_dead_nodes", OptLevel::Extended, false, remove_dead_nodes},
    {"layout_nchwc", OptLevel::All, true, layout_nchwc},
};

// g and its subgraphs, parents before children. `keep` (optional) receives an owning reference to
// every subgraph, so one that a pass removes along with its node (remove_dead_nodes on the parent
// runs before the pass reaches the child) stays valid until the caller is done with the list.
void collect_graphs(Graph& g, std::vector<Graph*>& out, std::vector<std::shared_ptr<Graph>>* keep = nullptr) {
  out.push_back(&g);
  for (auto& n : g.nodes)
    for (auto& a : n.attrs) {
      if (a.g) {
        if (keep) keep->push_back(a.g);
        collect_graphs(*a.g, out, keep);
      }
      for (auto& sg : a.graphs) {
        if (keep) keep->push_back(sg);
        collect_graphs(*sg, out, keep);
      }
    }
}

bool uses_basalt_domain(const Graph& g) {
  for (auto& n : g.nodes) {
    if (n.domain == "basalt") return true;
    for (auto& a : n.attrs) {
      if (a.g && uses_basalt_domain(*a.g)) return true;
      for (auto& sg : a.graphs)
        if (uses_basalt_domain(*sg)) return true;
    }
  }
  return false;
}

}  // namespace

void optimize_model(Model& m, const OptimizeOptions& opts, OptimizeReport* report) {
  OptimizeReport local;
  OptimizeReport& rep = report ? *report : local;
  if (!m.graph) return;
  {
    std::vector<Graph*> all;
    collect_graphs(*m.graph, all);
    for (Graph* g : all)
      for (auto& n : g->nodes)
        if (n.kernel) BASALT_THROW(Internal, "optimize_model: " + n.describe() + " already has a kernel; optimize before create_kernels");
  }
  rep.nodes_before = int(m.graph->nodes.size());
  if (opts.level != OptLevel::None && m.ir_version < 4) {
    // IR < 4 requires every initializer to be listed as a graph input as well; such inputs are
    // weights, not inputs with defaults (ONNX Runtime treats them as constants too). Dropping
    // them from the inputs makes them constants for the passes (graph_util.hpp: constant_of).
    Graph& g = *m.graph;
    std::vector<int> kept;
    for (int v : g.inputs) {
      ValueDef& d = g.values[size_t(v)];
      if (d.is_initializer) d.is_graph_input = false;
      else kept.push_back(v);
    }
    g.inputs = std::move(kept);
  }
  if (opts.level != OptLevel::None) {
    for (const PassInfo& p : kPasses) {
      if (int(opts.level) < int(p.min_level)) continue;
      if (p.needs_nonstandard_ops && opts.standard_ops) {
        rep.rejected.push_back({p.name, "", "skipped: --standard-ops allows only ai.onnx operators"});
        continue;
      }
      auto t0 = std::chrono::steady_clock::now();
      // Collected per pass: an earlier pass may have removed a node with subgraphs. Within the
      // pass, `keep` holds every listed subgraph alive (the pass on a parent may drop a node that
      // owns one; it is then processed as an orphan, harmlessly, and freed after the pass).
      std::vector<Graph*> graphs;
      std::vector<std::shared_ptr<Graph>> keep;
      collect_graphs(*m.graph, graphs, &keep);
      for (Graph* g : graphs) {
        PassContext ctx{m, *g, opts, rep};
        p.fn(ctx);
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      rep.passes.push_back({p.name, ms});
    }
  }
  if (uses_basalt_domain(*m.graph)) import_basalt_domain(m);
  rep.nodes_after = int(m.graph->nodes.size());
}

}  // namespace basalt
