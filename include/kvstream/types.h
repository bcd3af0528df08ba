// Values exchanged with a KVStream store and its daemon: chunk and persist results, step
// records, lookups, evictions and statistics. Shared by the store, the daemon and the clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvstream/policies.h"
#include "kvstream/tier_counters.h"

namespace kvstream {

inline constexpr size_t kMaxTiers = 32;

struct ChunkResult {
  size_t index = 0;        // position in the batch
  absl::Status status;     // OK, NotFound (miss), OutOfRange (dst too small), DataLoss/Unavailable
  uint64_t size = 0;       // payload bytes written to dst when OK
  uint32_t tier_mask = 0;  // tiers that served at least one block (0 when OK: served from staging)
};

// Called once per chunk, on the store's I/O thread, as soon as that chunk is complete.
// It must be quick and must not call the store's blocking methods (see store.h).
using ChunkCallback = std::function<void(const ChunkResult&)>;

// A chunk in a session's arena (region 0) or in one of its client regions (Client::AddRegion):
// retrieve writes up to `length` bytes at `offset`; persist stores [offset, offset + length).
struct ChunkRange {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t region = 0;
};

struct TierStep {
  std::string tier;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  double busy_seconds = 0;     // time with at least one of this step's reads in flight on the tier
  double bandwidth_bps = 0;    // bytes / busy_seconds in this step, or the tier's reference if idle
  bool eligible = false;       // held at least one chunk of the step: counted in the bound
};

// What one retrieval (one step) did, and how far it was from the aggregate-bandwidth bound.
struct StepRecord {
  uint64_t id = 0;
  int64_t start_unix_ns = 0;
  uint32_t chunks = 0;
  uint32_t hits = 0;
  uint32_t misses = 0;
  uint32_t failed = 0;
  uint64_t bytes = 0;             // payload bytes served (by the tiers, or from staging)
  double wall_seconds = 0;        // first placement to last chunk
  double bound_seconds = 0;       // D / sum of eligible tiers' bandwidths, D the bytes tiers served
  double gap = 0;                 // wall / bound - 1
  double estimate_seconds = 0;    // the load estimate when it was asked for (Store::LoadSeconds); NaN: none
  std::string routing;            // the policy that ran it
  std::string batching;
  std::vector<TierStep> tiers;
};

struct PersistResult {
  // OK when at least one replica is written, or when a newer write of the same key completed
  // first (then tier_mask is 0: the newer version holds the key).
  absl::Status status;
  uint32_t tier_mask = 0;  // tiers whose replica of this write is written (renamed into place)
  uint32_t lost_mask = 0;  // tiers the replication policy targeted whose replica failed
  std::string lost_reason;  // why the first of those failed ("" when none did)
  // The tiers of tier_mask whose replica is synced (fdatasync'd with its directory under
  // fsync: chunk) and so survives a power cut; the others may still be only in the page cache.
  uint32_t synced_mask = 0;
  // Written and synced on at least one tier: a power cut does not lose it.
  bool durable() const { return status.ok() && synced_mask != 0; }
};
using PersistCallback = std::function<void(const std::string& key, const PersistResult&)>;

// A key is present from the moment its persist is staged (then, until a replica is written, with
// tier_mask 0: a retrieve copies it from staging).
struct LookupEntry {
  bool present = false;
  uint64_t size = 0;
  uint32_t tier_mask = 0;  // tiers holding a written replica
  bool locked = false;     // LookupAndLock: this call locked it
};

struct EvictRequest {
  std::string key;        // non-empty: evict this key (from `tier`, or from every tier)
  std::string tier;       // empty: every tier
  // With an empty key and bytes > 0: evict chunks until this many bytes are freed per tier, least
  // recently used first; with tenants (StoreConfig::tenant_tier_share), from the tenant furthest
  // over its share first.
  uint64_t bytes = 0;
  bool all = false;       // with an empty key: evict everything (from `tier`, or every tier)
};

struct EvictResult {
  uint64_t replicas = 0;
  uint64_t bytes = 0;
};

// A distribution as Prometheus keeps one: counts per bucket (bucket i holds values <= upper[i]; one
// more for larger values), their sum and count.
struct Histogram {
  std::vector<double> upper;    // bucket upper bounds, increasing
  std::vector<uint64_t> counts;  // upper.size() + 1 entries, not cumulative
  double sum = 0;
  uint64_t count = 0;
};

struct TierStats {
  std::string name;             // "<group>.<i>" for drive i of a tier over several drives
  std::string path;
  std::string group;            // the configured tier it is a drive of (its name for one directory)
  std::string io_engine;        // "io_uring" or "threads"
  bool direct_io = false;       // false: buffered fallback (e.g. tmpfs)
  uint32_t mem_alignment = 0;
  uint32_t offset_alignment = 0;
  bool fixed_buffers = false;   // registered buffers in use
  uint32_t queue_depth = 0;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
  // The counters of tier_counters.h (bytes_read, hedged_reads, ...), each a uint64_t.
#define KVSTREAM_TIER_STATS_FIELD(field, metric, labels, help) uint64_t field = 0;
  KVSTREAM_TIER_COUNTERS(KVSTREAM_TIER_STATS_FIELD)
#undef KVSTREAM_TIER_STATS_FIELD
  uint64_t resubmits = 0;       // short reads and -EAGAIN
  uint64_t fixed_ops = 0;       // ops on registered buffers
  bool stalled = false;         // a read is past its deadline: the tier claims no new reads
  bool shared = false;          // other nodes publish chunks into the same directory
  uint64_t foreign_chunks = 0;  // shared: indexed chunks other nodes published (not in chunks/used_bytes)
  uint64_t discovered = 0;      // shared: keys this node's index lacked, found on the file system
  Histogram read_seconds;       // a block read's time, issue to completion
  Histogram write_seconds;      // a replica write's time, issue to completion
  bool readable = true;         // false: the tier is out of reach (unmounted, replaced)
  bool writable = true;         // false: out of reach or read-only
  std::string condition;        // why not, or ""
  double reference_bandwidth_bps = 0;  // bytes over busy time in recent steps (moving averages)
};

// The counters of tier_counters.h as data: each one's name, its metric, labels and help, and its
// field in TierStats, in the table's order.
struct TierCounter {
  const char* name;
  const char* metric;
  const char* labels;
  const char* help;
  uint64_t TierStats::*field;
};
inline constexpr TierCounter kTierCounters[] = {
#define KVSTREAM_TIER_COUNTER_ROW(field, metric, labels, help) {#field, metric, labels, help, &TierStats::field},
    KVSTREAM_TIER_COUNTERS(KVSTREAM_TIER_COUNTER_ROW)
#undef KVSTREAM_TIER_COUNTER_ROW
};


// What kvstreamd says of its own health.
struct HealthReport {
  bool serving = false;
  std::string version;
  std::vector<std::string> degraded_tiers;  // tiers with read or write errors since start
  std::vector<std::string> stalled_tiers;   // tiers with a read past its deadline now
  std::vector<std::string> unusable_tiers;  // "name: why" for tiers that cannot be read or written
  std::vector<std::string> problems;        // why it is not OK, one sentence each (empty: OK)
};

struct StoreStats {
  std::vector<TierStats> tiers;
  uint64_t chunks = 0;             // distinct keys held by at least one tier
  uint64_t staged_bytes = 0;
  uint64_t staged_chunks = 0;
  uint64_t staging_limit_bytes = 0;
  uint64_t staging_kept_bytes = 0;  // staging memory kept for reuse, beyond what staged chunks hold
  uint64_t steps = 0;
  uint64_t retrieve_hits = 0;
  uint64_t retrieve_misses = 0;
  uint64_t retrieve_failures = 0;
  uint64_t persists = 0;
  uint64_t persist_failures = 0;
  uint64_t writes_under_pressure = 0;  // write ops issued while reads were pending
  uint64_t persists_dropped = 0;       // refused for want of staging room (staging.when_full: drop)
  uint64_t persist_dropped_bytes = 0;
  // Chunks read from another node's file on a shared tier and staged for this node's other tiers
  // (cross-node reuse), and those not staged because staging was full.
  uint64_t shared_copies = 0;
  uint64_t shared_copies_skipped = 0;
  double write_stall_seconds = 0;      // time persists spent waiting for staging space
  double loop_lag_seconds = 0;         // since the I/O loop last went round (health: it is stuck)
  double process_cpu_seconds = 0;      // user + system CPU time of the process the store runs in
  uint32_t verify_threads = 0;         // threads verifying blocks off the I/O loop (0: the loop does)
  bool reconciling = false;            // checking a saved index against the tier's files (after a start)
  Histogram step_seconds;              // each step's retrieval time
  Histogram step_bound_seconds;        // each step's bound D / sum of b_k
  Histogram step_gap;                  // each step's gap to the bound (wall / bound - 1)
  Histogram load_estimate_error;       // each step's |estimate - wall| / wall (StepRecord)
  Policies policies;                   // in force
  FsyncPolicy fsync = FsyncPolicy::kNone;  // chunk: persists are synced (durable); none: only written
};

}  // namespace kvstream
