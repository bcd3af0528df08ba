// Files beneath a directory descriptor, touched only when they are what the caller expects.
//
// Every name on a tier is hostile input: whoever can write the directory (another node of a
// shared tier, a careless administrator, an attacker) can put a FIFO, a socket, a device node or
// a symbolic link where a chunk file should be. Opening a FIFO blocks until a writer comes (for
// ever), a symlinked fan-out directory leads outside the tier (where a scan would delete "its"
// temporaries), a device reads without end. So a name below a tier is resolved only beneath the
// tier's directory descriptor and never through a symbolic link (openat2 with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS where the kernel has it, one component at a time with O_NOFOLLOW where it
// does not), opened with O_NONBLOCK (an open that would wait returns at once), and fstat'ed:
// anything but a regular file is closed unread and refused. Removal is by unlinkat relative to a
// directory opened the same way, and only of a regular file this process could have written.
//
// Refusals are FailedPrecondition (IsRefused); errors of the system calls are coded by
// ErrnoStatus (NotFound when the name is not there), so the two never mix.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstream {

// Who must own a file for it to be opened: -1 = anyone (TierConfig::owner_uid/owner_gid).
struct ExpectedOwner {
  int64_t uid = -1;
  int64_t gid = -1;
  bool any() const { return uid < 0 && gid < 0; }
};

// Opens the regular file `rel` (a relative path of plain components: no "", "." or "..")
// beneath `dir_fd` with `flags` (O_RDONLY, O_DIRECT...; O_CLOEXEC, O_NOCTTY and O_NOFOLLOW are
// always added, O_NONBLOCK for the open only: the descriptor returned blocks as usual).
// FailedPrecondition when a component is a symbolic link, the file is not a regular file, or its
// owner is not `owner`; the file is then closed without a byte read. REQUIRES: no O_CREAT.
absl::StatusOr<int> OpenFileBeneath(int dir_fd, std::string_view rel, int flags, const ExpectedOwner& owner = {});

// Opens the directory `rel` beneath `dir_fd` (O_RDONLY | O_DIRECTORY), never through a symbolic
// link. FailedPrecondition when a component is a symbolic link or not a directory.
absl::StatusOr<int> OpenDirectoryBeneath(int dir_fd, std::string_view rel);

// What a directory entry is, without following a symbolic link.
enum class EntryKind : uint8_t { kRegular, kDirectory, kSymlink, kOther, kGone };
std::string_view ToString(EntryKind kind);
EntryKind KindOfMode(mode_t mode);
// The kind of `name` in `dir_fd` (fstatat with AT_SYMLINK_NOFOLLOW); kGone when it is not there.
EntryKind EntryKindAt(int dir_fd, const char* name);

// Calls `fn(name, kind)` for every entry of the directory `dir_fd` but "." and ".." (from d_type,
// or fstatat with AT_SYMLINK_NOFOLLOW where the file system does not fill it in). `dir_fd`
// stays open and is not moved; nothing is opened but the directory itself.
absl::Status ListDirectory(int dir_fd, const std::function<void(const std::string& name, EntryKind kind)>& fn);

// The status of `rel` beneath `dir_fd`, resolved as OpenFileBeneath does but without opening the
// file itself (O_PATH): a symbolic link at the end is reported as one (S_ISLNK), one on the way
// is refused. NotFound when it is not there.
absl::StatusOr<struct stat> StatBeneath(int dir_fd, std::string_view rel);

// Unlinks `rel` beneath `dir_fd` if it is a regular file owned by this process's effective uid
// (one it could have written), relative to its directory opened as OpenDirectoryBeneath does;
// FailedPrecondition, and nothing removed, if it is anything else or lies past a symbolic link.
// NotFound when it is not there.
absl::Status RemoveRegularFileBeneath(int dir_fd, std::string_view rel);

// The refusals above: the name is not a regular file (or directory) reached without a symbolic
// link, or has another owner.
inline bool IsRefused(const absl::Status& s) { return absl::IsFailedPrecondition(s); }

// Whether two stats are of one file.
inline bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Opens (creating it, 0640, if missing) the file `name` in `dir` (at `path`, for messages) to
// hold a lock on: never a symlink's target, never a FIFO's blocking open; FailedPrecondition when
// it is not a regular file. `what` heads the message of a failed open.
absl::StatusOr<int> OpenLockFile(int dir, const char* name, int access, const std::string& path, const char* what);

// Creates the directory `path` and any missing parent, each 0750 (before the umask), syncing the
// parent of each one it creates (its name survives a power cut).
absl::Status MakeDirectories(const std::string& path);

// Whether OpenFileBeneath resolves with openat2 (probed once) rather than a component walk.
bool SafeOpenUsesOpenat2();
// Tests: walk components with O_NOFOLLOW even where openat2 exists (both paths stay tested).
void ForceComponentWalkForTesting(bool on);

}  // namespace kvstream
