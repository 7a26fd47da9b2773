// `basalt bench MODEL [input options] [--threads N] [--warmup W] [--iters K] [--concurrency C] [--json]`
//
// Times a model the way a service sees it:
// - session_create_ms: Session::open (load, optimize, create kernels, prepare);
// - first_run_ms: the first run, alone (it pays for anything done once per input shape);
// - then W untimed warm-up runs and K timed runs: median, p90, p99 (nearest rank), min, mean;
// - rss_after_load_mb: VmRSS right after the session was created; peak_rss_mb: VmHWM of the
//   process at the end (load and every run included).
// With --concurrency C, C threads each make K timed runs of the same session at once (after the
// warm-up, which is sequential). Latencies are then per run under contention, throughput_per_s is
// C*K / wall time of the concurrent phase, and identical says whether every concurrent result is
// bitwise equal to the first run's (made alone, before any other run).
// Inputs are made once (the same options as `basalt run`) and reused by every run.
#include "kernels/cpu.hpp"
#include "graph/model.hpp"
#include "tools/cli.hpp"
#include "core/rss.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace basalt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Bitwise equality of two run results (dtype, shape and every byte; strings by value).
bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::String) {
    for (int64_t i = 0; i < a.numel(); ++i)
      if (a.data<std::string>()[i] != b.data<std::string>()[i]) return false;
    return true;
  }
  if (a.nbytes() == 0) return true;
  return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

bool same_value(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  if (a.is_tensor()) return same_tensor(a.tensor, b.tensor);
  if (a.is_sequence()) {
    if (a.sequence->size() != b.sequence->size()) return false;
    for (size_t i = 0; i < a.sequence->size(); ++i)
      if (!same_tensor((*a.sequence)[i], (*b.sequence)[i])) return false;
  }
  return true;
}

bool same_outputs(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_value(a[i], b[i])) return false;
  return true;
}

