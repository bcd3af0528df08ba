#include "bench_math.h"

#include <algorithm>
#include <cmath>

namespace kvbench {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[i];
}

double Bandwidth(const Run& run) {
  double seconds = 0, bytes = 0;
  for (const StepSample& s : run.steps) {
    seconds += s.seconds;
    bytes += static_cast<double>(s.bytes);
  }
  return seconds > 0 ? bytes / seconds : 0;
}

double TotalSeconds(const Run& run) {
  double seconds = 0;
  for (const StepSample& s : run.steps) seconds += s.seconds;
  return seconds;
}

std::vector<double> EstimateErrors(const Run& run, size_t* unknown) {
  std::vector<double> errors;
  size_t nan = 0;
  for (const StepSample& s : run.steps) {
    if (!s.estimated || !(s.seconds > 0)) continue;
    if (std::isnan(s.estimate_seconds)) {
      ++nan;
    } else {
      errors.push_back((s.estimate_seconds - s.seconds) / s.seconds);
    }
  }
  if (unknown) *unknown = nan;
  return errors;
}

EstimateSummary SummarizeErrors(const std::vector<double>& errors, size_t unknown) {
  EstimateSummary e;
  e.steps = errors.size();
  e.unknown = unknown;
  std::vector<double> abs;
  for (double x : errors) abs.push_back(std::abs(x));
  e.median_abs = Percentile(abs, 0.5);
  e.p90_abs = Percentile(abs, 0.9);
  e.median = Percentile(errors, 0.5);
  return e;
}

std::optional<EstimateSummary> SummarizeEstimate(const Run& run) {
  if (std::none_of(run.steps.begin(), run.steps.end(), [](const StepSample& s) { return s.estimated; })) {
    return std::nullopt;
  }
  size_t unknown = 0;
  const std::vector<double> errors = EstimateErrors(run, &unknown);
  return SummarizeErrors(errors, unknown);
}

std::vector<double> StepBounds(const Run& run, const std::vector<const Run*>& alone) {
  std::vector<double> bounds(run.steps.size(), 0);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    double sum_bps = 0;
    bool complete = !alone.empty();
    for (const Run* a : alone) {
      if (i >= a->steps.size() || a->steps[i].seconds <= 0) {
        complete = false;
        break;
      }
      sum_bps += a->steps[i].bytes / a->steps[i].seconds;
    }
    if (complete && sum_bps > 0) bounds[i] = run.steps[i].bytes / sum_bps;
  }
  return bounds;
}

Summary Summarize(const Run& run, const std::vector<const Run*>& alone, const Run* serial) {
  Summary s;
  s.label = run.label;
  std::vector<uint64_t> tier_bytes;
  uint64_t read = 0;
  double cpu = 0;
  for (const StepSample& step : run.steps) {
    s.total_seconds += step.seconds;
    cpu += step.daemon_cpu_seconds;
    s.bytes += step.bytes;
    if (tier_bytes.size() < step.tier_bytes.size()) tier_bytes.resize(step.tier_bytes.size(), 0);
    for (size_t t = 0; t < step.tier_bytes.size(); ++t) {
      tier_bytes[t] += step.tier_bytes[t];
      read += step.tier_bytes[t];
    }
  }
  for (double b : StepBounds(run, alone)) s.bound_seconds += b;
  if (s.bound_seconds > 0) s.gap = s.total_seconds / s.bound_seconds - 1;
  if (s.total_seconds > 0) s.throughput_bps = s.bytes / s.total_seconds;
  if (serial && s.total_seconds > 0) s.speedup_vs_serial = TotalSeconds(*serial) / s.total_seconds;
  if (read > 0) s.cpu_seconds_per_gb = cpu / (read / 1e9);
  for (uint64_t b : tier_bytes) s.tier_share.push_back(read ? static_cast<double>(b) / read : 0);
  return s;
}

}  // namespace kvbench
