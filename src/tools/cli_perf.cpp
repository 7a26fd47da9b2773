// Memory curves for users and CI (issue 4):
//
//   basalt perf shapes MODEL --input NAME --sizes HxW,HxW,... [--repeat R] [--threads N]
//                      [--plan-cache-entries N] [input options]
//   basalt perf switch --cycles K [--threads N] MODEL[:NAME=DIMS[,NAME=DIMS...]] ...
//
// Both print one JSON object per line (stdout is flushed after each line, so a caller can watch
// the curve grow), then a summary line with "summary": true. Memory figures are MB (2^20 bytes)
// from /proc/self/status (see rss.hpp); times are milliseconds (steady clock).
//
// shapes: one session runs the model at each size in turn; the input NAME is [1,3,H,W] (seeded
// uniform [-1,1) unless --fill says otherwise; other inputs are made as `basalt run` makes them).
// Per size: {h, w, first_ms (first run at that size), repeat_ms (median of R more runs),
// rss_mb (VmRSS after the size ran and its outputs were freed), rss_anon_mb (its anonymous part),
// rss_file_mb (its file-backed part: code and mapped model pages),
// peak_mb (peak during that size), plan cache counters, arena_bytes, arena_maps and arena_grows
// (so far: a size that grew the arena shows it)}. Summary: {base_rss_mb (before load),
// create_ms, rss_after_load_mb, peak_rss_mb (whole command), rss_after_last_size_mb,
// rss_after_release_mb (session destroyed), base_rss_anon_mb, rss_anon_after_release_mb, sizes,
// peak_source, plan_cache_bound}.
//
// switch: each cycle opens each model in turn, runs it once and destroys the session, so only
// one model is loaded at a time. Per cycle: {cycle, rss_after_release_mb, rss_anon_after_release_mb,
// run_ms, create_ms}. Summary: {base_rss_mb and base_rss_anon_mb (before the first load), peak_rss_mb,
// rss_after_first_cycle_mb,
// rss_after_last_cycle_mb, max_rss_after_release_mb, slope_mb_per_cycle (least-squares slope of
// rss_after_release over cycles 2..K; cycle 1 also pays one-time costs such as faulting in code
// pages and starting allocator arenas), cycles}.
#include "tools/cli.hpp"
#include "core/rss.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace basalt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
double r3(double v) { return std::round(v * 1000.0) / 1000.0; }

