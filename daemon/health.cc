#include "health.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstream {
namespace {

// "tier pfs", or "drive nvme.2 of tier nvme (/mnt/nvme2/kvstream)" for a drive of a tier over
// several drives.
std::string Named(const TierStats& t) {
  if (t.group.empty() || t.group == t.name) return absl::StrCat("tier ", t.name);
  return absl::StrCat("drive ", t.name, " of tier ", t.group, " (", t.path, ")");
}

}  // namespace

HealthReport ComputeHealth(const Store& store, const std::string& version) {
  HealthReport h;
  const StoreStats stats = store.Stats();
  h.serving = stats.loop_lag_seconds < kLoopStuckSeconds;
  h.version = version;
  if (!h.serving) {
    h.problems.push_back(absl::StrFormat("the I/O loop has not gone round for %.1f s", stats.loop_lag_seconds));
  }
  for (const TierStats& t : stats.tiers) {
    if (t.read_errors + t.write_errors + t.checksum_failures > 0) h.degraded_tiers.push_back(t.name);
    if (t.stalled) {
      h.stalled_tiers.push_back(t.name);
      h.problems.push_back(absl::StrCat(Named(t), " is stalled: a read is past its deadline, or its file system does not answer"));
    }
    if (!t.readable || !t.writable) {
      h.unusable_tiers.push_back(absl::StrCat(t.name, ": ", t.condition));
      h.problems.push_back(absl::StrCat(Named(t), (t.readable ? " cannot be written: " : " cannot be used: "),
                                        t.condition));
    }
  }
  return h;
}

bool HealthOk(const HealthReport& report) { return report.serving && report.problems.empty(); }

}  // namespace kvstream
