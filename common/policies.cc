#include "kvstream/policies.h"

#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvstream {

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
  if (text == "adaptive") return ReplicationPolicy::kAdaptive;
  return absl::InvalidArgumentError(absl::StrCat("replication '", text, "' is not one of all, primary, adaptive"));
}

absl::StatusOr<FsyncPolicy> ParseFsync(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "none") return FsyncPolicy::kNone;
  if (text == "chunk") return FsyncPolicy::kChunk;
  return absl::InvalidArgumentError(absl::StrCat("fsync '", text, "' is not one of none, chunk"));
}

absl::StatusOr<IoEngine> ParseIoEngine(std::string_view text_view) {
  const std::string text(text_view);
  if (text == "auto") return IoEngine::kAuto;
  if (text == "io_uring") return IoEngine::kUring;
  if (text == "threads") return IoEngine::kThreads;
  return absl::InvalidArgumentError(absl::StrCat("io_engine '", text, "' is not one of auto, io_uring, threads"));
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
std::string_view ToString(ReplicationPolicy r) {
  switch (r) {
    case ReplicationPolicy::kAll: return "all";
    case ReplicationPolicy::kPrimary: return "primary";
    case ReplicationPolicy::kAdaptive: return "adaptive";
  }
  return "?";
}
std::string_view ToString(FsyncPolicy f) { return f == FsyncPolicy::kNone ? "none" : "chunk"; }

std::string_view ToString(IoEngine e) {
  switch (e) {
    case IoEngine::kAuto: return "auto";
    case IoEngine::kUring: return "io_uring";
    case IoEngine::kThreads: return "threads";
  }
  return "?";
}

absl::StatusOr<Policies> ChangePolicies(Policies p, std::string_view routing, std::string_view batching,
                                        std::string_view writes, std::string_view replication) {
  if (!routing.empty()) {
    auto parsed = ParseRouting(routing);
    if (!parsed.ok()) return parsed.status();
    p.routing = *parsed;
  }
  if (!batching.empty()) {
    auto parsed = ParseBatching(batching);
    if (!parsed.ok()) return parsed.status();
    p.batching = *parsed;
  }
  if (!writes.empty()) {
    auto parsed = ParseWrites(writes);
    if (!parsed.ok()) return parsed.status();
    p.writes = *parsed;
  }
  if (!replication.empty()) {
    auto parsed = ParseReplication(replication);
    if (!parsed.ok()) return parsed.status();
    p.replication = *parsed;
  }
  return p;
}

}  // namespace kvstream
