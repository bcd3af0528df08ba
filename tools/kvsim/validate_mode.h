// kvsim --validate: the model (model.h) against a recorded benchmark run. Predicts each policy's
// measured retrieval time from the tiers' bandwidths measured alone in the same run, and prints
// measured, modelled and the error per policy.
#pragma once

#include <string>

namespace kvsim {

// Reads `path`, a kvcore_bench --json file (its "workload", "tiers" with alone_bps, and
// "policies") or a kvbench --json file (one with "runs": each step's bound from the same step of
// the only:<tier> runs); two tiers. `chunk_latency_s` is serial's per-chunk latency for
// kvcore_bench files (kvbench files carry their measured chunk drain). Returns 0, or 2 with a
// message on stderr for a file it cannot read or model.
int Validate(const std::string& path, double chunk_latency_s);

}  // namespace kvsim
