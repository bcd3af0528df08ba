// Per-step tier bandwidths for kvsim: constant, a periodic swing, or replayed step records.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "serving.h"

namespace kvsim {

// "1e9,2.5e9" -> {1e9, 2.5e9}. Throws std::invalid_argument on a bad number.
std::vector<double> ParseList(const std::string& text);

// Per-step bandwidths replayed from a file: step records as JSON (an array of records, or
// kvcore_bench's output, whose "completion" policy is used), each record's tiers[].bandwidth_bps;
// or text, one line of whitespace-separated bytes/s per tier per step.
absl::StatusOr<std::vector<std::vector<double>>> LoadReplay(const std::string& path, size_t tiers);

// "constant" (or empty) | "periodic:<period_s>:<amplitude>" (the last tier swings by
// 1 + a sin(2 pi t / period)) | "replay:<file>" (steps cycle).
absl::StatusOr<BandwidthSchedule> MakeSchedule(const std::vector<double>& base, const std::string& schedule);

}  // namespace kvsim