void emit(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void add_plan_cache(nlohmann::ordered_json& j, const MemoryStats& m) {
  j["plan_cache_entries"] = m.plan_cache_entries;
  j["plan_cache_bytes"] = m.plan_cache_bytes;
  j["plan_cache_hits"] = m.plan_cache_hits;
  j["plan_cache_misses"] = m.plan_cache_misses;
  j["plan_cache_evictions"] = m.plan_cache_evictions;
  j["arena_bytes"] = m.arena_bytes;
  j["arena_maps"] = m.arena_maps;
  j["arena_grows"] = m.arena_grows;  // a larger size grew the arena in place (its first run pays the added pages)
  j["dynamic_pool_held_bytes"] = m.dynamic_pool_held_bytes;
  j["last_run_heap_bytes"] = m.last_run_heap_bytes;
}

// "736x1280" -> {736, 1280}; both positive.
std::pair<int64_t, int64_t> parse_hw(const std::string& s) {
  auto x = s.find('x');
  if (x == std::string::npos) throw UsageError("--sizes: '" + s + "' is not a size like 640x480 (HxW)");
  int64_t h = 0, w = 0;
  try {
    h = parse_int_arg("--sizes", s.substr(0, x), 1);
    w = parse_int_arg("--sizes", s.substr(x + 1), 1);
  } catch (const UsageError&) {
    throw UsageError("--sizes: '" + s + "' is not a size like 640x480 (HxW, both >= 1)");
  }
  return {h, w};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int perf_shapes(const std::vector<std::string>& args) {
  InputSpec spec;
  SessionOptions opts;
  std::string model, input;
  std::vector<std::pair<int64_t, int64_t>> sizes;
  int64_t repeat = 3;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // `--input` names the resized input here (before parse_input_option, whose --input is NAME=FILE).
    if (a == "--input") {
      input = next_value(args, i);
      if (input.empty() || input.find('=') != std::string::npos)
        throw UsageError("--input takes the NAME of the [1,3,H,W] input, got '" + input + "'");
    } else if (parse_input_option(args, i, spec)) {
      continue;
    } else if (a == "--sizes") {
      std::stringstream ss(next_value(args, i));
      std::string part;
      while (std::getline(ss, part, ',')) sizes.push_back(parse_hw(part));
    } else if (a == "--repeat") {
      repeat = parse_int_arg(a, next_value(args, i), 1);
    } else if (a == "--plan-cache-entries") {
      opts.plan_cache_entries = size_t(parse_int_arg(a, next_value(args, i), 0));
    } else if (a == "--threads") {
      opts.threads = int(parse_int_arg(a, next_value(args, i), 1));
    } else {
      take_model_arg(a, model);
    }
  }
  if (model.empty()) throw UsageError("missing MODEL");
  if (input.empty()) throw UsageError("missing --input NAME (the [1,3,H,W] input whose size changes)");
  if (sizes.empty()) throw UsageError("missing --sizes HxW,HxW,...");

  const double base = rss_now_mb(), base_anon = rss_anon_mb();
  auto t0 = Clock::now();
  auto session = Session::open(model, opts);
  const double create_ms = ms_since(t0);
  const double after_load = rss_now_mb();
  bool known = false;
  for (auto& io : session->inputs()) known |= io.name == input && io.kind == "tensor";
  if (!known) BASALT_THROW(InvalidArgument, "--input: the model has no tensor input '" + input + "'");

  double peak = rss_hwm_mb();  // covers the load
  const char* peak_source = "VmHWM";
  for (auto [h, w] : sizes) {
    PeakTracker pt;
    pt.start();
    double first_ms = 0;
    std::vector<double> reps;
    {
      spec.shapes[input] = {1, 3, h, w};
      auto feeds = make_inputs(*session, spec);
      pt.sample();
      auto r0 = Clock::now();
      { auto outs = session->run(feeds); pt.sample(); }
      first_ms = ms_since(r0);
      for (int64_t k = 0; k < repeat; ++k) {
        r0 = Clock::now();
        { auto outs = session->run(feeds); pt.sample(); }
        reps.push_back(ms_since(r0));
      }
    }
    const double rss = rss_now_mb();
    pt.sample();
    const double size_peak = pt.peak_mb();
    peak = std::max(peak, size_peak);
    peak_source = pt.source();
    nlohmann::ordered_json j = {{"h", h},
                        {"w", w},
                        {"first_ms", r3(first_ms)},
                        {"repeat_ms", r3(median(reps))},
                        {"rss_mb", r3(rss)},
                        {"rss_anon_mb", r3(rss_anon_mb())},
                        {"rss_file_mb", r3(rss_file_mb())},
                        {"peak_mb", r3(size_peak)}};
    add_plan_cache(j, session->memory_stats());
    emit(j);
  }
  const double after_last = rss_now_mb();
  MemoryStats last_stats = session->memory_stats();
  const int threads = session->options().threads;
  session.reset();
  const double after_release = rss_now_mb(), after_release_anon = rss_anon_mb();
  nlohmann::ordered_json s = {{"summary", true},
                      {"model", model},
                      {"threads", threads},
                      {"base_rss_mb", r3(base)},
                      {"create_ms", r3(create_ms)},
                      {"rss_after_load_mb", r3(after_load)},
                      {"peak_rss_mb", r3(peak)},
                      {"peak_source", peak_source},
                      {"rss_after_last_size_mb", r3(after_last)},
                      {"rss_after_release_mb", r3(after_release)},
                      {"base_rss_anon_mb", r3(base_anon)},
                      {"rss_anon_after_release_mb", r3(after_release_anon)},
                      {"rss_file_after_release_mb", r3(rss_file_mb())},
                      {"sizes", sizes.size()},
                      {"plan_cache_bound", opts.plan_cache_entries}};
  add_plan_cache(s, last_stats);
  emit(s);
  return 0;
}

struct SwitchModel {
  std::string path;
  InputSpec spec;
};

// "dir/model.onnx:x=1x3x48x320,y=2x3" -> path + shapes. The split is at the last ':' that is
// followed by NAME=DIMS, so a path may itself contain ':'.
SwitchModel parse_switch_model(const std::string& s) {
  SwitchModel m;
  auto c = s.rfind(':');
  if (c == std::string::npos || s.find('=', c) == std::string::npos) {
    m.path = s;
    return m;
  }
  m.path = s.substr(0, c);
  if (m.path.empty()) throw UsageError("'" + s + "': missing MODEL before ':'");
  std::stringstream ss(s.substr(c + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::vector<std::string> opt = {"--shape", item};
    size_t i = 0;
    try {
      parse_input_option(opt, i, m.spec);
    } catch (const UsageError& e) {
      throw UsageError("'" + s + "': " + e.what() + " (expected MODEL:NAME=DIMS[,NAME=DIMS...])");
    }
  }
  return m;
}

int perf_switch(const std::vector<std::string>& args) {
  SessionOptions opts;
  int64_t cycles = 0;
  std::vector<SwitchModel> models;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--cycles") {
      cycles = parse_int_arg(a, next_value(args, i), 1);
    } else if (a == "--threads") {
      opts.threads = int(parse_int_arg(a, next_value(args, i), 1));
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else {
      models.push_back(parse_switch_model(a));
    }
  }
  if (cycles == 0) throw UsageError("missing --cycles K");
  if (models.empty()) throw UsageError("missing MODEL:NAME=DIMS (at least one model)");

  const double base = rss_now_mb(), base_anon = rss_anon_mb();
  int threads = opts.threads;
  std::vector<double> after;
  for (int64_t c = 1; c <= cycles; ++c) {
    nlohmann::ordered_json run_ms = nlohmann::ordered_json::array(), create_ms = nlohmann::ordered_json::array();
    for (auto& m : models) {
      auto t0 = Clock::now();
      auto session = Session::open(m.path, opts);
      threads = session->options().threads;
      create_ms.push_back(r3(ms_since(t0)));
      auto feeds = make_inputs(*session, m.spec);
      t0 = Clock::now();
      session->run(feeds);  // outputs are dropped at once
      run_ms.push_back(r3(ms_since(t0)));
    }  // session, inputs and outputs are all released here
    after.push_back(rss_now_mb());
    emit({{"cycle", c},
          {"rss_after_release_mb", r3(after.back())},
          {"rss_anon_after_release_mb", r3(rss_anon_mb())},
          {"rss_file_after_release_mb", r3(rss_file_mb())},
          {"run_ms", run_ms},
          {"create_ms", create_ms}});
  }
  // Least-squares slope over cycles 2..K (needs at least two points).
  double slope = 0;
  if (after.size() >= 3) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t k = 1; k < after.size(); ++k) {
      double x = double(k + 1), y = after[k];
      n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  }
  nlohmann::ordered_json names = nlohmann::ordered_json::array();
  for (auto& m : models) names.push_back(m.path);
  emit({{"summary", true},
        {"models", names},
        {"threads", threads},
        {"base_rss_mb", r3(base)},
        {"base_rss_anon_mb", r3(base_anon)},
        {"peak_rss_mb", r3(rss_hwm_mb())},
        {"rss_after_first_cycle_mb", r3(after.front())},
        {"rss_after_last_cycle_mb", r3(after.back())},
        {"max_rss_after_release_mb", r3(*std::max_element(after.begin(), after.end()))},
        {"slope_mb_per_cycle", r3(slope)},
        {"cycles", cycles}});
  return 0;
}

}  // namespace

int cmd_perf(const std::vector<std::string>& args) {
  if (args.empty()) throw UsageError("missing subcommand: perf shapes ... | perf switch ...");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "shapes") return perf_shapes(rest);
  if (args[0] == "switch") return perf_switch(rest);
  throw UsageError("unknown subcommand '" + args[0] + "' (expected shapes or switch)");
}

}  // namespace basalt
