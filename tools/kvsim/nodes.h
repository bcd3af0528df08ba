// Many nodes, one parallel file system (docs/design.md section 10): N nodes, each reading its steps
// with completion-driven routing (M4) from its own NVMe tier (tier 0) and one PFS tier (tier 1)
// that all nodes share, with no coordination between nodes. Predicts per node the share of its
// bytes that come from the PFS and its step time.
//
// Assumptions (the model's contract):
//   - A node alternates: read a step of step_bytes, then idle for a gap (its forward pass), then
//     the next step. A node with gap 0 reads back to back (load 1).
//   - Within a step a node routes as CompletionTime (model.h): each of its two tiers keeps
//     queue_depth blocks claimed and claims the next unread block whenever one completes, and
//     serves its claimed blocks one after another. At the end of a step, as the daemon does, the
//     PFS tier (with a read in flight) leaves the next block to the NVMe when the NVMe would read
//     all that is left before that PFS read would land at the present share, and the NVMe tier,
//     with nothing left to claim, takes over a PFS block that would land more than max(4 NVMe
//     block times, 10 ms) later; the abandoned PFS read still holds its slot and its share of the
//     PFS until it lands. Without this end-of-step handling (takeover = false) one node is
//     exactly CompletionTime.
//   - The NVMe tier of a node reads at nvme_bps, whoever else reads.
//   - The PFS delivers pfs_bps in all, split equally among the nodes that have a PFS read in
//     flight at that instant (processor sharing per node, not per request: every node keeps the
//     same queue depth on it). One node takes at most pfs_node_cap_bps (its link, or what its
//     queue depth would pull; 0 = no cap): share = min(cap, pfs_bps / readers). Bandwidth a
//     capped node leaves is not handed to the others (all nodes have the same cap, so equal
//     shares stay equal).
//   - Gaps are fixed, or exponential with the given mean (independent nodes, seeded).
// Deterministic: the same Cluster (seed included) gives the same result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvsim {

struct NodeLoad {
  double nvme_bps = 0;    // the node's own tier 0 read bandwidth, bytes/s (> 0)
  double step_bytes = 0;  // D: bytes each step reads (> 0)
  double gap_s = 0;       // mean idle time between the end of a step and the start of the next (>= 0)
};

enum class GapDistribution { kFixed, kExponential };

struct Cluster {
  std::vector<NodeLoad> nodes;
  double pfs_bps = 0;           // B: the PFS's total read bandwidth (>= 0; 0 = no PFS)
  double pfs_node_cap_bps = 0;  // most one node takes from the PFS; 0 = up to all of B
  double block_bytes = 1 << 20;
  uint32_t queue_depth = 2;     // blocks claimed per tier per node
  GapDistribution gaps = GapDistribution::kExponential;
  uint64_t seed = 1;
  double window_s = 0;          // simulated time; 0 = 200 solo cycles (SoloStepTime + gap) of the longest
  bool takeover = true;         // end of a step: the PFS leaves the last blocks, the NVMe takes over stragglers
};

struct NodeResult {
  uint64_t steps = 0;          // steps completed in the window (the others are not counted)
  uint64_t takeovers = 0;      // PFS blocks the NVMe tier took over (in all steps)
  double step_s = 0;           // mean step time
  double bound_s = 0;          // mean of D / (nvme_bps + the PFS share it would get, averaged over the step)
  double gap = 0;              // step_s / bound_s - 1: M4's tail
  double pfs_share = 0;        // of the bytes of its completed steps, the fraction read from the PFS, in [0, 1]
  double pfs_bps_reading = 0;  // PFS bytes over the time it spent reading steps
  double busy = 0;             // fraction of the window spent reading steps
  double solo_s = 0;           // its step time with the PFS to itself (SoloStepTime)
  double nvme_only_s = 0;      // D / nvme_bps: the step from its NVMe alone (serial, single tier)
  double bytes_per_s = 0;      // D / (step_s + gap_s)
  double nvme_only_bytes_per_s = 0;  // D / (nvme_only_s + gap_s)
};

struct ClusterResult {
  std::vector<NodeResult> nodes;
  double window_s = 0;
  double bytes_per_s = 0;            // sum over nodes
  double nvme_only_bytes_per_s = 0;  // sum over nodes, every node reading its NVMe alone, same gaps
  double ratio = 0;                  // bytes_per_s / nvme_only_bytes_per_s
  double pfs_bytes_per_s = 0;        // PFS bytes read in the window / window (<= pfs_bps), taken-over reads included
  double pfs_busy = 0;               // fraction of the window with at least one PFS reader
};

// Node i's step time alone on the PFS: CompletionTime over {nvme_bps, min(cap, pfs_bps)} (no
// takeover: alone, a PFS block rarely lands more than 10 ms late unless the PFS is slow).
double SoloStepTime(const Cluster& cluster, size_t i);

// The gap that makes node i read a fraction `load` in (0, 1] of the time with the PFS to
// itself: SoloStepTime * (1 / load - 1). Load 1 is back to back.
double GapForLoad(const Cluster& cluster, size_t i, double load);

// Event-driven simulation of the window. Requires valid inputs (see the fields above).
ClusterResult SimulateCluster(const Cluster& cluster);

}  // namespace kvsim
