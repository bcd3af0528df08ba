#include "kvstream/config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <set>
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

// One tier per drive of a tier over several drives (TierConfig::drives); every tier gets its
// group. Tiers that already have a group (an earlier ValidateConfig made them) stay as they are.
absl::StatusOr<std::vector<TierConfig>> ExpandDrives(std::vector<TierConfig> tiers) {
  std::vector<TierConfig> out;
  for (TierConfig& t : tiers) {
    if (!ValidTierName(t.group.empty() ? t.name : t.group)) {
      return absl::InvalidArgumentError(absl::StrCat("tier name '", t.group.empty() ? t.name : t.group,
                                                     "' must be 1-32 of [A-Za-z0-9_-]"));
    }
    if (!t.group.empty()) {
      if (t.name != t.group && t.name != absl::StrCat(t.group, ".", t.drive)) {
        return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' is not drive ", t.drive, " of '", t.group, "'"));
      }
      out.push_back(std::move(t));
      continue;
    }
    t.group = t.name;
    if (t.drives.empty()) {
      out.push_back(std::move(t));
      continue;
    }
    if (!t.path.empty()) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' has both a path and drives"));
    if (t.shared) {
      return absl::InvalidArgumentError(absl::StrCat("shared tier '", t.name, "' takes one path, not drives "
                                                     "(its file system spreads the files over its servers)"));
    }
    const uint64_t n = t.drives.size();
    if (n > kMaxTiers || t.capacity_bytes < n) {
      return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' has ", n, " drives: at most ", kMaxTiers,
                                                     ", each with a share of a capacity > 0"));
    }
    for (uint32_t i = 0; i < n; ++i) {
      TierConfig drive = t;
      drive.drives.clear();
      drive.name = n == 1 ? t.name : absl::StrCat(t.name, ".", i);
      drive.path = t.drives[i];
      drive.drive = i;
      drive.capacity_bytes = t.capacity_bytes / n + (i < t.capacity_bytes % n ? 1 : 0);
      out.push_back(std::move(drive));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<StoreConfig> ValidateConfig(StoreConfig c) {
  if (c.tiers.empty()) return absl::InvalidArgumentError("at least one tier is required");
  absl::StatusOr<std::vector<TierConfig>> tiers = ExpandDrives(std::move(c.tiers));
  if (!tiers.ok()) return tiers.status();
  c.tiers = *std::move(tiers);
  if (c.tiers.size() > kMaxTiers) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxTiers, " tiers (drives of all tiers) are supported"));
  }
  if (c.block_size < kFileAlignment || c.block_size % kFileAlignment != 0 || c.block_size > (64u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be a multiple of ", kFileAlignment,
                                                   " between 4 KiB and 64 MiB, not ", c.block_size));
  }
  if (c.staging_limit_bytes < c.block_size) {
    return absl::InvalidArgumentError("staging_limit must be at least one block");
  }
  if (!(c.staging_high_water > 0 && c.staging_high_water <= 1)) {
    return absl::InvalidArgumentError("staging_high_water must be in (0, 1]");
  }
  if (!(c.staging_max_defer_seconds > 0 && c.staging_max_defer_seconds <= 3600)) {
    return absl::InvalidArgumentError("staging.max_defer must be above 0 and at most 3600 seconds");
  }
  if (!(c.read_deadline_floor_seconds > 0 && c.read_deadline_floor_seconds <= c.read_deadline_cap_seconds &&
        c.read_deadline_cap_seconds <= 3600)) {
    return absl::InvalidArgumentError("read deadlines need 0 < floor <= cap <= 3600 seconds");
  }
  if (!(c.read_give_up_seconds >= 0 && c.read_give_up_seconds <= 3600)) {
    return absl::InvalidArgumentError("reads.give_up must be 0 (never) to 3600 seconds");
  }
  if (c.routing.kind == RoutingKind::kStatic && !(c.routing.static_share >= 0 && c.routing.static_share <= 1)) {
    return absl::InvalidArgumentError("static routing share must be in [0, 1]");
  }
  if (c.verify_threads < -1 || c.verify_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat("verify_threads must be -1 (auto) to 64, not ", c.verify_threads));
  }
  if (!(c.tenant_tier_share >= 0 && c.tenant_tier_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("tenant_tier_share must be in [0, 1], not ", c.tenant_tier_share));
  }
  if (c.tenant_locked_bytes > 0 && c.tenant_tier_share == 0) {
    return absl::InvalidArgumentError("tenant_locked_bytes needs tenants (tenant_tier_share > 0)");
  }
  bool any_shared = false;
  std::set<std::string> paths;
  std::map<std::string, uint32_t> drives_seen;  // group -> its drives so far
  for (TierConfig& t : c.tiers) {
    // A group's drives follow each other, 0, 1, ...: another tier of the same name is a duplicate.
    if (drives_seen[t.group]++ != t.drive) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tier name '", t.group, "'"));
    }
    if (t.path.empty()) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' has no path"));
    if (!paths.insert(t.path).second) return absl::InvalidArgumentError(absl::StrCat("tier path ", t.path, " is used twice"));
    if (t.capacity_bytes == 0) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' needs a capacity > 0"));
    if (t.queue_depth == 0) {  // auto: from the default up to the ceiling (AutoMaxQueueDepth unless given)
      if (t.queue_depth_max == 0) t.queue_depth_max = AutoMaxQueueDepth(c.block_size);
      t.queue_depth = std::min(DefaultQueueDepth(c.block_size), t.queue_depth_max);
    }
    if (t.queue_depth > 4096) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' queue_depth above 4096"));
    if (t.queue_depth_max == 0) t.queue_depth_max = t.queue_depth;  // given: fixed
    if (t.queue_depth_max < t.queue_depth || t.queue_depth_max > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' queue_depth_max must be queue_depth to 4096"));
    }
    if (t.write_queue_depth == 0 || t.write_queue_depth > 256) {
      return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' write_queue_depth must be 1-256"));
    }
    if (!(t.miss_ttl_seconds >= 0 && t.miss_ttl_seconds <= 3600)) {
      return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' miss_ttl must be 0 to 3600 seconds"));
    }
    for (const auto& [id, what] : {std::pair{t.owner_uid, "owner_uid"}, std::pair{t.owner_gid, "owner_gid"}}) {
      if (id < -1 || id >= int64_t{UINT32_MAX}) {  // (uid_t)-1 is no one's
        return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' ", what, " must be -1 (anyone) or a uid/gid below 4294967295"));
      }
    }
    any_shared |= t.shared;
  }
  if (c.foreign_chunks_limit == 0) return absl::InvalidArgumentError("foreign_chunks_limit must be at least 1");
  if (!c.shared_key_file.empty() && !c.verify_checksums) {
    // The MAC authenticates the segment checksums; payload bytes not checked against them are not.
    return absl::InvalidArgumentError("shared_key_file needs verify_checksums on");
  }
  if (any_shared && c.node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      return absl::InvalidArgumentError("a shared tier needs a node name and the host name is unknown: set 'node'");
    }
    c.node = host;
  }
  if (!c.node.empty() &&
      (c.node.size() > 64 || c.node == "." || c.node == ".." ||
       !std::all_of(c.node.begin(), c.node.end(), [](char ch) {
         return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
       }))) {
    return absl::InvalidArgumentError(absl::StrCat("node name '", c.node, "' must be 1-64 of [A-Za-z0-9_.-]"));
  }
  return c;
}

Policies PoliciesOf(const StoreConfig& config) {
  return {config.routing, config.batching, config.writes, config.replication};
}

}  // namespace kvstream
