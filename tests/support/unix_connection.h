// Client connections to a Unix socket that send nothing of their own accord, as a tenant flooding
// a listener makes them, and whether the server closed one.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace kvstream::testing {

// A new Unix stream socket, close-on-exec; nonblocking with `nonblocking` (a connect then fails
// at once when the listener's backlog is full, instead of waiting for room). -1 on failure.
inline int NewUnixSocket(bool nonblocking = false) {
  return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
}

// Connects `fd` (a new blocking socket unless given: one made beforehand, for a test that has no
// descriptor left to make one) to the Unix socket at `path`. Returns `fd`, or -1 with `fd` closed.
inline int ConnectUnix(const std::string& path, int fd = NewUnixSocket()) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof(addr.sun_path)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  std::strcpy(addr.sun_path, path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

// True when the server closed `socket` within `wait_ms`, or `socket` was never open (-1).
inline bool ClosedByServer(int socket, int wait_ms = 0) {
  if (socket < 0) return true;
  pollfd p{socket, POLLRDHUP, 0};
  return poll(&p, 1, wait_ms) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace kvstream::testing
