// PowerCut: kvfaultfs's power-loss mode (LevelDB's FaultInjectionTestEnv and RocksDB's
// FaultInjectionTestFS, as a file system). Every change goes through to the backing directory at
// once, as into a page cache, and what a power cut would take back is remembered:
//   - file data: a write or truncate not followed by fsync/fdatasync of that file. The first
//     change after a sync saves the file's size and, block by block (4 KiB), the bytes it is about
//     to overwrite; a sync forgets them.
//   - names: a create, mkdir, link, unlink, rmdir or rename not followed by an fsync of its
//     directory (both directories for a rename). An unlinked file, or a file a rename replaced, waits in a
//     hidden graveyard directory of the backing directory until its removal is durable.
// Cut() puts the backing directory back as the medium would hold it after a power loss: each
// file's data as of its last sync (optionally with the last unsynced write torn: each of its
// blocks either reached the medium or did not), then the names undone newest first. After a cut
// the power is off: every operation fails with EIO (the machine is down) until PowerOn(). Sync()
// is a sync point (sync(2)): everything is durable from then on.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvfaultfs {

class PowerCut {
 public:
  static constexpr off_t kBlock = 4096;
  // The graveyard's name in the backing directory's root (hidden from the mount).
  static constexpr const char* kGraveyard = ".kvfaultfs-graveyard";

  // `backing`: the backing directory (kept open by the caller). Empties an old graveyard.
  explicit PowerCut(int backing);

  bool off() const { return off_.load(); }

  // The operations, done on the backing directory and remembered until durable. Paths are
  // relative to the backing directory ("t0/ab/x.kvc"). Each returns what FUSE wants: 0 (or the
  // descriptor, or the bytes written) or -errno.
  int Create(const std::string& rel, int flags, mode_t mode);  // returns the descriptor
  int Write(int fd, const void* buf, size_t size, off_t offset);
  int Truncate(int fd, off_t size);
  int Fsync(int fd, bool datasync);
  int FsyncDir(const std::string& rel);
  int Mkdir(const std::string& rel, mode_t mode);
  int Unlink(const std::string& rel);
  int Rmdir(const std::string& rel);
  int Rename(const std::string& from, const std::string& to);
  int Link(const std::string& from, const std::string& to);

  // The control commands: cut, cut tear SEED, sync, on. False for an unknown command.
  bool Command(const std::string& line);
  // "power on|off", then counts, one per line (reading the control file).
  std::string Status() const;

 private:
  using Inode = std::pair<dev_t, ino_t>;
  struct UnsyncedFile {
    int fd = -1;            // read-write, on the backing inode: where Cut restores its data
    off_t durable_size = 0;
    std::map<off_t, std::vector<char>> durable_blocks;  // block index -> its bytes at the last sync
  };
  struct NameChange {
    enum class Kind { kCreated, kMadeDir, kUnlinked, kRemovedDir, kRenamed };
    Kind kind;
    std::string path;   // the name created (a link too), removed, or renamed to
    std::string from;   // kRenamed: the name before
    std::string grave;  // kUnlinked, kRenamed over a file: the graveyard name of the old file
    mode_t mode = 0;    // kRemovedDir
    std::set<std::string> unsynced_dirs;  // durable once each of them is fsynced
  };
  struct LastWrite {
    Inode inode{};
    off_t offset = 0;
    size_t size = 0;
    bool valid = false;
  };

  // The unsynced state of the file `fd` is, started now if it has none. Null on error.
  UnsyncedFile* TrackLocked(int fd, Inode* inode);
  // Saves the durable bytes of the blocks [begin, end) of `f` not saved yet.
  void SaveBlocksLocked(UnsyncedFile* f, off_t begin, off_t end);
  std::string NewGraveLocked();
  void ForgetLocked(NameChange& change);  // a durable change: its grave is deleted
  void UndoLocked(const NameChange& change);
  void CutLocked(bool tear, uint64_t seed);
  void SyncLocked();
  void RemoveTree(const std::string& rel);

  const int backing_;
  mutable std::mutex mu_;
  std::atomic<bool> off_{false};           // written under mu_
  std::map<Inode, UnsyncedFile> files_;     // guarded by mu_
  std::vector<NameChange> names_;           // guarded by mu_, oldest first
  LastWrite last_write_;                    // guarded by mu_
  uint64_t graves_ = 0;                     // guarded by mu_
  uint64_t cuts_ = 0, syncs_ = 0, torn_blocks_kept_ = 0, restore_errors_ = 0;  // guarded by mu_
};

}  // namespace kvfaultfs
