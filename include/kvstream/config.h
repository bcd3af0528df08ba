// Configuration of a KVStream store: its tiers and the policies it runs.
// Every baseline policy lives in the same binary so benchmarks compare them side by side.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvstream {

// How the blocks of a step are assigned to the tiers that hold them.
enum class RoutingKind {
  kCompletion,  // each tier claims the next unread blocks whenever it has room (M4)
  kStatic,      // a fixed share g of the step's blocks on the first tier, the rest on the second
  kFastest,     // every block from the first tier (in preference order) that holds the chunk
};

struct RoutingPolicy {
  RoutingKind kind = RoutingKind::kCompletion;
  double static_share = 0.5;  // g, only for kStatic; in [0, 1]
};

enum class BatchingPolicy {
  kStep,    // all chunks of all pending retrievals form one pool (M1)
  kSerial,  // chunk after chunk, request after request (LMCache's disk backend)
};

enum class WritePolicy {
  kDeferred,   // writes run only while no read is pending, or above the staging high-water mark (M2)
  kImmediate,  // writes are issued as soon as they are staged
};

enum class ReplicationPolicy {
  kAll,      // every chunk on every tier (M3)
  kPrimary,  // only on the first tier
};

enum class FsyncPolicy {
  kNone,   // durable = written and renamed; the page cache/device may still lose it on power loss
  kChunk,  // fdatasync each replica file before it is renamed into place and reported durable
};

// The policies a running store can switch between (Store::SetPolicies), e.g. to compare them
// side by side on the same tiers and chunks.
struct Policies {
  RoutingPolicy routing;
  BatchingPolicy batching = BatchingPolicy::kStep;
  WritePolicy writes = WritePolicy::kDeferred;
};

struct TierConfig {
  std::string name;                 // unique, [A-Za-z0-9_-]{1,32}
  std::string path;                 // directory; created if missing
  uint64_t capacity_bytes = 0;      // on-disk bytes (headers + padded payloads); > 0
  uint32_t queue_depth = 0;         // reads in flight; 0 = auto (see DefaultQueueDepth)
  uint32_t write_queue_depth = 2;   // writes in flight, on their own ring
  bool allow_buffered_fallback = true;  // use buffered I/O where O_DIRECT is unsupported (tmpfs)
};

struct StoreConfig {
  std::vector<TierConfig> tiers;          // in read-preference order (first = primary)
  uint32_t block_size = 1 << 20;          // bytes per read block and per checksummed segment
  uint64_t staging_limit_bytes = 256ull << 20;  // staged, not yet durable chunk images
  double staging_high_water = 0.75;       // fraction of the limit above which writes run during reads
  bool verify_checksums = true;           // verify every block against its segment checksum
  RoutingPolicy routing;
  BatchingPolicy batching = BatchingPolicy::kStep;
  WritePolicy writes = WritePolicy::kDeferred;
  ReplicationPolicy replication = ReplicationPolicy::kAll;
  FsyncPolicy fsync = FsyncPolicy::kNone;
};

// Reads in flight per tier: enough to cover bandwidth x latency (about 2 MiB), at least 2 and at
// most 128. Deeper queues do not read faster once a device is busy, and every block in flight on
// a slow tier when the step's pool runs dry lengthens the step (DESIGN.md section 2, the tail).
uint32_t DefaultQueueDepth(uint32_t block_size);

// Checks ranges and names; fills queue_depth = 0 with the default. Returns the completed config.
absl::StatusOr<StoreConfig> ValidateConfig(StoreConfig config);

// "completion" | "static:<g>" | "fastest"
absl::StatusOr<RoutingPolicy> ParseRouting(std::string_view text);
absl::StatusOr<BatchingPolicy> ParseBatching(std::string_view text);   // "step" | "serial"
absl::StatusOr<WritePolicy> ParseWrites(std::string_view text);        // "deferred" | "immediate"
absl::StatusOr<ReplicationPolicy> ParseReplication(std::string_view text);  // "all" | "primary"
absl::StatusOr<FsyncPolicy> ParseFsync(std::string_view text);         // "none" | "chunk"
// Parses "64MiB", "1.5G", "4096" (binary units; K/M/G/T with optional "iB"/"B").
absl::StatusOr<uint64_t> ParseBytes(std::string_view text);

Policies PoliciesOf(const StoreConfig& config);

std::string ToString(const RoutingPolicy& routing);
std::string_view ToString(BatchingPolicy batching);
std::string_view ToString(WritePolicy writes);
std::string_view ToString(ReplicationPolicy replication);
std::string_view ToString(FsyncPolicy fsync);

}  // namespace kvstream
