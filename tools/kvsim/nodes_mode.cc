// kvsim --nodes and --validate-nodes (nodes_mode.h).
#include "nodes_mode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "kvstream/config.h"
#include "nodes.h"
#include "nodes_input.h"
#include "schedule.h"

namespace kvsim {
namespace {

// One value for every node, or one per node.
template <typename T>
bool PerNode(const std::vector<T>& values, size_t n, const char* option, std::vector<T>* out) {
  if (values.size() == 1) {
    out->assign(n, values[0]);
    return true;
  }
  if (values.size() == n) {
    *out = values;
    return true;
  }
  std::cerr << "kvsim: " << option << " takes one value, or one per node (" << n << ")\n";
  return false;
}

// The end of both modes' first line: the PFS, the settings and the window simulated.
void PrintNodesHeader(const Cluster& c, const ClusterResult& r) {
  char cap[64] = "no per-node cap";
  if (c.pfs_node_cap_bps > 0) std::snprintf(cap, sizeof(cap), "at most %.1f MB/s per node", c.pfs_node_cap_bps / 1e6);
  std::printf("PFS %.1f MB/s shared by %zu nodes (%s), block %.0f KiB, depth %u, %s gaps", c.pfs_bps / 1e6,
              c.nodes.size(), cap, c.block_bytes / 1024, c.queue_depth,
              c.gaps == GapDistribution::kFixed ? "fixed" : "exponential");
  if (c.gaps == GapDistribution::kExponential) std::printf(" (seed %llu)", static_cast<unsigned long long>(c.seed));
  std::printf(", window %.1f s%s\n", r.window_s, c.takeover ? "" : ", no takeover");
}

// The duty cycle a node's gap gives with the PFS to itself (what --node-load sets).
double LoadOf(const Cluster& c, size_t i) {
  const double solo = SoloStepTime(c, i);
  return solo / (solo + c.nodes[i].gap_s);
}

// --json of both modes: the settings, per node and the aggregate (LoadNodesFile reads it back).
nlohmann::json NodesJson(const Cluster& c, const ClusterResult& r, const std::vector<std::string>& names) {
  nlohmann::json j = {{"pfs_bps", c.pfs_bps}, {"pfs_node_cap_bps", c.pfs_node_cap_bps}, {"block_bytes", c.block_bytes},
                      {"queue_depth", c.queue_depth}, {"takeover", c.takeover},
                      {"gaps", c.gaps == GapDistribution::kFixed ? "fixed" : "exponential"}, {"seed", c.seed},
                      {"window_s", r.window_s}};
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const NodeResult& n = r.nodes[i];
    j["nodes"].push_back({{"node", names[i]}, {"load", LoadOf(c, i)}, {"nvme_bps", c.nodes[i].nvme_bps},
                          {"step_bytes", c.nodes[i].step_bytes}, {"gap_s", c.nodes[i].gap_s}, {"steps", n.steps},
                          {"step_s", n.step_s}, {"bound_s", n.bound_s}, {"gap_to_bound", n.gap},
                          {"pfs_share", n.pfs_share}, {"takeovers", n.takeovers}, {"pfs_bps_reading", n.pfs_bps_reading}, {"busy", n.busy}, {"solo_s", n.solo_s},
                          {"nvme_only_s", n.nvme_only_s}, {"bytes_per_s", n.bytes_per_s},
                          {"nvme_only_bytes_per_s", n.nvme_only_bytes_per_s}});
  }
  j["aggregate"] = {{"bytes_per_s", r.bytes_per_s}, {"nvme_only_bytes_per_s", r.nvme_only_bytes_per_s},
                    {"ratio", r.ratio}, {"pfs_bytes_per_s", r.pfs_bytes_per_s}, {"pfs_busy", r.pfs_busy}};
  return j;
}

// The cluster-wide settings the command line gives (--nodes and --validate-nodes alike); nodes and
// bandwidths are added by the caller.
Cluster ClusterOptions(const NodesOptions& o, uint32_t depth, uint64_t seed) {
  Cluster c;
  c.queue_depth = depth;
  c.seed = seed;
  c.window_s = o.window_s;
  c.takeover = !o.no_takeover;
  c.gaps = o.gaps == "fixed" ? GapDistribution::kFixed : GapDistribution::kExponential;
  return c;
}

}  // namespace

