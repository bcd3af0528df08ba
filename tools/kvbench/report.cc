#include "report.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_format.h"
#include "plan.h"

namespace kvbench {
namespace {

nlohmann::json RunJson(const Run& run, const Summary& s, const std::vector<double>& bounds) {
  nlohmann::json j = {{"label", s.label}, {"total_seconds", s.total_seconds}, {"bytes", s.bytes},
                      {"bound_seconds", s.bound_seconds}, {"gap", s.gap}, {"speedup_vs_serial", s.speedup_vs_serial},
                      {"throughput_bps", s.throughput_bps}, {"tier_share", s.tier_share},
                      {"daemon_cpu_seconds_per_gb", s.cpu_seconds_per_gb}, {"steps", nlohmann::json::array()}};
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const StepSample& st = run.steps[i];
    nlohmann::json step = {{"seconds", st.seconds}, {"bytes", st.bytes}, {"tier_bytes", st.tier_bytes},
                           {"bound_seconds", bounds[i]}, {"daemon_cpu_seconds", st.daemon_cpu_seconds}};
    if (st.estimated) {  // null: the daemon had none (NaN)
      step["estimate_seconds"] = std::isnan(st.estimate_seconds) ? nlohmann::json(nullptr) : nlohmann::json(st.estimate_seconds);
    }
    if (st.cycle_seconds > 0) {  // a run with writes
      step.update({{"cycle_seconds", st.cycle_seconds}, {"tier_bytes_written", st.tier_bytes_written},
                   {"new_bytes", st.new_bytes}, {"write_stall_seconds", st.write_stall_seconds}});
    }
    j["steps"].push_back(std::move(step));
  }
  if (!run.persist_seconds.empty()) j["persist_seconds"] = run.persist_seconds;
  if (const auto e = SummarizeEstimate(run)) {
    j["estimate"] = {{"steps", e->steps}, {"unknown", e->unknown}, {"median_abs_error", e->median_abs},
                     {"p90_abs_error", e->p90_abs}, {"median_error", e->median}};
  }
  return j;
}

// Each tier alone and, with a completion run, together: its bytes over the completion run's time
// (both tiers busy all the step).
void PrintTierBandwidths(std::FILE* out, const BenchResults& results, const Analysis& a) {
  for (size_t t = 0; t < a.alone.size(); ++t) {
    std::fprintf(out, "%-12s alone: %8.1f MB/s", results.tiers[t].c_str(), Bandwidth(*a.alone[t]) / 1e6);
    if (a.completion) {
      const Summary c = Summarize(*a.completion, a.alone, nullptr);
      std::fprintf(out, "   together (completion): %8.1f MB/s", c.tier_share[t] * c.throughput_bps / 1e6);
    }
    std::fprintf(out, "\n");
  }
  if (results.chunk_drain_seconds.size() == results.tiers.size()) {
    std::fprintf(out, "chunk drain (serial batching's idle time per chunk boundary):");
    for (size_t t = 0; t < results.tiers.size(); ++t) {
      std::fprintf(out, " %s %.2f ms", results.tiers[t].c_str(), 1e3 * results.chunk_drain_seconds[t]);
    }
    std::fprintf(out, "\n");
  }
  if (results.fio_bps > 0) {
    std::fprintf(out, "fio on %s: %8.1f MB/s; %s through kvstreamd alone = %.3f x fio\n", results.fio_dir.c_str(),
                 results.fio_bps / 1e6, results.tiers[0].c_str(),
                 a.alone.empty() ? 0 : Bandwidth(*a.alone[0]) / results.fio_bps);
  }
  if (results.fio_all_bps > 0 && a.completion) {
    std::fprintf(out, "fio on every tier at once: %8.1f MB/s; completion through kvstreamd = %.3f x fio\n",
                 results.fio_all_bps / 1e6, Bandwidth(*a.completion) / results.fio_all_bps);
  }
}

void PrintTable(std::FILE* out, const BenchResults& results, const Analysis& a) {
  std::fprintf(out, "\n%-26s %9s %9s %9s %8s %9s %8s", "policy", "total_s", "bound_s", "MB/s", "gap", "vs_serial",
               "cpu_s/GB");
  for (const auto& n : results.tiers) std::fprintf(out, " %7s", (n + "%").c_str());
  std::fprintf(out, "\n");
  for (const Summary& s : a.summaries) {
    std::fprintf(out, "%-26s %9.3f %9.3f %9.1f %+7.1f%% %8.2fx %8.3f", s.label.c_str(), s.total_seconds,
                 s.bound_seconds, s.throughput_bps / 1e6, 100 * s.gap, s.speedup_vs_serial, s.cpu_seconds_per_gb);
    for (double share : s.tier_share) std::fprintf(out, " %6.1f%%", 100 * share);
    std::fprintf(out, "\n");
  }
}

// Reads of the runs with writes against the same reads without them, after the same idle time
// (the read loss), and how long their persists took from the call until written.
void PrintReadsWithWrites(std::FILE* out, const BenchResults& results, const Analysis& a) {
  double reads_alone = 0;
  for (const Summary& s : a.summaries) {
    if (s.label == kIdleReferenceLabel) reads_alone = s.throughput_bps;
  }
  if (reads_alone <= 0) return;
  for (const Run& r : results.runs) {
    if (!r.label.starts_with(kWritesPrefix)) continue;
    const double ratio = Bandwidth(r) / reads_alone;
    std::fprintf(out, "%s: reads at %.3f x reads alone (%s), read loss %.1f%%", r.label.c_str(), ratio,
                 kIdleReferenceLabel, 100 * (1 - ratio));
    if (!r.persist_seconds.empty()) {
      std::fprintf(out, "; persists (call to written) p50 %.3f s, p95 %.3f s, max %.3f s over %zu",
                   Percentile(r.persist_seconds, 0.5), Percentile(r.persist_seconds, 0.95),
                   Percentile(r.persist_seconds, 1), r.persist_seconds.size());
    }
    std::fprintf(out, "\n");
  }
}

// The replication runs: each step from its start until its reads are done and its new chunks
// written, against replication:serial; the bytes written per tier over the new KV (write
// amplification) and the time producers waited for staging.
void PrintReplication(std::FILE* out, const BenchResults& results) {
  const std::string serial_label = std::string(kReplicationPrefix) + kSerialLabel;
  double serial_cycle = 0;
  bool any = false;
  for (const Run& r : results.runs) {
    if (!r.label.starts_with(kReplicationPrefix)) continue;
    any = true;
    if (r.label == serial_label) {
      for (const StepSample& st : r.steps) serial_cycle += st.cycle_seconds;
    }
  }
  if (!any) return;
  std::fprintf(out, "\n%-24s %9s %9s %9s %8s %9s  %s\n", "replication run", "cycle_s", "reads_s", "vs_serial",
               "write_x", "stall_s", "GB written per tier");
  for (const Run& r : results.runs) {
    if (!r.label.starts_with(kReplicationPrefix)) continue;
    double cycle = 0, reads = 0, stall = 0;
    uint64_t fresh = 0, written = 0;
    std::vector<uint64_t> per_tier(results.tiers.size(), 0);
    for (const StepSample& st : r.steps) {
      cycle += st.cycle_seconds;
      reads += st.seconds;
      stall += st.write_stall_seconds;
      fresh += st.new_bytes;
      for (size_t t = 0; t < st.tier_bytes_written.size() && t < per_tier.size(); ++t) {
        per_tier[t] += st.tier_bytes_written[t];
        written += st.tier_bytes_written[t];
      }
    }
    std::fprintf(out, "%-24s %9.3f %9.3f %8.3fx %7.2fx %9.3f ", r.label.c_str(), cycle, reads,
                 cycle > 0 && serial_cycle > 0 ? serial_cycle / cycle : 0, fresh ? static_cast<double>(written) / fresh : 0,
                 stall);
    for (size_t t = 0; t < per_tier.size(); ++t) std::fprintf(out, "%s%.2f", t ? "/" : " ", per_tier[t] / 1e9);
    std::fprintf(out, "\n");
  }
}

// The runs with --estimate: the daemon's load estimate before each step against the step's time.
void PrintEstimates(std::FILE* out, const BenchResults& results) {
  bool header = false;
  for (const Run& r : results.runs) {
    const auto e = SummarizeEstimate(r);
    if (!e) continue;
    if (!header) {
      std::fprintf(out, "\nload estimate (a Lookup with estimate_load over every rank's keys just before each step) "
                        "against the step's time here (release of the ranks to the last reply):\n"
                        "%-26s %6s %8s %12s %10s %8s\n",
                   "run", "steps", "unknown", "median|err|", "p90|err|", "bias");
      header = true;
    }
    std::fprintf(out, "%-26s %6zu %8zu %11.1f%% %9.1f%% %+7.1f%%\n", r.label.c_str(), e->steps, e->unknown,
                 100 * e->median_abs, 100 * e->p90_abs, 100 * e->median);
  }
}

}  // namespace

