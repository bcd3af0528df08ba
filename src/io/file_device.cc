#include "io/file_device.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "format/index_checkpoint.h"
#include "io/chunk_files.h"
#include "io/direct_io_probe.h"
#include "io/safe_open.h"
#include "io/shared_publish.h"
#include "io/thread_queue.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

namespace fs = std::filesystem;

// fsyncs the directory `name` below `base` (whose path is `base_path`, for messages).
absl::Status SyncDirectory(int base, const std::string& base_path, const std::string& name) {
  const int dfd = openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  absl::Status status;
  if (dfd < 0 || fsync(dfd) != 0) status = ErrnoAt("fsync", absl::StrCat(base_path, "/", name));
  if (dfd >= 0) close(dfd);
  return status;
}

// Whether reads of the directory `fd` are copies by the CPU rather than DMA by a device: buffered
// (from the page cache), or a file system in memory (tmpfs, ramfs: O_DIRECT there is a copy too)
// or in a user-space server (FUSE: a network file system's client, the copy done on read).
bool CpuCopyReads(int fd, bool direct_io) {
  constexpr long kTmpfs = 0x01021994, kRamfs = 0x858458f6, kFuse = 0x65735546;  // linux/magic.h
  struct statfs fs {};
  if (!direct_io || fstatfs(fd, &fs) != 0) return true;
  return fs.f_type == kTmpfs || fs.f_type == kRamfs || fs.f_type == kFuse;
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

bool CopyThreadsPay() {
  if (const char* env = std::getenv("KVSTREAM_COPY_THREADS"); env != nullptr && *env != '\0') {
    return std::string_view(env) != "0";
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return cores >= 8;
}

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
  calls_ = std::make_unique<BlockingCallThread>(root, static_cast<int64_t>(options_.call_wait_seconds * 1e9));
  if (absl::Status s = OpenDirectory(); !s.ok()) return s;
  if (absl::Status s = ProbeDirectIo(); !s.ok()) return s;
  if (absl::Status s = StartQueues(); !s.ok()) return s;
  // A sparse table of registered buffers, filled by RegisterRegion. Kernels or limits that refuse
  // it leave fixed buffers off; plain buffers work everywhere.
  if (read_queue_->RegisterSparseBuffers(kMaxRegions) == 0 && write_queue_->RegisterSparseBuffers(kMaxRegions) == 0) {
    props_.fixed_buffers = true;
    slots_.Reset(kMaxRegions);
  }
  return absl::OkStatus();
}

absl::Status FileDevice::ProbeDirectIo() {
  absl::StatusOr<DirectIoSupport> probed = ProbeDirectIoBeneath(own_fd_, own_path_);
  if (!probed.ok()) return probed.status();
  buffered_reason_ = probed->buffered_reason;
  props_.direct_io = probed->direct_io;
  props_.mem_alignment = probed->direct_io ? probed->mem_alignment : 1;
  props_.offset_alignment = probed->direct_io ? probed->offset_alignment : 1;
  if (!props_.direct_io && !options_.allow_buffered_fallback) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.path, ": ", buffered_reason_, " and buffered fallback is disabled"));
  }
  return absl::OkStatus();
}

