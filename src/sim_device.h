// SimDevice: an in-memory tier with a controllable bandwidth, latency and faults, on SimClock's
// virtual time. Reads and writes share one FIFO server (as on a real device, so writes during a
// step slow its reads): an op transfers at `bandwidth` after the previous one, then completes
// `latency` later. Every op is logged with its virtual start and end for tests to inspect.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sim_clock.h"
#include "tier_device.h"

namespace kvstream {

// kError: -EIO (the copy is bad). kTransient: -EAGAIN-like failure that says nothing about the
// copy (-ECANCELED). kCorrupt: flips a byte of what a read returns.
enum class SimFault { kNone, kError, kTransient, kCorrupt };

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
  // Decides the fate of each data op (index counts ops of every kind from 0).
  void SetFaultHook(std::function<SimFault(const IoOp&, const std::string& stem, uint64_t index)> hook);
  std::vector<SimOpRecord> ops() const;
  void ClearOps();
  // Direct access for tests: the committed files (stem -> bytes).
  std::map<std::string, std::vector<uint8_t>>& files() { return files_; }

  const DeviceProperties& properties() const override { return props_; }
  absl::StatusOr<ScanReport> Scan() override;
  absl::StatusOr<FileHandle> OpenChunk(const std::string& stem) override;
  absl::StatusOr<FileHandle> CreateTemp(const std::string& stem) override;
  absl::Status CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) override;
  void AbortTemp(FileHandle temp) override;
  absl::Status RemoveChunk(const std::string& stem) override;
  bool Queue(const IoOp& op) override;
  void Submit() override;
  void Reap(std::vector<IoCompletion>* out) override;
  uint64_t resubmits() const override { return 0; }
  absl::StatusOr<int> RegisterRegion(void*, size_t) override {
    return absl::UnimplementedError("simulated devices have no registered buffers");
  }
  void UnregisterRegion(int) override {}
  uint64_t fixed_ops() const override { return 0; }

  int64_t NextEventNs() override;

 private:
  struct Pending {
    IoOp op;
    std::string stem;
    SimFault fault;
    int64_t done_ns;
    size_t record;
  };
  struct Temp {
    std::string stem;
    std::vector<uint8_t> bytes;
  };
  std::vector<uint8_t>* FileOf(FileHandle h, std::string* stem);

  SimClock* clock_;
  DeviceProperties props_;
  mutable std::mutex mu_;
  double bandwidth_bps_;
  int64_t latency_ns_;
  int64_t free_at_ns_ = 0;
  uint64_t op_index_ = 0;
  std::function<SimFault(const IoOp&, const std::string&, uint64_t)> fault_hook_;
  std::map<std::string, std::vector<uint8_t>> files_;
  absl::flat_hash_map<FileHandle, std::string> open_;  // read handle -> stem
  absl::flat_hash_map<FileHandle, Temp> temps_;
  FileHandle next_handle_ = 1;
  std::vector<Pending> queued_;
  std::vector<Pending> pending_;
  std::vector<SimOpRecord> records_;
};

}  // namespace kvstream
