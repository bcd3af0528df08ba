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

// A synthetic long-document workload (kvsim --synthetic long-doc[:DOCS[:READS]]): DOCS documents
// (default 32) of 32k-128k tokens (uniform, whole 512-token blocks), each read by READS requests
// (default 8) in a random order; a request is its document followed by a short unique suffix
// (64-511 tokens: a question, one block of its own) and asks for 64-256 output tokens. Arrivals are
// Poisson at 0.1 requests/s (scaled by --rate or --load like any trace). The first read of a
// document computes it; the others can reuse all of it but their last block. Block ids: document
// d's block i is (d + 1) << 32 | i; request j's suffix is 1 << 62 | j. Deterministic for a seed.
struct LongDocOptions {
  uint32_t docs = 32;
  uint32_t reads = 8;
  uint32_t min_tokens = 32768, max_tokens = 131072;  // a document
  uint32_t min_suffix = 64, max_suffix = 511;
  uint32_t min_output = 64, max_output = 256;
  double rate_rps = 0.1;
};
// "long-doc" | "long-doc:<docs>" | "long-doc:<docs>:<reads>"
absl::StatusOr<LongDocOptions> ParseSynthetic(const std::string& text);
std::vector<Request> LongDocTrace(const LongDocOptions& o, uint64_t seed);

// Divides inter-arrival times by `rate` (2 = twice the arrival rate) and reorders requests: the
// recorded order, or sessions interleaved round-robin / at random (each session keeps its own
// order), keeping the recorded sequence of arrival times.
std::vector<Request> Arrange(std::vector<Request> trace, double rate, ArrivalOrder order, uint64_t seed);

}  // namespace kvsim
