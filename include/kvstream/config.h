// Configuration of a KVStream store: its tiers, its block and staging sizes, and the policies it
// starts with (kvstream/policies.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstream/policies.h"

namespace kvstream {

// An object-store tier (TierConfig::type kS3): chunks as objects `<prefix><stem>` in a bucket of an
// S3-compatible store, read with ranged GETs, written with PUTs (docs/operations.md, "Object-store
// tiers").
struct S3TierConfig {
  std::string endpoint;  // scheme://host[:port]: http://127.0.0.1:9000, https://s3.eu-west-1.amazonaws.com
  std::string bucket;
  std::string prefix;    // key prefix of this tier's objects ("" or ending in '/'), e.g. "kvstream/"
  std::string region = "us-east-1";
  // An AWS shared-credentials file (mode 0600 or stricter) and its profile; "" = the environment's
  // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
  std::string credentials_file;
  std::string credentials_profile = "default";
  bool virtual_hosted = false;  // bucket.host/key instead of host/bucket/key
  bool verify_tls = true;       // https: check the server's certificate and name
  std::string ca_file;          // "" = the system's CA bundle
  double request_timeout_seconds = 30;  // one attempt of one request
};

enum class TierType : uint8_t { kDirectory, kS3 };

struct TierConfig {
  std::string name;                 // unique, [A-Za-z0-9_-]{1,32}
  std::string path;                 // directory; created if missing (or `drives`, below). An s3
                                    // tier (`type`, below): set by ValidateConfig to
                                    // s3://bucket/prefix, for people
  uint64_t capacity_bytes = 0;      // on-disk bytes (headers + padded payloads); > 0
  uint32_t queue_depth = 0;         // reads in flight; 0 = auto: from DefaultQueueDepth, grown
                                    // while that raises the tier's bandwidth (queue_depth_max)
  uint32_t write_queue_depth = 2;   // writes in flight, on their own ring
  bool allow_buffered_fallback = true;  // use buffered I/O where O_DIRECT is unsupported (tmpfs)
  // A tier whose directory several nodes' daemons use at once (a parallel file system every node
  // mounts): every node reads every node's chunks; each node writes, evicts and counts against
  // `capacity_bytes` only the chunks it published (docs/design.md, "Shared tiers").
  bool shared = false;
  // Shared tiers: a key looked up in vain on the file system is not looked up there again for
  // this long (another node may publish it meanwhile).
  double miss_ttl_seconds = 1.0;
  // Who must own a chunk file for it to be read (-1: anyone). On a shared tier, the uid and gid
  // every node's daemon writes as: a file published by any other user is a miss, never read. A
  // file of another owner is never removed either way (only this process's own files are).
  int64_t owner_uid = -1;
  int64_t owner_gid = -1;
  // A tier over several drives: one directory per drive (each on its own device or mount),
  // instead of `path`. ValidateConfig turns such a tier into one tier per drive, named
  // "<name>.<i>", each with `group` = <name> and an equal share of `capacity_bytes`: each drive
  // has its own queues, stats, index and recovery, a chunk's replica on the tier lives on one of
  // its drives (docs/design.md, "Tiers over several drives"), and a failed drive costs only its
  // own chunks. Not for shared tiers (a parallel file system stripes by itself).
  std::vector<std::string> drives{};
  // Set by ValidateConfig: the configured tier this one is a drive of (its own name for a tier
  // with one directory) and the drive's place in it.
  std::string group{};
  uint32_t drive = 0;
  // The most reads in flight. Under queue_depth auto the depth starts at DefaultQueueDepth and
  // grows while the tier reads faster for it, up to this (0: ValidateConfig sets
  // AutoMaxQueueDepth); with a queue_depth given, a 0 here becomes queue_depth (fixed).
  uint32_t queue_depth_max = 0;
  // A directory of chunk files, or objects in an S3-compatible bucket (then `s3` says which).
  TierType type = TierType::kDirectory;
  S3TierConfig s3{};
};

struct StoreConfig {
  std::vector<TierConfig> tiers;          // in read-preference order (first = primary)
  // This node's name on shared tiers ([A-Za-z0-9_.-]{1,64}, unique per node); "" = the host name.
  std::string node;
  // Shared tiers: at most this many keys with a replica in another node's file stay indexed (an
  // index entry each, with the chunk's segment checksums); the least recently used are forgotten
  // past it and found again on the file system when next looked up. At least 1.
  uint64_t foreign_chunks_limit = 262144;
  // The cluster key ("" = none): a file of 32 to 4096 secret bytes, mode 0600 or stricter, owned
  // by the daemon's uid or root, named by an absolute path without symlinks, the same on every node
  // (docs/chunk-format.md, "MAC and segment tags (cluster key)"). With it, every chunk written is
  // format version 2: a keyed MAC over its header and a tag per segment over its payload; a chunk
  // on a shared tier is served only if its MAC verifies and every block read from there matches
  // its tag (private tiers check a MAC when there is one, and blocks against their checksums).
  // Needs verify_checksums.
  std::string shared_key_file;
  // Tenants (docs/design.md, "Tenants"): with a share > 0, the chunks of each key namespace
  // (KeyNamespace, kvstream/key.h) are one tenant's, guaranteed this fraction of every tier's
  // capacity: room for a write is made from the tenant furthest over its share (the writer's own
  // chunks when that is the writer), never from another within its share. 0: no tenants, one
  // LRU over all keys. In (0, 1] otherwise.
  double tenant_tier_share = 0;
  // With tenants: the chunk bytes (on-disk size, each key once) one tenant may hold locked
  // (Lookup with a lease); a lock past it is not granted (LookupEntry::locked false). At most the
  // share of the smallest tier keeps every tenant's locked chunks within its share. 0: no limit.
  uint64_t tenant_locked_bytes = 0;
  uint32_t block_size = 1 << 20;          // bytes per read block and per checksummed segment
  uint64_t staging_limit_bytes = 256ull << 20;  // staged chunk images not yet written to their tiers
  double staging_high_water = 0.75;       // fraction of the limit above which writes run during reads
  // Under deferred writes, how long a staged chunk waits for reads to pause at most: once the
  // oldest chunk not yet written has waited this long, writes run while reads go on (reads that
  // never pause would otherwise hold every write until staging filled). > 0, at most an hour.
  double staging_max_defer_seconds = 0.25;
  // A persist that finds staging full: dropped at once (false: waits for room). Dropping keeps
  // the engine's step from waiting on writes the tiers cannot absorb (docs/design.md, "Load or
  // recompute"); a persist call's chunks are admitted in order until staging is full, so a client
  // sends the most valuable first.
  bool staging_drop_when_full = true;
  bool verify_checksums = true;           // verify every block against its segment checksum
  // Threads that verify blocks off the I/O loop: -1 = auto (half the cores, 1 to 8); 0 = the
  // loop verifies inline (deterministic tests).
  int verify_threads = -1;
  // A read in flight past its tier's deadline (4x the tier's recent read time, clamped to
  // [floor, cap]) marks the tier stalled and is read again from another holder.
  double read_deadline_floor_seconds = 0.5;  // below it, throttled or busy devices jitter
  double read_deadline_cap_seconds = 2.0;
  // A late read no other tier can take over fails its chunk (the client recomputes it) once it
  // has been in flight this long (and is late), where its late landing cannot be seen (a bounce
  // buffer, memory the store takes back); chunks only that tier holds then fail at once until it
  // answers again. 0 = such a step waits for the tier however long it takes.
  double read_give_up_seconds = 10.0;
  RoutingPolicy routing;
  BatchingPolicy batching = BatchingPolicy::kStep;
  WritePolicy writes = WritePolicy::kDeferred;
  ReplicationPolicy replication = ReplicationPolicy::kAll;
  FsyncPolicy fsync = FsyncPolicy::kNone;
  // How every tier's reads and writes reach the kernel; `auto` falls back to threads (logged)
  // where io_uring cannot be set up.
  IoEngine io_engine = IoEngine::kAuto;
};

// Reads in flight per tier: enough to cover bandwidth x latency (about 2 MiB), at least 2 and at
// most 128. Deeper queues do not read faster once a device is busy, and every block in flight on
// a slow tier when the step pool runs dry lengthens the step (docs/design-notes.md, the tail).
uint32_t DefaultQueueDepth(uint32_t block_size);
// The most reads in flight per tier under queue_depth auto: about 32 MiB (a 25 GB/s file system
// at about 1 ms per read), at least DefaultQueueDepth and at most 128.
uint32_t AutoMaxQueueDepth(uint32_t block_size);
// An s3 tier under queue_depth auto: an object store answers in tens of milliseconds and gives
// its bandwidth only to many requests at once, so its depth starts at 16 and grows up to 256.
inline constexpr uint32_t kS3DefaultQueueDepth = 16;
inline constexpr uint32_t kS3AutoMaxQueueDepth = 256;

// What ValidateConfig refused: the field at fault as StoreConfig or TierConfig names it
// ("tenant_tier_share", "capacity_bytes"; empty where no one field is), and for a tier's field
// the tier's place in `config.tiers` as given (-1 otherwise). A caller that read the config from
// somewhere names the place from it (kvstreamd: the key and its line).
struct ConfigFault {
  std::string field;
  int tier = -1;
};

// Checks ranges and names; fills queue_depth = 0 with the default (and queue_depth_max). Returns
// the completed config; on an error, says in `fault` (where given) what was refused. It owns the
// checks on a StoreConfig's values; kvstreamd checks the YAML's shape, its own keys, and of the
// store's only what its parser must (a shared_key_file path is absolute, queue_depth_max at least 1).
absl::StatusOr<StoreConfig> ValidateConfig(StoreConfig config, ConfigFault* fault = nullptr);

Policies PoliciesOf(const StoreConfig& config);

}  // namespace kvstream
