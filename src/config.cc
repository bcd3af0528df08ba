#include "kvstream/config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "format/chunk_format.h"
#include "kvstream/types.h"  // kMaxTiers

namespace kvstream {

uint32_t DefaultQueueDepth(uint32_t block_size) {
  // Every block in flight when a step's pool runs dry is a tail the other tiers cannot help
  // with, so the depth is the smallest that keeps a device busy: about 2 MiB in flight (2 GB/s x
  // 1 ms), at least 2 requests so a new one is queued while the previous completes.
  constexpr uint64_t kBandwidthDelayBytes = 2ull << 20;
  const uint64_t depth = (kBandwidthDelayBytes + block_size - 1) / block_size;
  return static_cast<uint32_t>(std::clamp<uint64_t>(depth, 2, 128));
}

uint32_t AutoMaxQueueDepth(uint32_t block_size) {
  constexpr uint64_t kMostInFlightBytes = 32ull << 20;
  const uint64_t depth = (kMostInFlightBytes + block_size - 1) / block_size;
  return static_cast<uint32_t>(std::clamp<uint64_t>(depth, DefaultQueueDepth(block_size), 128));
}

namespace {

bool ValidTierName(const std::string& name) {
  return !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
  });
}

// An error of ValidateConfig and its fault (ConfigFault) where the caller asked for it.
class Refusal {
 public:
  explicit Refusal(ConfigFault* fault) : fault_(fault) {}
  absl::Status operator()(std::string field, int tier, std::string message) const {
    if (fault_ != nullptr) *fault_ = {std::move(field), tier};
    return absl::InvalidArgumentError(std::move(message));
  }
  absl::Status operator()(std::string field, std::string message) const {
    return (*this)(std::move(field), -1, std::move(message));
  }

 private:
  ConfigFault* fault_;
};

// A tier of the validated config, and its place among the tiers as given (drives of one tier
// share it).
struct ExpandedTier {
  TierConfig tier;
  int given;
  bool from_drives = false;  // one drive of a tier given as `drives` (its path is one of them)
};

// One tier per drive of a tier over several drives (TierConfig::drives); every tier gets its
// group. Tiers that already have a group (an earlier ValidateConfig made them) stay as they are.
absl::StatusOr<std::vector<ExpandedTier>> ExpandDrives(std::vector<TierConfig> tiers, const Refusal& refuse) {
  std::vector<ExpandedTier> out;
  for (int given = 0; given < static_cast<int>(tiers.size()); ++given) {
    TierConfig& t = tiers[given];
    if (!ValidTierName(t.group.empty() ? t.name : t.group)) {
      return refuse("name", given, absl::StrCat("tier name '", t.group.empty() ? t.name : t.group,
                                                "' must be 1-32 of [A-Za-z0-9_-]"));
    }
    if (!t.group.empty()) {
      if (t.name != t.group && t.name != absl::StrCat(t.group, ".", t.drive)) {
        return refuse("name", given, absl::StrCat("tier '", t.name, "' is not drive ", t.drive, " of '", t.group, "'"));
      }
      out.push_back({std::move(t), given});
      continue;
    }
    t.group = t.name;
    if (t.drives.empty()) {
      out.push_back({std::move(t), given});
      continue;
    }
    if (!t.path.empty()) {
      return refuse("drives", given, absl::StrCat("tier '", t.name, "' has both a path and drives: it needs either "
                                                  "'path' (one directory) or 'drives' (one directory per drive)"));
    }
    if (t.type == TierType::kS3) {
      return refuse("drives", given, absl::StrCat("s3 tier '", t.name, "' takes a bucket, not drives"));
    }
    if (t.shared) {
      return refuse("drives", given, absl::StrCat("shared tier '", t.name, "' takes one path, not drives "
                                                  "(its file system spreads the files over its servers)"));
    }
    const uint64_t n = t.drives.size();
    if (n > kMaxTiers || t.capacity_bytes < n) {
      return refuse("drives", given, absl::StrCat("tier '", t.name, "' has ", n, " drives: at most ", kMaxTiers,
                                                  ", each with a share of a capacity > 0"));
    }
    for (uint32_t i = 0; i < n; ++i) {
      TierConfig drive = t;
      drive.drives.clear();
      drive.name = n == 1 ? t.name : absl::StrCat(t.name, ".", i);
      drive.path = t.drives[i];
      drive.drive = i;
      drive.capacity_bytes = t.capacity_bytes / n + (i < t.capacity_bytes % n ? 1 : 0);
      out.push_back({std::move(drive), given, /*from_drives=*/true});
    }
  }
  return out;
}

bool AllOf(std::string_view s, std::string_view allowed) {
  return s.find_first_not_of(allowed) == std::string_view::npos;
}

