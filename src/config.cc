#include "kvstream/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "chunk_format.h"
#include "kvstream/types.h"

namespace kvstream {

uint32_t DefaultQueueDepth(uint32_t block_size) {
  // Every block in flight when a step's pool runs dry is a tail the other tiers cannot help
  // with, so the depth is the smallest that keeps a device busy: about 2 MiB in flight (2 GB/s x
  // 1 ms), at least 2 requests so a new one is queued while the previous completes.
  constexpr uint64_t kBandwidthDelayBytes = 2ull << 20;
  const uint64_t depth = (kBandwidthDelayBytes + block_size - 1) / block_size;
  return static_cast<uint32_t>(std::clamp<uint64_t>(depth, 2, 128));
}

absl::StatusOr<StoreConfig> ValidateConfig(StoreConfig c) {
  if (c.tiers.empty()) return absl::InvalidArgumentError("at least one tier is required");
  if (c.tiers.size() > kMaxTiers) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxTiers, " tiers are supported"));
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
  if (c.routing.kind == RoutingKind::kStatic && !(c.routing.static_share >= 0 && c.routing.static_share <= 1)) {
    return absl::InvalidArgumentError("static routing share must be in [0, 1]");
  }
  std::set<std::string> names, paths;
  for (TierConfig& t : c.tiers) {
    if (t.name.empty() || t.name.size() > 32 ||
        !std::all_of(t.name.begin(), t.name.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
        })) {
      return absl::InvalidArgumentError(absl::StrCat("tier name '", t.name, "' must be 1-32 of [A-Za-z0-9_-]"));
    }
    if (!names.insert(t.name).second) return absl::InvalidArgumentError(absl::StrCat("duplicate tier name '", t.name, "'"));
    if (t.path.empty()) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' has no path"));
    if (!paths.insert(t.path).second) return absl::InvalidArgumentError(absl::StrCat("tier path ", t.path, " is used twice"));
    if (t.capacity_bytes == 0) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' needs a capacity > 0"));
    if (t.queue_depth == 0) t.queue_depth = DefaultQueueDepth(c.block_size);
    if (t.queue_depth > 4096) return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' queue_depth above 4096"));
    if (t.write_queue_depth == 0 || t.write_queue_depth > 256) {
      return absl::InvalidArgumentError(absl::StrCat("tier '", t.name, "' write_queue_depth must be 1-256"));
    }
  }
  return c;
}

absl::StatusOr<RoutingPolicy> ParseRouting(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "completion") return RoutingPolicy{RoutingKind::kCompletion, 0.5};
  if (text == "fastest") return RoutingPolicy{RoutingKind::kFastest, 1.0};
  if (text.rfind("static:", 0) == 0) {
    double g;
    if (absl::SimpleAtod(text.substr(7), &g) && g >= 0 && g <= 1) return RoutingPolicy{RoutingKind::kStatic, g};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("routing '", text, "' is not one of completion, static:<g> with g in [0,1], fastest"));
}

absl::StatusOr<BatchingPolicy> ParseBatching(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "step") return BatchingPolicy::kStep;
  if (text == "serial") return BatchingPolicy::kSerial;
  return absl::InvalidArgumentError(absl::StrCat("batching '", text, "' is not one of step, serial"));
}

absl::StatusOr<WritePolicy> ParseWrites(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "deferred") return WritePolicy::kDeferred;
  if (text == "immediate") return WritePolicy::kImmediate;
  return absl::InvalidArgumentError(absl::StrCat("writes '", text, "' is not one of deferred, immediate"));
}

absl::StatusOr<ReplicationPolicy> ParseReplication(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "all") return ReplicationPolicy::kAll;
  if (text == "primary") return ReplicationPolicy::kPrimary;
  return absl::InvalidArgumentError(absl::StrCat("replication '", text, "' is not one of all, primary"));
}

absl::StatusOr<FsyncPolicy> ParseFsync(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "none") return FsyncPolicy::kNone;
  if (text == "chunk") return FsyncPolicy::kChunk;
  return absl::InvalidArgumentError(absl::StrCat("fsync '", text, "' is not one of none, chunk"));
}

absl::StatusOr<uint64_t> ParseBytes(std::string_view text_view) {
  const std::string text(text_view);
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t end = 0;
  while (end < t.size() && (std::isdigit(static_cast<unsigned char>(t[end])) || t[end] == '.')) ++end;
  double value;
  if (end == 0 || !absl::SimpleAtod(t.substr(0, end), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte size"));
  }
  std::string unit = std::string(absl::StripAsciiWhitespace(t.substr(end)));
  double scale = 1;
  if (!unit.empty()) {
    const char u = unit[0];
    const std::string rest = unit.substr(1);
    if (rest != "" && rest != "b" && rest != "ib") {
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown unit"));
    }
    switch (u) {
      case 'b': if (!rest.empty()) return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown unit")); break;
      case 'k': scale = 1ull << 10; break;
      case 'm': scale = 1ull << 20; break;
      case 'g': scale = 1ull << 30; break;
      case 't': scale = 1ull << 40; break;
      default: return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown unit"));
    }
  }
  const double bytes = value * scale;
  if (bytes >= 1.8e19) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  return static_cast<uint64_t>(std::llround(bytes));
}

Policies PoliciesOf(const StoreConfig& config) { return {config.routing, config.batching, config.writes}; }

std::string ToString(const RoutingPolicy& r) {
  switch (r.kind) {
    case RoutingKind::kCompletion: return "completion";
    case RoutingKind::kFastest: return "fastest";
    case RoutingKind::kStatic: {
      std::string g = absl::StrCat(r.static_share);
      return absl::StrCat("static:", g);
    }
  }
  return "?";
}

std::string_view ToString(BatchingPolicy b) { return b == BatchingPolicy::kStep ? "step" : "serial"; }
std::string_view ToString(WritePolicy w) { return w == WritePolicy::kDeferred ? "deferred" : "immediate"; }
std::string_view ToString(ReplicationPolicy r) { return r == ReplicationPolicy::kAll ? "all" : "primary"; }
std::string_view ToString(FsyncPolicy f) { return f == FsyncPolicy::kNone ? "none" : "chunk"; }

}  // namespace kvstream
