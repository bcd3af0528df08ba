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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index_checkpoint.h"
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

// Reads and validates one chunk file's header (its MAC too: VerifyChunkMac). Returns
// DataLoss/NotFound/PermissionDenied for files to remove.
absl::StatusOr<ScannedChunk> ReadHeader(const std::string& path, std::string_view stem, const ChunkMacKey* mac_key,
                                        bool require_mac) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
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

// Walks a tier's chunk directories (named by the first two hex digits of their files' stems):
// `on_chunk(file, stem)` for each committed chunk file, `on_temp(file)` for each temporary.
std::error_code ForEachChunkFile(const std::string& root,
                                 const std::function<void(const fs::directory_entry&, const std::string&)>& on_chunk,
                                 const std::function<void(const fs::directory_entry&)>& on_temp) {
  std::error_code ec;
  for (const fs::directory_entry& dir : fs::directory_iterator(root, ec)) {
    const std::string dir_name = dir.path().filename().string();
    if (!dir.is_directory() || !IsHexStem(dir_name, 2)) continue;
    for (const fs::directory_entry& file : fs::directory_iterator(dir.path(), ec)) {
      const std::string name = file.path().filename().string();
      if (absl::StrContains(name, kTempMarker)) {
        on_temp(file);
        continue;
      }
      if (!absl::EndsWith(name, kChunkSuffix)) continue;
      const std::string stem = name.substr(0, name.size() - kChunkSuffixLength);
      if (IsHexStem(stem, 32) && stem.substr(0, 2) == dir_name) on_chunk(file, stem);
    }
  }
  return ec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileDevice>> FileDevice::Open(const FileDeviceOptions& options) {
  std::unique_ptr<FileDevice> device(new FileDevice(options));
  if (absl::Status s = device->Init(); !s.ok()) return s;
  return device;
}

absl::Status FileDevice::Init() {
  const std::string& root = options_.path;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create tier directory ", root, ": ", ec.message()));
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
    if ((mkdirat(dir, kNodesDir, 0750) != 0 && errno != EEXIST) || (mkdirat(dir, rel.c_str(), 0750) != 0 && errno != EEXIST) ||
        (own = openat(dir, rel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
      const absl::Status s = Errno("shared tier directory is not writable: cannot make", own_path);
      close(dir);
      return s;
    }
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
    shared_lock = openat(dir, kLockName, O_RDONLY | O_CREAT | O_CLOEXEC, 0640);
    if (shared_lock < 0 || flock(shared_lock, LOCK_SH | LOCK_NB) != 0) {
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
  const int lock = openat(own, kLockName, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock < 0) {
    const absl::Status s = Errno("tier directory is not writable: cannot create", lock_path);
    close_both();
    return s;
  }
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
  if (own_fd_ >= 0 && own_fd_ != dir_fd_) close(own_fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
  if (shared_lock_fd_ >= 0) close(shared_lock_fd_);
  shared_lock_fd_ = shared_lock;
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
  std::error_code ec;
  fs::create_directories(options_.path, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", options_.path, ": ", ec.message()));
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
  int fd = openat(own_fd_, kProbeName, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0640);
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
  unlinkat(own_fd_, kProbeName, 0);
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
    unlinkat(own_fd_, path.c_str(), 0);
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  if (shared_lock_fd_ >= 0) close(shared_lock_fd_);
  if (own_fd_ >= 0 && own_fd_ != dir_fd_) close(own_fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
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
  std::vector<std::pair<std::string, std::string>> files;  // path, stem
  const std::error_code ec = ForEachChunkFile(
      own_path_, [&](const fs::directory_entry& file, const std::string& stem) { files.emplace_back(file.path().string(), stem); },
      [&](const fs::directory_entry& temp) {
        unlink(temp.path().c_str());
        ++report.removed_temporaries;
      });
  if (ec) return absl::InternalError(absl::StrCat("scanning ", options_.path, ": ", ec.message()));
  std::vector<absl::StatusOr<ScannedChunk>> headers(files.size(), absl::UnknownError("not read"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> readers;
  for (size_t r = 0; r < std::min<size_t>(kScanThreads, files.size()); ++r) {
    readers.emplace_back([&] {
      for (size_t i = next++; i < files.size(); i = next++) headers[i] = ReadHeader(files[i].first, files[i].second, options_.mac_key.get(), options_.require_mac);
    });
  }
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < files.size(); ++i) {
    if (!headers[i].ok()) {
      spdlog::warn("tier {}: removing invalid chunk file {}: {}", options_.path, files[i].first,
                   std::string(headers[i].status().message()));
      if (shared()) {
        // Its published name too, or nobody would ever remove it.
        if (absl::Status s = RemoveOwn(files[i].second); !s.ok()) {
          spdlog::warn("tier {}: {}", options_.path, std::string(s.message()));
        }
      } else {
        unlink(files[i].first.c_str());
      }
      ++report.removed_invalid;
      continue;
    }
    // Shared: a crash between the node's link and the publish left a chunk unpublished; one whose
    // name another node published meanwhile is not this node's any more. A chunk that cannot be
    // published now stays, unindexed, for the next start.
    if (shared() && !Publish(files[i].second, /*remove_on_error=*/false).ok()) continue;
    report.chunks.push_back(*std::move(headers[i]));
  }
  return report;
}

absl::StatusOr<std::vector<ListedChunk>> FileDevice::ListChunks() {
  std::vector<ListedChunk> out;
  const std::error_code ec = ForEachChunkFile(
      own_path_,
      [&](const fs::directory_entry& file, const std::string& stem) {
        std::error_code size_ec;
        const uint64_t size = file.file_size(size_ec);
        if (!size_ec) out.push_back({stem, size});
      },
      [](const fs::directory_entry&) {});  // temporaries belong to writes in progress
  if (ec) return absl::InternalError(absl::StrCat("listing ", options_.path, ": ", ec.message()));
  return out;
}

absl::StatusOr<ScannedChunk> FileDevice::ReadChunkHeader(const std::string& stem) {
  absl::StatusOr<ScannedChunk> chunk = ReadHeader(ChunkPath(stem), stem, options_.mac_key.get(), options_.require_mac);
  if (absl::IsPermissionDenied(chunk.status())) LogRefusedChunk(options_.path, stem, chunk.status());
  if (chunk.ok() && shared()) chunk->owned = OwnIsPublished(RelativeChunkPath(stem));  // else another node's
  return chunk;
}

absl::StatusOr<uint64_t> FileDevice::ChunkFileSize(const std::string& stem) {
  struct stat st;
  if (fstatat(dir_fd_, RelativeChunkPath(stem).c_str(), &st, 0) != 0) return Errno("stat", ChunkPath(stem));
  return static_cast<uint64_t>(st.st_size);
}

absl::Status FileDevice::SaveIndex(const std::vector<ChunkMeta>& chunks) { return WriteCheckpoint(own_path_, chunks); }

absl::StatusOr<FileHandle> FileDevice::OpenChunk(const std::string& stem) {
  const int64_t now = shared() ? MonotonicNs() : 0;
  if (auto it = files_.find(stem); it != files_.end()) {
    CachedFile& f = it->second;
    if (shared() && now - f.checked_ns > static_cast<int64_t>(options_.revalidate_seconds * 1e9)) {
      // Another node may have removed or replaced its file: the handle must still be the name's.
      struct stat named, held;
      const bool same = fstatat(dir_fd_, RelativeChunkPath(stem).c_str(), &named, 0) == 0 && fstat(f.fd, &held) == 0 &&
                        SameFile(named, held);
      if (same) f.checked_ns = now;
      if (!same) DropCached(stem);
    }
  }
  if (auto it = files_.find(stem); it != files_.end()) {
    if (it->second.in_flight == 0) idle_lru_.splice(idle_lru_.end(), idle_lru_, it->second.lru);
    return it->second.fd;
  }
  const int fd = openat(dir_fd_, RelativeChunkPath(stem).c_str(), O_RDONLY | O_CLOEXEC | (props_.direct_io ? O_DIRECT : 0));
  if (fd < 0) return Errno("open", ChunkPath(stem));
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
  const std::string path = absl::StrCat(dir, "/", stem, kChunkSuffix, kTempMarker, getpid(), ".", ++temp_counter_);
  const int fd =
      openat(own_fd_, path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (props_.direct_io ? O_DIRECT : 0), 0640);
  if (fd < 0) return Errno("create", absl::StrCat(own_path_, "/", path));
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
  if (shared()) status = Unpublish(stem);
  if (!status.ok()) {
    unlinkat(own_fd_, it->second.c_str(), 0);
  } else if (renameat(own_fd_, it->second.c_str(), own_fd_, rel.c_str()) != 0) {
    status = Errno("rename", absl::StrCat(own_path_, "/", it->second));
    unlinkat(own_fd_, it->second.c_str(), 0);
  }
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
  if (linkat(own_fd_, rel.c_str(), dir_fd_, rel.c_str(), 0) == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EEXIST && OwnIsPublished(rel)) return absl::OkStatus();  // published already (a restart's scan)
  if (err == EEXIST) {  // another node published the key first: its file stands
    unlinkat(own_fd_, rel.c_str(), 0);
    return absl::AlreadyExistsError(absl::StrCat("another node published ", ChunkPath(stem), " first"));
  }
  if (remove_on_error) unlinkat(own_fd_, rel.c_str(), 0);
  return Errno("link", ChunkPath(stem), err);
}

bool FileDevice::OwnIsPublished(const std::string& rel) const {
  struct stat own, published;
  return fstatat(own_fd_, rel.c_str(), &own, 0) == 0 && fstatat(dir_fd_, rel.c_str(), &published, 0) == 0 &&
         SameFile(own, published);
}

absl::Status FileDevice::Unpublish(const std::string& stem) {
  const std::string rel = RelativeChunkPath(stem);
  struct stat own, published;
  if (fstatat(own_fd_, rel.c_str(), &own, 0) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("stat", absl::StrCat(own_path_, "/", rel));
  }
  if (fstatat(dir_fd_, rel.c_str(), &published, 0) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("stat", ChunkPath(stem));
  }
  // Only the owner changes its published name, so the file cannot change between stat and unlink.
  if (SameFile(own, published) && unlinkat(dir_fd_, rel.c_str(), 0) != 0 && errno != ENOENT) {
    return Errno("unlink", ChunkPath(stem));
  }
  return absl::OkStatus();
}

absl::Status FileDevice::RemoveOwn(const std::string& stem) {
  if (absl::Status s = Unpublish(stem); !s.ok()) return s;
  const std::string rel = RelativeChunkPath(stem);
  if (unlinkat(own_fd_, rel.c_str(), 0) != 0 && errno != ENOENT) return Errno("unlink", absl::StrCat(own_path_, "/", rel));
  return absl::OkStatus();
}

void FileDevice::AbortTemp(FileHandle temp) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return;
  close(temp);
  unlinkat(own_fd_, it->second.c_str(), 0);
  temps_.erase(it);
}

absl::Status FileDevice::RemoveChunk(const std::string& stem) {
  DropCached(stem);
  // Shared: only the node's own file (readers that opened it keep their file).
  if (shared()) return RemoveOwn(stem);
  if (unlinkat(dir_fd_, RelativeChunkPath(stem).c_str(), 0) != 0) return Errno("unlink", ChunkPath(stem));
  return absl::OkStatus();
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
