#include "plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kvstream/policies.h"

namespace kvbench {
namespace {

constexpr uint64_t kSlotAlign = 4096;

absl::Status FlagError(const char* flag, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(flag, ": ", s.message()));
}

}  // namespace

bool IsAloneRun(const std::string& label) { return label.starts_with(kAlonePrefix); }

absl::StatusOr<std::vector<RunSpec>> PlanPolicyRuns(const std::string& policies, const std::string& write_policies,
                                                    double step_gap, double write_gap) {
  std::vector<RunSpec> runs;
  for (const std::string& p : std::vector<std::string>(absl::StrSplit(policies, ',', absl::SkipEmpty()))) {
    if (p == kSerialLabel) {
      runs.push_back({p, "fastest", "serial", "deferred", false, step_gap});
    } else if (auto r = kvstream::ParseRouting(p); r.ok()) {
      runs.push_back({p, p, "step", "deferred", false, step_gap});
    } else {
      return FlagError("--policies", r.status());
    }
  }
  const std::vector<std::string> writes = absl::StrSplit(write_policies, ',', absl::SkipEmpty());
  if (!writes.empty()) {
    // The reference for "reads with writes": the same reads with the same idle time between steps
    // and no writes (an idle device and its throttle behave differently from a busy one).
    runs.push_back({kIdleReferenceLabel, "completion", "step", "deferred", false, write_gap});
  }
  for (const std::string& w : writes) {
    if (auto s = kvstream::ParseWrites(w); !s.ok()) return FlagError("--write-policies", s.status());
    runs.push_back({absl::StrCat(kWritesPrefix, w), "completion", "step", w, true, write_gap});
  }
  return runs;
}

absl::StatusOr<std::vector<RunSpec>> PlanReplicationRuns(const std::string& replications, double write_gap) {
  std::vector<RunSpec> runs;
  const std::vector<std::string> list = absl::StrSplit(replications, ',', absl::SkipEmpty());
  if (list.empty()) return runs;
  runs.push_back({absl::StrCat(kReplicationPrefix, kSerialLabel), "fastest", "serial", "deferred", true, write_gap,
                  "primary"});
  for (const std::string& r : list) {
    if (auto p = kvstream::ParseReplication(r); !p.ok()) return FlagError("--replications", p.status());
    runs.push_back({absl::StrCat(kReplicationPrefix, r), "completion", "step", "deferred", true, write_gap, r});
  }
  return runs;
}

std::vector<RunSpec> PlanAloneRuns(const std::vector<std::string>& tier_names, bool with_writes, double write_gap) {
  const auto alone = [&](const std::string& tier, std::string routing) {
    RunSpec run{absl::StrCat(kAlonePrefix, tier), std::move(routing)};
    if (with_writes) {
      run.with_writes = true;
      run.idle = write_gap;
      run.replication = "primary";
    }
    return run;
  };
  if (tier_names.size() == 2) return {alone(tier_names[0], "static:1"), alone(tier_names[1], "static:0")};
  if (tier_names.size() == 1) return {alone(tier_names[0], "completion")};
  return {};
}

uint64_t SlotBytes(uint64_t chunk_bytes) { return (chunk_bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

ArenaPlan PlanArena(const Workload& workload, const std::vector<RunSpec>& runs) {
  size_t max_reads = 1, max_writes = 0;
  for (const BenchStep& s : workload.steps) {
    max_reads = std::max(max_reads, s.reads.size());
    max_writes = std::max(max_writes, s.writes.size());
  }
  const bool any_writes = std::any_of(runs.begin(), runs.end(), [](const RunSpec& r) { return r.with_writes; });
  return {max_reads, SlotBytes(workload.chunk_bytes) * (max_reads + (any_writes ? max_writes : 0))};
}

}  // namespace kvbench