// Nearest-rank percentile (p in [0,100]) of `v`, which it sorts; 0 for an empty vector.
double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = size_t(std::ceil(p / 100.0 * double(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

}  // namespace

struct BenchArgs {
  InputSpec spec;
  std::string model;
  SessionOptions opts;
  int64_t warmup = 3;
  int64_t iters = 20;
  int64_t concurrency = 1;
  bool json = false;
  bool concurrency_given = false;
};

// The command line of `bench`.
BenchArgs parse_bench_args(const std::vector<std::string>& args) {
  InputSpec spec;
  std::string model;
  SessionOptions opts;
  int64_t warmup = 3, iters = 20, concurrency = 1;
  bool json = false, concurrency_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (parse_input_option(args, i, spec) || parse_session_option(args, i, opts)) continue;
    if (a == "--warmup") {
      warmup = parse_int_arg(a, next_value(args, i), 0);
    } else if (a == "--iters") {
      iters = parse_int_arg(a, next_value(args, i), 1);
    } else if (a == "--concurrency") {
      concurrency = parse_int_arg(a, next_value(args, i), 1);
      if (concurrency > 1024) throw UsageError("--concurrency must be <= 1024");
      concurrency_given = true;
    } else if (a == "--json") {
      json = true;
    } else {
      take_model_arg(a, model);
    }
  }
  if (model.empty()) throw UsageError("missing MODEL");
  return {spec, model, opts, warmup, iters, concurrency, json, concurrency_given};
}

int cmd_bench(const std::vector<std::string>& args) {
  // (references, not structured bindings: clang 14 cannot capture those in the lambdas below)
  BenchArgs parsed = parse_bench_args(args);
  InputSpec& spec = parsed.spec;
  const std::string& model = parsed.model;
  SessionOptions& opts = parsed.opts;
  const int64_t warmup = parsed.warmup, iters = parsed.iters, concurrency = parsed.concurrency;
  const bool json = parsed.json, concurrency_given = parsed.concurrency_given;

  double rss_before_load = rss_now_mb();
  auto t0 = Clock::now();
  auto session = Session::open(model, opts);
  double create_ms = ms_since(t0);
  double rss_after_load = rss_now_mb();
  auto feeds = make_inputs(*session, spec);

  t0 = Clock::now();
  std::vector<Value> reference = session->run(feeds);
  double first_ms = ms_since(t0);
  for (int64_t k = 0; k < warmup; ++k) session->run(feeds);

  std::vector<double> lat;
  lat.reserve(size_t(iters * concurrency));
  double wall_ms = 0;
  bool identical = true;
  if (concurrency == 1) {
    auto w0 = Clock::now();
    for (int64_t k = 0; k < iters; ++k) {
      auto r0 = Clock::now();
      auto outs = session->run(feeds);
      lat.push_back(ms_since(r0));
      if (concurrency_given && !same_outputs(outs, reference)) identical = false;
    }
    wall_ms = ms_since(w0);
  } else {
    // Every thread waits at a start line so that the runs really overlap.
    std::vector<std::vector<double>> per(static_cast<size_t>(concurrency));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false}, mismatch{false};
    std::mutex err_mu;
    std::exception_ptr err;
    std::vector<std::thread> workers;
    for (int64_t c = 0; c < concurrency; ++c) {
      workers.emplace_back([&, c] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        try {
          auto& mine = per[size_t(c)];
          for (int64_t k = 0; k < iters; ++k) {
            auto r0 = Clock::now();
            auto outs = session->run(feeds);
            mine.push_back(ms_since(r0));
            if (!same_outputs(outs, reference)) mismatch = true;
          }
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu);
          if (!err) err = std::current_exception();
        }
      });
    }
    while (ready.load() < concurrency) std::this_thread::yield();
    auto w0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& w : workers) w.join();
    wall_ms = ms_since(w0);
    if (err) std::rethrow_exception(err);
    for (auto& p : per) lat.insert(lat.end(), p.begin(), p.end());
    identical = !mismatch;
  }

  double sum = 0;
  for (double v : lat) sum += v;
  const double mean = sum / double(lat.size());
  const double p50 = percentile(lat, 50), p90 = percentile(lat, 90), p99 = percentile(lat, 99);
  const double mn = lat.front();  // sorted by percentile()
  const double peak = rss_hwm_mb();
  const double throughput = wall_ms > 0 ? double(lat.size()) * 1000.0 / wall_ms : 0;
  MemoryStats ms = session->memory_stats();

  if (json) {
    nlohmann::ordered_json j;
    j["model"] = model;
    j["threads"] = session->options().threads;
    j["warmup"] = warmup;
    j["iters"] = iters;
    j["concurrency"] = concurrency;
    // the kernels this CPU runs (kernels/cpu.hpp): results from different machines are told apart
    j["isa"] = kernels::isa_name(kernels::best_isa());
    j["fma512_pipes"] = kernels::fma512_pipes();
    auto r3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
    j["median_ms"] = r3(p50);
    j["p90_ms"] = r3(p90);
    j["p99_ms"] = r3(p99);
    j["min_ms"] = r3(mn);
    j["mean_ms"] = r3(mean);
    j["first_run_ms"] = r3(first_ms);
    j["session_create_ms"] = r3(create_ms);
    j["rss_before_load_mb"] = r3(rss_before_load);
    j["rss_after_load_mb"] = r3(rss_after_load);
    j["peak_rss_mb"] = r3(peak);
    if (concurrency_given) {
      j["throughput_per_s"] = r3(throughput);
      j["identical"] = identical;
    }
    j["weights_bytes"] = ms.weights_bytes;
    j["packed_weights_bytes"] = ms.packed_weights_bytes;
    j["plan_cache_entries"] = ms.plan_cache_entries;
    j["plan_cache_hits"] = ms.plan_cache_hits;
    j["plan_cache_misses"] = ms.plan_cache_misses;
    j["plan_cache_evictions"] = ms.plan_cache_evictions;
    j["arena_bytes"] = ms.arena_bytes;
    j["arena_maps"] = ms.arena_maps;
    j["arena_grows"] = ms.arena_grows;
    j["dynamic_pool_hits"] = ms.dynamic_pool_hits;
    j["dynamic_pool_misses"] = ms.dynamic_pool_misses;
    j["dynamic_pool_held_bytes"] = ms.dynamic_pool_held_bytes;
    j["dynamic_pool_peak_bytes"] = ms.dynamic_pool_peak_bytes;
    const ThreadPoolStats ps = session->pool_stats();
    j["pool_busy_detections"] = ps.busy_detections;
    j["pool_preempted_spins"] = ps.preempted_spins;
    j["pool_apart_moves"] = ps.apart_moves;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s\n", model.c_str());
    std::printf("threads %d, warmup %lld, iters %lld, concurrency %lld; kernels %s, %d 512-bit FMA pipe(s) per core\n",
                session->options().threads, (long long)warmup, (long long)iters, (long long)concurrency,
                kernels::isa_name(kernels::best_isa()), kernels::fma512_pipes());
    std::printf("session create %.2f ms, first run %.2f ms\n", create_ms, first_ms);
    std::printf("run: median %.3f ms, p90 %.3f ms, p99 %.3f ms, min %.3f ms, mean %.3f ms (%zu runs)\n", p50, p90, p99, mn,
                mean, lat.size());
    if (concurrency_given)
      std::printf("throughput %.2f runs/s; results %s\n", throughput,
                  identical ? "identical to the first run (bitwise)" : "DIFFER from the first run");
    std::printf("RSS before load %.1f MB, after load %.1f MB, peak %.1f MB\n", rss_before_load, rss_after_load, peak);
    const ThreadPoolStats ps = session->pool_stats();
    if (ps.threads > 1)
      std::printf("thread pool: busy machine noticed %llu times, spinning threads preempted %llu times, workers "
                  "moved off the caller's core %llu times\n",
                  (unsigned long long)ps.busy_detections, (unsigned long long)ps.preempted_spins,
                  (unsigned long long)ps.apart_moves);
  }
  return 0;
}

}  // namespace basalt
