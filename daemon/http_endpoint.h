// kvstreamd's HTTP endpoint (config `metrics.listen`, off by default): GET /metrics (Prometheus
// text, metrics.h) and GET /health (200 "OK", or 503 with one problem per line: health.h). Serves
// on its own thread; never touches the data path.
//
// Every connection is hostile until it has sent a request: one thread polls nonblocking sockets,
// so a silent, drip-feeding or non-reading client holds one connection slot and nothing else;
// each connection has a deadline for its request head and one for its response; a head larger than
// a few KiB or a request with a body is refused; at the connection limit the oldest connection not
// being answered is closed to admit the new one. No keep-alive: one request per connection.
// (Debian 12's cpp-httplib 0.11.4 serves a connection per pooled thread with no per-connection
// deadline and no bound on queued connections: a few silent clients delayed every scrape by
// their timeouts, and a drip-fed header held a thread forever.)
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "kvstream/store.h"
#include "sessions.h"

namespace kvstream {

struct HttpLimits {
  std::chrono::milliseconds read_timeout{2000};   // accept -> the whole request head received
  std::chrono::milliseconds write_timeout{2000};  // head received -> response sent, peer's close awaited
  size_t max_connections = 32;                    // open at once; beyond, the oldest idle one is closed
  size_t max_request_bytes = 4096;                // request line and headers; a body is refused (413)
};

// What ParseRequestHead makes of the bytes received so far.
struct HttpRequestHead {
  enum class Outcome { kIncomplete, kComplete, kBad };
  Outcome outcome = Outcome::kIncomplete;
  int error_status = 0;  // kBad: the status to answer (400, 405, 413, 505)
  bool head_only = false;  // HEAD: answer without the body
  std::string path;        // the target without its query, e.g. "/metrics"
};

// Parses an HTTP/1.x request head (request line, headers, empty line). Only GET and HEAD without
// a body are accepted. Pure: the fuzzable part of the endpoint.
HttpRequestHead ParseRequestHead(std::string_view bytes);

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

// The server: binds in Start, serves on one thread until Stop. The handler runs on that thread
// and must be quick (it renders a reply from in-memory state).
class HttpServer {
 public:
  using Handler = std::function<HttpReply(std::string_view path)>;

  explicit HttpServer(Handler handler, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds HOST:PORT (HOST may be a name, an IPv4 address or a bracketed IPv6 address; PORT 0
  // picks a free port, see port()) and starts serving.
  absl::Status Start(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }
  // Connections closed by a deadline or by the connection limit (tests, logs).
  uint64_t timed_out() const { return timed_out_.load(); }
  uint64_t evicted() const { return evicted_.load(); }

 private:
  void Serve();

  const Handler handler_;
  const HttpLimits limits_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop wakes the poll loop
  int port_ = 0;
  std::atomic<uint64_t> timed_out_{0};
  std::atomic<uint64_t> evicted_{0};
  std::thread thread_;
};

class HttpEndpoint {
 public:
  HttpEndpoint(const Store* store, const SessionManager* sessions, std::string version);
  ~HttpEndpoint();

  // Binds `listen` ("HOST:PORT", e.g. 127.0.0.1:9464) and starts serving. A clear error when the
  // address is malformed or taken.
  absl::Status Start(const std::string& listen);
  void Stop();

 private:
  HttpReply Handle(std::string_view path) const;

  const Store* store_;
  const SessionManager* sessions_;
  const std::string version_;
  HttpServer server_;
};

}  // namespace kvstream
