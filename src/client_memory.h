// Client memory that may shrink under the store: a client's own shared-memory file (say an
// unsealed /dev/shm pool) that the daemon maps but never touches with the CPU, because a page the
// client truncated away would kill the daemon with SIGBUS. Everything the store does with the
// bytes goes through the file instead: pread, pwrite, and hashing what pread returns. A range
// that is no longer there is FailedPrecondition, never a crash and never the tiers' fault.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kvstream/store.h"

namespace kvstream {

// Reads all of `range` into `out` (pread, retried on EINTR and short reads).
absl::Status ReadClientMemory(const FileRange& range, void* out);
// Writes `size` bytes of `data` to `fd` at `offset`; FailedPrecondition when the file no longer
// covers the range (a write past its end would grow it again, so that is refused, not done).
absl::Status WriteClientMemory(int fd, uint64_t offset, const void* data, size_t size);
// xxh3-64 of `range` (the value Checksum gives for the same bytes), read through a small buffer
// of the calling thread so the bytes are hashed while in cache.
absl::StatusOr<uint64_t> ChecksumClientMemory(const FileRange& range);

}  // namespace kvstream
