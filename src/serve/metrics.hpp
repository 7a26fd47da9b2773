// Server metrics in the Prometheus text format (GET /metrics; docs/serving.md lists every series).
//
// Counters and histograms are lock-free atomics updated on the request path; gauges that have a
// source of their own (queue depth, in flight, session memory, RSS) are read when scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace basalt::serve {

// A latency histogram in seconds with fixed buckets, 50 us to 10 s.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
                                                     10e-3, 25e-3,  50e-3,  100e-3, 500e-3, 1.0,    10.0};
  void observe(double seconds);
  // Appends `name_bucket{labels,le=...}`, `name_sum{labels}`, `name_count{labels}` lines.
  void write(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// Requests counted by protocol and status code (the labels of basalt_requests_total).
class RequestCounter {
 public:
  void add(const char* protocol, int code);
  void write(std::string& out, const std::string& labels) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

// Per model version: what its scheduler records.
struct ModelMetrics {
  RequestCounter requests;
  Histogram queue, compute, total;
  std::array<std::atomic<uint64_t>, 9> batch_sizes{};  // runs of batch 1, 2, 3-4, ..., 129+ (powers of two)
  std::atomic<uint64_t> runs{0}, batched_requests{0};
  void observe_batch(int n);
  void write_batches(std::string& out, const std::string& labels) const;
};

// Appends `# HELP` and `# TYPE` lines for a series.
void metric_header(std::string& out, const char* name, const char* type, const char* help);
// A label value with \, " and newlines escaped.
std::string label_escape(const std::string& v);

}  // namespace basalt::serve
