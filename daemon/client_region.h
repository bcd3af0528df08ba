// ClientRegion: shared memory of a client's own, handed to the daemon as a region of its session
// (SGLang's host pool, LMCache's buffers), so reads land in memory the client already uses. It
// comes as a descriptor over the data socket (data_socket.h) and must be a shared-memory file
// (memfd, /dev/shm, hugetlbfs) open read-write and not sealed against writes.
//
// A memfd sealed against shrinking is used like the session's own arena. Any other file may be
// truncated by its owner at any time, and a load or store through a mapping of a page that is gone
// kills the process (SIGBUS): the daemon maps such a region as a target for O_DIRECT reads (where
// a vanished page fails the read), hashes it only under a SIGBUS guard, and otherwise reaches its
// bytes through the descriptor (src/memory/client_memory.h). `sealed()` says which.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstream {

class ClientRegion {
 public:
  // Checks and maps `size` bytes of `fd` (taking ownership of the descriptor; closed on failure).
  // InvalidArgument/FailedPrecondition name what is wrong with it.
  static absl::StatusOr<std::unique_ptr<ClientRegion>> Adopt(int fd, uint64_t size);
  ~ClientRegion();
  ClientRegion(const ClientRegion&) = delete;
  ClientRegion& operator=(const ClientRegion&) = delete;

  uint8_t* data() const { return base_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // Sealed against shrinking: the daemon may load from and store to it directly.
  bool sealed() const { return sealed_; }

  // OK when [offset, offset + length) lies inside the region (length > 0); OutOfRange otherwise.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const;

 private:
  ClientRegion(int fd, uint8_t* base, uint64_t size, bool sealed) : fd_(fd), base_(base), size_(size), sealed_(sealed) {}
  int fd_;
  uint8_t* base_;
  uint64_t size_;
  bool sealed_;
};

}  // namespace kvstream
