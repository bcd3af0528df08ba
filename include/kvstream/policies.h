// The policies a KVStream store runs, shared by the store, the daemon and its clients. Every
// baseline lives in the same binary, so benchmarks compare them side by side on the same tiers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
  kStep,    // all chunks of all pending steps form one pool (M1)
  kSerial,  // chunk after chunk, request after request (LMCache's disk backend)
};

enum class WritePolicy {
  kDeferred,   // writes run only while no read is pending, or above the staging high-water mark (M2)
  kImmediate,  // writes are issued as soon as they are staged
};

enum class ReplicationPolicy {
  kAll,      // every chunk on every tier (M3)
  kPrimary,  // only on the first tier
  kAdaptive, // on the first tier, acknowledged once it is there; copies on the others only from
             // their idle write slots, dropped instead of ever stalling a step or filling staging
};

enum class FsyncPolicy {
  kNone,   // a persist is written (renamed into place), not synced: a power cut may lose it
  kChunk,  // fdatasync each replica file, rename it, fsync its directory: reported synced (durable)
};

// How tiers hand their reads and writes to the kernel.
enum class IoEngine {
  kAuto,     // io_uring where the kernel and the seccomp filter allow it, else threads
  kUring,    // io_uring only: a tier without it fails to open
  kThreads,  // threads doing pread/pwrite (io/thread_queue.h): no io_uring needed
};

// The policies a running store can switch between (Store::SetPolicies).
struct Policies {
  RoutingPolicy routing;
  BatchingPolicy batching = BatchingPolicy::kStep;
  WritePolicy writes = WritePolicy::kDeferred;
  ReplicationPolicy replication = ReplicationPolicy::kAll;  // for chunks staged from then on
};

// "completion" | "static:<g>" | "fastest"
absl::StatusOr<RoutingPolicy> ParseRouting(std::string_view text);
absl::StatusOr<BatchingPolicy> ParseBatching(std::string_view text);        // "step" | "serial"
absl::StatusOr<WritePolicy> ParseWrites(std::string_view text);             // "deferred" | "immediate"
absl::StatusOr<ReplicationPolicy> ParseReplication(std::string_view text);  // "all" | "primary" | "adaptive"
absl::StatusOr<FsyncPolicy> ParseFsync(std::string_view text);
absl::StatusOr<IoEngine> ParseIoEngine(std::string_view text);  // "auto" | "io_uring" | "threads"              // "none" | "chunk"
// `current` with each policy a text names replaced ("" keeps it): what command lines and the
// control plane ask for. InvalidArgument names the text that is not a policy.
absl::StatusOr<Policies> ChangePolicies(Policies current, std::string_view routing, std::string_view batching,
                                        std::string_view writes, std::string_view replication);

// Parses "64MiB", "1.5G", "4096" (binary units; K/M/G/T with optional "iB"/"B").
absl::StatusOr<uint64_t> ParseBytes(std::string_view text);

std::string ToString(const RoutingPolicy& routing);
std::string_view ToString(BatchingPolicy batching);
std::string_view ToString(WritePolicy writes);
std::string_view ToString(ReplicationPolicy replication);
std::string_view ToString(FsyncPolicy fsync);
std::string_view ToString(IoEngine engine);

}  // namespace kvstream
