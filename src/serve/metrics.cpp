// Prometheus text exposition of the server's counters (see metrics.hpp).
#include "serve/metrics.hpp"

#include <cstdio>

namespace basalt::serve {

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(uint64_t(seconds * 1e9), std::memory_order_relaxed);
}

static void append_fmt(std::string& out, const char* fmt, const std::string& a, const std::string& b, double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, a.c_str(), b.c_str(), v);
  out += buf;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cum += buckets_[i].load(std::memory_order_relaxed);
    char le[32];
    if (i < kBounds.size())
      std::snprintf(le, sizeof le, "%g", kBounds[i]);
    else
      std::snprintf(le, sizeof le, "+Inf");
    out += name + "_bucket{" + labels + (labels.empty() ? "" : ",") + "le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  append_fmt(out, "%s_sum{%s} %.9f\n", name, labels, double(sum_ns_.load(std::memory_order_relaxed)) * 1e-9);
  out += name + "_count{" + labels + "} " + std::to_string(count_.load(std::memory_order_relaxed)) + "\n";
}

void RequestCounter::add(const char* protocol, int code) {
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[{protocol, code}];
}

void RequestCounter::write(std::string& out, const std::string& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [key, n] : counts_)
    out += "basalt_requests_total{" + labels + ",protocol=\"" + key.first + "\",code=\"" + std::to_string(key.second) +
           "\"} " + std::to_string(n) + "\n";
}

void ModelMetrics::observe_batch(int n) {
  size_t i = 0;
  while (i + 1 < batch_sizes.size() && n > (1 << i)) ++i;
  batch_sizes[i].fetch_add(1, std::memory_order_relaxed);
  runs.fetch_add(1, std::memory_order_relaxed);
  batched_requests.fetch_add(uint64_t(n), std::memory_order_relaxed);
}

void ModelMetrics::write_batches(std::string& out, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < batch_sizes.size(); ++i) {
    cum += batch_sizes[i].load(std::memory_order_relaxed);
    std::string le = i + 1 < batch_sizes.size() ? std::to_string(1 << i) : "+Inf";
    out += "basalt_batch_size_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += "basalt_batch_size_sum{" + labels + "} " + std::to_string(batched_requests.load()) + "\n";
  out += "basalt_batch_size_count{" + labels + "} " + std::to_string(runs.load()) + "\n";
}

void metric_header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string label_escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"')
      o += '\\', o += c;
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

}  // namespace basalt::serve
