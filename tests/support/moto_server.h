// A real S3 server for a test: moto_server (PyPI moto[server], the venv of deploy/python-env.sh
// --s3) on a free 127.0.0.1 port, started by the constructor and killed by the destructor. moto
// keeps objects in memory: Stop and Start lose them; Pause and Resume (SIGSTOP, SIGCONT) keep
// them (a server that stops answering).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace kvstream::testing {

class MotoServer {
 public:
  // The moto_server to run: $KVSTREAM_MOTO_SERVER, else moto_server on PATH; "" when none.
  static std::string Find() {
    if (const char* env = std::getenv("KVSTREAM_MOTO_SERVER"); env != nullptr && *env != '\0') return env;
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    for (size_t start = 0; start <= dirs.size();) {
      const size_t end = std::min(dirs.find(':', start), dirs.size());
      const std::string candidate = dirs.substr(start, end - start) + "/moto_server";
      if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
      start = end + 1;
    }
    return "";
  }

  // `environment`: NAME=VALUE pairs for the server's environment. (moto checks no signature by
  // default; tools/lib/s3.sh's s3_server_start --auth makes one that does, for the daemon tests.)
  explicit MotoServer(std::vector<std::string> environment = {}) : binary_(Find()), environment_(std::move(environment)) {
    port_ = FreePort();
    Start();
  }
  ~MotoServer() { Stop(); }
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  bool ok() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Starts it on its port and waits until it answers (at most 30 s); ok() says whether it did.
  void Start() {
    if (binary_.empty() || pid_ > 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      for (const std::string& e : environment_) putenv(const_cast<char*>(e.c_str()));
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      const std::string port = std::to_string(port_);
      execl(binary_.c_str(), binary_.c_str(), "-H", "127.0.0.1", "-p", port.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!Answers()) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_ || std::chrono::steady_clock::now() > end) {
        Stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Pause() { kill(pid_, SIGSTOP); }
  void Resume() { kill(pid_, SIGCONT); }

  // Makes a bucket (moto takes an unsigned request unless it checks signatures). True if made.
  bool CreateBucket(const std::string& bucket) const {
    return Request("PUT /" + bucket + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port_) +
                   "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
               .rfind("HTTP/1.1 200", 0) == 0;
  }

 private:
  static int FreePort() {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    close(s);
    return ntohs(a.sin_port);
  }
  // Sends `request`, returns what came back before the server closed ("" if it could not connect).
  std::string Request(const std::string& request) const {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string reply;
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        send(s, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = recv(s, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
    }
    close(s);
    return reply;
  }
  bool Answers() const {
    return Request("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.", 0) == 0;
  }

  std::string binary_;
  std::vector<std::string> environment_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvstream::testing
