// UnixListener: a listening Unix socket served from an epoll loop, accepted from until nothing is
// waiting. Out of descriptors (EMFILE, ENFILE), it pauses: the listener is level-triggered, so the
// connection that could not be taken would be reported again at once and retrying would spin (and
// log on every turn). Instead the listener leaves the epoll set for kPauseMs, during which the loop
// serves everything else, and the warning is throttled (throttled_warning.h). Waiting clients
// stay in the listen backlog and are accepted once descriptors are free again. Serving thread
// only (Listen and Close excepted, before and after serving).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "throttled_warning.h"

namespace kvstream {

class UnixListener {
 public:
  static constexpr int kBacklog = 128;
  static constexpr int64_t kPauseMs = 100;

  // `name` names the socket in warnings ("data socket").
  explicit UnixListener(std::string name) : name_(std::move(name)) {}
  ~UnixListener() { Close(); }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Binds `path` (removing what is there: the caller checked that no live daemon serves it) with
  // permission bits `mode`, listens, and adds the socket to `epoll_fd`'s set (EPOLLIN, data.fd).
  absl::Status Listen(const std::string& path, uint32_t mode, int epoll_fd);
  // A connection waiting (nonblocking, close-on-exec), or -1: none is waiting, or accept4 failed
  // (EMFILE and ENFILE pause the listener). `now_ms`: the steady clock.
  int Accept(int64_t now_ms);
  // The longest epoll_wait may wait to end a pause on time: -1 (no bound) when not paused.
  int64_t WaitMs(int64_t now_ms) const;
  // After epoll_wait: puts the listener back in the epoll set once a pause is over.
  void ResumeIfDue(int64_t now_ms);
  // Closes the socket and removes its path.
  void Close();

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  std::string path_;
  int fd_ = -1;
  int epoll_fd_ = -1;
  bool paused_ = false;
  int64_t resume_ms_ = 0;
  ThrottledWarning warning_;
};

}  // namespace kvstream