absl::Status FileDevice::StartQueues() {
  if (options_.io_engine != IoEngine::kThreads) {
    // Reads stay inline (an O_DIRECT read that would block is handed to io-wq by the kernel
    // itself, and a context switch per block costs at GB/s); writes go to io-wq always: a FUSE
    // write that extends its file blocks inside the submission (measured: the loop thread held
    // for every write).
    UringQueue::Options ring;
    ring.event_fd = options_.event_fd;
    ring.io_workers = options_.io_workers;
    ring.depth = options_.write_depth;
    ring.never_inline = true;
    auto writes = std::make_unique<UringQueue>();
    absl::Status s = writes->Init(ring);
    if (s.ok() && options_.copy_threads && CpuCopyReads(own_fd_, props_.direct_io)) {
      // A read that is a CPU copy (page cache, tmpfs, FUSE) is done by io_uring inside the
      // submission, on the loop's thread: every such tier's reads would share one core (two
      // tmpfs tiers read no faster than one). Copy threads, one per read in flight, run them
      // side by side instead.
      auto reads = std::make_unique<ThreadQueue>();
      if (s = reads->Init({.depth = options_.read_depth, .event_fd = options_.event_fd}); !s.ok()) return s;
      read_queue_ = std::move(reads);
      write_queue_ = std::move(writes);
      props_.threads_engine = true;
      props_.io_engine = "io_uring, reads on threads";
      return absl::OkStatus();
    }
    if (s.ok()) {
      ring.depth = options_.read_depth;
      ring.never_inline = false;
      auto reads = std::make_unique<UringQueue>();
      if (s = reads->Init(ring); s.ok()) {
        read_queue_ = std::move(reads);
        write_queue_ = std::move(writes);
        return absl::OkStatus();
      }
    }
    // Unavailable: the kernel or a seccomp filter refuses io_uring (ENOSYS, EPERM...).
    if (options_.io_engine == IoEngine::kUring || !absl::IsUnavailable(s)) return s;
    spdlog::warn("tier {}: {}: reads and writes go to threads instead (io_engine: threads)", options_.path,
                 std::string(s.message()));
  }
  auto reads = std::make_unique<ThreadQueue>();
  auto writes = std::make_unique<ThreadQueue>();
  if (absl::Status s = reads->Init({.depth = options_.read_depth, .event_fd = options_.event_fd}); !s.ok()) return s;
  if (absl::Status s = writes->Init({.depth = options_.write_depth, .event_fd = options_.event_fd}); !s.ok()) return s;
  read_queue_ = std::move(reads);
  write_queue_ = std::move(writes);
  props_.threads_engine = true;
  props_.io_engine = "threads";
  return absl::OkStatus();
}

absl::StatusOr<int> FileDevice::RegisterRegion(void* base, size_t size) {
  if (!props_.fixed_buffers) return absl::UnimplementedError("registered buffers are unavailable");
  if (size == 0 || size > (1ull << 30)) {
    return absl::InvalidArgumentError("a registered region must be 1 byte to 1 GiB");
  }
  const int index = slots_.Free();
  if (index < 0) return absl::ResourceExhaustedError("all registered buffer slots are in use");
  int rc = read_queue_->UpdateBuffer(index, {base, size});
  if (rc == 0) {
    rc = write_queue_->UpdateBuffer(index, {base, size});
    if (rc < 0) read_queue_->UpdateBuffer(index, {nullptr, 0});  // undo the read ring's registration
  }
  if (rc < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("registering ", size, " bytes of buffers: ", std::strerror(-rc),
                                                     rc == -ENOMEM ? " (raise LimitMEMLOCK)" : ""));
  }
  slots_.Take(index, base, size);
  return index;
}

void FileDevice::UnregisterRegion(int index) {
  if (!slots_.Holds(index)) return;
  read_queue_->UpdateBuffer(index, {nullptr, 0});
  write_queue_->UpdateBuffer(index, {nullptr, 0});
  slots_.Release(index);
}

