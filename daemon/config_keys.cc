#include "config_keys.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "config_value.h"

namespace kvstream {
namespace {

// A reader's parameters (ConfigKey::read).
using Value = const ConfigValue&;
using Config = DaemonConfig&;
using Tier = TierConfig*;

const ConfigCondition kIsolationUid{"sessions.isolation uid", "sessions.isolation", "uid",
                                    [](const DaemonConfig& c, const TierConfig*) {
                                      return c.isolation == DaemonConfig::Isolation::kUid;
                                    }};
const ConfigCondition kSharedTier{"shared tiers", "tiers[].shared", "true",
                                  [](const DaemonConfig&, const TierConfig* t) { return t->shared; }};
const ConfigCondition kS3Tier{"s3 tiers", "tiers[].type", "s3",
                              [](const DaemonConfig&, const TierConfig* t) { return t->type == TierType::kS3; }};
const ConfigCondition kQueueDepthAuto{"queue_depth auto", "tiers[].queue_depth", "auto",
                                      [](const DaemonConfig&, const TierConfig* t) { return t->queue_depth == 0; }};

uint32_t UintIn(Value v, uint32_t least, uint32_t most) {
  const uint32_t n = v.Uint();
  if (n < least || n > most) {
    v.Fail(most == UINT32_MAX ? absl::StrCat(" must be at least ", least)
                              : absl::StrCat(" must be ", least, " to ", most));
  }
  return n;
}

uint64_t AtLeast4KiB(Value v) {
  const uint64_t bytes = v.Bytes();
  if (bytes < 4096) v.Fail(" must be at least 4KiB");
  return bytes;
}

std::vector<ConfigKey> Table() {
  return {
      // socket: the gRPC control socket (the data socket is <path>.data).
      {.name = "socket.path", .type = "path", .default_value = "/run/kvstream/kvstreamd.sock",
       .read = [](Value v, Config c, Tier) { c.socket_path = v.Str(); },
       .doc = "the gRPC control socket (Unix); the data socket is <path>.data"},
      {.name = "socket.mode", .type = "octal", .default_value = "0660",
       .read =
           [](Value v, Config c, Tier) {
             const std::string mode = v.Str();
             char* end = nullptr;
             const unsigned long m = std::strtoul(mode.c_str(), &end, 8);
             if (mode.empty() || *end != '\0' || m > 0777) v.Fail(" must be octal permission bits such as \"0660\"");
             c.socket_mode = static_cast<uint32_t>(m);
           },
       .doc = "permission bits of the sockets"},
      {.name = "socket.group", .type = "group name or gid", .absent = "the daemon's group",
       .read = [](Value v, Config c, Tier) { c.socket_group = v.Str(); },
       .doc = "group whose members may connect"},

      // sessions: who may attach what.
      {.name = "sessions.isolation", .type = "none | uid", .default_value = "none",
       .read =
           [](Value v, Config c, Tier) {
             const std::string isolation = v.Str();
             if (isolation != "none" && isolation != "uid") v.Fail(" must be none or uid");
             c.isolation = isolation == "uid" ? DaemonConfig::Isolation::kUid : DaemonConfig::Isolation::kNone;
           },
       .doc = "uid: a key namespace per client uid (docs/security.md)"},
      {.name = "sessions.admin_group", .type = "group name or gid", .absent = "none",
       .read = [](Value v, Config c, Tier) { c.admin_group = v.Str(); },
       .doc = "members may administer (evict, policies, others' locks) besides root and the daemon's uid"},
      {.name = "sessions.max_sessions", .type = "count", .default_value = "256",
       .read = [](Value v, Config c, Tier) { c.max_sessions = UintIn(v, 1, UINT32_MAX); },
       .doc = "sessions attached at once"},
      {.name = "sessions.max_arena", .type = "bytes", .default_value = "8GiB",
       .read = [](Value v, Config c, Tier) { c.max_arena_bytes = AtLeast4KiB(v); },
       .doc = "largest shared-memory arena one session may attach"},
      {.name = "sessions.arena_budget", .type = "bytes | auto", .default_value = "auto",
       .read =
           [](Value v, Config c, Tier) {
             c.arena_budget_bytes = v.IsAuto() ? DefaultArenaBudget() : AtLeast4KiB(v);
           },
       .doc = "all sessions' arenas together; auto: a quarter of the memory limit"},
      {.name = "sessions.max_sessions_per_uid", .type = "count | auto", .default_value = "auto",
       .read =
           [](Value v, Config c, Tier) {
             const bool isolated = c.isolation == DaemonConfig::Isolation::kUid;
             c.max_sessions_per_uid = !v.IsAuto() ? v.Uint() : isolated ? std::max<uint32_t>(c.max_sessions / 2, 1) : 0;
           },
       .doc = "sessions one uid may attach (0: no limit); auto: half of max_sessions under isolation uid, else 0"},
      {.name = "sessions.arena_budget_per_uid", .type = "bytes | auto", .default_value = "auto",
       .read =
           [](Value v, Config c, Tier) {
             const bool isolated = c.isolation == DaemonConfig::Isolation::kUid;
             c.arena_budget_per_uid = !v.IsAuto() ? v.Bytes() : isolated ? c.arena_budget_bytes / 2 : 0;
           },
       .doc = "arena and client region bytes of one uid (0: no limit); auto: half of arena_budget under isolation uid"},
      {.name = "sessions.tier_share_per_uid", .type = "number", .default_value = "0.25", .when = &kIsolationUid,
       .store_field = "tenant_tier_share",
       .read = [](Value v, Config c, Tier) { c.tier_share_per_uid = v.Number(); },
       .doc = "each uid's guaranteed share of every tier, 0 (no tenants) to 1"},
      {.name = "sessions.locked_bytes_per_uid", .type = "bytes", .absent = "the share of the smallest tier",
       .when = &kIsolationUid, .store_field = "tenant_locked_bytes",
       .read = [](Value v, Config c, Tier) { c.locked_bytes_per_uid = AtLeast4KiB(v); },
       .doc = "chunk bytes one uid may hold locked"},
      {.name = "sessions.uids_same_on_all_nodes", .type = "bool", .default_value = "false", .when = &kIsolationUid,
       .read = [](Value v, Config c, Tier) { c.uids_same_on_all_nodes = v.Bool(); },
       .doc = "every node's uids are the same accounts: isolation uid may use shared tiers"},
      {.name = "sessions.max_lookup_keys", .type = "count", .default_value = std::to_string(kDefaultMaxLookupKeys),
       .read = [](Value v, Config c, Tier) { c.max_lookup_keys = UintIn(v, 1, 1u << 20); },
       .doc = "keys in one Lookup or Unlock"},
      {.name = "sessions.max_chunks_per_call", .type = "count",
       .default_value = std::to_string(kDefaultMaxChunksPerCall),
       .read = [](Value v, Config c, Tier) { c.max_chunks_per_call = UintIn(v, 1, kMaxChunksPerCallLimit); },
       .doc = "chunks in one Retrieve or Persist"},

      // The store.
      {.name = "block_size", .type = "bytes", .default_value = "1MiB", .store_field = "block_size",
       .read =
           [](Value v, Config c, Tier) {
             c.store.block_size = static_cast<uint32_t>(std::min<uint64_t>(v.Bytes(), UINT32_MAX));
           },
       .doc = "read block and checksummed segment of new chunks (a multiple of 4 KiB)"},
      {.name = "staging.limit", .type = "bytes | auto", .default_value = "auto", .store_field = "staging_limit_bytes",
       .read =
           [](Value v, Config c, Tier) {
             c.store.staging_limit_bytes = v.IsAuto() ? DefaultStagingLimit() : v.Bytes();
           },
       .doc = "staged chunk images not yet written to their tiers; auto: 1/32 of the memory limit, 256MiB to 16GiB"},
      {.name = "staging.high_water", .type = "number", .default_value = "0.75", .store_field = "staging_high_water",
       .read = [](Value v, Config c, Tier) { c.store.staging_high_water = v.Number(); },
       .doc = "share of the limit above which deferred writes also run during reads"},
      {.name = "staging.max_defer", .type = "duration", .default_value = "250ms",
       .store_field = "staging_max_defer_seconds",
       .read = [](Value v, Config c, Tier) { c.store.staging_max_defer_seconds = v.Seconds(); },
       .doc = "how long deferred writes wait for reads to pause at most"},
      {.name = "staging.when_full", .type = "drop | wait", .default_value = "drop",
       .store_field = "staging_drop_when_full",
       .read =
           [](Value v, Config c, Tier) {
             const std::string when = v.Str();
             if (when != "drop" && when != "wait") v.Fail(" must be drop or wait");
             c.store.staging_drop_when_full = when == "drop";
           },
       .doc = "a persist that finds staging full: dropped at once and counted (never a stalled step), or waits"},
      {.name = "verify_checksums", .type = "bool", .default_value = "true", .store_field = "verify_checksums",
       .read = [](Value v, Config c, Tier) { c.store.verify_checksums = v.Bool(); },
       .doc = "verify every block read against its checksum"},
      {.name = "reads.deadline_floor", .type = "duration", .default_value = "500ms",
       .store_field = "read_deadline_floor_seconds",
       .read = [](Value v, Config c, Tier) { c.store.read_deadline_floor_seconds = v.Seconds(); },
       .doc = "least read deadline (4x the tier's recent read time, clamped)"},
      {.name = "reads.deadline_cap", .type = "duration", .default_value = "2s",
       .store_field = "read_deadline_cap_seconds",
       .read = [](Value v, Config c, Tier) { c.store.read_deadline_cap_seconds = v.Seconds(); },
       .doc = "most read deadline"},
      {.name = "reads.give_up", .type = "duration", .default_value = "10s", .store_field = "read_give_up_seconds",
       .read = [](Value v, Config c, Tier) { c.store.read_give_up_seconds = v.Seconds(); },
       .doc = "a late read no other tier can take over fails its chunk after this; 0: wait"},
      {.name = "reads.verify_threads", .type = "count | auto", .default_value = "auto", .store_field = "verify_threads",
       .read =
           [](Value v, Config c, Tier) {
             c.store.verify_threads = v.IsAuto() ? -1 : static_cast<int>(std::min<uint32_t>(v.Uint(), INT32_MAX));
           },
       .doc = "threads hashing blocks off the I/O loop; auto: half the cores, 1 to 8; 0: the loop"},
      {.name = "policies.routing", .type = "completion | static:<g> | fastest", .default_value = "completion",
       .store_field = "routing", .read = [](Value v, Config c, Tier) { c.store.routing = v.Parsed(ParseRouting); },
       .doc = "which tier reads a block"},
      {.name = "policies.batching", .type = "step | serial", .default_value = "step", .store_field = "batching",
       .read = [](Value v, Config c, Tier) { c.store.batching = v.Parsed(ParseBatching); },
       .doc = "reads of concurrent steps in one pool, or chunk after chunk"},
      {.name = "policies.writes", .type = "deferred | immediate", .default_value = "deferred", .store_field = "writes",
       .read = [](Value v, Config c, Tier) { c.store.writes = v.Parsed(ParseWrites); },
       .doc = "writes while reads are idle, or at once"},
      {.name = "policies.replication", .type = "all | primary | adaptive", .default_value = "all",
       .store_field = "replication",
       .read = [](Value v, Config c, Tier) { c.store.replication = v.Parsed(ParseReplication); },
       .doc = "which tiers a chunk is written to"},
      {.name = "policies.fsync", .type = "none | chunk", .default_value = "none", .store_field = "fsync",
       .read = [](Value v, Config c, Tier) { c.store.fsync = v.Parsed(ParseFsync); },
       .doc = "chunk: fdatasync each replica and its directory before it counts (persists are durable); "
              "none: persists are written, not synced (a power cut may lose them)"},
      {.name = "metrics.listen", .type = "HOST:PORT", .absent = "off",
       .read = [](Value v, Config c, Tier) { c.metrics_listen = v.Str(); },
       .doc = "HTTP /metrics and /health; empty: off"},
      {.name = "logging.level", .type = "trace | debug | info | warn | error", .default_value = "info",
       .read =
           [](Value v, Config c, Tier) {
             static const std::set<std::string> known = {"trace", "debug", "info", "warn", "error"};
             c.log_level = v.Str();
             if (!known.count(c.log_level)) v.Fail(" must be trace, debug, info, warn or error");
           },
       .doc = "what goes to stderr"},
      {.name = "node", .type = "name", .absent = "the host name", .store_field = "node",
       .read = [](Value v, Config c, Tier) { c.store.node = v.Str(); },
       .doc = "this node's name on shared tiers (unique per node)"},
      {.name = "foreign_chunks_limit", .type = "count", .default_value = "262144",
       .store_field = "foreign_chunks_limit",
       .read = [](Value v, Config c, Tier) { c.store.foreign_chunks_limit = v.Uint(); },
       .doc = "shared tiers: keys in other nodes' files kept indexed"},
      {.name = "shared_key_file", .type = "absolute path", .absent = "none", .store_field = "shared_key_file",
       .read =
           [](Value v, Config c, Tier) {
             c.store.shared_key_file = v.Str();
             if (c.store.shared_key_file.empty() || c.store.shared_key_file[0] != '/') {
               v.Fail(" must be an absolute path");
             }
           },
       .doc = "the cluster key: chunks carry a keyed MAC (docs/chunk-format.md)"},
      {.name = "io_engine", .type = "auto | io_uring | threads", .default_value = "auto", .store_field = "io_engine",
       .read = [](Value v, Config c, Tier) { c.store.io_engine = v.Parsed(ParseIoEngine); },
       .doc = "how tiers reach the kernel; auto: io_uring, else threads"},

      // tiers: in read-preference order.
      {.name = "tiers[].name", .type = "name", .absent = "required", .required = true, .store_field = "name",
       .read = [](Value v, Config, Tier t) { t->name = v.Str(); },
       .doc = "1-32 of [A-Za-z0-9_-]; a tier over drives is <name>.0, <name>.1, ... in stats"},
      {.name = "tiers[].type", .type = "directory | s3", .default_value = "directory", .store_field = "type",
       .read =
           [](Value v, Config, Tier t) {
             const std::string type = v.Str();
             if (type != "directory" && type != "s3") v.Fail(" must be directory or s3");
             t->type = type == "s3" ? TierType::kS3 : TierType::kDirectory;
           },
       .doc = "a directory of chunk files, or objects in an S3-compatible bucket"},
      {.name = "tiers[].endpoint", .type = "URL", .absent = "required", .when = &kS3Tier,
       .store_field = "s3.endpoint", .read = [](Value v, Config, Tier t) { t->s3.endpoint = v.Str(); },
       .doc = "http://host[:port] or https://host[:port] of the object store"},
      {.name = "tiers[].bucket", .type = "name", .absent = "required", .when = &kS3Tier,
       .store_field = "s3.bucket", .read = [](Value v, Config, Tier t) { t->s3.bucket = v.Str(); },
       .doc = "the bucket (it must exist)"},
      {.name = "tiers[].prefix", .type = "key prefix", .absent = "none (the bucket's top)", .when = &kS3Tier,
       .store_field = "s3.prefix", .read = [](Value v, Config, Tier t) { t->s3.prefix = v.Str(); },
       .doc = "where in the bucket the tier's objects are (empty or ending in /)"},
      {.name = "tiers[].region", .type = "name", .default_value = "us-east-1", .when = &kS3Tier,
       .store_field = "s3.region", .read = [](Value v, Config, Tier t) { t->s3.region = v.Str(); },
       .doc = "the region requests are signed for"},
      {.name = "tiers[].credentials_file", .type = "absolute path", .absent = "the AWS_* environment variables",
       .when = &kS3Tier, .store_field = "s3.credentials_file",
       .read = [](Value v, Config, Tier t) { t->s3.credentials_file = v.Str(); },
       .doc = "an AWS shared-credentials file, mode 0600"},
      {.name = "tiers[].credentials_profile", .type = "name", .default_value = "default", .when = &kS3Tier,
       .store_field = "s3.credentials_profile",
       .read = [](Value v, Config, Tier t) { t->s3.credentials_profile = v.Str(); },
       .doc = "the profile of credentials_file"},
      {.name = "tiers[].virtual_hosted", .type = "bool", .default_value = "false", .when = &kS3Tier,
       .store_field = "s3.virtual_hosted", .read = [](Value v, Config, Tier t) { t->s3.virtual_hosted = v.Bool(); },
       .doc = "address bucket.host/key instead of host/bucket/key"},
      {.name = "tiers[].tls_verify", .type = "bool", .default_value = "true", .when = &kS3Tier,
       .store_field = "s3.verify_tls", .read = [](Value v, Config, Tier t) { t->s3.verify_tls = v.Bool(); },
       .doc = "https: check the server's certificate and host name"},
      {.name = "tiers[].ca_file", .type = "path", .absent = "the system's CA certificates", .when = &kS3Tier,
       .store_field = "s3.ca_file", .read = [](Value v, Config, Tier t) { t->s3.ca_file = v.Str(); },
       .doc = "https: the CA certificates to trust"},
      {.name = "tiers[].request_timeout", .type = "duration", .default_value = "30s", .when = &kS3Tier,
       .store_field = "s3.request_timeout_seconds",
       .read = [](Value v, Config, Tier t) { t->s3.request_timeout_seconds = v.Seconds(); },
       .doc = "one attempt of one request (failed ones are retried with backoff)"},
      {.name = "tiers[].path", .type = "path", .absent = "drives instead", .store_field = "path",
       .read = [](Value v, Config, Tier t) { t->path = v.Str(); },
       .doc = "the tier's directory (or drives)"},
      {.name = "tiers[].drives", .type = "list of paths", .absent = "path instead", .store_field = "drives",
       .read =
           [](Value v, Config, Tier t) {
             const YAML::Node& drives = v.Node();
             if (!drives.IsSequence() || drives.size() == 0) v.Fail(" must list at least one directory");
             for (size_t d = 0; d < drives.size(); ++d) {
               t->drives.push_back(ConfigValue(drives[d], v.key() + "[" + std::to_string(d) + "]").Str());
             }
           },
       .doc = "one directory per drive, instead of path"},
      {.name = "tiers[].capacity", .type = "bytes", .absent = "required", .required = true,
       .store_field = "capacity_bytes", .read = [](Value v, Config, Tier t) { t->capacity_bytes = v.Bytes(); },
       .doc = "on-disk bytes; LRU eviction keeps the tier under it"},
      {.name = "tiers[].queue_depth", .type = "count | auto", .default_value = "auto", .store_field = "queue_depth",
       .read = [](Value v, Config, Tier t) { t->queue_depth = v.IsAuto() ? 0 : v.Uint(); },  // 0: auto too
       .doc = "reads in flight; auto: from about 2 MiB worth of blocks, grown while the tier reads faster"},
      {.name = "tiers[].queue_depth_max", .type = "count", .absent = "about 32 MiB worth of blocks",
       .when = &kQueueDepthAuto, .store_field = "queue_depth_max",
       .read = [](Value v, Config, Tier t) { t->queue_depth_max = UintIn(v, 1, UINT32_MAX); },
       .doc = "the most reads in flight queue_depth auto grows to"},
      {.name = "tiers[].write_queue_depth", .type = "count", .default_value = "2", .store_field = "write_queue_depth",
       .read = [](Value v, Config, Tier t) { t->write_queue_depth = v.Uint(); },
       .doc = "writes in flight, on their own ring"},
      {.name = "tiers[].allow_buffered", .type = "bool", .default_value = "true",
       .store_field = "allow_buffered_fallback",
       .read = [](Value v, Config, Tier t) { t->allow_buffered_fallback = v.Bool(); },
       .doc = "buffered I/O where O_DIRECT is unsupported (tmpfs)"},
      {.name = "tiers[].shared", .type = "bool", .default_value = "false", .store_field = "shared",
       .read = [](Value v, Config, Tier t) { t->shared = v.Bool(); },
       .doc = "several nodes' daemons use the directory (a parallel file system)"},
      {.name = "tiers[].miss_ttl", .type = "duration", .default_value = "1s", .when = &kSharedTier,
       .store_field = "miss_ttl_seconds", .read = [](Value v, Config, Tier t) { t->miss_ttl_seconds = v.Seconds(); },
       .doc = "a key looked for in vain is not looked for again for this long"},
      {.name = "tiers[].owner_uid", .type = "uid", .absent = "anyone", .store_field = "owner_uid",
       .read = [](Value v, Config, Tier t) { t->owner_uid = v.Uint(); },
       .doc = "only chunk files this uid owns are read"},
      {.name = "tiers[].owner_gid", .type = "gid", .absent = "anyone", .store_field = "owner_gid",
       .read = [](Value v, Config, Tier t) { t->owner_gid = v.Uint(); },
       .doc = "only chunk files this gid owns are read"},
  };
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() {
  static const std::vector<ConfigKey> keys = Table();
  return keys;
}

const ConfigKey* FindConfigKey(const std::string& name) {
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.name == name) return &key;
  }
  return nullptr;
}

std::string FormatConfigKeys() {
  std::string out;
  for (const ConfigKey& key : ConfigKeys()) {
    const std::string& value = key.default_value.empty() ? key.absent : key.default_value;
    absl::StrAppend(&out, key.name, "  ", key.type, "  default: ", value,
                    key.when != nullptr ? absl::StrCat("  (", key.when->doc, " only)") : "", "\n    ", key.doc, "\n");
  }
  return out;
}

}  // namespace kvstream
