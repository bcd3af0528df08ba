// SimDevice: an in-memory tier on SimClock's virtual time, and the fault environment of the
// engine's tests (LevelDB's and RocksDB's fault-injecting Env, as a device). Reads and writes share
// one FIFO server (as on a real device, so writes during a step slow its reads): an op transfers
// at `bandwidth` after the previous one, then completes `latency` later. A fault hook decides the
// fate of every operation, control operations included: errors with a chosen errno, corrupted
// reads, short transfers, -EAGAIN, extra delay (reordered completions) and hangs. Every data op
// is logged with its virtual start and end for tests to inspect.
//
// Power loss (LevelDB's FaultInjectionTestEnv, RocksDB's FaultInjectionTestFS): beside the files
// as they are, the device keeps what its medium holds. A file's bytes reach the medium when the
// file is synced (an IoKind::kSync on its handle completes); a name (a commit, a removal) when its
// directory is synced: CommitTemp with sync_directory syncs the directory of the stem's first two
// hex digits, as FileDevice's fan-out does. SyncAll is a sync point (sync(2)). Under a SimPower
// (SetPower) nothing more reaches the medium once the power is off, and Medium says what a
// restart finds: the files the names on the medium lead to, each with its bytes as last synced
// (temporaries are gone: a scan removes them), optionally with the names as they were at the cut
// (a journal that committed names ahead of data, with writeback in any order: each 4 KiB block of
// a file is as last synced or as at the cut, zeros where neither) and with the last unsynced
// write torn (each of its 4 KiB blocks reached the medium or not).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "io/tier_device.h"
#include "sim/sim_clock.h"
#include "sim/sim_power.h"

namespace kvstream {

// Every operation a fault can hit.
enum class SimOp : uint8_t { kRead, kWrite, kSync, kScan, kOpen, kCreateTemp, kCommit, kRemove };

struct SimFault {
  enum class Kind : uint8_t {
    kNone,
    kError,    // fails with `error` (data ops: as the kernel would; control ops: as a Status)
    kCorrupt,  // a read returns its bytes with the first one flipped
    kShort,    // a data op transfers half its bytes first; the device continues with the rest
    kAgain,    // a data op first fails with -EAGAIN; the device resubmits it
    kHang,     // a data op never completes until ReleaseHung()
  };
  Kind kind = Kind::kNone;
  int error = 0;
  int64_t delay_ns = 0;  // extra virtual time before the completion (any kind)

  static SimFault None() { return {}; }
  static SimFault Error(int error) { return {Kind::kError, error, 0}; }
  static SimFault Corrupt() { return {Kind::kCorrupt, 0, 0}; }
  static SimFault Short() { return {Kind::kShort, 0, 0}; }
  static SimFault Again() { return {Kind::kAgain, 0, 0}; }
  static SimFault Hang() { return {Kind::kHang, 0, 0}; }
  static SimFault Delay(int64_t ns) { return {Kind::kNone, 0, ns}; }
};

struct SimOpInfo {
  SimOp op;
  std::string_view stem;  // the chunk the operation is about (empty for a scan)
  uint64_t offset = 0;    // data ops only
  uint32_t length = 0;
  uint64_t index = 0;     // counts every operation of the device, from 0
};
using SimFaultHook = std::function<SimFault(const SimOpInfo&)>;

// What a power cut leaves beyond the synced data and names (SimDevice::Medium).
struct SimPowerCut {
  bool names_ahead_of_data = false;  // the names and sizes as at the cut; each block synced or as then
  bool tear_last_write = false;      // the last unsynced write: each of its blocks landed or not
  uint64_t seed = 0;                 // which blocks of a torn write landed
};

struct SimOpRecord {
  IoKind kind;
  std::string stem;
  uint64_t offset;
  uint32_t length;
  int64_t submit_ns;
  int64_t done_ns;
};

class SimDevice final : public TierDevice, public SimClock::Source {
 public:
  // bandwidth in bytes per second (<= 0: infinite), latency in ns.
  SimDevice(SimClock* clock, double bandwidth_bps, int64_t latency_ns);
  ~SimDevice() override;

  void SetBandwidth(double bandwidth_bps);
  // Called under the device's lock for every operation; must not call back into the device.
  void SetFaultHook(SimFaultHook hook);
  // Completes the hung ops now (with their bytes transferred).
  void ReleaseHung();
  std::vector<SimOpRecord> ops() const;
  void ClearOps();
  // Direct access for tests: the committed files (stem -> bytes). Not while ops are in flight.
  std::map<std::string, std::vector<uint8_t>>& files() { return files_; }
  size_t temporaries() const;

  // Power loss (see the top). The supply this device's operations count on; none: always on.
  void SetPower(std::shared_ptr<SimPower> power);
  // A sync point: every file's bytes and every name reach the medium (the files put in place
  // through files() too).
  void SyncAll();
  // The committed files a restart finds after the power is cut now, or as it was cut (stem ->
  // bytes): give them to a new device through files().
  std::map<std::string, std::vector<uint8_t>> Medium(const SimPowerCut& cut);

