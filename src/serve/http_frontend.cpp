// Boost.Beast transport of the REST front end (see http_frontend.hpp).
#include "serve/http_frontend.hpp"

#include "serve/rest.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <chrono>

namespace basalt::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpFrontend::Impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<asio::ssl::context> tls;
};

HttpFrontend::HttpFrontend(ServerCore& core) : core_(core), impl_(std::make_unique<Impl>()) {
  const ServeOptions& o = core.options();
  beast::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) throw ServeError(Status::BadRequest, "--host '" + o.host + "' is not an IP address");
  tcp::endpoint ep(addr, uint16_t(o.http_port));
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ServeError(Status::BadRequest, "cannot listen on " + o.host + ":" + std::to_string(o.http_port) + " (HTTP): " +
                                             ec.message());
  port_ = impl_->acceptor.local_endpoint().port();
  if (!o.tls_cert.empty()) {
    impl_->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    impl_->tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                            asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    impl_->tls->use_certificate_chain_file(o.tls_cert, ec);
    if (ec) throw ServeError(Status::BadRequest, "--tls-cert " + o.tls_cert + ": " + ec.message());
    impl_->tls->use_private_key_file(o.tls_key, asio::ssl::context::pem, ec);
    if (ec) throw ServeError(Status::BadRequest, "--tls-key " + o.tls_key + ": " + ec.message());
  }
}

HttpFrontend::~HttpFrontend() {
  stop_accepting();
  close_connections();
  // Connection threads are detached; wait (bounded) for them to leave before core_ goes away.
  for (int i = 0; i < 500 && active_.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void HttpFrontend::start() { acceptor_ = std::thread([this] { accept_loop(); }); }

void HttpFrontend::stop_accepting() {
  if (stop_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  beast::error_code ec;
  impl_->acceptor.close(ec);
}

void HttpFrontend::close_connections() {
  std::lock_guard<std::mutex> lk(conn_mu_);
  for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
}

// After an error answered before the body was read (413, 431, 400): stop writing and read what
// the client is still sending, for up to 2 s, so that it gets to read the answer instead of a
// reset connection (a "lingering close", as HTTP servers do).
static void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[65536];
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
}

static http::response<http::string_body> make_response(RestReply& r, unsigned version, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::server, "basalt");
  res.set(http::field::content_type, r.content_type);
  if (r.has_header_length) res.set("Inference-Header-Content-Length", std::to_string(r.header_length));
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);  // the reply is not used after this
  res.prepare_payload();
  return res;
}

