#include "file_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>

#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "index_checkpoint.h"
#include "safe_open.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

namespace fs = std::filesystem;

constexpr char kLockName[] = ".kvstream.lock";
constexpr char kProbeName[] = ".kvstream-probe";
constexpr char kNodesDir[] = ".nodes";  // shared tiers: each node's own directory below it
constexpr size_t kScanThreads = 8;  // header reads in flight while scanning a tier without a checkpoint

absl::Status Errno(const char* what, const std::string& path, int err = errno) {
  return ErrnoStatus(err, absl::StrCat(what, " ", path));
}

// fsyncs the directory `name` below `base` (whose path is `base_path`, for messages).
absl::Status SyncDirectory(int base, const std::string& base_path, const std::string& name) {
  const int dfd = openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  absl::Status status;
  if (dfd < 0 || fsync(dfd) != 0) status = Errno("fsync", absl::StrCat(base_path, "/", name));
  if (dfd >= 0) close(dfd);
  return status;
}

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool IsHexStem(std::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A status of a name below the tier directory `root`, saying which tier.
absl::Status InTier(const std::string& root, const absl::Status& s) {
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat("tier ", root, ": ", s.message()));
}

// Reads and validates the header of chunk file `rel` beneath the directory `dir` (at path
// `dir_path`) and its MAC (VerifyChunkMac). Returns DataLoss/NotFound/PermissionDenied for files
// to remove; refused (IsRefused: not a regular file, reached through a symlink, another owner
// than `owner`) for names that are not the daemon's to read or remove: never opened blocking,
// never read.
absl::StatusOr<ScannedChunk> ReadHeader(int dir, const std::string& dir_path, const std::string& rel,
                                        std::string_view stem, const ExpectedOwner& owner,
                                        const ChunkMacKey* mac_key, bool require_mac) {
  const std::string path = absl::StrCat(dir_path, "/", rel);
  absl::StatusOr<int> opened = OpenFileBeneath(dir, rel, O_RDONLY, owner);
  if (!opened.ok()) return InTier(dir_path, opened.status());
  const int fd = *opened;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Errno("stat", path);
  }
  std::vector<uint8_t> buf(kFileAlignment);
  ssize_t n = pread(fd, buf.data(), buf.size(), 0);
  absl::StatusOr<ChunkMeta> meta = n < 0 ? absl::DataLossError("unreadable header")
                                         : DecodeChunkHeader(buf.data(), static_cast<size_t>(n));
  if (absl::IsOutOfRange(meta.status())) {  // a long key or many segments: read the whole header
    buf.resize(*ChunkHeaderSize(buf.data(), buf.size()));
    n = pread(fd, buf.data(), buf.size(), 0);
    meta = n < 0 ? absl::DataLossError("unreadable header") : DecodeChunkHeader(buf.data(), n);
    if (absl::IsOutOfRange(meta.status())) meta = absl::DataLossError("header truncated");
  }
  close(fd);
  if (!meta.ok()) return meta.status();
  if (absl::Status s = VerifyChunkMac(*meta, mac_key, require_mac); !s.ok()) return s;
  if (FileStem(meta->key) != stem) return absl::DataLossError("file name does not match its key");
  if (static_cast<uint64_t>(st.st_size) != meta->file_size()) {
    return absl::DataLossError(absl::StrCat("file is ", st.st_size, " bytes, header says ",
                                            meta->file_size()));
  }
  return ScannedChunk{*std::move(meta), static_cast<uint64_t>(st.st_size)};
}

// Names below a tier that look like the daemon's (a fan-out directory, a chunk file, a
// temporary) but are not what it writes there: symlinks, FIFOs, sockets, devices, directories,
// files of another owner. Counted, and logged once per walk with a few examples; never opened
// blocking, read or removed.
struct Skipped {
  uint64_t count = 0;
  std::vector<std::string> examples;

  void Add(const std::string& rel, const std::string& what) {
    if (count++ < 4) examples.push_back(absl::StrCat(rel, " (", what, ")"));
  }
  void Log(const std::string& tier_path, const char* during) const {
    if (count == 0) return;
    spdlog::warn("tier {}: {} skipped {} names that are not the daemon's regular files (not opened, read or "
                 "removed): {}{}", tier_path, during, count, absl::StrJoin(examples, ", "), count > examples.size() ? ", ..." : "");
  }
};

