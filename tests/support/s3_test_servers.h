// Servers for the S3 client's tests: a real S3 (moto_server, a child process on a free port of
// 127.0.0.1) and a small HTTP server of the test's own that answers as a script says: canned
// answers (503 SlowDown, bodies longer than asked), silence, dropped connections, or the request
// forwarded to moto and its answer relayed back.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvstream::testing {

// A port of 127.0.0.1 nothing listens on (bound, then let go: another process could take it).
inline uint16_t FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("FreePort");
    std::abort();
  }
  close(fd);
  return ntohs(a.sin_port);
}

inline int ConnectLoopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The moto_server executable: $KVSTREAM_MOTO_SERVER, else moto_server on PATH; "" when neither.
inline std::string FindMotoServer() {
  if (const char* env = std::getenv("KVSTREAM_MOTO_SERVER"); env != nullptr && *env != '\0') {
    return access(env, X_OK) == 0 ? env : "";
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/moto_server";
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// moto_server on a free port of 127.0.0.1, in a process group of its own, killed at the end.
class MotoServer {
 public:
  // `env`: NAME=VALUE settings for the server (INITIAL_NO_AUTH_ACTION_COUNT=3). Exits the test
  // with 77 (skipped) when there is no moto_server.
  explicit MotoServer(std::vector<std::string> env = {}) {
    const std::string exe = FindMotoServer();
    if (exe.empty()) {
      std::cerr << "SKIPPED: no moto_server (set KVSTREAM_MOTO_SERVER to its path, put it on PATH, or make "
                   "the venv with deploy/python-env.sh --s3)\n";
      std::exit(77);
    }
    port_ = FreePort();
    char log_template[] = "/tmp/kvstream-moto-XXXXXX";
    const int log_fd = mkstemp(log_template);
    log_ = log_template;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the test, even one killed by a timeout
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      const std::string port = std::to_string(port_);
      execl(exe.c_str(), exe.c_str(), "-H", "127.0.0.1", "-p", port.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(log_fd);
    setpgid(pid_, pid_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      if (const int fd = ConnectLoopback(port_); fd >= 0) {
        close(fd);
        break;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_ || std::chrono::steady_clock::now() > deadline) {
        std::cerr << "moto_server (" << exe << ") did not start; its output:\n" << Log() << "\n";
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~MotoServer() {
    kill(-pid_, SIGCONT);
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    unlink(log_.c_str());
  }
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // SIGSTOP / SIGCONT: a server that holds every request (and keeps its objects) meanwhile.
  void Pause() { kill(-pid_, SIGSTOP); }
  void Resume() { kill(-pid_, SIGCONT); }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string log_;
};

// One HTTP request as the fake server read it.
struct FakeRequest {
  std::string method, target;  // target: path?query, as sent
  std::string head;            // the request line and headers, as sent
  std::string body;
  std::string Header(const std::string& name) const {  // "" when absent
    std::istringstream lines(head);
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos || colon != name.size()) continue;
      if (strncasecmp(line.c_str(), name.c_str(), name.size()) != 0) continue;
      std::string value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
      while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.pop_back();
      return value;
    }
    return "";
  }
};

struct FakeReply {
  enum class Kind { kRaw, kRawThenClose, kForward, kHang, kClose } kind = Kind::kForward;
  std::string raw;  // kRaw, kRawThenClose: the answer's bytes as sent
  static FakeReply Raw(std::string raw) { return {Kind::kRaw, std::move(raw)}; }
  static FakeReply RawThenClose(std::string raw) { return {Kind::kRawThenClose, std::move(raw)}; }
  static FakeReply Forward() { return {Kind::kForward, ""}; }
  static FakeReply Hang() { return {Kind::kHang, ""}; }
  static FakeReply Close() { return {Kind::kClose, ""}; }
};

// An answer with `status`, a Content-Length'd `body` and `headers` ("Name: value\r\n" each).
inline std::string HttpAnswer(int status, const std::string& reason, const std::string& headers,
                              const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + headers + "\r\n" + body;
}

inline std::string SlowDownAnswer() {
  return HttpAnswer(503, "Slow Down", "Content-Type: application/xml\r\n",
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
                    "<Message>Please reduce your request rate.</Message></Error>");
}

// The test's own HTTP/1.1 server on 127.0.0.1: a thread per connection, keep-alive, each request
// answered as `handler` says; kForward sends it to 127.0.0.1:`upstream` and relays the answer.
class FakeS3Server {
 public:
  using Handler = std::function<FakeReply(const FakeRequest&)>;

  explicit FakeS3Server(Handler handler, uint16_t upstream = 0) : handler_(std::move(handler)), upstream_(upstream) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 256) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("FakeS3Server");
      std::abort();
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FakeS3Server() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : connections_) shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : threads_) t.join();
    close(listen_fd_);
  }
  FakeS3Server(const FakeS3Server&) = delete;
  FakeS3Server& operator=(const FakeS3Server&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<FakeRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Accept() {
    while (!stop_) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stop_ || errno == EINVAL || errno == EBADF) return;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      connections_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // Reads one request off `fd` (into `buffer`, which keeps what follows it); false at the end.
  static bool ReadRequest(int fd, std::string& buffer, FakeRequest* request) {
    size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      char chunk[65536];
      const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    request->head = buffer.substr(0, end + 2);
    buffer.erase(0, end + 4);
    std::istringstream line(request->head);
    line >> request->method >> request->target;
    const std::string length = request->Header("Content-Length");
    const size_t body = length.empty() ? 0 : std::stoul(length);
    while (buffer.size() < body) {
      char chunk[65536];
      const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    request->body = buffer.substr(0, body);
    buffer.erase(0, body);
    return true;
  }

  // Sends `request` to moto and returns its whole answer (empty when it failed).
  std::string Forward(const FakeRequest& request) const {
    const int fd = ConnectLoopback(upstream_);
    if (fd < 0) return "";
    std::string answer;
    if (WriteAll(fd, request.head + "\r\n" + request.body)) {
      size_t need = std::string::npos;
      for (;;) {
        char chunk[65536];
        const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) break;
        answer.append(chunk, static_cast<size_t>(n));
        const size_t end = answer.find("\r\n\r\n");
        if (need == std::string::npos && end != std::string::npos) {
          FakeRequest head;
          head.head = answer.substr(0, end + 2);
          const std::string length = head.Header("Content-Length");
          const bool no_body = request.method == "HEAD" || answer.compare(9, 3, "204") == 0;
          need = end + 4 + (no_body || length.empty() ? 0 : std::stoul(length));
        }
        if (need != std::string::npos && answer.size() >= need) {
          answer.resize(need);
          break;
        }
      }
    }
    close(fd);
    return answer;
  }

  void Serve(int fd) {
    std::string buffer;
    FakeRequest request;
    while (!stop_ && ReadRequest(fd, buffer, &request)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(request);
      }
      const FakeReply reply = handler_(request);
      if (reply.kind == FakeReply::Kind::kClose) break;
      if (reply.kind == FakeReply::Kind::kHang) {
        while (!stop_) {
          pollfd p{fd, POLLIN, 0};
          if (poll(&p, 1, 50) > 0) {
            char c;
            if (recv(fd, &c, 1, MSG_PEEK) <= 0) break;  // the client went away
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
        break;
      }
      const bool raw = reply.kind == FakeReply::Kind::kRaw || reply.kind == FakeReply::Kind::kRawThenClose;
      const std::string answer = raw ? reply.raw : Forward(request);
      if (answer.empty() || !WriteAll(fd, answer) || reply.kind == FakeReply::Kind::kRawThenClose) break;
    }
    shutdown(fd, SHUT_RDWR);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (*it == fd) {
        connections_.erase(it);
        break;
      }
    }
    close(fd);
  }

  const Handler handler_;
  const uint16_t upstream_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> connections_;
  std::vector<std::thread> threads_;
  std::vector<FakeRequest> requests_;
};

}  // namespace kvstream::testing
