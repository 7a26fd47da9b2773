// The HTTP/1.1 transport of the REST front end: Boost.Beast on Asio sockets (docs/serving.md says
// why Beast: 2.7x cpp-httplib's requests per second on loopback).
//
// One acceptor thread; one thread per connection doing blocking reads and writes (keep-alive,
// pipelining in order). Limits: header and body size (431 / 413 before the body is read),
// connections (over the limit a connection is answered 503 and closed), idle keep-alive time.
// Optional TLS (OpenSSL through asio::ssl). stop() closes the acceptor; close_connections()
// shuts every connection down once the requests in flight are answered.
#pragma once

#include "serve/server.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace basalt::serve {

class HttpFrontend {
 public:
  explicit HttpFrontend(ServerCore& core);  // binds host:http_port (throws ServeError when it cannot)
  ~HttpFrontend();
  int port() const { return port_; }
  void start();
  void stop_accepting();
  void close_connections();  // after the drain: wakes idle keep-alive readers
  int connections() const { return active_.load(); }
  int busy() const { return busy_.load(); }  // requests read and not yet answered

 private:
  struct Impl;
  void accept_loop();
  template <class Stream>
  void serve_connection(Stream& stream, int fd);
  ServerCore& core_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0};  // connection threads alive (each detached; counted until it leaves)
  std::atomic<int> busy_{0};
  std::thread acceptor_;
  std::mutex conn_mu_;
  std::set<int> conn_fds_;
};

}  // namespace basalt::serve
