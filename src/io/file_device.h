// FileDevice: a tier on a directory of chunk files, with one io_uring ring for reads and another
// for writes (so neither waits behind the other), O_DIRECT where the filesystem supports it and
// buffered I/O where it does not (tmpfs). The directory is opened once and every read, write,
// rename and removal resolves relative to that descriptor, so reads and writes always mean the
// same directory; Condition says when its path no longer leads there. The calls of the loop that
// can block on the file system run on a thread of their own (io/blocking_call_thread.h), so a
// file system that stops answering stalls this tier only.
//
// A shared directory (FileDeviceOptions::node set) is used by several nodes at once, one daemon
// each, under the publish protocol of io/shared_publish.h: Scan, ListChunks and the saved index
// cover the node's own chunks only; RemoveChunk unlinks the published name only while it is the
// node's own file.
//
// Every name below the directory is resolved beneath it and never through a symbolic link
// (io/safe_open.h): only regular files are read, and only regular files this process could have
// written are removed. A FIFO, socket, device, symlink or directory named like a chunk, a
// temporary or a fan-out directory is skipped, counted (ScanReport::skipped_irregular) and logged,
// and a published name that is one is a miss. With FileDeviceOptions::owner, files of any other
// owner are skipped too (a shared tier's nodes all write as one uid/gid).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_format.h"
#include "format/chunk_mac.h"
#include "io/aligned_buffer.h"
#include "io/blocking_call_thread.h"
#include "io/buffer_slots.h"
#include "io/read_handle_cache.h"
#include "io/safe_open.h"
#include "io/shared_publish.h"
#include "io/tier_device.h"
#include "io/io_queue.h"
#include "io/uring_queue.h"
#include "kvstream/policies.h"

namespace kvstream {

struct FileDeviceOptions {
  std::string path;
  uint32_t read_depth = 8;
  uint32_t write_depth = 2;
  bool allow_buffered_fallback = true;
  int event_fd = -1;            // registered with both rings when >= 0
  // io-wq workers the thread submitting to every device's rings may run at once: the sum of all
  // their depths (UringQueue::Options::io_workers; 0: the kernel's default).
  uint32_t io_workers = 0;
  size_t max_cached_files = 1024;  // idle read handles kept open
  std::string node;  // non-empty: the directory is shared by several nodes, and this is this one
  // Shared: a cached read handle is checked against the published name again after this long
  // (its owner may have removed or replaced the file; an open handle would still read it).
  double revalidate_seconds = 1.0;
  // Who must own a chunk file for it to be read (TierConfig::owner_uid/owner_gid; -1: anyone).
  ExpectedOwner owner;
  // The cluster key (format/chunk_mac.h; null: none): a header whose MAC is present must verify; with
  // `require_mac` (a shared tier), a header without one is refused too. Refused headers are
  // misses, from a scan, a header read and the saved index alike.
  std::shared_ptr<const ChunkMacKey> mac_key;
  bool require_mac = false;
  // io_uring, threads, or io_uring where it can be set up (StoreConfig::io_engine).
  IoEngine io_engine = IoEngine::kAuto;
  // On io_uring: reads that are CPU copies (buffered, tmpfs, FUSE) go to copy threads, one per
  // read in flight, instead of being copied on the loop's thread inside the submission. Pays
  // where cores are to spare (CopyThreadsPay); on 2 cores the handoffs cost more than they give.
  bool copy_threads = false;
  // The file-system calls of the loop (opens, the directory check, publish, removal) run on a
  // thread of the tier's (io/blocking_call_thread.h); the loop waits this long for one, then goes
  // on without it: `call_wait_seconds` for checks and opens (a late open only hands its block to
  // another holder), `write_wait_seconds` for what loses a replica when late (creating a
  // temporary, publish, removal: a parallel file system's publish takes 100s of ms). After
  // `not_answering_seconds` of one call the tier is kNotAnswering.
  double call_wait_seconds = 0.1;
  double write_wait_seconds = 1.0;
  double not_answering_seconds = 1.0;
};

// Whether copy threads pay on this node: at least 8 cores this process may run on. With fewer,
// the loop's own thread is the cheapest copier (measured on 2 cores: one tmpfs tier 7.4 GB/s
// inline, 5.6 GB/s on copy threads; two tiers 7.5 vs 7.0). KVSTREAM_COPY_THREADS=1 or 0 decides
// instead (tests run both paths).
bool CopyThreadsPay();

class FileDevice final : public TierDevice {
 public:
  // Creates the directory if needed, locks it against other processes, probes O_DIRECT and its
  // alignment (statx STATX_DIOALIGN) and sets up the rings.
  static absl::StatusOr<std::unique_ptr<FileDevice>> Open(const FileDeviceOptions& options);
  ~FileDevice() override;