// --nodes: one row per node and the aggregate against every node reading its NVMe alone.
int RunNodes(const NodesOptions& o, uint32_t depth, uint64_t seed, const std::string& json_path) {
  const size_t n = o.nodes;
  if (depth == 0) {
    std::cerr << "kvsim: --queue-depth must be positive\n";
    return 2;
  }
  Cluster c = ClusterOptions(o, depth, seed);
  auto nvme = ParseRates(o.nvme_bw);
  auto pfs = ParseRate(o.pfs_bw);
  for (const absl::Status& s : {nvme.status(), pfs.status()}) {
    if (!s.ok()) {
      std::cerr << "kvsim: " << s.message() << "\n";
      return 2;
    }
  }
  if (!o.pfs_node_cap.empty()) {
    auto cap = ParseRate(o.pfs_node_cap);
    if (!cap.ok()) {
      std::cerr << "kvsim: " << cap.status().message() << "\n";
      return 2;
    }
    c.pfs_node_cap_bps = *cap;
  }
  c.pfs_bps = *pfs;
  std::vector<double> sizes, nvme_bps, step_bytes, loads, gaps;
  std::stringstream ss(o.step_bytes);
  for (std::string item; std::getline(ss, item, ',');) {
    auto b = kvstream::ParseBytes(item);
    if (!b.ok() || *b == 0) {
      std::cerr << "kvsim: --step-bytes: '" << item << "' is not a positive byte size\n";
      return 2;
    }
    sizes.push_back(static_cast<double>(*b));
  }
  try {
    if (!o.load.empty()) loads = ParseList(o.load);
    if (!o.gap.empty()) gaps = ParseList(o.gap);
  } catch (const std::exception&) {
    std::cerr << "kvsim: --node-load and --node-gap take comma-separated numbers\n";
    return 2;
  }
  if (loads.empty() && gaps.empty()) loads = {1.0};
  if (!PerNode(*nvme, n, "--nvme-bw", &nvme_bps) || !PerNode(sizes, n, "--step-bytes", &step_bytes) ||
      (!loads.empty() && !PerNode(loads, n, "--node-load", &loads)) ||
      (!gaps.empty() && !PerNode(gaps, n, "--node-gap", &gaps))) {
    return 2;
  }
  if (std::any_of(loads.begin(), loads.end(), [](double l) { return !(l > 0 && l <= 1); }) ||
      std::any_of(gaps.begin(), gaps.end(), [](double g) { return !(g >= 0); })) {
    std::cerr << "kvsim: --node-load is in (0, 1], --node-gap >= 0\n";
    return 2;
  }
  for (size_t i = 0; i < n; ++i) c.nodes.push_back({nvme_bps[i], step_bytes[i], 0});
  for (size_t i = 0; i < n; ++i) c.nodes[i].gap_s = gaps.empty() ? GapForLoad(c, i, loads[i]) : gaps[i];
  const ClusterResult r = SimulateCluster(c);
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(absl::StrCat("n", i));

  std::printf("kvsim nodes: ");
  PrintNodesHeader(c, r);
  std::printf("%-5s %5s %9s %9s %7s %7s %8s %8s %8s %9s %9s %6s %8s %8s %8s\n", "node", "load", "nvme_MB/s",
              "step_MiB", "gap_s", "steps", "step_s", "bound_s", "to_bound", "pfs_share", "pfs_MB/s", "busy", "solo_s",
              "nvme_s", "tko/step");
  for (size_t i = 0; i < n; ++i) {
    const NodeResult& x = r.nodes[i];
    std::printf("%-5s %5.2f %9.1f %9.1f %7.3f %7llu %8.4f %8.4f %+7.1f%% %8.1f%% %9.1f %5.1f%% %8.4f %8.4f %8.2f\n",
                names[i].c_str(), LoadOf(c, i), c.nodes[i].nvme_bps / 1e6, c.nodes[i].step_bytes / (1 << 20),
                c.nodes[i].gap_s, static_cast<unsigned long long>(x.steps), x.step_s, x.bound_s, 100 * x.gap,
                100 * x.pfs_share, x.pfs_bps_reading / 1e6, 100 * x.busy, x.solo_s, x.nvme_only_s,
                x.steps ? static_cast<double>(x.takeovers) / x.steps : 0.0);
  }
  std::printf("aggregate: %.1f MB/s read (PFS %.1f MB/s of %.1f, in use %.1f%% of the time); every node from its NVMe "
              "alone: %.1f MB/s; %.3fx\n",
              r.bytes_per_s / 1e6, r.pfs_bytes_per_s / 1e6, c.pfs_bps / 1e6, 100 * r.pfs_busy,
              r.nvme_only_bytes_per_s / 1e6, r.ratio);
  std::printf("(load: share of time reading with the PFS to itself; gap_s: mean idle time between steps; to_bound: "
              "step over D/(nvme + the PFS share it would get); pfs_MB/s: its PFS bytes per second of reading; busy: "
              "time reading; solo_s: step with the PFS to itself; nvme_s: from its NVMe alone; tko/step: PFS blocks "
              "the NVMe took over)\n");
  if (!json_path.empty()) std::ofstream(json_path) << NodesJson(c, r, names).dump(2) << "\n";
  return 0;
}

