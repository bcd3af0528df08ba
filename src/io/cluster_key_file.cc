#include "io/cluster_key_file.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "io/safe_open.h"
#include "util/errno_status.h"

namespace kvstream {
namespace {

constexpr size_t kMinKeyFileBytes = ChunkMacKey::kMinKeyFileBytes;
constexpr size_t kMaxKeyFileBytes = ChunkMacKey::kMaxKeyFileBytes;

absl::Status Fail(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("shared_key_file ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChunkMacKey>> LoadClusterKeyFile(const std::string& path) {
  if (sodium_init() < 0) return absl::InternalError("libsodium failed to initialise");  // before sodium_malloc
  // Beneath "/", never through a symlink in any component: whoever could change a link on the way
  // could hand the daemon a key of their own. Never a FIFO's blocking open.
  if (path.empty() || path[0] != '/') return Fail(path, "must be an absolute path");
  const int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  absl::StatusOr<int> opened = root < 0 ? ErrnoStatus(errno, "open /") : OpenFileBeneath(root, path.substr(1), O_RDONLY);
  if (root >= 0) close(root);
  if (IsRefused(opened.status())) {
    return Fail(path, absl::StrCat(opened.status().message(), " (name the key file by a path without symlinks)"));
  }
  if (!opened.ok()) {
    return absl::Status(opened.status().code(), absl::StrCat("shared_key_file ", path, ": ", opened.status().message()));
  }
  const int fd = *opened;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("stat shared_key_file ", path));
  }
  absl::Status bad;
  if (!S_ISREG(st.st_mode)) {
    bad = Fail(path, "is not a regular file");
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    bad = absl::PermissionDeniedError(absl::StrCat("shared_key_file ", path, " is owned by uid ", st.st_uid,
                                                   "; it must be owned by the daemon's uid (", geteuid(), ") or root"));
  } else if ((st.st_mode & 077) != 0) {
    bad = absl::PermissionDeniedError(absl::StrFormat(
        "shared_key_file %s has mode %04o; it must not be readable or writable by group or others (chmod 0600)", path,
        st.st_mode & 0777));
  } else if (st.st_size < static_cast<off_t>(kMinKeyFileBytes) || st.st_size > static_cast<off_t>(kMaxKeyFileBytes)) {
    bad = Fail(path, absl::StrCat("holds ", st.st_size, " bytes; a key file holds ", kMinKeyFileBytes, " to ",
                                  kMaxKeyFileBytes, " bytes (e.g. head -c 32 /dev/urandom)"));
  }
  if (!bad.ok()) {
    close(fd);
    return bad;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  auto* material = static_cast<unsigned char*>(sodium_malloc(size));
  if (material == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError("cannot allocate the cluster key");
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, material + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = errno;
  close(fd);
  absl::StatusOr<std::shared_ptr<const ChunkMacKey>> key =
      done == size ? ChunkMacKey::FromBytes(material, size)
                   : absl::StatusOr<std::shared_ptr<const ChunkMacKey>>(
                         ErrnoStatus(err, absl::StrCat("read shared_key_file ", path, " (changed while read?)")));
  sodium_free(material);  // zeroes it
  return key;
}

}  // namespace kvstream