  const DeviceProperties& properties() const override { return props_; }
  absl::StatusOr<ScanReport> Scan() override;
  absl::Status SaveIndex(const std::vector<ChunkMeta>& chunks) override;
  absl::StatusOr<std::vector<ListedChunk>> ListChunks() override;
  absl::StatusOr<ScannedChunk> ReadChunkHeader(const std::string& stem) override;
  absl::StatusOr<uint64_t> ChunkFileSize(const std::string& stem) override;
  absl::StatusOr<FileHandle> OpenChunk(const std::string& stem) override;
  absl::StatusOr<FileHandle> CreateTemp(const std::string& stem) override;
  absl::Status CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) override;
  void AbortTemp(FileHandle temp) override;
  absl::Status RemoveChunk(const std::string& stem) override;
  // Set by tests: what Condition reports. Recreate empties the files and reports OK again.
  void SetCondition(TierCondition condition);
  TierCondition Condition() const override;
  absl::Status Recreate() override;
  absl::Status Reopen() override;
  bool Queue(IoRequest* request) override;
  // An abandoned read completes as usual but its bytes reach no buffer: as if the kernel had
  // cancelled it, or as a read into memory the store took back (memory/memory_regions.h).
  void Abandon(IoRequest* request) override;
  void Submit() override;
  void Reap(std::vector<IoCompletion>* out) override;
  uint64_t resubmits() const override;
  // Registered buffers are bookkeeping only: an op whose buffer lies in a region counts as fixed.
  absl::StatusOr<int> RegisterRegion(void* base, size_t size) override;
  void UnregisterRegion(int region) override;
  uint64_t fixed_ops() const override;

  int64_t NextEventNs() override;

 private:
  struct Pending {
    IoRequest* request;
    std::string stem;
    SimFault fault;
    int64_t done_ns = 0;
  };
  struct Region {
    uint8_t* base = nullptr;
    size_t size = 0;
    uint64_t generation = 0;  // 0: free
  };
  struct Temp {
    std::string stem;
    std::vector<uint8_t> bytes;
    uint64_t inode = 0;
  };
  struct NameAtCut {
    uint64_t inode = 0;
    std::vector<uint8_t> bytes;  // as at the cut
  };
  struct LastWrite {
    uint64_t inode = 0;
    uint64_t offset = 0;
    std::vector<uint8_t> bytes;
    bool valid = false;
  };
  // Power loss: whether changes still reach the medium; the names as they are when the power went.
  bool PoweredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t InodeLocked(const std::string& stem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t InodeOfHandleLocked(FileHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The names of the directory `stem` is in, as they are now, reach the medium.
  void SyncDirectoryLocked(const std::string& stem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SimFault FaultLocked(SimOp op, std::string_view stem, uint64_t offset, uint32_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ControlFaultLocked(SimOp op, std::string_view stem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<uint8_t>* FileOfLocked(FileHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the op on the bytes; returns what the kernel would (bytes transferred or -errno).
  int TransferLocked(Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked(Pending p, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SimClock* clock_;
  DeviceProperties props_;
  mutable absl::Mutex mu_;
  double bandwidth_bps_ ABSL_GUARDED_BY(mu_);
  int64_t latency_ns_ ABSL_GUARDED_BY(mu_);
  int64_t free_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t op_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resubmits_ ABSL_GUARDED_BY(mu_) = 0;
  SimFaultHook fault_hook_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<uint8_t>> files_;  // guarded by mu_ (files() hands it to tests)
  absl::flat_hash_map<FileHandle, std::string> open_ ABSL_GUARDED_BY(mu_);  // read handle -> stem
  absl::flat_hash_map<FileHandle, Temp> temps_ ABSL_GUARDED_BY(mu_);
  FileHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Pending> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> hung_ ABSL_GUARDED_BY(mu_);
  std::vector<SimOpRecord> records_ ABSL_GUARDED_BY(mu_);
  std::optional<std::vector<ChunkMeta>> saved_index_ ABSL_GUARDED_BY(mu_);
  TierCondition condition_ ABSL_GUARDED_BY(mu_);
  std::vector<Region> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t fixed_ops_ ABSL_GUARDED_BY(mu_) = 0;
  // Power loss: each file is an inode (a temporary keeps its inode when committed).
  std::shared_ptr<SimPower> power_ ABSL_GUARDED_BY(mu_);
  uint64_t next_inode_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, uint64_t> inode_of_ ABSL_GUARDED_BY(mu_);  // committed name -> inode
  std::map<std::string, uint64_t> durable_names_ ABSL_GUARDED_BY(mu_);       // the names on the medium
  absl::flat_hash_map<uint64_t, std::vector<uint8_t>> synced_ ABSL_GUARDED_BY(mu_);  // inode -> bytes on the medium
  LastWrite last_write_ ABSL_GUARDED_BY(mu_);  // the last write not synced since
  std::optional<std::map<std::string, NameAtCut>> names_at_cut_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstream
