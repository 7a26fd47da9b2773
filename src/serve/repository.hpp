// The model repository: DIR/<name>/<version>/model.onnx with an optional DIR/<name>/config.json,
// the models loaded from it, and the scheduler that runs each one's requests (docs/serving.md).
//
// - Names are validated (letters, digits, '_', '-', '.', not "." or ".."; versions are decimal),
//   and every path is resolved and checked to lie inside DIR: nothing outside it is read.
// - Loading builds a Session (weights used in place from the mapped file) and its scheduler;
//   while it loads the model is LOADING and not ready. A load whose weights and planned memory
//   would take the server over its memory budget is refused with the numbers. Unloading waits for
//   the requests in flight, then frees the session (its memory goes back to the OS).
// - Each loaded version has a bounded queue, `instances` worker threads that share the process's
//   thread budget, and optional dynamic batching (max_batch_size, max_queue_delay_us).
#pragma once

#include "serve/metrics.hpp"
#include "serve/types.hpp"

#include <basalt/basalt.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace basalt::serve {

// DIR/<name>/config.json (every key optional; an unknown key or a value of the wrong type is an
// error naming it, so a typo never goes unnoticed).
struct ModelConfig {
  SessionOptions session;          // "threads", "optimization_level", "memory_limit", "spin_us", "winograd"
  std::string precision = "fp32";  // "precision": fp32 only for now
  int instances = 1;               // "instances": requests of this model run at once
  int max_batch_size = 0;          // "max_batch_size": 0 = no dynamic batching
  int64_t max_queue_delay_us = 0;  // "max_queue_delay_us": how long a batch waits to fill
  int max_queue = 64;              // "max_queue": requests waiting; one more is answered 503 at once
  bool all_versions = false;       // "version_policy": "latest" (default) or "all"
};
ModelConfig parse_model_config(const std::string& json_text, const std::string& where, int default_threads);

// Limits of the whole server (basalt serve's options).
struct ServerLimits {
  int thread_budget = 1;             // threads all models share (default: the cgroup CPU quota)
  uint64_t memory_budget = 0;        // bytes all loaded models may take; 0 = no budget
  int64_t max_tensor_elements = int64_t(1) << 28;
};

// The CPUs this process may use: the cgroup CPU quota (cgroup v2 cpu.max, v1 cfs quota), rounded
// up, and at most the CPUs in its affinity mask; at least 1.
int cpu_budget();

class ModelVersion;

// One queued request and its answer.
struct Pending {
  InferRequest request;
  InferResponse response;
  std::string error;
  Status error_status = Status::Internal;
  bool done = false;
  std::chrono::steady_clock::time_point enqueued;
  std::mutex mu;
  std::condition_variable cv;
};

class ModelVersion {
 public:
  ModelVersion(std::string name, std::string version, const std::string& path, const ModelConfig& cfg,
               const ServerLimits& limits);
  ~ModelVersion();  // stops the workers after the queue drains
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const Session& session() const { return *session_; }
  const ModelConfig& config() const { return cfg_; }
  ModelMetrics& metrics() { return metrics_; }
  uint64_t accounted_bytes() const { return accounted_bytes_; }
  int queue_depth() const;
  int in_flight() const { return in_flight_.load(); }

  // Checks the request against the model (names, datatypes, ranks, fixed dims, batch limit),
  // then runs it: on the calling thread when the model does not batch and an instance is free
  // (no hand-off between threads), else through the queue and a worker. Throws ServeError
  // (Unavailable when the queue is full).
  InferResponse infer(InferRequest&& req);

 private:
  void check(const InferRequest& req) const;
  void worker();
  void run_batch(std::vector<std::shared_ptr<Pending>>& batch);
  void run_timed(std::vector<std::shared_ptr<Pending>>& batch);  // run_batch + queue/compute/batch metrics
  void run_one(Pending& p);
  bool batchable_with(const InferRequest& a, const InferRequest& b) const;

  std::string name_, version_;
  ModelConfig cfg_;
  ServerLimits limits_;
  std::unique_ptr<Session> session_;
  uint64_t accounted_bytes_ = 0;
  ModelMetrics metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::atomic<int> in_flight_{0};
  int running_ = 0;  // runs in progress (inline or by a worker), at most cfg_.instances; under mu_
  std::vector<std::thread> workers_;
};

enum class ModelState { Loading, Ready, Unavailable, Unloading };
const char* model_state_name(ModelState s);

struct ModelIndexEntry {
  std::string name, version, state, reason;
};

class Repository {
 public:
  Repository(std::string dir, ServerLimits limits);
  ~Repository();
  const ServerLimits& limits() const { return limits_; }

  // Every model directory under DIR (sorted), loaded or not.
  std::vector<std::string> scan() const;
  // Loads (or reloads) a model: its latest version, or all with "version_policy": "all".
  // Throws ServeError (NotFound: no such model directory; BadRequest: bad name, config, model or
  // over the memory budget). A reload replaces the old versions once the new ones are ready.
  void load(const std::string& name);
  void unload(const std::string& name);  // NotFound when not loaded
  void unload_all();
  // The model version that serves a request: `version` empty = the latest loaded. NotFound for
  // an unknown model or version, Unavailable when the model is not ready.
  std::shared_ptr<ModelVersion> get(const std::string& name, const std::string& version) const;
  bool ready(const std::string& name, const std::string& version) const;
  std::vector<std::string> versions(const std::string& name) const;
  std::vector<ModelIndexEntry> index(bool ready_only) const;
  // Models ready (for /v2/health/ready: every model that should be loaded is).
  bool all_ready() const;
  void write_metrics(std::string& out) const;
  uint64_t accounted_bytes() const;

 private:
  struct Entry {
    ModelState state = ModelState::Unavailable;
    std::string reason;
    std::map<int64_t, std::shared_ptr<ModelVersion>> versions;
  };
  std::string model_dir(const std::string& name) const;  // validated, inside dir_

  std::string dir_;
  ServerLimits limits_;
  mutable std::mutex mu_;
  std::mutex load_mu_;  // one load / unload at a time
  std::map<std::string, Entry> models_;
};

void validate_model_name(const std::string& name);

}  // namespace basalt::serve