// The checks of an s3 tier; names it s3://bucket/prefix in `path` (for people and for the check
// that no two tiers share one place).
absl::Status ValidateS3Tier(TierConfig& t, int given, const Refusal& refuse) {
  const S3TierConfig& s3 = t.s3;
  const auto bad = [&](const char* field, const std::string& why) {
    return refuse(field, given, absl::StrCat("s3 tier '", t.name, "' ", why));
  };
  const std::string named = absl::StrCat("s3://", s3.bucket, "/", s3.prefix);  // what an earlier validation set
  if ((!t.path.empty() && t.path != named) || !t.drives.empty()) {
    return bad("path", "takes endpoint and bucket, not a path");
  }
  const std::string_view endpoint = s3.endpoint;
  const size_t host = endpoint.starts_with("https://") ? 8 : endpoint.starts_with("http://") ? 7 : 0;
  if (host == 0 || endpoint.size() == host || endpoint.size() > 256 ||
      !AllOf(endpoint.substr(host), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]")) {
    return bad("s3.endpoint", "needs an endpoint http://host[:port] or https://host[:port] (no path)");
  }
  // S3's bucket names: 3-63 of lower-case letters, digits, dots and hyphens.
  if (s3.bucket.size() < 3 || s3.bucket.size() > 63 || !AllOf(s3.bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-")) {
    return bad("s3.bucket", "needs a bucket name of 3-63 lower-case letters, digits, dots and hyphens");
  }
  if (s3.prefix.size() > 256 || s3.prefix.starts_with('/') || (!s3.prefix.empty() && !s3.prefix.ends_with('/')) ||
      s3.prefix.find("//") != std::string::npos || s3.prefix.find("..") != std::string::npos ||
      !AllOf(s3.prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.-")) {
    return bad("s3.prefix", "prefix must be empty or up to 256 of [A-Za-z0-9/_.-] ending in '/', without '//' or '..'");
  }
  if (s3.region.empty() || s3.region.size() > 32 || !AllOf(s3.region, "abcdefghijklmnopqrstuvwxyz0123456789-")) {
    return bad("s3.region", "region must be 1-32 of [a-z0-9-]");
  }
  if (!s3.credentials_file.empty() && s3.credentials_file[0] != '/') {
    return bad("s3.credentials_file", "credentials_file must be an absolute path");
  }
  if (!(s3.request_timeout_seconds > 0 && s3.request_timeout_seconds <= 600)) {
    return bad("s3.request_timeout_seconds", "request_timeout must be above 0 and at most 600 seconds");
  }
  if (t.owner_uid != -1 || t.owner_gid != -1) return bad("owner_uid", "has no file owners: owner_uid/owner_gid do not apply");
  t.path = named;
  // Objects answer in tens of milliseconds and read fast only with many requests in flight.
  if (t.queue_depth == 0) {
    if (t.queue_depth_max == 0) t.queue_depth_max = kS3AutoMaxQueueDepth;
    t.queue_depth = std::min(kS3DefaultQueueDepth, t.queue_depth_max);
  }
  return absl::OkStatus();
}

// The checks of one tier (of the expanded tiers); fills its queue depths.
absl::Status ValidateTier(TierConfig& t, int given, uint32_t block_size, const Refusal& refuse) {
  if (t.type == TierType::kS3) {
    if (absl::Status s = ValidateS3Tier(t, given, refuse); !s.ok()) return s;
  }
  if (t.path.empty()) {
    return refuse("path", given, absl::StrCat("tier '", t.name, "' has no path: it needs either 'path' (one "
                                              "directory) or 'drives' (one directory per drive)"));
  }
  if (t.capacity_bytes == 0) {
    return refuse("capacity_bytes", given, absl::StrCat("tier '", t.name, "' needs a capacity > 0"));
  }
  if (t.queue_depth == 0) {  // auto: from the default up to the ceiling (AutoMaxQueueDepth unless given)
    if (t.queue_depth_max == 0) t.queue_depth_max = AutoMaxQueueDepth(block_size);
    t.queue_depth = std::min(DefaultQueueDepth(block_size), t.queue_depth_max);
  }
  if (t.queue_depth > 4096) {
    return refuse("queue_depth", given, absl::StrCat("tier '", t.name, "' queue_depth above 4096"));
  }
  if (t.queue_depth_max == 0) t.queue_depth_max = t.queue_depth;  // given: fixed
  if (t.queue_depth_max < t.queue_depth || t.queue_depth_max > 4096) {
    return refuse("queue_depth_max", given,
                  absl::StrCat("tier '", t.name, "' queue_depth_max must be queue_depth to 4096"));
  }
  if (t.write_queue_depth == 0 || t.write_queue_depth > 256) {
    return refuse("write_queue_depth", given, absl::StrCat("tier '", t.name, "' write_queue_depth must be 1-256"));
  }
  if (!(t.miss_ttl_seconds >= 0 && t.miss_ttl_seconds <= 3600)) {
    return refuse("miss_ttl_seconds", given, absl::StrCat("tier '", t.name, "' miss_ttl must be 0 to 3600 seconds"));
  }
  for (const auto& [id, what] : {std::pair{t.owner_uid, "owner_uid"}, std::pair{t.owner_gid, "owner_gid"}}) {
    if (id < -1 || id >= int64_t{UINT32_MAX}) {  // (uid_t)-1 is no one's
      return refuse(what, given, absl::StrCat("tier '", t.name, "' ", what,
                                              " must be -1 (anyone) or a uid/gid below 4294967295"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StoreConfig> ValidateConfig(StoreConfig c, ConfigFault* fault) {
  const Refusal refuse(fault);
  if (c.tiers.empty()) return refuse("tiers", "at least one tier is required");
  absl::StatusOr<std::vector<ExpandedTier>> tiers = ExpandDrives(std::move(c.tiers), refuse);
  if (!tiers.ok()) return tiers.status();
  if (tiers->size() > kMaxTiers) {
    return refuse("tiers", absl::StrCat("at most ", kMaxTiers, " tiers (drives of all tiers) are supported"));
  }
  if (c.block_size < kFileAlignment || c.block_size % kFileAlignment != 0 || c.block_size > (64u << 20)) {
    return refuse("block_size", absl::StrCat("block_size must be a multiple of ", kFileAlignment,
                                             " between 4 KiB and 64 MiB, not ", c.block_size));
  }
  if (c.staging_limit_bytes < c.block_size) {
    return refuse("staging_limit_bytes", "staging_limit must be at least one block");
  }
  if (!(c.staging_high_water > 0 && c.staging_high_water <= 1)) {
    return refuse("staging_high_water", "staging_high_water must be in (0, 1]");
  }
  if (!(c.staging_max_defer_seconds > 0 && c.staging_max_defer_seconds <= 3600)) {
    return refuse("staging_max_defer_seconds", "staging.max_defer must be above 0 and at most 3600 seconds");
  }
  if (!(c.read_deadline_floor_seconds > 0 && c.read_deadline_floor_seconds <= c.read_deadline_cap_seconds &&
        c.read_deadline_cap_seconds <= 3600)) {
    const bool floor_bad = !(c.read_deadline_floor_seconds > 0 && c.read_deadline_floor_seconds <= 3600);
    return refuse(floor_bad ? "read_deadline_floor_seconds" : "read_deadline_cap_seconds",
                  "read deadlines need 0 < floor <= cap <= 3600 seconds");
  }
  if (!(c.read_give_up_seconds >= 0 && c.read_give_up_seconds <= 3600)) {
    return refuse("read_give_up_seconds", "reads.give_up must be 0 (never) to 3600 seconds");
  }
  if (c.routing.kind == RoutingKind::kStatic && !(c.routing.static_share >= 0 && c.routing.static_share <= 1)) {
    return refuse("routing", "static routing share must be in [0, 1]");
  }
  if (c.verify_threads < -1 || c.verify_threads > 64) {
    return refuse("verify_threads",
                  absl::StrCat("verify_threads must be auto or 0 to 64 (auto: -1), not ", c.verify_threads));
  }
  if (!(c.tenant_tier_share >= 0 && c.tenant_tier_share <= 1)) {
    return refuse("tenant_tier_share",
                  absl::StrCat("tenant_tier_share must be in [0, 1] (0: no tenants), not ", c.tenant_tier_share));
  }
  if (c.tenant_locked_bytes > 0 && c.tenant_tier_share == 0) {
    return refuse("tenant_locked_bytes", "tenant_locked_bytes needs tenants (tenant_tier_share > 0)");
  }
  bool any_shared = false;
  std::set<std::string> paths;
  std::map<std::string, uint32_t> drives_seen;  // group -> its drives so far
  c.tiers.clear();
  for (auto& [t, given, from_drives] : *tiers) {
    // A group's drives follow each other, 0, 1, ...: another tier of the same name is a duplicate.
    if (drives_seen[t.group]++ != t.drive) {
      return refuse("name", given, absl::StrCat("duplicate tier name '", t.group, "'"));
    }
    if (!t.path.empty() && !paths.insert(t.path).second) {
      return refuse(!from_drives && t.group == t.name ? "path" : "drives", given,
                    absl::StrCat("tier path ", t.path, " is used twice"));
    }
    if (absl::Status valid = ValidateTier(t, given, c.block_size, refuse); !valid.ok()) return valid;
    any_shared |= t.shared;
    c.tiers.push_back(std::move(t));
  }
  if (c.foreign_chunks_limit == 0) return refuse("foreign_chunks_limit", "foreign_chunks_limit must be at least 1");
  if (!c.shared_key_file.empty() && !c.verify_checksums) {
    // The MAC authenticates the segment checksums; payload bytes not checked against them are not.
    return refuse("shared_key_file", "shared_key_file needs verify_checksums on");
  }
  if (any_shared && c.node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      return refuse("node", "a shared tier needs a node name and the host name is unknown: set 'node'");
    }
    c.node = host;
  }
  if (!c.node.empty() &&
      (c.node.size() > 64 || c.node == "." || c.node == ".." ||
       !std::all_of(c.node.begin(), c.node.end(), [](char ch) {
         return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
       }))) {
    return refuse("node", absl::StrCat("node name '", c.node, "' must be 1-64 of [A-Za-z0-9_.-]"));
  }
  return c;
}

Policies PoliciesOf(const StoreConfig& config) {
  return {config.routing, config.batching, config.writes, config.replication};
}

}  // namespace kvstream
