#include "http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "health.h"
#include "metrics.h"
#include "thread_name.h"

namespace kvstream {
namespace {

using Clock = std::chrono::steady_clock;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

std::string RenderResponse(const HttpReply& reply, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", reply.status, " ", ReasonPhrase(reply.status), "\r\nContent-Type: ",
                                 reply.content_type, "\r\nContent-Length: ", reply.body.size(),
                                 reply.status == 405 ? "\r\nAllow: GET, HEAD" : "", "\r\nConnection: close\r\n\r\n");
  if (!head_only) out += reply.body;
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return absl::ascii_tolower(static_cast<unsigned char>(x)) == absl::ascii_tolower(static_cast<unsigned char>(y));
         });
}

HttpReply ErrorReply(int status) { return HttpReply{status, "text/plain", absl::StrCat(ReasonPhrase(status), "\n")}; }

// One accepted connection. Reading: until a whole request head arrived (read deadline). Writing:
// the response (write deadline). Draining: response sent and our side shut down; what the peer
// still sends is discarded until it closes, so that closing never resets the connection before
// the peer read the response (bounded by the same write deadline).
struct Connection {
  enum class State { kReading, kWriting, kDraining, kClosed };
  int fd = -1;
  State state = State::kReading;
  Clock::time_point deadline;
  uint64_t order = 0;  // acceptance order: the oldest idle connection is closed at the limit
  std::string in;
  std::string out;
  size_t sent = 0;
};

void Close(Connection& c) {
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;
  c.state = Connection::State::kClosed;
}

}  // namespace

HttpRequestHead ParseRequestHead(std::string_view bytes) {
  HttpRequestHead head;
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) return head;
  const auto bad = [&head](int status) {
    head.outcome = HttpRequestHead::Outcome::kBad;
    head.error_status = status;
    return head;
  };
  std::string_view rest = bytes.substr(0, end + 2);  // every line ends in CRLF
  const size_t line_end = rest.find("\r\n");
  const std::string_view line = rest.substr(0, line_end);
  rest.remove_prefix(line_end + 2);

  // METHOD SP TARGET SP VERSION
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return bad(400);
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return bad(version.substr(0, 5) == "HTTP/" ? 505 : 400);
  if (target.empty() || target[0] != '/') return bad(400);
  if (method != "GET" && method != "HEAD") return bad(405);

  // Headers: only whether a body follows matters, and none may.
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view header = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad(400);
    const std::string_view name = header.substr(0, colon);
    std::string_view value = header.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (EqualsIgnoreCase(name, "transfer-encoding")) return bad(413);
    if (EqualsIgnoreCase(name, "content-length") && value != "0") return bad(413);
  }
  head.outcome = HttpRequestHead::Outcome::kComplete;
  head.head_only = method == "HEAD";
  head.path = std::string(target.substr(0, target.find_first_of("?#")));
  return head;
}

