// The server core and its lifecycle (see server.hpp).
#include "serve/server.hpp"

#include "core/json_text.hpp"
#include "core/rss.hpp"
#include "serve/grpc_frontend.hpp"
#include "serve/http_frontend.hpp"
#include "serve/rest.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

namespace basalt::serve {

const char* ServerCore::version() { return "0.1.0"; }

ServerCore::ServerCore(const ServeOptions& opts) : opts_(opts), repo_(opts.repository, opts.limits) {
  if (!opts_.token_file.empty()) {
    std::ifstream f(opts_.token_file);
    if (!f) throw ServeError(Status::BadRequest, "--token-file " + opts_.token_file + ": cannot read");
    std::getline(f, token_);
    while (!token_.empty() && (token_.back() == '\r' || token_.back() == ' ')) token_.pop_back();
    if (token_.empty()) throw ServeError(Status::BadRequest, "--token-file " + opts_.token_file + " is empty");
  }
  if (opts_.tls_cert.empty() != opts_.tls_key.empty())
    throw ServeError(Status::BadRequest, "--tls-cert and --tls-key go together");
}

void ServerCore::authorize(const std::string& authorization) const {
  if (token_.empty()) return;
  const std::string want = "Bearer " + token_;
  // Compare in constant time for equal lengths.
  bool ok = authorization.size() == want.size();
  unsigned char diff = 0;
  for (size_t i = 0; ok && i < want.size(); ++i) diff |= static_cast<unsigned char>(authorization[i] ^ want[i]);
  if (!ok || diff) throw ServeError(Status::Unauthorized, "missing or wrong bearer token (Authorization: Bearer <token>)");
}

InferResponse ServerCore::infer(InferRequest&& req, const char* protocol) {
  auto t0 = std::chrono::steady_clock::now();
  if (draining_.load()) {
    count_failure(req.model, protocol, 503);
    throw ServeError(Status::Unavailable, "the server is shutting down");
  }
  std::shared_ptr<ModelVersion> mv;
  try {
    mv = repo_.get(req.model, req.version);
  } catch (const ServeError& e) {
    count_failure(req.model, protocol, http_status(e.status));
    throw;
  }
  in_flight_++;
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n--; }
  } leave{in_flight_};
  try {
    InferResponse r = mv->infer(std::move(req));
    mv->metrics().requests.add(protocol, 200);
    mv->metrics().total.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r;
  } catch (const ServeError& e) {
    mv->metrics().requests.add(protocol, http_status(e.status));
    throw;
  }
}

void ServerCore::count_failure(const std::string& model, const char* protocol, int code) {
  try {
    repo_.get(model, "")->metrics().requests.add(protocol, code);
  } catch (const ServeError&) {
    unresolved_.add(protocol, code);
  }
}

std::string ServerCore::metrics_text() const {
  std::string out;
  repo_.write_metrics(out);
  unresolved_.write(out, "model=\"\",version=\"\"");
  metric_header(out, "basalt_server_inflight_requests", "gauge", "Requests in flight in the whole server.");
  out += "basalt_server_inflight_requests " + std::to_string(in_flight_.load()) + "\n";
  metric_header(out, "basalt_rejected_connections_total", "counter", "Connections refused over --max-connections.");
  out += "basalt_rejected_connections_total " + std::to_string(rejected_connections_.load()) + "\n";
  metric_header(out, "basalt_memory_accounted_bytes", "gauge", "Bytes the loaded models take from the memory budget.");
  out += "basalt_memory_accounted_bytes " + std::to_string(repo_.accounted_bytes()) + "\n";
  metric_header(out, "basalt_memory_budget_bytes", "gauge", "The server's memory budget (0 = none).");
  out += "basalt_memory_budget_bytes " + std::to_string(opts_.limits.memory_budget) + "\n";
  metric_header(out, "basalt_thread_budget", "gauge", "Threads the models share.");
  out += "basalt_thread_budget " + std::to_string(opts_.limits.thread_budget) + "\n";
  metric_header(out, "process_resident_memory_bytes", "gauge", "Resident memory of the process (VmRSS).");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", rss_now_mb() * 1048576.0);
  out += std::string("process_resident_memory_bytes ") + buf + "\n";
  return out;
}

void ServerCore::log_access(const char* protocol, const std::string& what, int code, size_t bytes_in, size_t bytes_out,
                            double seconds) const {
  if (!opts_.access_log) return;
  std::string line = "{\"ts\":" + std::to_string(std::time(nullptr)) + ",\"protocol\":\"" + protocol + "\",\"request\":";
  append_json_string(line, what);
  char tail[160];
  std::snprintf(tail, sizeof tail, ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,\"ms\":%.3f}\n", code, bytes_in,
                bytes_out, seconds * 1e3);
  line += tail;
  std::fwrite(line.data(), 1, line.size(), stderr);
}

int run_server(const ServeOptions& opts) {
  // Signals are taken by sigwait on this thread: block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ServerCore core(opts);
  std::unique_ptr<HttpFrontend> http;
  std::unique_ptr<GrpcFrontend> grpc;
  if (opts.http_port >= 0) http = std::make_unique<HttpFrontend>(core);
  if (opts.grpc_port >= 0) grpc = std::make_unique<GrpcFrontend>(core);
  if (http) http->start();
  // Health answers while the models load (ready is false until they are).
  std::printf("basalt serve: http %s:%d grpc %s:%d repository %s\n", opts.host.c_str(), http ? http->port() : -1,
              opts.host.c_str(), grpc ? grpc->port() : -1, opts.repository.c_str());
  std::fflush(stdout);
  std::vector<std::string> names = opts.models;
  if (opts.load_all && names.empty()) names = core.repository().scan();
  for (const auto& n : names) {
    try {
      core.repository().load(n);
      std::fprintf(stderr, "basalt serve: loaded model '%s'\n", n.c_str());
    } catch (const ServeError& e) {
      std::fprintf(stderr, "basalt serve: model '%s' not loaded: %s\n", n.c_str(), e.what());
    }
  }
  std::printf("basalt serve: ready\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "basalt serve: %s: draining (up to %d s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               opts.drain_timeout_s);
  core.start_draining();
  if (http) http->stop_accepting();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.drain_timeout_s);
  if (grpc) grpc->shutdown(opts.drain_timeout_s);
  // Requests in flight: running in a model, or read by a connection and not yet answered.
  auto pending = [&] { return std::max(core.in_flight(), http ? http->busy() : 0); };
  while (pending() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int left = pending();
  if (http) http->close_connections();
  http.reset();
  grpc.reset();
  core.repository().unload_all();
  std::fprintf(stderr, "basalt serve: stopped (%d requests unanswered at the deadline)\n", left);
  return left == 0 ? 0 : 1;
}

}  // namespace basalt::serve
