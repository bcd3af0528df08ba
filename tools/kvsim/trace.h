// Request traces in the Mooncake format (one JSON object per line: timestamp in ms, input_length,
// output_length, hash_ids of 512-token prefix blocks; equal ids mean reusable prefix KV).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvsim {

inline constexpr uint32_t kTraceBlockTokens = 512;

struct Request {
  double arrival_s = 0;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  std::vector<uint64_t> blocks;  // prefix block ids
  uint64_t session = 0;          // requests continuing one conversation share it
};

// Parses a trace file; a malformed line is an error naming the line.
absl::StatusOr<std::vector<Request>> LoadTrace(const std::string& path);

enum class ArrivalOrder { kRecorded, kSessionsRoundRobin, kSessionsRandom };
absl::StatusOr<ArrivalOrder> ParseArrivalOrder(const std::string& text);

// Divides inter-arrival times by `rate` (2 = twice the arrival rate) and reorders requests: the
// recorded order, or sessions interleaved round-robin / at random (each session keeps its own
// order), keeping the recorded sequence of arrival times.
std::vector<Request> Arrange(std::vector<Request> trace, double rate, ArrivalOrder order, uint64_t seed);

}  // namespace kvsim