HttpServer::HttpServer(Handler handler, HttpLimits limits) : handler_(std::move(handler)), limits_(limits) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(const std::string& host_in, int port) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("port ", port, " out of range"));
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      error = std::strerror(errno);
      close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return absl::UnavailableError(error);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const std::string reason = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return absl::ResourceExhaustedError(absl::StrCat("eventfd: ", reason));
  }
  thread_ = std::thread([this] {
    NameThisThread("kvs-http");
    Serve();
  });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void HttpServer::Serve() {
  using State = Connection::State;
  std::vector<Connection> conns;
  conns.reserve(limits_.max_connections);
  std::vector<pollfd> fds;
  uint64_t accepted = 0;
  Clock::time_point accept_paused_until;  // out of descriptors: accept again a little later

  // Moves one connection on as far as its socket allows without blocking.
  const auto advance = [this](Connection& c, Clock::time_point now) {
    const auto respond = [&](const HttpReply& reply, bool head_only) {
      c.out = RenderResponse(reply, head_only);
      c.in.clear();
      c.state = State::kWriting;
      c.deadline = now + limits_.write_timeout;
    };
    char buf[4096];
    while (c.state == State::kReading) {
      const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {  // the peer gave up, or nothing more yet
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) Close(c);
        return;
      }
      c.in.append(buf, std::min(static_cast<size_t>(r), limits_.max_request_bytes + 1 - c.in.size()));
      const HttpRequestHead head = ParseRequestHead(c.in);
      if (head.outcome == HttpRequestHead::Outcome::kComplete) {
        respond(handler_(head.path), head.head_only);
      } else if (head.outcome == HttpRequestHead::Outcome::kBad) {
        respond(ErrorReply(head.error_status), false);
      } else if (c.in.size() > limits_.max_request_bytes) {
        respond(ErrorReply(431), false);
      }
    }
    while (c.state == State::kWriting && c.sent < c.out.size()) {
      const ssize_t w = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (w <= 0) {
        Close(c);
        return;
      }
      c.sent += static_cast<size_t>(w);
    }
    if (c.state == State::kWriting) {
      shutdown(c.fd, SHUT_WR);
      c.out = std::string();
      c.state = State::kDraining;
    }
    for (int reads = 0; c.state == State::kDraining && reads < 16; ++reads) {
      const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) Close(c);
      if (r <= 0) return;
    }
  };

  for (;;) {
    Clock::time_point now = Clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(now >= accept_paused_until ? POLLIN : 0), 0});
    Clock::time_point wake_at = now >= accept_paused_until ? Clock::time_point::max() : accept_paused_until;
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == State::kWriting ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;  // Stop
    now = Clock::now();

    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      if (fds[i + 2].revents != 0) advance(c, now);
      if (c.state != State::kClosed && now >= c.deadline) {
        if (c.state != State::kDraining) timed_out_.fetch_add(1, std::memory_order_relaxed);
        Close(c);
      }
    }
    std::erase_if(conns, [](const Connection& c) { return c.state == State::kClosed; });

    // Accept what is waiting, at most the limit's worth per round.
    for (size_t n = 0; (fds[1].revents & POLLIN) != 0 && n < limits_.max_connections; ++n) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) accept_paused_until = now + std::chrono::milliseconds(100);
        break;
      }
      if (conns.size() >= limits_.max_connections) {
        // Make room: close the oldest connection that is not being answered (a response in
        // flight is finished); if every one is, the newcomer is closed instead.
        auto oldest = conns.end();
        for (auto it = conns.begin(); it != conns.end(); ++it) {
          if (it->state != State::kWriting && (oldest == conns.end() || it->order < oldest->order)) oldest = it;
        }
        evicted_.fetch_add(1, std::memory_order_relaxed);
        if (oldest == conns.end()) {
          close(fd);
          continue;
        }
        Close(*oldest);
        conns.erase(oldest);
      }
      Connection& c = conns.emplace_back();
      c.fd = fd;
      c.deadline = now + limits_.read_timeout;
      c.order = accepted++;
      advance(c, now);  // a client usually sends its request with the connection
      if (c.state == State::kClosed) conns.pop_back();
    }
  }
  for (Connection& c : conns) Close(c);
}

HttpEndpoint::HttpEndpoint(const Store* store, const SessionManager* sessions, std::string version)
    : store_(store),
      sessions_(sessions),
      version_(std::move(version)),
      server_([this](std::string_view path) { return Handle(path); }) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

absl::Status HttpEndpoint::Start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.listen '", listen, "' is not HOST:PORT"));
  }
  if (absl::Status s = server_.Start(listen.substr(0, colon), port); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot listen on ", listen, " (metrics.listen): ", s.message()));
  }
  return absl::OkStatus();
}

void HttpEndpoint::Stop() { server_.Stop(); }

HttpReply HttpEndpoint::Handle(std::string_view path) const {
  if (path == "/metrics") {
    const HealthReport health = ComputeHealth(*store_, version_);
    DaemonGauges gauges{static_cast<uint32_t>(sessions_->count()), sessions_->arena_bytes(),
                        sessions_->arena_budget()};
    ReadProcessGauges(&gauges);
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8",
                     RenderMetrics(store_->Stats(), gauges, HealthOk(health), version_)};
  }
  if (path == "/health") {
    const HealthReport health = ComputeHealth(*store_, version_);
    if (HealthOk(health)) return HttpReply{200, "text/plain", "OK\n"};
    return HttpReply{503, "text/plain", absl::StrCat("NOT OK\n", absl::StrJoin(health.problems, "\n"), "\n")};
  }
  return ErrorReply(404);
}

}  // namespace kvstream
