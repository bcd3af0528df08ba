// FileDevice (file_device.h): its directory. Opened once and locked against other processes (a
// shared tier's nodes hold the directory's lock shared, each its own directory's exclusively);
// Condition says when the path no longer leads there, and Recreate makes a deleted one again.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/chunk_files.h"
#include "io/file_device.h"
#include "io/safe_open.h"

namespace kvstream {
namespace {

namespace fs = std::filesystem;

constexpr char kLockName[] = ".kvstream.lock";
constexpr char kNodesDir[] = ".nodes";  // shared tiers: each node's own directory below it

// Makes (if missing) and opens the directory `rel`'s last component beneath `parent`, which
// must be a real directory: another writer of a shared tier can plant a symlink (or a file) under
// `.nodes` or the node's name, and a node following it would write its files, its lock and its
// saved index outside the tier. mkdirat never follows a symlink at its last component.
absl::StatusOr<int> MakeOwnDirectory(int parent, const std::string& root, const std::string& rel) {
  const std::string name = rel.substr(rel.rfind('/') + 1);
  if (mkdirat(parent, name.c_str(), 0750) == 0) {
    // Made here: its name reaches the disk before the chunks beneath it can be durable.
    if (fsync(parent) != 0) return ErrnoAt("fsync", absl::StrCat(root, "/", rel, "/.."));
  } else if (errno != EEXIST) {
    const int err = errno;
    return ErrnoAt("shared tier directory is not writable: cannot make", absl::StrCat(root, "/", rel), err);
  }
  absl::StatusOr<int> opened = OpenDirectoryBeneath(parent, name);
  if (IsRefused(opened.status())) {
    const std::string found(ToString(EntryKindAt(parent, name.c_str())));
    return absl::FailedPreconditionError(
        absl::StrCat("shared tier directory ", root, ": ", rel, " is not a directory (found: ", found,
                     "): refused, never followed (another writer of the shared directory may have put it there)"));
  }
  if (!opened.ok()) return InTier(root, opened.status());
  return opened;
}

// The condition of the tier directory `dir` opened at `root` (its device and inode then: `dev`,
// `ino`). Blocks while its file system does not answer: run off the loop.
TierCondition CheckDirectory(int dir, const std::string& root, dev_t dev, ino_t ino) {
  using State = TierCondition::State;
  struct stat opened, at_path;
  const bool answered = fstat(dir, &opened) == 0;
  const int err = answered ? 0 : errno;
  if (!answered && err != ENOENT && err != ESTALE) {  // ENOTCONN (its FUSE client is gone, its servers down), EIO
    return {State::kDetached,
            absl::StrCat("the file system of ", root, " cannot be reached (", std::strerror(err), ")")};
  }
  if (!answered || opened.st_nlink == 0) {
    return {State::kDeleted, absl::StrCat("the tier directory ", root, " was deleted")};
  }
  if (stat(root.c_str(), &at_path) != 0) {  // still linked, but not there: its file system went away
    return {State::kDetached,
            absl::StrCat("the tier directory is no longer at ", root, " (its file system was unmounted, or it moved)")};
  }
  if (at_path.st_dev != dev || at_path.st_ino != ino) {
    return {State::kDetached,
            absl::StrCat("another directory is now at ", root, " (its file system was unmounted or it was replaced)")};
  }
  struct statvfs vfs;
  if (fstatvfs(dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
    return {State::kReadOnly, absl::StrCat("the file system of ", root, " is read-only")};
  }
  return {};
}

}  // namespace

absl::Status FileDevice::OpenDirectory() {
  const std::string& root = options_.path;
  const int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoAt("open tier directory", root);
  struct stat st;
  if (fstat(dir, &st) != 0) {
    const absl::Status s = ErrnoAt("stat tier directory", root);
    close(dir);
    return s;
  }
  int own = dir;
  std::string own_path = root;
  if (shared()) {  // this node's own directory below the shared one
    own_path = absl::StrCat(root, "/", kNodesDir, "/", options_.node);
    absl::StatusOr<int> nodes = MakeOwnDirectory(dir, root, kNodesDir);
    absl::StatusOr<int> opened = nodes.ok() ? MakeOwnDirectory(*nodes, root, absl::StrCat(kNodesDir, "/", options_.node))
                                            : nodes.status();
    if (nodes.ok()) close(*nodes);
    if (!opened.ok()) {
      close(dir);
      return opened.status();
    }
    own = *opened;
  }
  int shared_lock = -1;
  const auto close_both = [&] {
    if (shared_lock >= 0) close(shared_lock);
    if (own != dir) close(own);
    close(dir);
  };
  if (shared()) {
    // Nodes hold the directory's lock shared, a private daemon exclusively: neither starts beside
    // the other (a private daemon would take every node's files for its own).
    absl::StatusOr<int> opened = OpenLockFile(dir, kLockName, O_RDONLY, absl::StrCat(root, "/", kLockName), "lock");
    if (!opened.ok()) {
      close_both();
      return opened.status();
    }
    shared_lock = *opened;
    if (flock(shared_lock, LOCK_SH | LOCK_NB) != 0) {
      const int err = errno;
      close_both();
      if (err == EWOULDBLOCK) {
        return absl::FailedPreconditionError(absl::StrCat("shared tier directory ", root,
                                                          " is in use by a kvstream process that does not share it"));
      }
      return ErrnoAt("lock", absl::StrCat(root, "/", kLockName), err);
    }
  }
  const std::string lock_path = absl::StrCat(own_path, "/", kLockName);
  absl::StatusOr<int> lock_file = OpenLockFile(own, kLockName, O_RDWR, lock_path, "tier directory is not writable: cannot create");
  if (!lock_file.ok()) {
    close_both();
    return lock_file.status();
  }
  const int lock = *lock_file;
  if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock);
    close_both();
    if (err != EWOULDBLOCK) return ErrnoAt("lock", lock_path, err);  // e.g. a file system mounted without flock
    if (shared()) {
      return absl::FailedPreconditionError(absl::StrCat("node '", options_.node, "' of the shared tier directory ", root,
                                                        " is in use by another kvstream process (each node needs its own name)"));
    }
    return absl::FailedPreconditionError(absl::StrCat("tier directory ", root, " is in use by another kvstream process"));
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  if (shared_lock_fd_ >= 0) close(shared_lock_fd_);
  shared_lock_fd_ = shared_lock;
  auto dirs = std::make_shared<Directories>();
  dirs->root = dir;
  dirs->own = own;
  std::shared_ptr<const Directories> old;  // closed once no other thread uses it
  {
    absl::MutexLock hold(&dirs_mu_);
    old = std::exchange(dirs_, std::move(dirs));
  }
  dir_fd_ = dir;
  own_fd_ = own;
  own_path_ = std::move(own_path);
  lock_fd_ = lock;
  dir_dev_ = st.st_dev;
  dir_ino_ = st.st_ino;
  return absl::OkStatus();
}

TierCondition FileDevice::Condition() const {
  absl::StatusOr<TierCondition> checked = calls_->Run<TierCondition>(
      "checking the tier directory", [dirs = directories(), root = options_.path, dev = dir_dev_, ino = dir_ino_] {
        return absl::StatusOr<TierCondition>(CheckDirectory(dirs->root, root, dev, ino));
      });
  if (checked.ok()) return last_condition_ = *std::move(checked);
  if (calls_->HungNs() >= static_cast<int64_t>(options_.not_answering_seconds * 1e9)) {
    return {TierCondition::State::kNotAnswering,
            absl::StrCat("the file system of ", options_.path, " does not answer (", calls_->HungCall(),
                         " has waited over ", options_.not_answering_seconds, " s)")};
  }
  return last_condition_;  // answering slowly: as it was
}

absl::Status FileDevice::Reopen() {
  // Only the directory it was: the same inode number (a file id on the file systems that are
  // mounted again: GlusterFS's gfid, NFS's fileid, Lustre's FID; the device number changes), with
  // the lock file it made in it. Never an empty mount point, never another tier's directory.
  const std::string& root = options_.path;
  struct stat at_path, lock;
  if (stat(root.c_str(), &at_path) != 0) return ErrnoAt("stat tier directory", root);
  const std::string lock_path = absl::StrCat(root, "/", kLockName);
  if (!S_ISDIR(at_path.st_mode) || at_path.st_ino != dir_ino_ || lstat(lock_path.c_str(), &lock) != 0 ||
      !S_ISREG(lock.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("not reopening ", root, ": it is not the tier's directory"));
  }
  handles_.DropAll();
  return OpenDirectory();
}

absl::Status FileDevice::Recreate() {
  // Only where it was: never on another file system (an unmounted tier's mount point).
  struct stat parent;
  const std::string parent_path = fs::path(options_.path).parent_path().string();
  if (stat(parent_path.c_str(), &parent) != 0 || parent.st_dev != dir_dev_) {
    return absl::FailedPreconditionError(
        absl::StrCat("not making ", options_.path, " again: ", parent_path, " is not on the tier's file system"));
  }
  if (absl::Status s = MakeDirectories(options_.path); !s.ok()) return s;
  handles_.DropAll();
  return OpenDirectory();
}

}  // namespace kvstream
