// kvbench's output: the workload, each tier alone and together, the table of runs against the
// bound, the JSON document, the gnuplot PNG and the --check verdict. Everything but the PNG is
// computed from the measured runs alone, so it is tested on recorded ones.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_math.h"
#include "workload.h"

namespace kvbench {

// What a bench measured: all the report shows.
struct BenchResults {
  std::string workload;            // the workload's description
  uint32_t ranks = 0;
  uint64_t chunk_bytes = 0;        // of one chunk on one rank
  size_t steps = 0;                // of the workload
  std::vector<std::string> tiers;  // tier names, in the daemon's order
  std::vector<Run> runs;           // in the order measured
  std::string fio_dir;             // fio's directory (empty: fio not run)
  double fio_bps = 0;              // 0: fio not run, or failed
  double fio_all_bps = 0;          // fio on every tier at once (--fio-all); 0: not run, or failed
  std::vector<double> chunk_drain_seconds = {};  // per tier (Bench::MeasureChunkDrains); empty: not measured
};

// The runs summarized against the references found among them (pointers into BenchResults::runs).
struct Analysis {
  std::vector<const Run*> alone;    // the only:<tier> runs in run order; empty unless one per tier
  const Run* serial = nullptr;      // the (last) run labelled serial
  const Run* completion = nullptr;  // the (last) run labelled completion
  std::vector<Summary> summaries;   // one per run, in run order, against alone and serial
};
Analysis Analyze(const BenchResults& results);

// --dry-run: the workload's description, its steps and chunk counts per rank.
void PrintWorkload(std::FILE* out, const Workload& workload);

// The first line of a measurement: workload, ranks, chunk size and tiers (flushed).
void PrintHeader(std::FILE* out, const Workload& workload, uint32_t ranks, const std::vector<std::string>& tiers);

// The report: average step size, each tier's bandwidth alone and, with a completion run, together;
// fio against the first tier alone and every tier at once; one table row per run; reads of each completion+writes:<w>
// run against completion+idle; the replication runs; and, for the runs with load estimates (--estimate), their
// steps, median and 90th percentile of |estimate - time| / time and the median signed error (the bias).
void PrintReport(std::FILE* out, const BenchResults& results, const Analysis& analysis);

// The --json document: the results' fields and, per run, its summary and per-step samples and
// bounds; with load estimates, each step's estimate_seconds (null: none) and the run's "estimate"
// (steps, unknown, median_abs_error, p90_abs_error, median_error).
nlohmann::json ToJson(const BenchResults& results, const Analysis& analysis);

// Per-step time against the bound and the first tier's share per step, one line per run but the
// alone runs: writes `png`.dat and `png`.gp and renders them to `png` with gnuplot (reported on
// stderr when it fails).
void Plot(const std::string& png, const BenchResults& results, const Analysis& analysis);

// --check: the completion run's gap against `limit`.
struct CheckVerdict {
  int exit_code = 0;       // 0: the gap is within the limit; 3: it is not, or there is none
  std::string message;     // one line, without its newline
  bool to_stderr = false;  // the check could not be made (no completion run with a bound)
};
CheckVerdict CheckCompletionGap(const Analysis& analysis, double limit);

// Prints the verdict's message where it belongs and returns its exit code.
int Emit(const CheckVerdict& verdict);

}  // namespace kvbench