// --validate-nodes: the model's PFS share per node against the measured one (LoadNodesFile's
// format, nodes_input.h). Exit 0 when every node is within 5 points, 1 when one is not, 2 on a bad file.
int ValidateNodes(const NodesOptions& o, uint32_t depth, uint64_t seed, const std::string& json_path) {
  auto f = LoadNodesFile(o.validate_path, ClusterOptions(o, depth, seed));
  if (!f.ok()) {
    std::cerr << "kvsim: " << f.status().message() << "\n";
    return 2;
  }
  const Cluster& c = f->cluster;
  const ClusterResult r = SimulateCluster(c);
  constexpr double kPoints = 5;
  std::printf("kvsim validate-nodes %s: ", o.validate_path.c_str());
  PrintNodesHeader(c, r);
  std::printf("%-12s %9s %9s %7s %9s %9s %8s %6s %10s %8s %7s\n", "node", "nvme_MB/s", "step_MiB", "gap_s",
              "measured", "model", "diff", "within", "measured_s", "model_s", "error");
  size_t off = 0;
  std::vector<std::string> names;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const MeasuredNode& m = f->measured[i];
    names.push_back(m.name);
    const double diff = 100 * (r.nodes[i].pfs_share - m.pfs_share);
    const bool within = std::fabs(diff) <= kPoints;
    off += !within;
    std::printf("%-12s %9.1f %9.1f %7.3f %8.1f%% %8.1f%% %+5.1f pt %6s", m.name.c_str(), c.nodes[i].nvme_bps / 1e6,
                c.nodes[i].step_bytes / (1 << 20), c.nodes[i].gap_s, 100 * m.pfs_share, 100 * r.nodes[i].pfs_share,
                diff, within ? "yes" : "NO");
    if (std::isnan(m.step_s)) {
      std::printf(" %10s %8.4f %7s\n", "-", r.nodes[i].step_s, "-");
    } else {
      std::printf(" %10.4f %8.4f %+6.1f%%\n", m.step_s, r.nodes[i].step_s, 100 * (r.nodes[i].step_s / m.step_s - 1));
    }
  }
  std::printf("%zu of %zu nodes within %.0f points of the measured PFS share\n", c.nodes.size() - off, c.nodes.size(),
              kPoints);
  if (!json_path.empty()) {
    nlohmann::json j = NodesJson(c, r, names);
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      j["nodes"][i]["measured_pfs_share"] = f->measured[i].pfs_share;
      if (!std::isnan(f->measured[i].step_s)) j["nodes"][i]["measured_step_s"] = f->measured[i].step_s;
      j["nodes"][i]["within"] = std::fabs(r.nodes[i].pfs_share - f->measured[i].pfs_share) * 100 <= kPoints;
    }
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return off == 0 ? 0 : 1;
}

}  // namespace kvsim
