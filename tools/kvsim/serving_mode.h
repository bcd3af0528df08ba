// kvsim --trace, the serving mode: a continuous-batching node (serving.h) replays a request trace
// (trace.h) under each read policy and each replication policy, and reports per policy throughput,
// TTFT, the retrieval gap to the bound, write stalls and bytes written per tier.
#pragma once

#include <cstdint>
#include <string>

#include "serving.h"

namespace kvsim {

// The serving mode's options as the command line gives them (text where RunServing parses it;
// the defaults are the command line's).
struct ServingOptions {
  std::string trace_path;             // --trace: Mooncake JSON lines (LoadTrace)
  std::string synthetic;              // --synthetic: instead of --trace, ParseSynthetic (LongDocTrace, --seed)
  uint64_t requests = 0;              // --requests: only the first N requests (after --order); 0: all
  double load = 0;                    // --load: instead of --rate, the arrival rate that offers this
                                      //   fraction of the node's recompute capacity (serving.h OfferedLoadRate)
  std::string attention_text = "on";  // --attention: on | off (NodeConfig::attention)
  std::string profile_name = "32B";   // --model: FindProfile
  std::string memory_text = "64GiB";  // --memory: GPU + host KV capacity (kvstream::ParseBytes)
  std::string bw_text = "12e9,6e9";   // --bw: read bytes/s per tier, comma-separated (ParseList)
  std::string write_bw_text;          // --write-bw: write bytes/s per tier; empty: as each reads
  std::string replication = "all";    // --replication: comma-separated ParseReplication labels
  std::string schedule;               // --schedule: MakeSchedule (empty: constant)
  double rate = 1;                    // --rate: arrival-rate scale (Arrange)
  std::string order_text = "recorded";  // --order: ParseArrivalOrder
  uint64_t seed = 1;                  // --seed: for --order random
  std::string policies_text = "recompute,serial,fastest,static:0.5,static:0.75,completion,verdict";  // --policies
  std::string staging_text = "32GiB";  // --staging: deferred-write memory (kvstream::ParseBytes)
  std::string slo_text = "1,2,5";     // --slo: TTFT deadlines in seconds, comma-separated
  NodeConfig node;                    // --token-budget, --max-running, --queue-depth, --overlap; RunServing sets the rest
  std::string json_path;              // --json: the full results; empty: none
  std::string plot_dir;               // --plot-dir: TTFT CDF and gap-vs-g plots (gnuplot); empty: none
};

// Parses and checks the options, loads (or generates) and arranges the trace, and simulates every
// policy (a two-tier one under every replication, a one-tier one once) and, on two tiers with a
// static policy among them or --plot-dir, static:g for g in 0, 0.05, ..., 1. Prints the storage
// demand and one row per policy; writes --json and --plot-dir.
// Returns 0, or 2 with a message on stderr for a bad option or trace.
int RunServing(const ServingOptions& o);

}  // namespace kvsim
