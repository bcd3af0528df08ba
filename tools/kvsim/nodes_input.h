// Inputs of the multi-node model (nodes.h): bandwidths as text, and the file of measured per-node
// PFS shares that `kvsim --validate-nodes` predicts.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nodes.h"

namespace kvsim {

// A read bandwidth in bytes/s: a plain number ("3e8", "300000000") or a number with a unit,
// decimal for B (K, KB, M, MB, G, GB, T, TB: 300MB = 3e8) and binary for iB (300MiB = 300 * 2^20),
// optionally followed by "/s". Must be positive.
absl::StatusOr<double> ParseRate(std::string_view text);

// Comma-separated ParseRate values.
absl::StatusOr<std::vector<double>> ParseRates(std::string_view text);

// A measured node of a --validate-nodes file.
struct MeasuredNode {
  std::string name;
  double pfs_share = 0;  // PFS bytes / all bytes the node read, in [0, 1]
  double step_s = NAN;   // mean step time, when the file has it
};

struct NodesFile {
  Cluster cluster;  // the measured setup, to simulate
  std::vector<MeasuredNode> measured;
};

// The --validate-nodes format (JSON; bandwidths in bytes/s, sizes in bytes, times in seconds):
//   {"pfs_bps": 3e8,                       required: the PFS's total read bandwidth
//    "pfs_node_cap_bps": 0,                optional: most one node takes from the PFS (0: no cap)
//    "block_bytes": 1048576,               optional: the daemon's block_size
//    "queue_depth": 2,                     optional: blocks in flight per tier
//    "gaps": "exponential",                optional: "fixed" | "exponential"
//    "seed": 1, "window_s": 0,             optional: the simulation's (Cluster)
//    "takeover": true,                     optional: end-of-step handling (as the daemon)
//    "nodes": [{"node": "n0",              a name to print
//               "nvme_bps": 3e8,           the node's NVMe read bandwidth, measured alone
//               "step_bytes": 268435456,   bytes per step (mean)
//               "gap_s": 0.5,              mean idle time between a step's end and the next's start
//               "pfs_share": 0.31,         measured: PFS bytes / all bytes the node read
//               "step_s": 0.62}]}          optional measured mean step time
// Fields the file leaves out keep their value in `defaults` (the command line's); nodes are
// replaced. Other fields are ignored, so `kvsim --nodes ... --json` output is such a file.
absl::StatusOr<NodesFile> LoadNodesFile(const std::string& path, const Cluster& defaults);

}  // namespace kvsim
