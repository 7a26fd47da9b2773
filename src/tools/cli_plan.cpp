// `basalt plan MODEL --shape NAME=DIMS ... [--dim P=V] [--threads N] [--memory-limit BYTES] [--json]`:
// the memory a run with those input shapes will use, from the static plan, without running.
// Exit code 1 (with the report still printed) when the planned peak exceeds --memory-limit.
#include <basalt/basalt.hpp>

#include "tools/cli.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace basalt {

static std::string mb(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", double(b) / (1024.0 * 1024.0));
  return buf;
}

int cmd_plan(const std::vector<std::string>& args) {
  InputSpec spec;
  std::string model;
  SessionOptions opts;
  bool json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--input" || a == "--fill" || a == "--seed")
      throw UsageError(a + " is not used by plan: give input shapes with --shape NAME=DIMS (and --dim SYMBOL=VALUE)");
    if (parse_input_option(args, i, spec) || parse_session_option(args, i, opts)) continue;
    if (a == "--json") {
      json = true;
    } else {
      take_model_arg(a, model);
    }
  }
  if (model.empty()) throw UsageError("missing MODEL");
  auto session = Session::open(model, opts);
  // Inputs without --shape: symbolic dims from --dim (like `basalt run`), fixed dims as declared.
  std::map<std::string, Shape> shapes = spec.shapes;
  for (const IoInfo& io : session->inputs()) {
    if (shapes.count(io.name) || io.has_default || io.kind != "tensor" || !io.has_shape) continue;
    Shape s;
    bool ok = true;
    for (size_t d = 0; d < io.shape.size(); ++d) {
      if (io.shape[d] >= 0) {
        s.push_back(io.shape[d]);
        continue;
      }
      auto it = spec.dims.find(io.dim_params[d]);
      if (io.dim_params[d].empty() || it == spec.dims.end()) ok = false;
      else s.push_back(it->second);
    }
    if (ok) shapes[io.name] = s;
  }
  MemoryPlanReport r = session->plan_memory(shapes);
  bool over = opts.memory_limit && r.peak_bytes > opts.memory_limit;
  if (json) {
    nlohmann::json j;
    j["model"] = model;
    nlohmann::json in = nlohmann::json::object();
    for (auto& [n, s] : shapes) in[n] = s;
    j["inputs"] = in;
    j["arena_bytes"] = r.arena_bytes;
    j["tensor_bytes"] = r.tensor_bytes;
    j["workspace_bytes"] = r.workspace_bytes;
    j["inputs_bytes"] = r.inputs_bytes;
    j["outputs_bytes"] = r.outputs_bytes;
    j["weights_bytes"] = r.weights_bytes;
    j["packed_weights_bytes"] = r.packed_weights_bytes;
    j["peak_bytes"] = r.peak_bytes;
    j["planned_tensors"] = r.planned_tensors;
    j["aliased_tensors"] = r.aliased_tensors;
    j["in_place_tensors"] = r.in_place_tensors;
    j["concat_in_place"] = r.concat_in_place;
    j["dynamic_tensors"] = r.dynamic_values.size();
    j["dynamic_values"] = r.dynamic_values;
    j["memory_limit"] = opts.memory_limit;
    j["within_limit"] = !over;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string sig;
    for (auto& [n, s] : shapes) sig += (sig.empty() ? "" : " ") + n + "=" + shape_str(s);
    std::printf("plan for %s\n", sig.c_str());
    std::printf("  arena      %12llu bytes  %s  (%d tensors, %s before reuse, %d in place, %d Concats in place; %d views need none)\n",
                (unsigned long long)r.arena_bytes, mb(r.arena_bytes).c_str(), r.planned_tensors,
                mb(r.tensor_bytes).c_str(), r.in_place_tensors, r.concat_in_place, r.aliased_tensors);
    std::printf("  workspace  %12llu bytes  %s  (largest; inside the arena)\n", (unsigned long long)r.workspace_bytes,
                mb(r.workspace_bytes).c_str());
    std::printf("  inputs     %12llu bytes  %s\n", (unsigned long long)r.inputs_bytes, mb(r.inputs_bytes).c_str());
    std::printf("  outputs    %12llu bytes  %s\n", (unsigned long long)r.outputs_bytes, mb(r.outputs_bytes).c_str());
    std::printf("  weights    %12llu bytes  %s  (+ packed copies %llu bytes)\n", (unsigned long long)r.weights_bytes,
                mb(r.weights_bytes).c_str(), (unsigned long long)r.packed_weights_bytes);
    std::printf("  peak       %12llu bytes  %s\n", (unsigned long long)r.peak_bytes, mb(r.peak_bytes).c_str());
    if (!r.dynamic_values.empty()) {
      std::printf("  dynamic    %zu tensors whose size depends on data (pool, not in peak):", r.dynamic_values.size());
      for (size_t i = 0; i < r.dynamic_values.size() && i < 8; ++i) std::printf(" %s", r.dynamic_values[i].c_str());
      std::printf("%s\n", r.dynamic_values.size() > 8 ? " ..." : "");
    }
    if (opts.memory_limit)
      std::printf("  limit      %12llu bytes  %s\n", (unsigned long long)opts.memory_limit, over ? "EXCEEDED" : "ok");
  }
  if (over) {
    std::fprintf(stderr, "basalt: error: the run needs %llu bytes, more than the memory limit of %llu bytes\n",
                 (unsigned long long)r.peak_bytes, (unsigned long long)opts.memory_limit);
    return 1;
  }
  return 0;
}

}  // namespace basalt
