// TierDevice: the storage behind one tier, as the engine sees it. Control operations (scan, open,
// create, commit, remove) are synchronous; data operations are queued, submitted in batches and
// reaped without blocking (fio's queue/commit split). FileDevice implements it on a directory with
// io_uring; SimDevice implements it in memory with a virtual clock and injected faults.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "format/chunk_format.h"
#include "util/errno_status.h"  // ErrnoStatus, for every device

namespace kvstream {

// kCommit (devices with DeviceProperties::async_commit only): publishes a temporary whose writes
// have completed, as CommitTemp does, but queued: its completion says how it went (kExists: another
// node published the name first, as CommitTemp's AlreadyExists).
enum class IoKind : uint8_t { kRead, kWrite, kSync, kCommit };

// A handle to an open chunk file of a device (a file descriptor for FileDevice).
using FileHandle = int32_t;

// What a data operation came to. Devices map their errors onto these, so the engine decides from
// the outcome alone (is this copy bad, is the tier full) and never decodes an errno.
enum class IoStatus : uint8_t {
  kOk,          // the whole request transferred
  kMediaError,  // EIO and the like: the bytes on the device are bad
  kEndOfFile,   // the file ended before the request did: a truncated or torn copy
  kGone,        // ENOENT, ESTALE, ENOTCONN...: the file or its file system went away
  kNoSpace,     // ENOSPC, EDQUOT
  kFailed,      // anything else (ENOMEM, ECANCELED, EINVAL...): says nothing about the copy
  kExists,      // a kCommit on a shared device: another node published the name first
};
std::string_view ToString(IoStatus status);
IoStatus IoStatusOfErrno(int error);
// A control operation the tier's file system did not answer in time (DeadlineExceeded): says
// nothing of the copy; the tier is slow or hung (TierCondition::kNotAnswering once it lasts).
inline bool NotAnswering(const absl::Status& s) { return absl::IsDeadlineExceeded(s); }
// The copy a read came from is bad (rather than the read having failed for another reason).
inline bool IsBadCopy(IoStatus s) {
  return s == IoStatus::kMediaError || s == IoStatus::kEndOfFile || s == IoStatus::kGone;
}

// One data operation. The caller owns it and keeps it unchanged from Queue until its completion
// is reaped (fio's per-slot request state): devices keep no copy, so its address identifies it.
struct IoRequest {
  IoKind kind = IoKind::kRead;
  FileHandle file = -1;
  uint64_t offset = 0;
  uint32_t length = 0;
  void* buffer = nullptr;  // destination of reads, source of writes
  // Device state while in flight.
  uint32_t transferred = 0;  // bytes done so far (short transfers continue from here)
  int16_t region = -1;       // registered buffer in use, or -1
  bool abandoned = false;    // TierDevice::Abandon: never resubmitted, its bytes are not wanted

  // Sets the operation and clears the device state.
  void Set(IoKind k, FileHandle f, uint64_t off, uint32_t len, void* buf) {
    kind = k, file = f, offset = off, length = len, buffer = buf, transferred = 0, region = -1, abandoned = false;
  }
};

struct IoCompletion {
  IoRequest* request = nullptr;
  IoStatus status = IoStatus::kOk;
  int error = 0;  // the errno behind a failure, for messages
};

// What one kernel (or simulated) result means for a request: finished (completion filled in), or
// to be resubmitted for the rest (a short transfer, -EAGAIN, -EINTR; never an abandoned request).
// Every device continues partial transfers through this one function.
enum class TransferStep { kDone, kResubmit };
TransferStep AdvanceTransfer(IoRequest* request, int result, IoCompletion* completion);

struct DeviceProperties {
  bool direct_io = false;
  uint32_t mem_alignment = 1;     // required alignment of buffers for reads/writes
  uint32_t offset_alignment = 1;  // required alignment of file offsets and lengths
  bool fixed_buffers = false;
  // Other nodes use the same directory (a shared tier): a committed chunk may be theirs (CommitTemp
  // says AlreadyExists), RemoveChunk removes only this node's, and ReadChunkHeader finds any node's.
  bool shared = false;
  // Reads go to threads (io/thread_queue.h), not io_uring: under io_engine threads, and on a
  // tier whose reads are CPU copies (buffered, tmpfs, FUSE: they run on as many threads as the
  // tier's depth instead of all on the I/O loop's thread inside io_uring_submit).
  bool threads_engine = false;
  // How reads and writes reach the kernel, for stats and the log: "io_uring", "threads", or
  // "io_uring, reads on threads" (CPU-copy reads).
  const char* io_engine = "io_uring";
  // A temporary is published by a queued IoKind::kCommit, not by CommitTemp (an object store, whose
  // upload takes as long as a read: the loop never waits for it).
  bool async_commit = false;
  // A committed replica survives a power cut without a sync (an object store's acknowledged PUT):
  // counted as synced under any fsync policy.
  bool durable_commit = false;
  // Abandon returns only once the device writes nothing more into the request's buffer (it stops
  // the transfer), so a hedge may read the block into the same memory at once.
  bool abandon_is_final = false;
};

struct ScannedChunk {
  ChunkMeta meta;
  uint64_t file_size = 0;
  bool owned = true;  // a shared device: this node published the file (else another node did)
};

struct ListedChunk {
  std::string stem;
  uint64_t file_size = 0;
};

struct ScanReport {
  std::vector<ScannedChunk> chunks;
  uint64_t removed_temporaries = 0;
  uint64_t removed_invalid = 0;
  // Names like a chunk's, a temporary's or a fan-out directory's that are not regular files the
  // daemon may read or remove (symlinks, FIFOs, sockets, devices, directories, another owner's
  // files): never opened blocking, read or removed.
  uint64_t skipped_irregular = 0;
  bool from_checkpoint = false;  // read from the index saved at the last clean shutdown
};

// What a tier is like now, as the engine acts on it: `state` decides, `reason` tells people.
struct TierCondition {
  enum class State {
    kUsable,
    kDeleted,   // its directory was deleted: nothing to read; Recreate may make an empty one
    kDetached,  // its path no longer leads to it (unmounted, moved, replaced) or its file system does
                // not answer (ENOTCONN, EIO): not read nor written; Reopen may find it again
    kReadOnly,  // its file system is read-only: read, not written
    kNotAnswering,  // its file system has not answered a call for a while (a hung parallel file
                    // system): neither read nor written, its chunks stay indexed; usable once it answers
  };
  State state = State::kUsable;
  std::string reason;  // "" when usable

  bool readable() const { return state == State::kUsable || state == State::kReadOnly; }
  bool writable() const { return state == State::kUsable; }
};

class TierDevice {
 public:
  virtual ~TierDevice() = default;

  virtual const DeviceProperties& properties() const = 0;

  // Lists valid chunk files (headers only). Removes temporaries and files whose header is invalid
  // or whose size does not match their header. Where SaveIndex left an index at the last clean
  // shutdown, takes it (once) instead of reading every file's header.
  virtual absl::StatusOr<ScanReport> Scan() = 0;
  // Saves the chunks the tier holds for the next Scan (at clean shutdown, when nothing changes
  // any more).
  virtual absl::Status SaveIndex(const std::vector<ChunkMeta>& chunks) = 0;

  // The reconcile pass after a start from a saved index (catalog/reconcile.h): every committed chunk
  // file's stem and size by its name only (no header read); one file's header; one file's size
  // now (NotFound when it is gone).
  virtual absl::StatusOr<std::vector<ListedChunk>> ListChunks() = 0;
  virtual absl::StatusOr<ScannedChunk> ReadChunkHeader(const std::string& stem) = 0;
  virtual absl::StatusOr<uint64_t> ChunkFileSize(const std::string& stem) = 0;

  // Control operations on the loop never wait on a file system that does not answer: Unavailable
  // when it has not (FileDevice runs them on a thread of their own, io/blocking_call_thread.h).
  // Returns a handle for reading the committed chunk file of `stem` (NotFound if there is none).
  // Handles are cached by the device. REQUIRES: the handle is used by Queue before the next
  // OpenChunk call (which may close idle handles); a queued op keeps it open until it completes.
  virtual absl::StatusOr<FileHandle> OpenChunk(const std::string& stem) = 0;
  // Whether the file behind `handle` (from OpenChunk) holds the version `meta` describes. A shared
  // device compares the header it read at open (another node may have removed the file and
  // published another version under its name meanwhile); files only this process writes always do.
  virtual bool HoldsVersion(FileHandle handle, const ChunkMeta& meta) { return true; }

  // Creates a temporary file for writing a new replica of `stem`.
  virtual absl::StatusOr<FileHandle> CreateTemp(const std::string& stem) = 0;
  // Renames the temporary into place (atomically replacing an older file) and closes it. With
  // `sync_directory`, the directory is synced too so the rename survives power loss. On failure
  // the temporary is removed. On a shared device, AlreadyExists: another node published the key
  // first (its file stays, this one is removed; ReadChunkHeader says which version it is).
  virtual absl::Status CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) = 0;
  // Closes and unlinks a temporary.
  virtual void AbortTemp(FileHandle temp) = 0;

  // Removes the chunk file of `stem`. On a shared device only a file this node published is
  // removed; another node's is left alone (OK: it is not this node's to remove).
  virtual absl::Status RemoveChunk(const std::string& stem) = 0;

  // Whether the tier can be read and written now (TierCondition). Never waits on a file system
  // that does not answer (the loop asks it about once a second).
  virtual TierCondition Condition() const = 0;
  // After kDeleted: makes the directory again, empty, where it was (on the same file system),
  // and uses it from now on.
  virtual absl::Status Recreate() = 0;
  // After kDetached: where the path leads to the tier's directory again (its file system mounted
  // again, maybe on another device number: the same inode number, its lock file in it), opens it
  // there and uses it from now on. FailedPrecondition while the path leads elsewhere or nowhere.
  virtual absl::Status Reopen() = 0;

  // Data path. Queue returns false when the device has no room (the caller bounds in-flight ops
  // by its queue depths, so this is a programming error). A completion always covers the whole
  // request or reports why not.
  virtual bool Queue(IoRequest* request) = 0;
  // The caller no longer wants the result of a request in flight (a hedged read): a device that
  // can cancel it tries to. Its completion still comes and must still be reaped; the request stays
  // owned by the caller until then.
  virtual void Abandon(IoRequest* request) = 0;
  virtual void Submit() = 0;
  // Appends completions that are ready, without blocking.
  virtual void Reap(std::vector<IoCompletion>* out) = 0;

  // Registers [base, base + size) for fixed-buffer I/O (io_uring registered buffers): ops whose
  // buffer lies inside a registered region skip the per-I/O page pinning. Returns a region id, or
  // Unimplemented/ResourceExhausted when the device cannot (then ops use plain buffers).
  // REQUIRES: no op using the region is in flight when it is unregistered.
  virtual absl::StatusOr<int> RegisterRegion(void* base, size_t size) = 0;
  virtual void UnregisterRegion(int region) = 0;

  // Counters the device keeps itself.
  virtual uint64_t resubmits() const = 0;
  virtual uint64_t fixed_ops() const = 0;
};

}  // namespace kvstream
