// ClientRegion: shared memory of a client's own, handed to the daemon as a region of its session
// (SGLang's host pool, LMCache's buffers), so reads land in memory the client already uses. It
// comes as a descriptor over the data socket (data_socket.h) and must be a shared-memory file
// (memfd, /dev/shm, hugetlbfs) open read-write and not sealed against writes.
//
// One rule decides how the daemon touches a region, whatever the client does to its file later
// (truncate it, punch holes, add seals): a load or store through a mapping of a page that is gone
// and cannot be replaced kills the process (SIGBUS), so the daemon touches a region directly only
// where no page can vanish for good: a memfd on tmpfs sealed against shrinking (F_SEAL_SHRINK). Its
// size cannot drop, and a page punched out of it (which the seal allows) is a fresh zero page on
// the next touch. Every other region is reached through its descriptor (pread for persists), as
// the target of O_DIRECT reads (a missing page fails the read, not the process), and with the CPU
// only under a SIGBUS guard (src/memory/client_memory.h): unsealed files, which may be truncated,
// and anything on hugetlbfs, sealed or not, where a punched huge page is replaced only while a
// free huge page is left. Seals against writing are refused (nothing could be read into the
// region); the other seals change nothing. `direct()` says which.
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
  // The daemon may load from and store to the mapping directly (a tmpfs memfd sealed against
  // shrinking); false: through the descriptor and under the SIGBUS guard.
  bool direct() const { return direct_; }

  // OK when [offset, offset + length) lies inside the region (length > 0); OutOfRange otherwise.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const;

 private:
  ClientRegion(int fd, uint8_t* base, uint64_t size, uint64_t mapped, bool direct)
      : fd_(fd), base_(base), size_(size), mapped_(mapped), direct_(direct) {}
  int fd_;
  uint8_t* base_;
  uint64_t size_;
  uint64_t mapped_;  // size_ rounded up to whole pages of the file
  bool direct_;
};

}  // namespace kvstream
