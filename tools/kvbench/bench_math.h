// The arithmetic of kvbench's report: per-step aggregate-bandwidth bounds from the tiers' alone
// runs of the same steps, gaps, speedups and shares (docs/design.md section 2). Pure functions, so
// they are tested on recorded inputs.
#pragma once

#include <cstdint>
#include <optional>
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
  // Runs with writes: from the step's start until its reads are done and its new chunks written
  // (the persists answered), the bytes the daemon wrote per tier, and the time producers waited
  // for staging space.
  double cycle_seconds = 0;
  std::vector<uint64_t> tier_bytes_written = {};
  uint64_t new_bytes = 0;  // of new KV persisted (once)
  double write_stall_seconds = 0;
  // With --estimate: the daemon's load estimate for the step, asked just before it (one Lookup with
  // estimate_load over every rank's keys of the step: its last entry's load_seconds); NaN where the
  // daemon had none (a tier not measured yet).
  bool estimated = false;
  double estimate_seconds = 0;
};

struct Run {
  std::string label;
  std::vector<StepSample> steps;
  // Runs with writes: each persist's time from the call until its chunks were written (one per
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

// The load estimate against the step's measured time (StepSample::seconds, kvbench's own: from
// the release of the ranks to the last rank's reply), over the steps of a run that were estimated:
// error = (estimate - seconds) / seconds. A NaN estimate (the daemon had none) is counted apart,
// not as an error; an infinite one (the daemon saw no tier able to serve) is an infinite error.
struct EstimateSummary {
  size_t steps = 0;        // estimated, with an estimate (the errors' count)
  size_t unknown = 0;      // estimated, answered NaN
  double median_abs = 0;   // median |error|
  double p90_abs = 0;      // 90th percentile of |error|
  double median = 0;       // median signed error: the bias (< 0: the estimate is short)
};
// Each estimated step's signed error, in step order; `unknown` (when given) counts the NaN ones.
std::vector<double> EstimateErrors(const Run& run, size_t* unknown = nullptr);
// Of the errors (nearest-rank percentiles, as Percentile).
EstimateSummary SummarizeErrors(const std::vector<double>& errors, size_t unknown = 0);
// None when no step of the run was estimated.
std::optional<EstimateSummary> SummarizeEstimate(const Run& run);

}  // namespace kvbench