// Walks a tier's chunk directories (named by the first two hex digits of their files' stems)
// beneath the directory `root`, never through a symbolic link: `on_chunk(dir, name, rel, stem)`
// for each committed chunk file, `on_temp(dir, name)` for each temporary (`dir`: its directory,
// open; `rel`: its path below `root`). Both see regular files only: every other entry by those
// names, and every fan-out name that is not a directory, goes to `skipped`.
absl::Status ForEachChunkFile(
    int root, const std::function<void(int, const std::string&, const std::string&, const std::string&)>& on_chunk,
    const std::function<void(int, const std::string&)>& on_temp, Skipped* skipped) {
  std::vector<std::string> dirs;
  absl::Status status = ListDirectory(root, [&](const std::string& name, EntryKind kind) {
    if (!IsHexStem(name, 2)) return;
    if (kind == EntryKind::kDirectory) {
      dirs.push_back(name);
    } else {
      skipped->Add(name, std::string(ToString(kind)));
    }
  });
  for (size_t d = 0; d < dirs.size() && status.ok(); ++d) {
    const std::string& dir_name = dirs[d];
    absl::StatusOr<int> dir = OpenDirectoryBeneath(root, dir_name);
    if (!dir.ok()) {  // replaced since it was listed
      if (IsRefused(dir.status())) skipped->Add(dir_name, std::string(ToString(EntryKindAt(root, dir_name.c_str()))));
      if (!IsRefused(dir.status()) && !absl::IsNotFound(dir.status())) status = dir.status();
      continue;
    }
    status = ListDirectory(*dir, [&](const std::string& name, EntryKind kind) {
      const bool temp = absl::StrContains(name, kTempMarker);
      std::string stem;
      if (!temp) {
        if (!absl::EndsWith(name, kChunkSuffix)) return;
        stem = name.substr(0, name.size() - kChunkSuffixLength);
        if (!IsHexStem(stem, 32) || stem.substr(0, 2) != dir_name) return;
      }
      const std::string rel = absl::StrCat(dir_name, "/", name);
      if (kind != EntryKind::kRegular) {
        skipped->Add(rel, std::string(ToString(kind)));
      } else if (temp) {
        on_temp(*dir, name);
      } else {
        on_chunk(*dir, name, rel, stem);
      }
    });
    close(*dir);
  }
  return status;
}

