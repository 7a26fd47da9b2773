// basalt serve: the server core both front ends share (docs/serving.md).
//
// ServerCore holds the repository, the limits, the token and the server-wide state (draining,
// requests in flight, the metrics not tied to a model). The REST front end (rest.hpp over
// http_frontend.hpp, Boost.Beast) and the gRPC front end (grpc_frontend.hpp) are thin: they
// decode a request, call ServerCore, and encode the answer or the ServeError.
#pragma once

#include "serve/repository.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace basalt::serve {

struct ServeOptions {
  std::string repository;
  std::string host = "127.0.0.1";   // loopback unless the operator says otherwise
  int http_port = 8000, grpc_port = 8001;  // 0 = any free port (printed at start); -1 = off
  bool load_all = true;             // --no-load: start with no model, load via the repository API
  std::vector<std::string> models;  // --model NAME: load only these at start
  ServerLimits limits;
  size_t max_body_bytes = size_t(256) << 20;
  size_t max_header_bytes = 16 << 10;
  int max_connections = 256;
  int idle_timeout_s = 60;          // keep-alive connections idle longer are closed
  int drain_timeout_s = 30;         // SIGTERM: in-flight requests get this long
  std::string tls_cert, tls_key;    // PEM files: both endpoints use TLS
  std::string token_file;           // bearer token for infer and repository endpoints
  bool access_log = false;          // one JSON line per request on stderr
};

class ServerCore {
 public:
  explicit ServerCore(const ServeOptions& opts);
  const ServeOptions& options() const { return opts_; }
  Repository& repository() { return repo_; }

  bool live() const { return true; }
  bool ready() const { return !draining_.load() && repo_.all_ready(); }
  void start_draining() { draining_ = true; }
  bool draining() const { return draining_.load(); }
  int in_flight() const { return in_flight_.load(); }

  // Throws Unauthorized when a token is configured and `authorization` is not "Bearer <token>".
  void authorize(const std::string& authorization) const;
  // Runs a request (any protocol): counts it, times it and answers or throws ServeError.
  InferResponse infer(InferRequest&& req, const char* protocol);
  // Counts a request that failed before reaching a model (bad body, unknown model).
  void count_failure(const std::string& model, const char* protocol, int code);
  std::string metrics_text() const;
  void log_access(const char* protocol, const std::string& what, int code, size_t bytes_in, size_t bytes_out,
                  double seconds) const;

  static constexpr const char* kName = "basalt";
  static const char* version();

 private:
  ServeOptions opts_;
  Repository repo_;
  std::string token_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  RequestCounter unresolved_;
  std::atomic<uint64_t> rejected_connections_{0};
  friend class HttpFrontend;
};

// Runs the server until SIGTERM / SIGINT; returns the exit code (0 after a clean drain).
int run_server(const ServeOptions& opts);

}  // namespace basalt::serve
