#include "io/safe_open.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "io/tier_device.h"  // ErrnoStatus

namespace kvstream {
namespace {

#if defined(SYS_openat2) && defined(RESOLVE_BENEATH)
constexpr bool kBuiltWithOpenat2 = true;
#else
constexpr bool kBuiltWithOpenat2 = false;
#endif

std::atomic<bool> force_walk{false};

// Flags every open below a tier carries: never a controlling terminal, never an exec'd child's,
// never the target of a symbolic link, never a wait for a FIFO's other end.
constexpr int kAlwaysFlags = O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK;

bool Openat2Works() {
#if defined(SYS_openat2) && defined(RESOLVE_BENEATH)
  // Kernels before 5.6 say ENOSYS; seccomp filters (containers) often EPERM.
  static const bool works = [] {
    open_how how{};
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
    const long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
    if (fd < 0) return false;
    close(static_cast<int>(fd));
    return true;
  }();
  return works;
#else
  return false;
#endif
}

// `rel` is one or more plain components: nothing absolute, empty, "." or "..".
bool PlainRelativePath(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(rel.find('/', start), rel.size());
    const std::string_view c = rel.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    if (end == rel.size()) return true;
    start = end + 1;
  }
}

// openat2 beneath `dir_fd`, no symbolic link on the way; -1 and errno on failure.
int OpenWithOpenat2(int dir_fd, const std::string& rel, int flags) {
#if defined(SYS_openat2) && defined(RESOLVE_BENEATH)
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int tries = 0;; ++tries) {
    // EAGAIN: a rename raced the resolution (only possible with "..", which `rel` never has).
    const long fd = syscall(SYS_openat2, dir_fd, rel.c_str(), &how, sizeof(how));
    if (fd >= 0 || errno != EAGAIN || tries == 3) return static_cast<int>(fd);
  }
#else
  (void)dir_fd, (void)rel, (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}

// One component at a time: each directory with O_NOFOLLOW | O_DIRECTORY (a symbolic link is ELOOP
// or ENOTDIR), the last with `flags` (which carry O_NOFOLLOW). -1 and errno on failure.
int OpenByComponents(int dir_fd, std::string_view rel, int flags) {
  int cur = dir_fd;
  int owned = -1;
  size_t start = 0;
  for (size_t slash = rel.find('/'); slash != std::string_view::npos; start = slash + 1, slash = rel.find('/', start)) {
    const int next = openat(cur, std::string(rel.substr(start, slash - start)).c_str(), O_RDONLY | O_DIRECTORY | kAlwaysFlags);
    const int err = errno;
    if (owned >= 0) close(owned);
    if (next < 0) {
      errno = err;
      return -1;
    }
    owned = cur = next;
  }
  const int fd = openat(cur, std::string(rel.substr(start)).c_str(), flags);
  const int err = errno;
  if (owned >= 0) close(owned);
  errno = err;
  return fd;
}

int OpenBeneath(int dir_fd, const std::string& rel, int flags) {
  if (!force_walk.load(std::memory_order_relaxed) && Openat2Works()) return OpenWithOpenat2(dir_fd, rel, flags);
  return OpenByComponents(dir_fd, rel, flags);
}

absl::Status Refused(const std::string& rel, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(rel, ": ", why));
}

// The status of a failed open: the name not being what the caller may open is a refusal.
absl::Status OpenFailed(const std::string& rel, int err) {
  switch (err) {
    case ELOOP: return Refused(rel, "a symbolic link (not followed)");
    case ENOTDIR: return Refused(rel, "not a directory where one was expected (or a symbolic link to one)");
    case EXDEV: return Refused(rel, "leads outside its directory");
    case ENXIO: return Refused(rel, "not a regular file (a socket, or a device without its driver)");
    default: return ErrnoStatus(err, absl::StrCat("open ", rel));
  }
}

const char* Describe(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<int> OpenFileBeneath(int dir_fd, std::string_view rel_view, int flags, const ExpectedOwner& owner) {
  const std::string rel(rel_view);
  if (!PlainRelativePath(rel)) return Refused(rel, "not a plain relative path");
  // O_DIRECT only once the file is known to be regular (F_SETFL below): a FIFO or a directory
  // opened with it fails with EINVAL rather than being refused.
  const int fd = OpenBeneath(dir_fd, rel, (flags & ~(O_CREAT | O_DIRECT)) | kAlwaysFlags);
  if (fd < 0) return OpenFailed(rel, errno);
  struct stat st;
  absl::Status refusal;
  if (fstat(fd, &st) != 0) {
    refusal = ErrnoStatus(errno, absl::StrCat("stat ", rel));
  } else if (!S_ISREG(st.st_mode)) {
    refusal = Refused(rel, absl::StrCat(Describe(st.st_mode), ", not a regular file: not read"));
  } else if (owner.uid >= 0 && static_cast<int64_t>(st.st_uid) != owner.uid) {
    refusal = Refused(rel, absl::StrCat("owned by uid ", st.st_uid, ", not the tier's owner_uid ", owner.uid));
  } else if (owner.gid >= 0 && static_cast<int64_t>(st.st_gid) != owner.gid) {
    refusal = Refused(rel, absl::StrCat("owned by gid ", st.st_gid, ", not the tier's owner_gid ", owner.gid));
  } else if (fcntl(fd, F_SETFL, flags) != 0) {
    // A regular file: reads block as reads of files do unless `flags` has O_NONBLOCK (io_uring
    // would otherwise hand back EAGAIN instead of waiting for the page cache). F_SETFL takes only
    // the status flags of `flags` (O_DIRECT, O_APPEND, O_NOATIME...).
    refusal = ErrnoStatus(errno, absl::StrCat("fcntl ", rel));
  }
  if (!refusal.ok()) {
    close(fd);
    return refusal;
  }
  return fd;
}

absl::StatusOr<int> OpenDirectoryBeneath(int dir_fd, std::string_view rel_view) {
  const std::string rel(rel_view);
  if (!PlainRelativePath(rel)) return Refused(rel, "not a plain relative path");
  const int fd = OpenBeneath(dir_fd, rel, O_RDONLY | O_DIRECTORY | kAlwaysFlags);
  if (fd < 0) return OpenFailed(rel, errno);
  return fd;
}

std::string_view ToString(EntryKind kind) {
  switch (kind) {
    case EntryKind::kRegular: return "regular file";
    case EntryKind::kDirectory: return "directory";
    case EntryKind::kSymlink: return "symbolic link";
    case EntryKind::kOther: return "FIFO, socket or device";
    case EntryKind::kGone: return "gone";
  }
  return "?";
}

EntryKind KindOfMode(mode_t mode) {
  if (S_ISREG(mode)) return EntryKind::kRegular;
  if (S_ISDIR(mode)) return EntryKind::kDirectory;
  if (S_ISLNK(mode)) return EntryKind::kSymlink;
  return EntryKind::kOther;
}

EntryKind EntryKindAt(int dir_fd, const char* name) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return EntryKind::kGone;
  return KindOfMode(st.st_mode);
}