// Opens the lock file of the directory `dir` (at `path`), creating it if missing: never a
// symlink's target, never a FIFO's blocking open. `what` heads the message of a failed open.
absl::StatusOr<int> OpenLockFile(int dir, int access, const std::string& path, const char* what) {
  const int fd = openat(dir, kLockName, access | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0640);
  if (fd < 0 && errno == ELOOP) return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link (not followed)"));
  if (fd < 0) return Errno(what, path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

// Creates the directory `path` and any missing parent, each 0750 (before the umask).
absl::Status MakeDirectories(const std::string& path) {
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = path.substr(0, at);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return Errno("cannot create tier directory", prefix);
    }
    if (at == std::string::npos) return absl::OkStatus();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileDevice>> FileDevice::Open(const FileDeviceOptions& options) {
  std::unique_ptr<FileDevice> device(new FileDevice(options));
  if (absl::Status s = device->Init(); !s.ok()) return s;
  return device;
}

absl::Status FileDevice::Init() {
  const std::string& root = options_.path;
  if (absl::Status s = MakeDirectories(root); !s.ok()) return s;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return absl::InvalidArgumentError(absl::StrCat(root, " is not a directory"));

  props_.shared = shared();
  if (absl::Status s = OpenDirectory(); !s.ok()) return s;
  if (absl::Status s = ProbeDirectIo(); !s.ok()) return s;
  // Reads stay inline (an O_DIRECT read that would block is handed to io-wq by the kernel itself,
  // and a context switch per block costs at GB/s); writes go to io-wq always: a FUSE write that
  // extends its file blocks inside the submission (measured: the loop thread held for every write).
  UringQueue::Options ring;
  ring.event_fd = options_.event_fd;
  ring.io_workers = options_.io_workers;
  ring.depth = options_.read_depth;
  if (absl::Status s = read_queue_.Init(ring); !s.ok()) return s;
  ring.depth = options_.write_depth;
  ring.never_inline = true;
  if (absl::Status s = write_queue_.Init(ring); !s.ok()) return s;
  // A sparse table of registered buffers, filled by RegisterRegion. Kernels or limits that refuse
  // it leave fixed buffers off; plain buffers work everywhere.
  if (read_queue_.RegisterSparseBuffers(kMaxRegions) == 0 && write_queue_.RegisterSparseBuffers(kMaxRegions) == 0) {
    props_.fixed_buffers = true;
    regions_.resize(kMaxRegions);
    for (int i = kMaxRegions; i > 0; --i) free_regions_.push_back(i - 1);
  }
  return absl::OkStatus();
}

absl::Status FileDevice::OpenDirectory() {
  const std::string& root = options_.path;
  const int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Errno("open tier directory", root);
  struct stat st;
  if (fstat(dir, &st) != 0) {
    const absl::Status s = Errno("stat tier directory", root);
    close(dir);
    return s;
  }
  int own = dir;
  std::string own_path = root;
  if (shared()) {  // this node's own directory below the shared one
    own_path = absl::StrCat(root, "/", kNodesDir, "/", options_.node);
    const std::string rel = absl::StrCat(kNodesDir, "/", options_.node);
    if ((mkdirat(dir, kNodesDir, 0750) != 0 && errno != EEXIST) || (mkdirat(dir, rel.c_str(), 0750) != 0 && errno != EEXIST)) {
      const absl::Status s = Errno("shared tier directory is not writable: cannot make", own_path);
      close(dir);
      return s;
    }
    absl::StatusOr<int> opened = OpenDirectoryBeneath(dir, rel);  // never a symlink to elsewhere
    if (!opened.ok()) {
      close(dir);
      return InTier(root, opened.status());
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
    absl::StatusOr<int> opened = OpenLockFile(dir, O_RDONLY, absl::StrCat(root, "/", kLockName), "lock");
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
      return Errno("lock", absl::StrCat(root, "/", kLockName), err);
    }
  }
  const std::string lock_path = absl::StrCat(own_path, "/", kLockName);
  absl::StatusOr<int> lock_file = OpenLockFile(own, O_RDWR, lock_path, "tier directory is not writable: cannot create");
  if (!lock_file.ok()) {
    close_both();
    return lock_file.status();
  }
  const int lock = *lock_file;
  if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock);
    close_both();
    if (err != EWOULDBLOCK) return Errno("lock", lock_path, err);  // e.g. a file system mounted without flock
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

absl::Status FileDevice::Condition() const {
  const std::string& root = options_.path;
  struct stat opened, at_path;
  if (fstat(dir_fd_, &opened) != 0 || opened.st_nlink == 0) {
    return absl::NotFoundError(absl::StrCat("the tier directory ", root, " was deleted"));
  }
  if (stat(root.c_str(), &at_path) != 0) {  // still linked, but not there: its file system went away
    return absl::FailedPreconditionError(
        absl::StrCat("the tier directory is no longer at ", root, " (its file system was unmounted, or it moved)"));
  }
  if (at_path.st_dev != dir_dev_ || at_path.st_ino != dir_ino_) {
    return absl::FailedPreconditionError(
        absl::StrCat("another directory is now at ", root, " (its file system was unmounted or it was replaced)"));
  }
  struct statvfs vfs;
  if (fstatvfs(dir_fd_, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
    return absl::FailedPreconditionError(absl::StrCat("the file system of ", root, " is read-only"));
  }
  return absl::OkStatus();
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
  for (auto& [stem, f] : files_) {
    if (f.in_flight == 0) {
      close(f.fd);
    } else {
      doomed_[f.fd] = f.in_flight;
    }
  }
  files_.clear();
  fd_stems_.clear();
  idle_lru_.clear();
  return OpenDirectory();
}

// Probes O_DIRECT with a real aligned write and read and takes the alignment from statx; falls
// back to buffered I/O (when allowed) with the reason recorded.
absl::Status FileDevice::ProbeDirectIo() {
  const std::string& root = options_.path;
  const std::string probe = absl::StrCat(own_path_, "/", kProbeName);
  // A fresh file, never a symlink's target (O_EXCL): a stale probe is removed first if regular.
  RemoveRegularFileBeneath(own_fd_, kProbeName).IgnoreError();
  int fd = openat(own_fd_, kProbeName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_DIRECT, 0640);
  if (fd < 0 && errno != EINVAL) return Errno("tier directory is not writable: cannot create", probe);
  if (fd < 0) {
    buffered_reason_ = "the filesystem does not support O_DIRECT";
  } else {
    struct statx stx{};
    uint32_t mem_align = kFileAlignment, offset_align = kFileAlignment;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
        stx.stx_dio_mem_align != 0) {
      mem_align = std::max<uint32_t>(kFileAlignment, stx.stx_dio_mem_align);
      offset_align = std::max<uint32_t>(kFileAlignment, stx.stx_dio_offset_align);
    }
    if (mem_align > kFileAlignment || offset_align > kFileAlignment) {
      buffered_reason_ = absl::StrCat("O_DIRECT alignment ", std::max(mem_align, offset_align),
                                      " exceeds the chunk format's ", kFileAlignment);
    } else {
      void* page = std::aligned_alloc(kFileAlignment, kFileAlignment);
      std::memset(page, 0x5a, kFileAlignment);
      const bool ok = pwrite(fd, page, kFileAlignment, 0) == kFileAlignment &&
                      pread(fd, page, kFileAlignment, 0) == kFileAlignment;
      const int err = errno;
      std::free(page);
      if (ok) {
        props_.direct_io = true;
        props_.mem_alignment = mem_align;
        props_.offset_alignment = offset_align;
      } else {
        buffered_reason_ = absl::StrCat("O_DIRECT probe failed: ", std::strerror(err));
      }
    }
    close(fd);
  }
  if (fd >= 0) unlinkat(own_fd_, kProbeName, 0);
  if (!props_.direct_io) {
    if (!options_.allow_buffered_fallback) {
      return absl::FailedPreconditionError(absl::StrCat(root, ": ", buffered_reason_,
                                                        " and buffered fallback is disabled"));
    }
    props_.mem_alignment = 1;
    props_.offset_alignment = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FileDevice::RegisterRegion(void* base, size_t size) {
  if (!props_.fixed_buffers) return absl::UnimplementedError("registered buffers are unavailable");
  if (size == 0 || size > (1ull << 30)) {
    return absl::InvalidArgumentError("a registered region must be 1 byte to 1 GiB");
  }
  if (free_regions_.empty()) return absl::ResourceExhaustedError("all registered buffer slots are in use");
  const int index = free_regions_.back();
  int rc = read_queue_.UpdateBuffer(index, {base, size});
  if (rc == 0) {
    rc = write_queue_.UpdateBuffer(index, {base, size});
    if (rc < 0) read_queue_.UpdateBuffer(index, {nullptr, 0});  // undo the read ring's registration
  }
  if (rc < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("registering ", size, " bytes of buffers: ", std::strerror(-rc),
                                                     rc == -ENOMEM ? " (raise LimitMEMLOCK)" : ""));
  }
  free_regions_.pop_back();
  regions_[index] = {static_cast<uint8_t*>(base), size};
  region_by_base_[reinterpret_cast<uintptr_t>(base)] = index;
  return index;
}

void FileDevice::UnregisterRegion(int index) {
  if (index < 0 || static_cast<size_t>(index) >= regions_.size() || regions_[index].size == 0) return;
  read_queue_.UpdateBuffer(index, {nullptr, 0});
  write_queue_.UpdateBuffer(index, {nullptr, 0});
  region_by_base_.erase(reinterpret_cast<uintptr_t>(regions_[index].base));
  regions_[index] = {};
  free_regions_.push_back(index);
}

// The queues, destroyed after this body, wait for requests still in flight; the kernel keeps its
// own reference to each file they use.
FileDevice::~FileDevice() {
  for (auto& [stem, f] : files_) close(f.fd);
  for (auto& [fd, n] : doomed_) close(fd);
  for (auto& [fd, path] : temps_) {
    close(fd);
    RemoveRegularFileBeneath(own_fd_, path).IgnoreError();
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  if (shared_lock_fd_ >= 0) close(shared_lock_fd_);
}

FileDevice::Directories::~Directories() {
  if (own >= 0 && own != root) close(own);
  if (root >= 0) close(root);
}

std::shared_ptr<const FileDevice::Directories> FileDevice::directories() const {
  absl::MutexLock hold(&dirs_mu_);
  return dirs_;
}

std::string FileDevice::ChunkPath(const std::string& stem) const {
  return absl::StrCat(options_.path, "/", RelativeChunkPath(stem));
}

absl::StatusOr<ScanReport> FileDevice::Scan() {
  ScanReport report;
  absl::StatusOr<std::vector<ChunkMeta>> saved = TakeCheckpoint(own_path_);
  if (saved.ok()) {
    report.from_checkpoint = true;
    for (ChunkMeta& m : *saved) {
      // Refused entries are left to the reconciliation that follows a checkpoint (it reads their
      // headers, refuses them again and removes the files).
      if (absl::Status s = VerifyChunkMac(m, options_.mac_key.get(), options_.require_mac); !s.ok()) {
        LogRefusedChunk(options_.path, FileStem(m.key), s);
        continue;
      }
      const uint64_t size = m.file_size();
      report.chunks.push_back({std::move(m), size});
    }
    return report;
  }
  if (!absl::IsNotFound(saved.status())) {
    spdlog::warn("tier {}: ignoring its index checkpoint: {}; reading every chunk header", options_.path,
                 std::string(saved.status().message()));
  }
  // Every chunk file's header, read by a few threads (a cold scan waits on the device).
  std::vector<std::pair<std::string, std::string>> files;  // path below own_path_, stem
  Skipped skipped;
  const absl::Status walked = ForEachChunkFile(
      own_fd_,
      [&](int, const std::string&, const std::string& rel, const std::string& stem) { files.emplace_back(rel, stem); },
      [&](int dir, const std::string& name) {
        const absl::Status s = RemoveRegularFileBeneath(dir, name);
        if (s.ok()) ++report.removed_temporaries;
        if (IsRefused(s)) skipped.Add(name, std::string(s.message()));  // another owner's (or swapped meanwhile)
      },
      &skipped);
  if (!walked.ok()) return absl::Status(walked.code(), absl::StrCat("scanning ", options_.path, ": ", walked.message()));
  std::vector<absl::StatusOr<ScannedChunk>> headers(files.size(), absl::UnknownError("not read"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> readers;
  for (size_t r = 0; r < std::min<size_t>(kScanThreads, files.size()); ++r) {
    readers.emplace_back([&] {
      for (size_t i = next++; i < files.size(); i = next++) {
        headers[i] = ReadHeader(own_fd_, own_path_, files[i].first, files[i].second, options_.owner,
                                options_.mac_key.get(), options_.require_mac);
      }
    });
  }
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < files.size(); ++i) {
    if (IsRefused(headers[i].status())) {  // not the daemon's to read: never removed either
      skipped.Add(files[i].first, std::string(headers[i].status().message()));
      continue;
    }
    if (absl::IsNotFound(headers[i].status())) continue;  // removed since it was listed
    if (!headers[i].ok()) {
      // Shared: its published name too, or nobody would ever remove it.
      const absl::Status s = shared() ? RemoveOwn(dir_fd_, own_fd_, files[i].second)
                                      : RemoveRegularFileBeneath(own_fd_, files[i].first);
      if (IsRefused(s)) {  // another owner's: not the daemon's to remove
        skipped.Add(files[i].first, absl::StrCat(headers[i].status().message(), "; ", s.message()));
        continue;
      }
      spdlog::warn("tier {}: removed invalid chunk file {}/{}: {}", options_.path, own_path_, files[i].first,
                   std::string(headers[i].status().message()));
      if (!s.ok()) spdlog::warn("tier {}: {}", options_.path, std::string(s.message()));
      ++report.removed_invalid;
      continue;
    }
    // Shared: a crash between the node's link and the publish left a chunk unpublished; one whose
    // name another node published meanwhile is not this node's any more. A chunk that cannot be
    // published now stays, unindexed, for the next start.
    if (shared() && !Publish(files[i].second, /*remove_on_error=*/false).ok()) continue;
    report.chunks.push_back(*std::move(headers[i]));
  }
  skipped.Log(options_.path, "scan:");
  report.skipped_irregular = skipped.count;
  return report;
}

absl::StatusOr<std::vector<ListedChunk>> FileDevice::ListChunks() {
  const std::shared_ptr<const Directories> dirs = directories();  // off the loop: Recreate may replace them
  std::vector<ListedChunk> out;
  Skipped skipped;
  const absl::Status walked = ForEachChunkFile(
      dirs->own,
      [&](int dir, const std::string& name, const std::string&, const std::string& stem) {
        struct stat st;
        if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
          out.push_back({stem, static_cast<uint64_t>(st.st_size)});
        }
      },
      [](int, const std::string&) {},  // temporaries belong to writes in progress
      &skipped);
  if (!walked.ok()) return absl::Status(walked.code(), absl::StrCat("listing ", options_.path, ": ", walked.message()));
  skipped.Log(options_.path, "listing its files:");
  return out;
}

absl::StatusOr<ScannedChunk> FileDevice::ReadChunkHeader(const std::string& stem) {
  // Off the loop (shared lookups, the reconcile pass): Recreate may replace the directories.
  const std::shared_ptr<const Directories> dirs = directories();
  const std::string rel = RelativeChunkPath(stem);
  absl::StatusOr<ScannedChunk> chunk =
      ReadHeader(dirs->root, options_.path, rel, stem, options_.owner, options_.mac_key.get(), options_.require_mac);
  if (IsRefused(chunk.status())) {  // a FIFO, a symlink, another owner's file: no chunk here
    LogRefusedChunk(options_.path, stem, chunk.status());
    return absl::NotFoundError(chunk.status().message());
  }
  if (absl::IsPermissionDenied(chunk.status())) LogRefusedChunk(options_.path, stem, chunk.status());
  if (chunk.ok() && shared()) chunk->owned = OwnIsPublished(dirs->root, dirs->own, rel);  // else another node's
  return chunk;
}

absl::StatusOr<uint64_t> FileDevice::ChunkFileSize(const std::string& stem) {
  const std::shared_ptr<const Directories> dirs = directories();
  absl::StatusOr<struct stat> st = StatBeneath(dirs->root, RelativeChunkPath(stem));
  if (!st.ok() && !IsRefused(st.status())) return InTier(options_.path, st.status());
  if (!st.ok() || !S_ISREG(st->st_mode)) {
    return absl::NotFoundError(absl::StrCat(ChunkPath(stem), " is not a regular file reached without a symlink"));
  }
  return static_cast<uint64_t>(st->st_size);
}

absl::Status FileDevice::SaveIndex(const std::vector<ChunkMeta>& chunks) { return WriteCheckpoint(own_path_, chunks); }

absl::StatusOr<FileHandle> FileDevice::OpenChunk(const std::string& stem) {
  const int64_t now = shared() ? MonotonicNs() : 0;
  if (auto it = files_.find(stem); it != files_.end()) {
    CachedFile& f = it->second;
    if (shared() && now - f.checked_ns > static_cast<int64_t>(options_.revalidate_seconds * 1e9)) {
      // Another node may have removed or replaced its file: the handle must still be the name's.
      absl::StatusOr<struct stat> named = StatBeneath(dir_fd_, RelativeChunkPath(stem));
      struct stat held;
      const bool same = named.ok() && S_ISREG(named->st_mode) && fstat(f.fd, &held) == 0 && SameFile(*named, held);
      if (same) f.checked_ns = now;
      if (!same) DropCached(stem);
    }
  }
  if (auto it = files_.find(stem); it != files_.end()) {
    if (it->second.in_flight == 0) idle_lru_.splice(idle_lru_.end(), idle_lru_, it->second.lru);
    return it->second.fd;
  }
  // One openat2 where the kernel has it: never a FIFO's blocking open, never through a symlink.
  absl::StatusOr<int> opened =
      OpenFileBeneath(dir_fd_, RelativeChunkPath(stem), O_RDONLY | (props_.direct_io ? O_DIRECT : 0), options_.owner);
  if (IsRefused(opened.status())) {  // not a chunk this tier may serve: the replica is not there
    LogRefusedChunk(options_.path, stem, opened.status());
    return absl::NotFoundError(opened.status().message());
  }
  if (!opened.ok()) return InTier(options_.path, opened.status());
  const int fd = *opened;
  ChunkVersion version;
  if (shared()) {  // the version this name holds now, for HoldsVersion
    if (!header_page_) header_page_ = AllocateAligned(kFileAlignment);
    const ssize_t n = pread(fd, header_page_.get(), kFileAlignment, 0);
    absl::StatusOr<ChunkVersion> v = n > 0 ? PeekChunkVersion(header_page_.get(), static_cast<size_t>(n))
                                           : absl::DataLossError("unreadable header");
    if (v.ok()) version = *v;  // else no version matches: the chunk is read elsewhere or missed
  }
  CachedFile& f = files_[stem];
  f.fd = fd;
  f.checked_ns = now;
  f.version = version;
  f.lru = idle_lru_.insert(idle_lru_.end(), stem);
  fd_stems_[fd] = stem;
  TrimCache();
  return fd;
}

bool FileDevice::HoldsVersion(FileHandle handle, const ChunkMeta& meta) {
  if (!shared()) return true;
  auto s = fd_stems_.find(handle);
  if (s == fd_stems_.end()) return false;
  auto f = files_.find(s->second);
  return f != files_.end() && f->second.version == VersionOf(meta);
}

void FileDevice::TrimCache() {
  while (idle_lru_.size() > options_.max_cached_files) {
    auto it = files_.find(idle_lru_.front());
    idle_lru_.pop_front();
    fd_stems_.erase(it->second.fd);
    close(it->second.fd);
    files_.erase(it);
  }
}

void FileDevice::DropCached(const std::string& stem) {
  auto it = files_.find(stem);
  if (it == files_.end()) return;
  CachedFile& f = it->second;
  fd_stems_.erase(f.fd);
  if (f.in_flight == 0) {
    idle_lru_.erase(f.lru);
    close(f.fd);
  } else {
    doomed_[f.fd] = f.in_flight;
  }
  files_.erase(it);
}

void FileDevice::ReleaseFile(int fd) {
  if (auto d = doomed_.find(fd); d != doomed_.end()) {
    if (--d->second == 0) {
      close(fd);
      doomed_.erase(d);
    }
    return;
  }
  auto s = fd_stems_.find(fd);
  if (s == fd_stems_.end()) return;
  CachedFile& f = files_[s->second];
  if (--f.in_flight == 0) {
    f.lru = idle_lru_.insert(idle_lru_.end(), s->second);
    TrimCache();
  }
}

absl::StatusOr<FileHandle> FileDevice::CreateTemp(const std::string& stem) {
  const std::string dir = stem.substr(0, 2);
  if (mkdirat(own_fd_, dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return Errno("mkdir", absl::StrCat(own_path_, "/", dir));
  }
  const std::string name = absl::StrCat(stem, kChunkSuffix, kTempMarker, getpid(), ".", ++temp_counter_);
  const std::string path = absl::StrCat(dir, "/", name);
  absl::StatusOr<int> parent = OpenDirectoryBeneath(own_fd_, dir);  // not a symlink put in its place
  if (!parent.ok()) return InTier(own_path_, parent.status());
  const int fd =
      openat(*parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (props_.direct_io ? O_DIRECT : 0), 0640);
  const int err = errno;
  close(*parent);
  if (fd < 0) return Errno("create", absl::StrCat(own_path_, "/", path), err);
  temps_[fd] = path;
  return fd;
}

absl::Status FileDevice::CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InternalError("unknown temporary handle");
  const std::string rel = RelativeChunkPath(stem);
  absl::Status status;
  // Shared: the node's older version of the key is unpublished before the new one is renamed
  // over its link (a crash in between leaves the node's link unpublished, which its next start
  // publishes; never a published file without its owner's link).
  if (shared()) status = Unpublish(dir_fd_, own_fd_, stem);
  // Renamed within its directory, opened again as the temporary was created (no symlink).
  absl::StatusOr<int> parent = OpenDirectoryBeneath(own_fd_, stem.substr(0, 2));
  if (status.ok() && !parent.ok()) status = InTier(own_path_, parent.status());
  const std::string temp_name = it->second.substr(3);  // "<2 hex>/" off
  if (!status.ok()) {
    RemoveRegularFileBeneath(own_fd_, it->second).IgnoreError();
  } else if (renameat(*parent, temp_name.c_str(), *parent, rel.substr(3).c_str()) != 0) {
    status = Errno("rename", absl::StrCat(own_path_, "/", it->second));
    unlinkat(*parent, temp_name.c_str(), 0);
  }
  if (parent.ok()) close(*parent);
  close(temp);
  temps_.erase(it);
  DropCached(stem);
  if (status.ok() && shared()) status = Publish(stem, /*remove_on_error=*/true);
  if (status.ok() && sync_directory) {  // the rename (and the published link) survive power loss
    const std::string dir = stem.substr(0, 2);
    status = SyncDirectory(own_fd_, own_path_, dir);
    if (status.ok() && shared()) status = SyncDirectory(dir_fd_, options_.path, dir);
  }
  return status;
}

absl::Status FileDevice::Publish(const std::string& stem, bool remove_on_error) {
  const std::string rel = RelativeChunkPath(stem);
  const std::string dir = stem.substr(0, 2);
  if (mkdirat(dir_fd_, dir.c_str(), 0750) != 0 && errno != EEXIST) return Errno("mkdir", absl::StrCat(options_.path, "/", dir));
  // Both directories opened without following a symlink: a fan-out directory another writer
  // replaced by a link to elsewhere never receives this node's chunks.
  absl::StatusOr<int> published = OpenDirectoryBeneath(dir_fd_, dir);
  absl::StatusOr<int> own = OpenDirectoryBeneath(own_fd_, dir);
  const std::string name = rel.substr(3);
  absl::Status status;
  if (!published.ok() || !own.ok()) {
    status = InTier(options_.path, !published.ok() ? published.status() : own.status());
    if (remove_on_error && own.ok()) unlinkat(*own, name.c_str(), 0);
  } else if (linkat(*own, name.c_str(), *published, name.c_str(), 0) != 0) {
    const int err = errno;
    if (err == EEXIST && OwnIsPublished(dir_fd_, own_fd_, rel)) {
      // published already (a restart's scan)
    } else if (err == EEXIST) {  // another node published the key first: its file stands
      unlinkat(*own, name.c_str(), 0);
      status = absl::AlreadyExistsError(absl::StrCat("another node published ", ChunkPath(stem), " first"));
    } else {
      if (remove_on_error) unlinkat(*own, name.c_str(), 0);
      status = Errno("link", ChunkPath(stem), err);
    }
  }
  if (published.ok()) close(*published);
  if (own.ok()) close(*own);
  return status;
}

bool FileDevice::OwnIsPublished(int root, int own_dir, const std::string& rel) {
  absl::StatusOr<struct stat> own = StatBeneath(own_dir, rel), published = StatBeneath(root, rel);
  return own.ok() && published.ok() && S_ISREG(own->st_mode) && SameFile(*own, *published);
}

absl::Status FileDevice::Unpublish(int root, int own_dir, const std::string& stem) const {
  const std::string rel = RelativeChunkPath(stem);
  // Only the owner changes its published name, so the file cannot change between stat and unlink.
  if (!OwnIsPublished(root, own_dir, rel)) return absl::OkStatus();
  const absl::Status s = RemoveRegularFileBeneath(root, rel);
  return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : InTier(options_.path, s);
}

absl::Status FileDevice::RemoveOwn(int root, int own_dir, const std::string& stem) const {
  if (absl::Status s = Unpublish(root, own_dir, stem); !s.ok()) return s;
  const absl::Status s = RemoveRegularFileBeneath(own_dir, RelativeChunkPath(stem));
  return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : InTier(own_path_, s);
}

void FileDevice::AbortTemp(FileHandle temp) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return;
  close(temp);
  RemoveRegularFileBeneath(own_fd_, it->second).IgnoreError();
  temps_.erase(it);
}

absl::Status FileDevice::RemoveChunk(const std::string& stem) {
  DropCached(stem);
  // Also called off the loop (the reconcile pass): Recreate may replace the directories.
  const std::shared_ptr<const Directories> dirs = directories();
  // Shared: only the node's own file (readers that opened it keep their file).
  if (shared()) return RemoveOwn(dirs->root, dirs->own, stem);
  // Only a regular file the daemon could have written, never through a symlink.
  return InTier(options_.path, RemoveRegularFileBeneath(dirs->root, RelativeChunkPath(stem)));
}

bool FileDevice::Queue(IoRequest* request) {
  UringQueue& queue = request->kind == IoKind::kRead ? read_queue_ : write_queue_;
  request->transferred = 0;
  request->region = -1;
  if (request->kind != IoKind::kSync && !region_by_base_.empty()) {
    const auto b = reinterpret_cast<uintptr_t>(request->buffer);
    auto it = region_by_base_.upper_bound(b);
    if (it != region_by_base_.begin()) {
      const int index = std::prev(it)->second;
      const Region& reg = regions_[index];
      if (b + request->length <= reinterpret_cast<uintptr_t>(reg.base) + reg.size) {
        request->region = static_cast<int16_t>(index);
        fixed_ops_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (!queue.Queue(request)) return false;
  if (request->kind == IoKind::kRead) {  // the cached handle stays open while the read is in flight
    if (auto s = fd_stems_.find(request->file); s != fd_stems_.end()) {
      CachedFile& f = files_[s->second];
      if (f.in_flight++ == 0) idle_lru_.erase(f.lru);
    } else if (auto d = doomed_.find(request->file); d != doomed_.end()) {
      ++d->second;
    }
  }
  return true;
}

void FileDevice::Abandon(IoRequest* request) {
  (request->kind == IoKind::kRead ? read_queue_ : write_queue_).Cancel(request);
}

void FileDevice::Submit() {
  read_queue_.Submit();
  write_queue_.Submit();
}

void FileDevice::Reap(std::vector<IoCompletion>* out) {
  const size_t first = out->size();
  read_queue_.Reap(out);
  for (size_t i = first; i < out->size(); ++i) ReleaseFile((*out)[i].request->file);
  write_queue_.Reap(out);
}

}  // namespace kvstream
