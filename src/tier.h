// Tier: one configured tier as the loop's components share it: its device, its counters and its
// reference bandwidth. The loop thread owns the device; the counters are read by Stats from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "index.h"
#include "tier_device.h"

namespace kvstream {

struct TierCounters {
  std::atomic<uint64_t> bytes_read{0}, blocks_read{0}, bytes_written{0}, replicas_written{0};
  std::atomic<uint64_t> read_errors{0}, checksum_failures{0}, write_errors{0}, evictions{0};
  std::atomic<uint64_t> bounce_reads{0};
};

struct Tier {
  std::string name;
  std::unique_ptr<TierDevice> device;
  uint32_t read_depth = 0;
  uint32_t write_depth = 0;
  TierCounters counters;
  std::atomic<double> reference_bps{0};  // moving average of the bandwidth achieved in steps
};

using Tiers = std::vector<std::unique_ptr<Tier>>;

// Counters of the whole store's reads and writes (StoreStats), written by the loop.
struct StoreCounters {
  std::atomic<uint64_t> retrieve_hits{0}, retrieve_misses{0}, retrieve_failures{0};
  std::atomic<uint64_t> writes_under_pressure{0};
};

// Removes the files of replicas already taken out of the index (evicted, stale or bad); a file
// already gone is fine, other failures are logged. Loop thread (or before the loop starts).
void RemoveReplicaFiles(const Tiers& tiers, const std::vector<Victim>& victims);

}  // namespace kvstream