  const DeviceProperties& properties() const override { return props_; }
  absl::StatusOr<ScanReport> Scan() override;
  absl::StatusOr<std::vector<ListedChunk>> ListChunks() override;
  absl::StatusOr<ScannedChunk> ReadChunkHeader(const std::string& stem) override;
  absl::StatusOr<uint64_t> ChunkFileSize(const std::string& stem) override;
  absl::Status SaveIndex(const std::vector<ChunkMeta>& chunks) override;
  absl::StatusOr<FileHandle> OpenChunk(const std::string& stem) override;
  absl::StatusOr<FileHandle> CreateTemp(const std::string& stem) override;
  absl::Status CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) override;
  void AbortTemp(FileHandle temp) override;
  absl::Status RemoveChunk(const std::string& stem) override;
  TierCondition Condition() const override;
  absl::Status Recreate() override;
  absl::Status Reopen() override;
  bool Queue(IoRequest* request) override;
  void Abandon(IoRequest* request) override;
  void Submit() override;
  void Reap(std::vector<IoCompletion>* out) override;
  uint64_t resubmits() const override { return read_queue_->resubmits() + write_queue_->resubmits(); }
  absl::StatusOr<int> RegisterRegion(void* base, size_t size) override;
  void UnregisterRegion(int region) override;
  uint64_t fixed_ops() const override { return fixed_ops_.load(std::memory_order_relaxed); }

  bool HoldsVersion(FileHandle handle, const ChunkMeta& meta) override;

  // Why O_DIRECT is off, when it is.
  const std::string& buffered_reason() const { return buffered_reason_; }

 private:
  static constexpr unsigned kMaxRegions = 4096;  // registered buffer slots per ring (64 GiB of 16 MiB pieces)
  explicit FileDevice(FileDeviceOptions options)
      : options_(std::move(options)), handles_(options_.max_cached_files) {}
  absl::Status Init();
  absl::Status ProbeDirectIo();
  // Sets up the read and write queues on the engine options_.io_engine asks for.
  absl::Status StartQueues();
  // Opens and locks the tier directory (again, after Recreate).
  absl::Status OpenDirectory();
  // The tier's directory and this node's, open. Recreate (on the loop) replaces them while other
  // threads (shared lookups, the reconcile pass) may be resolving names in the old ones: each
  // holds a reference while it does, and the last one closes them.
  struct Directories {
    int root = -1;  // the tier directory: every published chunk path resolves from here
    int own = -1;   // this node's directory (== root on a private tier): lock, temporaries, links
    Directories() = default;
    Directories(const Directories&) = delete;
    Directories& operator=(const Directories&) = delete;
    ~Directories();
  };
  std::shared_ptr<const Directories> directories() const ABSL_LOCKS_EXCLUDED(dirs_mu_);
  std::string ChunkPath(const std::string& stem) const;
  bool shared() const { return !options_.node.empty(); }
  int64_t WriteWaitNs() const { return static_cast<int64_t>(options_.write_wait_seconds * 1e9); }
  // Shared: the directories in use (`root`, `own`: those of a Directories) with their paths.
  SharedDirectories Shared(int root, int own) const { return {root, own, options_.path, own_path_}; }

  FileDeviceOptions options_;
  DeviceProperties props_;
  std::string buffered_reason_;
  int lock_fd_ = -1;
  int shared_lock_fd_ = -1;  // shared: the directory's lock, held shared (a private daemon holds it exclusively)
  mutable absl::Mutex dirs_mu_;
  std::shared_ptr<const Directories> dirs_ ABSL_GUARDED_BY(dirs_mu_);
  // dirs_->root and dirs_->own, for the loop, which alone replaces them (Recreate).
  int dir_fd_ = -1;
  int own_fd_ = -1;
  std::string own_path_;
  dev_t dir_dev_ = 0;
  ino_t dir_ino_ = 0;
  // Reads and writes on rings of their own, so neither waits behind the other.
  std::unique_ptr<IoQueue> read_queue_;
  std::unique_ptr<IoQueue> write_queue_;
  std::atomic<uint64_t> fixed_ops_{0};  // read by Stats from other threads
  BufferSlots slots_;  // the rings' registered buffers
  uint64_t temp_counter_ = 0;
  // The calls that may block on the tier's file system, off the loop; the last check's answer.
  std::unique_ptr<BlockingCallThread> calls_;
  mutable TierCondition last_condition_;
  ReadHandleCache handles_;  // open chunk files for reads
  absl::flat_hash_map<int, std::string> temps_;          // temp fd -> its path below the directory
};

}  // namespace kvstream
