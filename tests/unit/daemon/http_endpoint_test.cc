// The HTTP endpoint against hostile clients on loopback: silent, drip-feeding and non-reading
// connections cost a slot and nothing else, each is closed at its deadline, and a request keeps
// being answered within a fraction of a second while they are open. The request parser alone:
// only GET and HEAD without a body.
#include "http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kvstream {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

HttpReply Echo(std::string_view path) {
  if (path == "/big") return HttpReply{200, "text/plain", std::string(32 << 20, 'x')};
  return HttpReply{200, "text/plain", std::string(path)};
}

// A loopback connection to `port`, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits up to `limit` for the peer to close; returns everything read. *closed says whether it did.
std::string ReadUntilClosed(int fd, milliseconds limit, bool* closed) {
  std::string got;
  *closed = false;
  const Clock::time_point end = Clock::now() + limit;
  char buf[65536];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(end - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(r));
  }
  return got;
}

// One request on a fresh connection; the response (empty on failure) within `limit`.
std::string Request(int port, const std::string& request, milliseconds limit = milliseconds(1000)) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  bool closed = false;
  std::string got = ReadUntilClosed(fd, limit, &closed);
  close(fd);
  return closed ? got : "";
}

std::string Get(int port, const std::string& path) { return Request(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"); }

HttpLimits ShortLimits() {
  HttpLimits limits;
  limits.read_timeout = milliseconds(300);
  limits.write_timeout = milliseconds(300);
  limits.max_connections = 8;
  return limits;
}

TEST_CASE("a GET is answered with the handler's reply and the connection closed") {
  HttpServer server(Echo);
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const std::string got = Get(server.port(), "/metrics?x=1");
  CHECK(got.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(got.find("Content-Length: 8\r\n") != std::string::npos);
  CHECK(got.find("Connection: close\r\n") != std::string::npos);
  CHECK(got.substr(got.size() - 8) == "/metrics");
  const std::string head = Request(server.port(), "HEAD /health HTTP/1.0\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");  // no body
}

TEST_CASE("requests other than a bodiless GET or HEAD are refused") {
  HttpServer server(Echo);
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const int port = server.port();
  CHECK(Request(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(Request(port, "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(Request(port, "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(Request(port, "GET /metrics HTTP/2.0\r\n\r\n").rfind("HTTP/1.1 505 ", 0) == 0);
  CHECK(Request(port, "garbage\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(Request(port, "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(8192, 'a') + "\r\n\r\n")
            .rfind("HTTP/1.1 431 ", 0) == 0);
}

TEST_CASE("the parser needs the whole head and takes only the path of the target") {
  CHECK(ParseRequestHead("GET /metrics HTTP/1.1\r\nHost: x\r\n").outcome == HttpRequestHead::Outcome::kIncomplete);
  const HttpRequestHead head = ParseRequestHead("GET /health?verbose#f HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  REQUIRE(head.outcome == HttpRequestHead::Outcome::kComplete);
  CHECK(head.path == "/health");
  CHECK(ParseRequestHead("GET http://x/metrics HTTP/1.1\r\n\r\n").error_status == 400);
  CHECK(ParseRequestHead("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n").error_status == 400);
  CHECK(ParseRequestHead("GET  HTTP/1.1\r\n\r\n").error_status == 400);
}

TEST_CASE("requests are answered promptly while many silent connections are open") {
  HttpServer server(Echo);  // the daemon's limits: 2 s deadlines, 32 connections
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i) {  // three times the connection limit
    const int fd = Connect(server.port());
    REQUIRE(fd >= 0);
    silent.push_back(fd);
  }
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    CHECK(Get(server.port(), "/health").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    // Before any silent connection's 2 s deadline: the server waited on none of them (a loose
    // bound, so a loaded machine does not fail it).
    CHECK(Clock::now() - start < milliseconds(1500));
  }
  CHECK(server.evicted() > 0);
  for (int fd : silent) close(fd);
}

TEST_CASE("a silent connection is closed at the read deadline") {
  HttpServer server(Echo, ShortLimits());
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const int fd = Connect(server.port());
  REQUIRE(fd >= 0);
  const Clock::time_point start = Clock::now();
  bool closed = false;
  CHECK(ReadUntilClosed(fd, milliseconds(3000), &closed).empty());
  CHECK(closed);
  CHECK(Clock::now() - start >= milliseconds(250));
  CHECK(Clock::now() - start < milliseconds(2500));
  CHECK(server.timed_out() == 1);
  close(fd);
}

TEST_CASE("a drip-fed request is closed at the read deadline however steadily it drips") {
  HttpServer server(Echo, ShortLimits());
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const int fd = Connect(server.port());
  REQUIRE(fd >= 0);
  const std::string request = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(100, 'a') + "\r\n\r\n";
  const Clock::time_point start = Clock::now();
  bool closed = false;
  for (size_t i = 0; i < request.size() && !closed; ++i) {  // one byte every 50 ms, under 6 s in all
    if (send(fd, &request[i], 1, MSG_NOSIGNAL) != 1) closed = true;
    if (!closed) ReadUntilClosed(fd, milliseconds(50), &closed);
  }
  CHECK(closed);
  CHECK(Clock::now() - start < milliseconds(3000));  // the whole drip takes over 6 s
  CHECK(server.timed_out() == 1);
  close(fd);
}

TEST_CASE("a client that does not read its response is closed at the write deadline") {
  HttpServer server(Echo, ShortLimits());
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const int fd = Connect(server.port());
  REQUIRE(fd >= 0);
  const std::string request = "GET /big HTTP/1.1\r\n\r\n";
  REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  // While the 32 MiB response is stuck in a full socket buffer, others are served.
  std::this_thread::sleep_for(milliseconds(50));
  CHECK(Get(server.port(), "/health").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  const Clock::time_point end = Clock::now() + milliseconds(3000);
  while (server.timed_out() == 0 && Clock::now() < end) std::this_thread::sleep_for(milliseconds(20));
  CHECK(server.timed_out() == 1);
  close(fd);
}

TEST_CASE("the connection limit closes the oldest idle connection to admit a new one") {
  HttpServer server(Echo, ShortLimits());
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(Connect(server.port()));
  CHECK(Get(server.port(), "/ok").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(server.evicted() == 1);
  bool closed = false;
  ReadUntilClosed(silent[0], milliseconds(100), &closed);
  CHECK(closed);  // the first one went
  for (int fd : silent) close(fd);
}

TEST_CASE("stopping returns at once with connections open") {
  HttpServer server(Echo);
  REQUIRE(server.Start("127.0.0.1", 0).ok());
  const int fd = Connect(server.port());
  const Clock::time_point start = Clock::now();
  server.Stop();
  CHECK(Clock::now() - start < milliseconds(1500));  // not the connection's 2 s deadline
  bool closed = false;
  ReadUntilClosed(fd, milliseconds(500), &closed);
  CHECK(closed);
  close(fd);
}

TEST_CASE("an address in use is a clear error and an IPv6 address goes in brackets") {
  HttpServer first(Echo);
  REQUIRE(first.Start("127.0.0.1", 0).ok());
  HttpServer second(Echo);
  CHECK(second.Start("127.0.0.1", first.port()).code() == absl::StatusCode::kUnavailable);
  HttpServer v6(Echo);
  const absl::Status s = v6.Start("[::1]", 0);  // where IPv6 exists
  if (s.ok()) CHECK(v6.port() > 0);
}

}  // namespace
}  // namespace kvstream