Analysis Analyze(const BenchResults& results) {
  Analysis a;
  for (const Run& r : results.runs) {
    if (IsAloneRun(r.label)) a.alone.push_back(&r);
    if (r.label == kSerialLabel) a.serial = &r;
    if (r.label == kCompletionLabel) a.completion = &r;
  }
  if (a.alone.size() != results.tiers.size()) a.alone.clear();
  for (const Run& r : results.runs) a.summaries.push_back(Summarize(r, a.alone, a.serial));
  return a;
}

void PrintWorkload(std::FILE* out, const Workload& workload) {
  uint64_t reads = 0, writes = 0;
  for (const BenchStep& s : workload.steps) {
    reads += s.reads.size();
    writes += s.writes.size();
  }
  std::fprintf(out, "%s\n%zu steps; per rank: %llu chunk reads (%.1f MiB per step), %llu new chunks; %zu chunks to populate\n",
               workload.description.c_str(), workload.steps.size(), static_cast<unsigned long long>(reads),
               reads * workload.chunk_bytes / 1048576.0 / workload.steps.size(), static_cast<unsigned long long>(writes),
               workload.populate.size());
}

void PrintHeader(std::FILE* out, const Workload& workload, uint32_t ranks, const std::vector<std::string>& tiers) {
  std::fprintf(out, "kvbench: %s; %u ranks, %llu KiB per chunk per rank, tiers", workload.description.c_str(), ranks,
               static_cast<unsigned long long>(workload.chunk_bytes >> 10));
  for (const auto& n : tiers) std::fprintf(out, " %s", n.c_str());
  std::fprintf(out, "\n");
  std::fflush(out);
}

