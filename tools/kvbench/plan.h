// What kvbench measures, decided before it times anything: the runs (one policy setting of the
// daemon each, over every step of the workload) in the order they run, and the arena each rank
// session needs for them. Pure functions, so they are tested without a daemon.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "workload.h"

namespace kvbench {

// Labels of the runs the report compares the others with.
inline constexpr char kAlonePrefix[] = "only:";                 // only:<tier>: one tier alone
inline constexpr char kCompletionLabel[] = "completion";         // the policy under test
inline constexpr char kSerialLabel[] = "serial";                 // the LMCache-like baseline
inline constexpr char kIdleReferenceLabel[] = "completion+idle"; // the write runs' reads, without writes
inline constexpr char kWritesPrefix[] = "completion+writes:";    // completion+writes:<write policy>
inline constexpr char kReplicationPrefix[] = "replication:";     // replication:<policy> (and :serial)

// True for the label of a run that reads one tier alone.
bool IsAloneRun(const std::string& label);

// A run: one policy setting of the daemon, over every step of the workload.
struct RunSpec {
  std::string label;
  std::string routing, batching = "step", writes = "deferred";
  bool with_writes = false;  // also persist each step's new chunks during it
  // Seconds without reads before every step (the forward pass), counted from the end of the
  // previous step's reads; with writes, a step also waits until the previous one's are written,
  // unless they go on in the background.
  double idle = 0;
  std::string replication = "";  // for the chunks this run writes; empty: as the daemon has it
  // With writes: a step's persists go on in the background while the next steps read (with no
  // idle: reads that never pause); the run ends once every one is written.
  bool background_writes = false;

  bool operator==(const RunSpec&) const = default;
};

// The runs --policies and --write-policies ask for, in this order:
//   each routing policy of `policies` (completion, static:<g>, fastest) as typed, and "serial"
//   (fastest routing, serial batching), all with `step_gap` idle seconds before each step;
//   then, when `write_policies` is not empty, completion+idle (completion routing, no writes) and
//   completion+writes:<w> for each write policy w, all with `write_gap` idle seconds.
// Empty items are skipped. An unknown policy fails with the parser's error, its message prefixed
// with the flag that named it ("--policies: ..." or "--write-policies: ...").
absl::StatusOr<std::vector<RunSpec>> PlanPolicyRuns(const std::string& policies, const std::string& write_policies,
                                                    double step_gap, double write_gap);

// The runs --replications asks for (each reads and writes every step, deferred writes, `write_gap`
// idle seconds before each step): replication:serial (serial batching on the first tier, new KV
// on the first tier only: today's single-tier offloading), then replication:<r> for each policy r
// (completion routing). Empty for an empty list; an unknown policy fails naming the flag.
absl::StatusOr<std::vector<RunSpec>> PlanReplicationRuns(const std::string& replications, double write_gap);

// The runs that read each tier alone, labelled only:<tier>, which give the bound: with two tiers
// static:1 (every block on the first) and static:0 (every block on the second), with one tier
// completion. Empty with no tier or more than two: no bound is measured then.
// `with_writes`: they also persist each step's new chunks (new KV on the first tier only, deferred,
// `write_gap` idle seconds before each step), so the bound, and kvsim --validate's references,
// carry the same staging work and idle time as the replication runs.
std::vector<RunSpec> PlanAloneRuns(const std::vector<std::string>& tier_names, bool with_writes = false,
                                   double write_gap = 0);

// Bytes of one chunk's arena slot: the chunk rounded up to 4 KiB (O_DIRECT alignment).
uint64_t SlotBytes(uint64_t chunk_bytes);

// The arena of each rank session: `read_slots` slots for the largest step's reads (at least one),
// followed by slots for the largest step's new chunks when a run writes them.
struct ArenaPlan {
  size_t read_slots = 1;
  uint64_t bytes = 0;
};
ArenaPlan PlanArena(const Workload& workload, const std::vector<RunSpec>& runs);

}  // namespace kvbench
