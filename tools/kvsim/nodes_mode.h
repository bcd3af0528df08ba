// kvsim --nodes and --validate-nodes: the multi-node model (nodes.h) from the command line, and
// against measured per-node PFS shares (nodes_input.h). docs/design.md section 10.
#pragma once

#include <cstdint>
#include <string>

namespace kvsim {

// The multi-node options as the command line gives them: bandwidths as ParseRate(s) text, sizes as
// kvstream::ParseBytes text, lists with one value for every node or one per node.
struct NodesOptions {
  uint32_t nodes = 0;
  std::string nvme_bw = "12e9", pfs_bw = "6e9", pfs_node_cap, step_bytes = "256MiB", load, gap;
  std::string gaps = "exponential";
  double window_s = 0;
  bool no_takeover = false;
  std::string validate_path;
};

// --nodes: simulates `o.nodes` nodes sharing one PFS (queue `depth` blocks per tier, gaps drawn
// from `seed`), prints one row per node and the aggregate against every node reading its NVMe
// alone, and writes them as JSON to `json_path` when it is not empty (LoadNodesFile's format).
// Returns 0, or 2 with a message on stderr for a bad option.
int RunNodes(const NodesOptions& o, uint32_t depth, uint64_t seed, const std::string& json_path);

// --validate-nodes: the model's PFS share per node against the one measured in `o.validate_path`
// (LoadNodesFile's format; `depth`, `seed` and `o` give what the file leaves out), printed and
// written to `json_path` as RunNodes does, with the measured values. Returns 0 when every node is
// within 5 points, 1 when one is not, 2 on a bad file.
int ValidateNodes(const NodesOptions& o, uint32_t depth, uint64_t seed, const std::string& json_path);

}  // namespace kvsim