absl::Status ListDirectory(int dir_fd, const std::function<void(const std::string& name, EntryKind kind)>& fn) {
  // A descriptor of its own: readdir moves its offset, and fdopendir takes it over.
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open directory");
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    const absl::Status s = ErrnoStatus(errno, "fdopendir");
    close(fd);
    return s;
  }
  absl::Status status;
  for (;;) {
    errno = 0;
    const dirent* e = readdir(dir);
    if (e == nullptr) {
      if (errno != 0) status = ErrnoStatus(errno, "read directory");
      break;
    }
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    EntryKind kind;
    switch (e->d_type) {
      case DT_REG: kind = EntryKind::kRegular; break;
      case DT_DIR: kind = EntryKind::kDirectory; break;
      case DT_LNK: kind = EntryKind::kSymlink; break;
      case DT_UNKNOWN: kind = EntryKindAt(dir_fd, name.c_str()); break;
      default: kind = EntryKind::kOther; break;
    }
    if (kind != EntryKind::kGone) fn(name, kind);
  }
  closedir(dir);
  return status;
}

absl::StatusOr<struct stat> StatBeneath(int dir_fd, std::string_view rel_view) {
  const std::string rel(rel_view);
  if (!PlainRelativePath(rel)) return Refused(rel, "not a plain relative path");
  // Exactly these flags: openat2 refuses any other beside O_PATH.
  const int fd = OpenBeneath(dir_fd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return OpenFailed(rel, errno);
  struct stat st;
  const bool ok = fstat(fd, &st) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return ErrnoStatus(err, absl::StrCat("stat ", rel));
  return st;
}

absl::Status RemoveRegularFileBeneath(int dir_fd, std::string_view rel_view) {
  const std::string rel(rel_view);
  if (!PlainRelativePath(rel)) return Refused(rel, "not a plain relative path");
  const size_t slash = rel.rfind('/');
  int parent = dir_fd;
  if (slash != std::string::npos) {
    absl::StatusOr<int> opened = OpenDirectoryBeneath(dir_fd, std::string_view(rel).substr(0, slash));
    if (!opened.ok()) return opened.status();
    parent = *opened;
  }
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  absl::Status status;
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("stat ", rel));
  } else if (!S_ISREG(st.st_mode)) {
    status = Refused(rel, absl::StrCat(Describe(st.st_mode), ", not a regular file: not removed"));
  } else if (st.st_uid != geteuid()) {
    status = Refused(rel, absl::StrCat("owned by uid ", st.st_uid, ", not written by this process: not removed"));
  } else if (unlinkat(parent, name.c_str(), 0) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("unlink ", rel));
  }
  if (parent != dir_fd) close(parent);
  return status;
}

bool SafeOpenUsesOpenat2() { return kBuiltWithOpenat2 && !force_walk.load(std::memory_order_relaxed) && Openat2Works(); }

void ForceComponentWalkForTesting(bool on) { force_walk.store(on, std::memory_order_relaxed); }

absl::StatusOr<int> OpenLockFile(int dir, const char* name, int access, const std::string& path, const char* what) {
  const int fd = openat(dir, name, access | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0640);
  if (fd < 0 && errno == ELOOP) return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link (not followed)"));
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(what, " ", path));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

absl::Status MakeDirectories(const std::string& path) {
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = path.substr(0, at);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) == 0) {
      // Made here: its name reaches the disk before anything beneath it can be durable.
      const size_t slash = prefix.rfind('/');
      const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash);
      const int fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      const bool synced = fd >= 0 && fsync(fd) == 0;
      const int err = errno;
      if (fd >= 0) close(fd);
      if (!synced) return ErrnoStatus(err, absl::StrCat("cannot sync ", parent, " after creating ", prefix));
    } else if (!prefix.empty() && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("cannot create tier directory ", prefix));
    }
    if (at == std::string::npos) return absl::OkStatus();
  }
}

}  // namespace kvstream
