// EpollThread: the thread that serves one socket (the control socket, the data socket), waiting on
// an epoll set that holds a stop event: Join signals it, and the serving function returns when it
// sees it (IsStop). Serving thread only, but for Create, Start, Join and Close.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/status/status.h"

namespace kvstream {

// The steady clock in milliseconds (the serving threads' deadlines and pauses).
int64_t SteadyNowMs();

class EpollThread {
 public:
  EpollThread() = default;
  ~EpollThread() { Close(); }
  EpollThread(const EpollThread&) = delete;
  EpollThread& operator=(const EpollThread&) = delete;

  // Creates the epoll set with the stop event in it.
  absl::Status Create();
  // Runs `serve` on a thread named `name` (at most 15 characters).
  void Start(const char* name, std::function<void()> serve);
  // Signals the stop event and waits for the thread to return. Idempotent.
  void Join();
  // Join, then closes the set and the stop event.
  void Close();

  int epoll_fd() const { return epoll_fd_; }
  bool IsStop(int fd) const { return fd == stop_fd_; }

 private:
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace kvstream