// The queues go first: they wait for the requests still in flight, which the thread engine
// does on the descriptors closed below (io_uring keeps its own reference to each file).
FileDevice::~FileDevice() {
  read_queue_.reset();
  write_queue_.reset();
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
  absl::StatusOr<std::vector<ChunkMeta>> saved = TakeCheckpoint(own_fd_, own_path_);
  if (saved.ok()) {
    report.from_checkpoint = true;
    report.chunks = SavedChunks(*std::move(saved), options_.path, options_.mac_key.get(), options_.require_mac);
    return report;
  }
  if (!absl::IsNotFound(saved.status())) {
    spdlog::warn("tier {}: ignoring its index checkpoint: {}; reading every chunk header", options_.path,
                 std::string(saved.status().message()));
  }
  // Every chunk file's header, read by a few threads (a cold scan waits on the device).
  std::vector<std::pair<std::string, std::string>> files;  // path below own_path_, stem
  SkippedNames skipped;
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
  std::vector<absl::StatusOr<ScannedChunk>> headers =
      ReadChunkFileHeaders(own_fd_, own_path_, files, options_.owner, options_.mac_key.get(), options_.require_mac);
  for (size_t i = 0; i < files.size(); ++i) {
    if (IsRefused(headers[i].status())) {  // not the daemon's to read: never removed either
      skipped.Add(files[i].first, std::string(headers[i].status().message()));
      continue;
    }
    if (absl::IsNotFound(headers[i].status())) continue;  // removed since it was listed
    if (!headers[i].ok()) {
      // Shared: its published name too, or nobody would ever remove it.
      const absl::Status s = shared() ? RemoveOwnChunk(Shared(dir_fd_, own_fd_), files[i].second)
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
    if (shared() && !PublishChunk(Shared(dir_fd_, own_fd_), files[i].second, /*remove_on_error=*/false).ok()) continue;
    report.chunks.push_back(*std::move(headers[i]));
  }
  skipped.Log(options_.path, "scan:");
  report.skipped_irregular = skipped.count;
  return report;
}

absl::StatusOr<std::vector<ListedChunk>> FileDevice::ListChunks() {
  const std::shared_ptr<const Directories> dirs = directories();  // off the loop: Recreate may replace them
  std::vector<ListedChunk> out;
  SkippedNames skipped;
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
      ReadChunkFileHeader(dirs->root, options_.path, rel, stem, options_.owner, options_.mac_key.get(), options_.require_mac);
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

absl::Status FileDevice::SaveIndex(const std::vector<ChunkMeta>& chunks) {
  return WriteCheckpoint(own_fd_, own_path_, chunks);  // the directory opened, never its path again
}

absl::StatusOr<FileHandle> FileDevice::OpenChunk(const std::string& stem) {
  const int64_t now = shared() ? MonotonicNs() : 0;
  ReadHandleCache::Handle* h = handles_.Find(stem);
  if (h != nullptr && (!shared() || now - h->checked_ns <= static_cast<int64_t>(options_.revalidate_seconds * 1e9))) {
    return h->fd;
  }
  const std::string rel = RelativeChunkPath(stem);
  const std::shared_ptr<const Directories> dirs = directories();
  if (h != nullptr) {
    // Another node may have removed or replaced its file: the handle must still be the name's.
    absl::StatusOr<bool> same =
        calls_->Run<bool>("checking a chunk file's name", [dirs, rel, fd = h->fd]() -> absl::StatusOr<bool> {
          absl::StatusOr<struct stat> named = StatBeneath(dirs->root, rel);
          struct stat held;
          return named.ok() && S_ISREG(named->st_mode) && fstat(fd, &held) == 0 && SameFile(*named, held);
        });
    if (!same.ok()) return same.status();  // NotAnswering
    if (*same) {
      h->checked_ns = now;
      return h->fd;
    }
    handles_.Drop(stem);
  }
  const int flags = O_RDONLY | (props_.direct_io ? O_DIRECT : 0);
  absl::StatusOr<ReadHandleCache::Handle> opened = calls_->Run<ReadHandleCache::Handle>(
      "opening a chunk file",
      [dirs, rel, flags, owner = options_.owner, shared = shared(), now]() -> absl::StatusOr<ReadHandleCache::Handle> {
        // One openat2 where the kernel has it: never a FIFO's blocking open, never through a symlink.
        absl::StatusOr<int> fd = OpenFileBeneath(dirs->root, rel, flags, owner);
        if (!fd.ok()) return fd.status();
        ReadHandleCache::Handle handle{*fd, now, {}};
        if (shared) {  // the version this name holds now, for HoldsVersion
          AlignedBuffer page = AllocateAligned(kFileAlignment);
          const ssize_t n = page ? pread(handle.fd, page.get(), kFileAlignment, 0) : -1;
          absl::StatusOr<ChunkVersion> v = n > 0 ? PeekChunkVersion(page.get(), static_cast<size_t>(n))
                                                 : absl::DataLossError("unreadable header");
          if (v.ok()) handle.version = *v;  // else no version matches: the chunk is read elsewhere or missed
        }
        return handle;
      },
      [](absl::StatusOr<ReadHandleCache::Handle>& late) {
        if (late.ok()) close(late->fd);
      });
  if (IsRefused(opened.status())) {  // not a chunk this tier may serve: the replica is not there
    LogRefusedChunk(options_.path, stem, opened.status());
    return absl::NotFoundError(opened.status().message());
  }
  if (!opened.ok()) return NotAnswering(opened.status()) ? opened.status() : InTier(options_.path, opened.status());
  handles_.Insert(stem, *opened);
  return opened->fd;
}

bool FileDevice::HoldsVersion(FileHandle handle, const ChunkMeta& meta) {
  if (!shared()) return true;
  const ReadHandleCache::Handle* h = handles_.ByFd(handle);
  return h != nullptr && h->version == VersionOf(meta);
}

absl::StatusOr<FileHandle> FileDevice::CreateTemp(const std::string& stem) {
  const std::string dir = stem.substr(0, 2);
  const std::string name = absl::StrCat(stem, kChunkSuffix, kTempMarker, getpid(), ".", ++temp_counter_);
  const std::string path = absl::StrCat(dir, "/", name);
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (props_.direct_io ? O_DIRECT : 0);
  absl::StatusOr<int> fd = calls_->Run<int>(
      "creating a temporary",
      [dirs = directories(), own_path = own_path_, dir, name, flags]() -> absl::StatusOr<int> {
        if (mkdirat(dirs->own, dir.c_str(), 0750) == 0) {
          // A new fan-out directory: its name reaches the disk before any chunk renamed into it can
          // be durable (CommitTemp syncs only the fan-out directory). Undone if not, so a retry syncs it.
          if (fsync(dirs->own) != 0) {
            const int err = errno;
            unlinkat(dirs->own, dir.c_str(), AT_REMOVEDIR);
            return ErrnoAt("fsync", own_path, err);
          }
        } else if (errno != EEXIST) {
          return ErrnoAt("mkdir", absl::StrCat(own_path, "/", dir));
        }
        absl::StatusOr<int> parent = OpenDirectoryBeneath(dirs->own, dir);  // not a symlink put in its place
        if (!parent.ok()) return InTier(own_path, parent.status());
        const int fd = openat(*parent, name.c_str(), flags, 0640);
        const int err = errno;
        close(*parent);
        if (fd < 0) return ErrnoAt("create", absl::StrCat(own_path, "/", dir, "/", name), err);
        return fd;
      },
      [dirs = directories(), path](absl::StatusOr<int>& late) {
        if (!late.ok()) return;
        close(*late);
        RemoveRegularFileBeneath(dirs->own, path).IgnoreError();
      },
      WriteWaitNs());
  if (!fd.ok()) return fd.status();
  temps_[*fd] = path;
  return *fd;
}

absl::Status FileDevice::CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InternalError("unknown temporary handle");
  const std::string temp_path = it->second;
  temps_.erase(it);
  handles_.Drop(stem);
  // Off the loop, to the end: a call that does not answer in time still publishes (or removes
  // the temporary) once the file system answers; the loop counts the replica failed.
  return calls_->RunAlways(
      "publishing a chunk", [dirs = directories(), root = options_.path, own_path = own_path_, shared = shared(), temp,
                             temp_path, stem, sync_directory]() -> absl::Status {
        const SharedDirectories names{dirs->root, dirs->own, root, own_path};
        const std::string rel = RelativeChunkPath(stem);
        absl::Status status;
        // Shared: the node's older version of the key is unpublished before the new one is renamed
        // over its link (a crash in between leaves the node's link unpublished, which its next start
        // publishes; never a published file without its owner's link).
        if (shared) status = UnpublishChunk(names, stem);
        // Renamed within its directory, opened again as the temporary was created (no symlink).
        absl::StatusOr<int> parent = OpenDirectoryBeneath(dirs->own, stem.substr(0, 2));
        if (status.ok() && !parent.ok()) status = InTier(own_path, parent.status());
        const std::string temp_name = temp_path.substr(3);  // "<2 hex>/" off
        if (!status.ok()) {
          RemoveRegularFileBeneath(dirs->own, temp_path).IgnoreError();
        } else if (renameat(*parent, temp_name.c_str(), *parent, rel.substr(3).c_str()) != 0) {
          status = ErrnoAt("rename", absl::StrCat(own_path, "/", temp_path));
          unlinkat(*parent, temp_name.c_str(), 0);
        }
        if (parent.ok()) close(*parent);
        close(temp);
        if (status.ok() && shared) status = PublishChunk(names, stem, /*remove_on_error=*/true);
        if (status.ok() && sync_directory) {  // the rename (and the published link) survive power loss
          const std::string dir = stem.substr(0, 2);
          status = SyncDirectory(dirs->own, own_path, dir);
          if (status.ok() && shared) status = SyncDirectory(dirs->root, root, dir);
        }
        return status;
      },
      WriteWaitNs());
}

void FileDevice::AbortTemp(FileHandle temp) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return;
  calls_
      ->RunAlways("removing a temporary", [dirs = directories(), temp, path = it->second] {
        close(temp);
        return RemoveRegularFileBeneath(dirs->own, path);
      }, WriteWaitNs())
      .IgnoreError();  // a temporary left behind is removed at the next start
  temps_.erase(it);
}

absl::Status FileDevice::RemoveChunk(const std::string& stem) {
  handles_.Drop(stem);
  // Also called off the loop (the reconcile pass): Recreate may replace the directories.
  return calls_->Run("removing a chunk file", [dirs = directories(), root = options_.path, own_path = own_path_,
                                               shared = shared(), stem]() -> absl::Status {
    // Shared: only the node's own file (readers that opened it keep their file).
    if (shared) return RemoveOwnChunk({dirs->root, dirs->own, root, own_path}, stem);
    // Only a regular file the daemon could have written, never through a symlink.
    return InTier(root, RemoveRegularFileBeneath(dirs->root, RelativeChunkPath(stem)));
  }, WriteWaitNs());
}

bool FileDevice::Queue(IoRequest* request) {
  IoQueue& queue = request->kind == IoKind::kRead ? *read_queue_ : *write_queue_;
  request->transferred = 0;
  request->region = -1;
  if (request->kind != IoKind::kSync) {
    request->region = static_cast<int16_t>(slots_.Covering(request->buffer, request->length));
    if (request->region >= 0) fixed_ops_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!queue.Queue(request)) return false;
  if (request->kind == IoKind::kRead) handles_.ReadIssued(request->file);  // stays open while in flight
  return true;
}

void FileDevice::Abandon(IoRequest* request) {
  (request->kind == IoKind::kRead ? *read_queue_ : *write_queue_).Cancel(request);
}

void FileDevice::Submit() {
  read_queue_->Submit();
  write_queue_->Submit();
}

void FileDevice::Reap(std::vector<IoCompletion>* out) {
  const size_t first = out->size();
  read_queue_->Reap(out);
  for (size_t i = first; i < out->size(); ++i) handles_.ReadLanded((*out)[i].request->file);
  write_queue_->Reap(out);
}

}  // namespace kvstream