void PrintReport(std::FILE* out, const BenchResults& results, const Analysis& analysis) {
  const uint64_t first_run_bytes = analysis.summaries.empty() ? 0 : analysis.summaries[0].bytes;
  std::fprintf(out, "%zu steps, %.1f MiB per step on average\n", results.steps,
               first_run_bytes / 1048576.0 / results.steps);
  PrintTierBandwidths(out, results, analysis);
  PrintTable(out, results, analysis);
  PrintReadsWithWrites(out, results, analysis);
  PrintReplication(out, results);
  PrintEstimates(out, results);
}

nlohmann::json ToJson(const BenchResults& results, const Analysis& analysis) {
  nlohmann::json j = {{"workload", results.workload}, {"ranks", results.ranks}, {"chunk_bytes", results.chunk_bytes},
                      {"steps", results.steps}, {"tiers", results.tiers}, {"fio_bps", results.fio_bps}, {"fio_all_bps", results.fio_all_bps},
                      {"runs", nlohmann::json::array()}};
  if (!results.chunk_drain_seconds.empty()) j["chunk_drain_seconds"] = results.chunk_drain_seconds;
  for (size_t i = 0; i < results.runs.size(); ++i) {
    const Run& r = results.runs[i];
    j["runs"].push_back(RunJson(r, analysis.summaries[i], StepBounds(r, analysis.alone)));
  }
  return j;
}

void Plot(const std::string& png, const BenchResults& results, const Analysis& analysis) {
  const std::string data = png + ".dat", script = png + ".gp";
  std::ofstream d(data);
  std::vector<std::string> plotted;
  for (const Run& run : results.runs) {
    if (IsAloneRun(run.label)) continue;
    const auto bounds = StepBounds(run, analysis.alone);
    d << "# " << run.label << "\n";
    for (size_t i = 0; i < run.steps.size(); ++i) {
      const auto& st = run.steps[i];
      uint64_t read = 0;
      for (uint64_t b : st.tier_bytes) read += b;
      d << i << " " << st.seconds << " " << bounds[i] << " " << (read ? 100.0 * st.tier_bytes[0] / read : 0) << "\n";
    }
    d << "\n\n";
    plotted.push_back(run.label);
  }
  d.close();
  std::ofstream g(script);
  g << "set terminal png size 1200,900\nset output '" << png << "'\nset multiplot layout 2,1\n"
    << "set title 'retrieval time per step vs the aggregate-bandwidth bound'\nset xlabel 'step'\n"
    << "set ylabel 'seconds'\nset key outside right\nset xtics 1\nplot ";
  for (size_t i = 0; i < plotted.size(); ++i) {
    g << "'" << data << "' index " << i << " using 1:2 with linespoints title '" << plotted[i] << "', ";
  }
  g << "'" << data << "' index 0 using 1:3 with lines lw 3 dt 2 lc rgb 'black' title 'bound'\n";
  g << "set title 'share of bytes read from " << results.tiers[0] << " per step'\nset ylabel '%'\nset yrange [0:100]\nplot ";
  for (size_t i = 0; i < plotted.size(); ++i) {
    g << (i ? ", " : "") << "'" << data << "' index " << i << " using 1:4 with linespoints title '" << plotted[i] << "'";
  }
  g << "\nunset multiplot\n";
  g.close();
  if (std::system(("gnuplot '" + script + "' 2>/dev/null").c_str()) != 0) {
    std::fprintf(stderr, "kvbench: gnuplot failed; data and script are %s and %s\n", data.c_str(), script.c_str());
  }
}

CheckVerdict CheckCompletionGap(const Analysis& analysis, double limit) {
  double gap = 0;
  bool have_gap = false;
  for (const Summary& s : analysis.summaries) {
    if (s.label == kCompletionLabel) {
      gap = s.gap;
      have_gap = s.bound_seconds > 0;
    }
  }
  if (!have_gap) return {3, "kvbench: --check needs the completion policy and the tiers' alone runs", true};
  if (gap > limit) return {3, absl::StrFormat("check FAILED: completion gap %+.1f%% > %.1f%%", 100 * gap, 100 * limit)};
  return {0, absl::StrFormat("check passed: completion gap %+.1f%% <= %.1f%%", 100 * gap, 100 * limit)};
}

int Emit(const CheckVerdict& verdict) {
  std::fprintf(verdict.to_stderr ? stderr : stdout, "%s\n", verdict.message.c_str());
  return verdict.exit_code;
}

}  // namespace kvbench
