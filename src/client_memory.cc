#include "client_memory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"
#if defined(__x86_64__)
#include "xxh_x86dispatch.h"  // as in chunk_format.cc: the vector build of XXH3
#endif

namespace kvstream {
namespace {

constexpr size_t kPieceBytes = 256 << 10;  // fits L2: the bytes pread copies are hashed from cache

absl::Status Shrank(const FileRange& range, uint64_t got) {
  return absl::FailedPreconditionError(absl::StrCat("the client's memory no longer covers [", range.offset, ", +",
                                                    range.size, ") (it ends ", got, " bytes in: truncated?)"));
}

absl::Status Failed(const char* what, const FileRange& range) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " the client's memory at ", range.offset, ": ", std::strerror(errno)));
}

// Reads [range.offset + done, ...) piece by piece into `out`; false (with `status`) when short.
bool ReadPiece(const FileRange& range, uint64_t done, void* out, size_t want, absl::Status* status) {
  size_t got = 0;
  while (got < want) {
    const ssize_t n = pread(range.fd, static_cast<uint8_t*>(out) + got, want - got,
                            static_cast<off_t>(range.offset + done + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *status = Failed("reading", range);
      return false;
    }
    if (n == 0) {
      *status = Shrank(range, done + got);
      return false;
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::Status ReadClientMemory(const FileRange& range, void* out) {
  absl::Status status;
  ReadPiece(range, 0, out, range.size, &status);
  return status;
}

absl::Status WriteClientMemory(int fd, uint64_t offset, const void* data, size_t size) {
  const FileRange range{fd, offset, size};
  struct stat st;
  if (fstat(fd, &st) != 0) return Failed("examining", range);
  if (static_cast<uint64_t>(st.st_size) < offset + size) {
    return Shrank(range, static_cast<uint64_t>(st.st_size) > offset ? st.st_size - offset : 0);
  }
  // A truncation between the check and the write grows the file back over the range: the client
  // sees bytes in memory it gave up, which is harmless to the daemon and to other clients.
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, static_cast<const uint8_t*>(data) + done, size - done,
                             static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Failed("writing", range);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ChecksumClientMemory(const FileRange& range) {
  thread_local std::unique_ptr<uint8_t[]> buffer(new uint8_t[kPieceBytes]);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  absl::Status status;
  for (uint64_t done = 0; done < range.size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, range.size - done));
    if (!ReadPiece(range, done, buffer.get(), want, &status)) return status;
    XXH3_64bits_update(&state, buffer.get(), want);
    done += want;
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace kvstream