template <class Stream>
void HttpFrontend::serve_connection(Stream& stream, int fd) {
  const ServeOptions& o = core_.options();
  beast::flat_buffer buf;
  beast::error_code ec;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(uint32_t(o.max_header_bytes));
    parser.body_limit(o.max_body_bytes);
    // The header first: a client that sent "Expect: 100-continue" (curl does, for bodies over
    // 1 KB) waits for "100 Continue" before it sends the body.
    http::read_header(stream, buf, parser, ec);
    if (!ec && beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> cont{http::status::continue_, parser.get().version()};
      http::write(stream, cont, ec);
    }
    if (!ec && !parser.is_done()) http::read(stream, buf, parser, ec);
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::ssl::error::stream_truncated)
      return;
    auto t0 = std::chrono::steady_clock::now();
    RestReply reply;
    bool close_after = false;
    if (ec) {
      // Answer what we can tell the client, then close (the stream is no longer in step).
      close_after = true;
      if (ec == http::error::body_limit) {
        reply.status = 413;
        reply.body = error_json("request body over the limit of " + std::to_string(o.max_body_bytes) +
                                " bytes (--max-body-bytes)");
      } else if (ec == http::error::header_limit) {
        reply.status = 431;
        reply.body = error_json("request header over the limit of " + std::to_string(o.max_header_bytes) + " bytes");
      } else if (ec == asio::error::timed_out || ec == asio::error::would_block || ec == asio::error::try_again) {
        return;  // idle keep-alive connection
      } else {
        reply.status = 400;
        reply.body = error_json("malformed HTTP request: " + ec.message());
      }
      size_t bytes_out = reply.body.size();
      auto res = make_response(reply, 11, false);
      http::write(stream, res, ec);
      core_.log_access("http", "-", reply.status, 0, bytes_out,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if constexpr (std::is_same_v<Stream, tcp::socket>) linger_close(fd);
      return;
    }
    auto& msg = parser.get();
    busy_++;
    struct Done {
      std::atomic<int>& n;
      ~Done() { n--; }
    } done{busy_};
    RestRequest rq;
    rq.method = std::string(msg.method_string());
    rq.target = std::string(msg.target());
    rq.body = std::move(msg.body());
    if (auto it = msg.find(http::field::authorization); it != msg.end()) rq.authorization = std::string(it->value());
    if (auto it = msg.find("Inference-Header-Content-Length"); it != msg.end()) {
      std::string v(it->value());
      char* end = nullptr;
      unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || !end || *end || v[0] == '-') {
        reply.status = 400;
        reply.body = error_json("Inference-Header-Content-Length '" + v.substr(0, 32) + "' is not a byte count");
        auto res = make_response(reply, msg.version(), msg.keep_alive());
        http::write(stream, res, ec);
        if (ec || !msg.keep_alive()) return;
        continue;
      }
      rq.has_header_length = true;
      rq.header_length = size_t(n);
    }
    size_t bytes_in = rq.body.size();
    reply = handle_rest(core_, rq);
    bool keep = msg.keep_alive() && !close_after && !core_.draining();
    auto res = make_response(reply, msg.version(), keep);
    size_t bytes_out = res.body().size();
    http::write(stream, res, ec);
    if (core_.options().access_log)
      core_.log_access("http", rq.method + " " + rq.target.substr(0, 200), reply.status, bytes_in, bytes_out,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (ec || !keep) return;
  }
}

void HttpFrontend::accept_loop() {
  int lfd = impl_->acceptor.native_handle();
  const ServeOptions& o = core_.options();
  while (!stop_.load()) {
    pollfd p{lfd, POLLIN, 0};
    int r = ::poll(&p, 1, 100);
    if (r <= 0 || stop_.load()) continue;
    tcp::socket sock(impl_->ioc);
    beast::error_code ec;
    impl_->acceptor.accept(sock, ec);
    if (ec) continue;
    sock.set_option(tcp::no_delay(true), ec);
    int fd = sock.native_handle();
    timeval tv{o.idle_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (active_.load() >= o.max_connections) {
      core_.rejected_connections_++;
      RestReply reply;
      reply.status = 503;
      reply.body = error_json("too many connections (" + std::to_string(o.max_connections) +
                              ", --max-connections); retry later");
      auto res = make_response(reply, 11, false);
      timeval wt{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wt, sizeof wt);
      if (!impl_->tls) http::write(sock, res, ec);
      sock.close(ec);
      continue;
    }
    active_++;
    {
      std::lock_guard<std::mutex> lk(conn_mu_);
      conn_fds_.insert(fd);
    }
    std::thread([this, s = std::move(sock), fd]() mutable {
      try {
        if (impl_->tls) {
          beast::ssl_stream<tcp::socket&> tls(s, *impl_->tls);
          beast::error_code hec;
          tls.handshake(asio::ssl::stream_base::server, hec);
          if (!hec) {
            serve_connection(tls, fd);
            tls.shutdown(hec);
          }
        } else {
          serve_connection(s, fd);
        }
      } catch (const std::exception&) {
      }
      {
        std::lock_guard<std::mutex> lk(conn_mu_);
        conn_fds_.erase(fd);
      }
      beast::error_code cec;
      s.shutdown(tcp::socket::shutdown_both, cec);
      s.close(cec);
      active_--;
    }).detach();
  }
}

}  // namespace basalt::serve
