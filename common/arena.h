// Arena: one session's shared-memory data plane. A sealed memfd of fixed size, mapped by the
// daemon (reads land in it by O_DIRECT) and by the client (which receives the fd over a Unix
// socket with SCM_RIGHTS). The seals forbid resizing, so neither side can pull pages away from
// the other. Every client-supplied range is checked against it before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstream {

class Arena {
 public:
  // Creates a memfd of `size` bytes (a multiple of the page size, > 0), maps it and seals its size.
  static absl::StatusOr<std::unique_ptr<Arena>> Create(const std::string& name, uint64_t size);
  // Maps an arena received from the daemon (client side). Checks the seals and the size.
  static absl::StatusOr<std::unique_ptr<Arena>> Map(int fd);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint8_t* data() const { return base_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  // OK when [offset, offset + length) lies inside the arena (length > 0); OutOfRange otherwise,
  // with a message naming the range. Overflow-safe.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const;

 private:
  Arena(int fd, uint8_t* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  // Maps `size` bytes of `fd` shared; takes ownership of `fd` (closed on failure).
  static absl::StatusOr<std::unique_ptr<Arena>> MapShared(int fd, uint64_t size);
  int fd_;
  uint8_t* base_;
  uint64_t size_;
};

// OK when [offset, offset + length) lies inside `size` bytes (length > 0); OutOfRange otherwise,
// with a message naming the range and `what` it is outside of. Overflow-safe.
absl::Status CheckRangeWithin(uint64_t offset, uint64_t length, uint64_t size, const std::string& what);

// Sends `fd` with one byte of payload over a connected Unix stream socket (SCM_RIGHTS).
absl::Status SendFd(int socket, int fd);
// Sends `size` bytes in one message, with `fd` attached when >= 0 (SCM_RIGHTS). False (errno set)
// unless all of it went.
bool SendWithDescriptor(int socket, const void* data, size_t size, int fd);
// Receives a descriptor sent by SendFd. The caller owns it.
absl::StatusOr<int> ReceiveFd(int socket);

}  // namespace kvstream
