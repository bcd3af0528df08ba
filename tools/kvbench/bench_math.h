// The arithmetic of kvbench's report: per-step aggregate-bandwidth bounds from the tiers' alone
// runs of the same steps, gaps, speedups and shares (docs/design.md section 2). Pure functions, so
// they are tested on recorded inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvbench {

// One measured step: client-side wall time from submitting every rank's retrieve to the last
// rank's reply, payload bytes served, and bytes read per tier.
struct StepSample {
  double seconds = 0;
  uint64_t bytes = 0;
  std::vector<uint64_t> tier_bytes;
  double daemon_cpu_seconds = 0;  // kvstreamd's CPU time during the step (its Stats, before and after)
  // Runs with writes: from the step's start until its reads are done and its new chunks durable
  // (the persists answered), the bytes the daemon wrote per tier, and the time producers waited
  // for staging space.
  double cycle_seconds = 0;
  std::vector<uint64_t> tier_bytes_written = {};
  uint64_t new_bytes = 0;  // of new KV persisted (once)
  double write_stall_seconds = 0;
};

struct Run {
  std::string label;
  std::vector<StepSample> steps;
  // Runs with writes: each persist's time from the call until its chunks were durable (one per
  // rank per step, in no particular order).
  std::vector<double> persist_seconds = {};
};

// The q-quantile (0 < q <= 1) of `values` by the nearest rank: the smallest value with at least
// q of them at or below it; 0 for none.
double Percentile(std::vector<double> values, double q);

// Bound of step i: T*_i = D_i / sum_k b_k(i), with b_k(i) the bandwidth tier k reached alone on
// step i (alone[k], the same steps read from tier k only). Steps the alone runs lack get 0.
std::vector<double> StepBounds(const Run& run, const std::vector<const Run*>& alone);

struct Summary {
  std::string label;
  double total_seconds = 0;
  uint64_t bytes = 0;
  double bound_seconds = 0;     // sum of the step bounds
  double gap = 0;               // total / bound - 1 (0 without a bound)
  double speedup_vs_serial = 0; // serial total / this total (0 without a serial run)
  double throughput_bps = 0;
  std::vector<double> tier_share;  // fraction of the bytes read per tier
  double cpu_seconds_per_gb = 0;   // kvstreamd's CPU seconds per GB (1e9 bytes) read from the tiers
};

Summary Summarize(const Run& run, const std::vector<const Run*>& alone, const Run* serial);

// Mean bandwidth of a run over all its steps (bytes / seconds).
double Bandwidth(const Run& run);

// Sum of a run's step times.
double TotalSeconds(const Run& run);

}  // namespace kvbench
