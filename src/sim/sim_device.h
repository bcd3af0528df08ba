// SimDevice: an in-memory tier on SimClock's virtual time, and the fault environment of the
// engine's tests (LevelDB's and RocksDB's fault-injecting Env, as a device). Reads and writes share
// one FIFO server (as on a real device, so writes during a step slow its reads): an op transfers
// at `bandwidth` after the previous one, then completes `latency` later. A fault hook decides the
// fate of every operation, control operations included: errors with a chosen errno, corrupted
// reads, short transfers, -EAGAIN, extra delay (reordered completions) and hangs. Every data op
// is logged with its virtual start and end for tests to inspect.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "io/tier_device.h"
#include "sim/sim_clock.h"

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
  };
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
};

}  // namespace kvstream
