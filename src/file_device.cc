#include "file_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

namespace fs = std::filesystem;

constexpr char kLockName[] = ".kvstream.lock";
constexpr char kProbeName[] = ".kvstream-probe";
constexpr uint64_t kWriteRingBit = 1ull << 63;

absl::Status Errno(const char* what, const std::string& path, int err = errno) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(message);
    case EACCES: case EPERM: case EROFS: return absl::PermissionDeniedError(message);
    case ENOSPC: case EDQUOT: return absl::ResourceExhaustedError(message);
    default: return absl::InternalError(message);
  }
}

bool IsHexStem(std::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Reads and validates one chunk file's header. Returns DataLoss/NotFound for files to remove.
absl::StatusOr<ScannedChunk> ReadHeader(const std::string& path, std::string_view stem) {
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
  if (absl::IsOutOfRange(meta.status())) {
    const size_t needed = std::strtoull(std::string(meta.status().message()).c_str(), nullptr, 10);
    buf.resize(needed);
    n = pread(fd, buf.data(), buf.size(), 0);
    meta = n < 0 ? absl::DataLossError("unreadable header") : DecodeChunkHeader(buf.data(), n);
    if (absl::IsOutOfRange(meta.status())) meta = absl::DataLossError("header truncated");
  }
  close(fd);
  if (!meta.ok()) return meta.status();
  if (FileStem(meta->key) != stem) return absl::DataLossError("file name does not match its key");
  if (static_cast<uint64_t>(st.st_size) != meta->file_size()) {
    return absl::DataLossError(absl::StrCat("file is ", st.st_size, " bytes, header says ",
                                            meta->file_size()));
  }
  return ScannedChunk{*std::move(meta), static_cast<uint64_t>(st.st_size)};
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

  const std::string lock_path = absl::StrCat(root, "/", kLockName);
  lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock_fd_ < 0) return Errno("tier directory is not writable: cannot create", lock_path);
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tier directory ", root, " is in use by another kvstream process"));
  }

  // Probe O_DIRECT with a real aligned write and read; take the alignment from statx.
  const std::string probe = absl::StrCat(root, "/", kProbeName);
  int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0640);
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
  unlink(probe.c_str());
  if (!props_.direct_io) {
    if (!options_.allow_buffered_fallback) {
      return absl::FailedPreconditionError(absl::StrCat(root, ": ", buffered_reason_,
                                                        " and buffered fallback is disabled"));
    }
    props_.mem_alignment = 1;
    props_.offset_alignment = 1;
  }
  if (absl::Status s = InitRing(read_ring_, options_.read_depth); !s.ok()) return s;
  if (absl::Status s = InitRing(write_ring_, options_.write_depth); !s.ok()) return s;
  // A sparse table of registered buffers, filled by RegisterRegion. Kernels or limits that refuse
  // it leave fixed buffers off; plain buffers work everywhere.
  if (io_uring_register_buffers_sparse(&read_ring_.ring, kMaxRegions) == 0 &&
      io_uring_register_buffers_sparse(&write_ring_.ring, kMaxRegions) == 0) {
    props_.fixed_buffers = true;
    regions_.resize(kMaxRegions);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FileDevice::RegisterRegion(void* base, size_t size) {
  if (!props_.fixed_buffers) return absl::UnimplementedError("registered buffers are unavailable");
  if (size == 0 || size > (1ull << 30)) {
    return absl::InvalidArgumentError("a registered region must be 1 byte to 1 GiB");
  }
  int index = -1;
  for (unsigned i = 0; i < regions_.size() && index < 0; ++i) {
    if (regions_[i].size == 0) index = static_cast<int>(i);
  }
  if (index < 0) return absl::ResourceExhaustedError("all registered buffer slots are in use");
  iovec iov{base, size};
  for (Ring* r : {&read_ring_, &write_ring_}) {
    const int rc = io_uring_register_buffers_update_tag(&r->ring, index, &iov, nullptr, 1);
    if (rc < 0) {
      if (r == &write_ring_) {  // undo the read ring's registration
        iovec empty{nullptr, 0};
        io_uring_register_buffers_update_tag(&read_ring_.ring, index, &empty, nullptr, 1);
      }
      return absl::ResourceExhaustedError(
          absl::StrCat("registering ", size, " bytes of buffers: ", std::strerror(-rc),
                       rc == -ENOMEM ? " (raise LimitMEMLOCK)" : ""));
    }
  }
  regions_[index] = {static_cast<uint8_t*>(base), size};
  return index;
}

void FileDevice::UnregisterRegion(int index) {
  if (index < 0 || static_cast<size_t>(index) >= regions_.size() || regions_[index].size == 0) return;
  iovec empty{nullptr, 0};
  for (Ring* r : {&read_ring_, &write_ring_}) {
    io_uring_register_buffers_update_tag(&r->ring, index, &empty, nullptr, 1);
  }
  regions_[index] = {};
}

absl::Status FileDevice::InitRing(Ring& r, uint32_t depth) {
  // Each slot may need one SQE at a time (resubmits reuse the slot), so depth entries suffice.
  io_uring_params params{};
  params.flags = IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(depth, &r.ring, &params);
  if (rc == -EINVAL) {
    params = {};
    rc = io_uring_queue_init_params(depth, &r.ring, &params);
  }
  if (rc < 0) {
    return absl::UnavailableError(absl::StrCat("io_uring_queue_init: ", std::strerror(-rc)));
  }
  r.initialized = true;
  if (options_.event_fd >= 0) {
    rc = io_uring_register_eventfd(&r.ring, options_.event_fd);
    if (rc < 0) return absl::InternalError(absl::StrCat("io_uring_register_eventfd: ", std::strerror(-rc)));
  }
  r.slots.resize(depth);
  r.free_slots.reserve(depth);
  for (uint32_t i = depth; i > 0; --i) r.free_slots.push_back(i - 1);
  return absl::OkStatus();
}

FileDevice::~FileDevice() {
  for (Ring* r : {&read_ring_, &write_ring_}) {
    if (!r->initialized) continue;
    // Wait for anything still in flight before the buffers go away.
    size_t busy = 0;
    for (const Slot& s : r->slots) busy += s.busy;
    if (r->unsubmitted) io_uring_submit(&r->ring);
    while (busy > 0) {
      io_uring_cqe* cqe;
      if (io_uring_wait_cqe(&r->ring, &cqe) != 0) break;
      io_uring_cqe_seen(&r->ring, cqe);
      --busy;
    }
    io_uring_queue_exit(&r->ring);
  }
  for (auto& [stem, f] : files_) close(f.fd);
  for (auto& [fd, n] : doomed_) close(fd);
  for (auto& [fd, path] : temps_) {
    close(fd);
    unlink(path.c_str());
  }
  if (lock_fd_ >= 0) close(lock_fd_);
}

std::string FileDevice::ChunkPath(const std::string& stem) const {
  return absl::StrCat(options_.path, "/", RelativeChunkPath(stem));
}

absl::StatusOr<ScanReport> FileDevice::Scan() {
  ScanReport report;
  std::error_code ec;
  for (const fs::directory_entry& dir : fs::directory_iterator(options_.path, ec)) {
    const std::string dir_name = dir.path().filename().string();
    if (!dir.is_directory() || !IsHexStem(dir_name, 2)) continue;
    for (const fs::directory_entry& file : fs::directory_iterator(dir.path(), ec)) {
      const std::string name = file.path().filename().string();
      const std::string path = file.path().string();
      if (absl::StrContains(name, kTempMarker)) {
        unlink(path.c_str());
        ++report.removed_temporaries;
        continue;
      }
      if (!absl::EndsWith(name, kChunkSuffix)) continue;
      const std::string stem = name.substr(0, name.size() - kChunkSuffixLength);
      if (!IsHexStem(stem, 32) || stem.substr(0, 2) != dir_name) continue;
      absl::StatusOr<ScannedChunk> chunk = ReadHeader(path, stem);
      if (!chunk.ok()) {
        spdlog::warn("tier {}: removing invalid chunk file {}: {}", options_.path, path,
                     std::string(chunk.status().message()));
        unlink(path.c_str());
        ++report.removed_invalid;
        continue;
      }
      report.chunks.push_back(*std::move(chunk));
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("scanning ", options_.path, ": ", ec.message()));
  return report;
}

absl::StatusOr<FileHandle> FileDevice::OpenChunk(const std::string& stem) {
  if (auto it = files_.find(stem); it != files_.end()) {
    if (it->second.in_flight == 0) idle_lru_.splice(idle_lru_.end(), idle_lru_, it->second.lru);
    return it->second.fd;
  }
  const std::string path = ChunkPath(stem);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (props_.direct_io ? O_DIRECT : 0));
  if (fd < 0) return Errno("open", path);
  CachedFile& f = files_[stem];
  f.fd = fd;
  f.lru = idle_lru_.insert(idle_lru_.end(), stem);
  fd_stems_[fd] = stem;
  TrimCache();
  return fd;
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
  const std::string dir = absl::StrCat(options_.path, "/", stem.substr(0, 2));
  if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) return Errno("mkdir", dir);
  const std::string path =
      absl::StrCat(dir, "/", stem, kChunkSuffix, kTempMarker, getpid(), ".", ++temp_counter_);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
                                        (props_.direct_io ? O_DIRECT : 0), 0640);
  if (fd < 0) return Errno("create", path);
  temps_[fd] = path;
  return fd;
}

absl::Status FileDevice::CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InternalError("unknown temporary handle");
  const std::string final_path = ChunkPath(stem);
  absl::Status status;
  if (rename(it->second.c_str(), final_path.c_str()) != 0) {
    status = Errno("rename", it->second);
    unlink(it->second.c_str());
  }
  close(temp);
  temps_.erase(it);
  DropCached(stem);
  if (status.ok() && sync_directory) {
    const std::string dir = absl::StrCat(options_.path, "/", stem.substr(0, 2));
    const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) status = Errno("fsync", dir);
    if (dfd >= 0) close(dfd);
  }
  return status;
}

void FileDevice::AbortTemp(FileHandle temp) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) return;
  close(temp);
  unlink(it->second.c_str());
  temps_.erase(it);
}

absl::Status FileDevice::RemoveChunk(const std::string& stem) {
  DropCached(stem);
  const std::string path = ChunkPath(stem);
  if (unlink(path.c_str()) != 0) return Errno("unlink", path);
  return absl::OkStatus();
}

void FileDevice::Prepare(Ring& r, uint32_t slot_index, uint64_t ring_id) {
  Slot& slot = r.slots[slot_index];
  io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
  if (sqe == nullptr) {  // The SQ holds as many entries as slots; flush and retry once.
    io_uring_submit(&r.ring);
    r.unsubmitted = 0;
    sqe = io_uring_get_sqe(&r.ring);
  }
  const IoOp& op = slot.op;
  auto* buf = static_cast<uint8_t*>(op.buffer) + slot.done;
  const uint32_t remaining = op.length - slot.done;
  switch (op.kind) {
    case IoKind::kRead:
      if (slot.region >= 0) {
        io_uring_prep_read_fixed(sqe, op.file, buf, remaining, op.offset + slot.done, slot.region);
      } else {
        io_uring_prep_read(sqe, op.file, buf, remaining, op.offset + slot.done);
      }
      break;
    case IoKind::kWrite:
      if (slot.region >= 0) {
        io_uring_prep_write_fixed(sqe, op.file, buf, remaining, op.offset + slot.done, slot.region);
      } else {
        io_uring_prep_write(sqe, op.file, buf, remaining, op.offset + slot.done);
      }
      break;
    case IoKind::kSync: io_uring_prep_fsync(sqe, op.file, IORING_FSYNC_DATASYNC); break;
  }
  io_uring_sqe_set_data64(sqe, ring_id | slot_index);
  ++r.unsubmitted;
}

bool FileDevice::Queue(const IoOp& op) {
  Ring& r = op.kind == IoKind::kRead ? read_ring_ : write_ring_;
  if (r.free_slots.empty()) return false;
  const uint32_t index = r.free_slots.back();
  r.free_slots.pop_back();
  Slot& slot = r.slots[index];
  slot.op = op;
  slot.done = 0;
  slot.busy = true;
  slot.region = -1;
  if (op.kind != IoKind::kSync) {
    const auto* b = static_cast<const uint8_t*>(op.buffer);
    for (size_t i = 0; i < regions_.size(); ++i) {
      const Region& reg = regions_[i];
      if (reg.size != 0 && b >= reg.base && b + op.length <= reg.base + reg.size) {
        slot.region = static_cast<int>(i);
        ++fixed_ops_;
        break;
      }
    }
  }
  if (op.kind == IoKind::kRead) {
    if (auto s = fd_stems_.find(op.file); s != fd_stems_.end()) {
      CachedFile& f = files_[s->second];
      if (f.in_flight++ == 0) idle_lru_.erase(f.lru);
    } else if (auto d = doomed_.find(op.file); d != doomed_.end()) {
      ++d->second;
    }
  }
  Prepare(r, index, op.kind == IoKind::kRead ? 0 : kWriteRingBit);
  return true;
}

void FileDevice::Submit() {
  for (Ring* r : {&read_ring_, &write_ring_}) {
    if (r->unsubmitted == 0) continue;
    io_uring_submit(&r->ring);
    r->unsubmitted = 0;
  }
}

void FileDevice::ReapRing(Ring& r, uint64_t ring_id, std::vector<IoCompletion>* out) {
  io_uring_cqe* cqe;
  while (io_uring_peek_cqe(&r.ring, &cqe) == 0) {
    const uint32_t index = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe) & ~kWriteRingBit);
    const int res = cqe->res;
    io_uring_cqe_seen(&r.ring, cqe);
    Slot& slot = r.slots[index];
    int32_t result;
    if (res == -EAGAIN || res == -EINTR) {
      ++resubmits_;
      Prepare(r, index, ring_id);
      continue;
    }
    if (res < 0) {
      result = res;
    } else if (slot.op.kind == IoKind::kSync) {
      result = 0;
    } else if (res == 0) {
      result = slot.op.kind == IoKind::kRead ? -ENODATA : -EIO;  // EOF: the file is truncated
    } else {
      slot.done += static_cast<uint32_t>(res);
      if (slot.done < slot.op.length) {  // short transfer: continue where it stopped
        ++resubmits_;
        Prepare(r, index, ring_id);
        continue;
      }
      result = static_cast<int32_t>(slot.op.length);
    }
    out->push_back({slot.op.tag, result});
    if (slot.op.kind == IoKind::kRead) ReleaseFile(slot.op.file);
    slot.busy = false;
    r.free_slots.push_back(index);
  }
}

void FileDevice::Reap(std::vector<IoCompletion>* out) {
  ReapRing(read_ring_, 0, out);
  ReapRing(write_ring_, kWriteRingBit, out);
  Submit();  // resubmissions
}

}  // namespace kvstream
