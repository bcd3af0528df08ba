// kvsim: trace-driven simulator of a serving node reading prefix KV through KVStream.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "kvstream/config.h"
#include "model.h"
#include "nodes.h"
#include "nodes_input.h"
#include "schedule.h"
#include "reuse.h"
#include "serving.h"
#include "trace.h"

namespace kvsim {
namespace {

// The model's time for a step of `d` bytes under policy `label`, the tiers reading `alone`
// bytes/s each when alone; NAN for a policy the model does not know. Serial pays
// `chunk_latency_s` for each of the step's chunks but the first `latency_in_alone` (those whose
// latency the alone bandwidths carry already).
double ModelTime(const std::string& label, double d, double block, uint32_t depth, double chunk, double chunk_latency_s,
                 const std::vector<double>& alone, uint64_t latency_in_alone = 0) {
  if (label == "completion") return CompletionTime(d, block, depth, alone);
  if (label == "fastest") return FastestTime(d, alone[0]);
  if (label == "serial") {
    const auto chunks = static_cast<uint64_t>(std::ceil(d / chunk));
    return SerialTime(d, chunks - std::min(chunks, latency_in_alone), chunk_latency_s, alone[0]);
  }
  if (label.rfind("static:", 0) == 0) return StaticTime(d, std::stod(label.substr(7)), alone[0], alone[1]);
  return NAN;
}

// The read policy of a kvbench run: its own label, or for the runs that also write
// (`replication:<policy>`, bench.sh --replication) serial for single-tier offloading and
// completion routing for every replication policy (reads are modelled as if every chunk read
// were on both tiers, true where the step's chunks were stored before: populated ones).
std::string ReadPolicy(const std::string& label) {
  constexpr std::string_view kReplication = "replication:";
  if (label.rfind(kReplication, 0) != 0) return label;
  return label.substr(kReplication.size()) == "serial" ? "serial" : "completion";
}

// kvbench --json: each step's bound from the same step read by each tier alone (only:<tier> runs),
// so the model sees the bandwidths the step really had (they vary per step on a fluctuating tier).
int ValidateKvbench(const std::string& path, const nlohmann::json& j) {
  const auto tiers = j.at("tiers").get<std::vector<std::string>>();
  if (tiers.size() != 2) {
    std::cerr << "kvsim: --validate models two tiers; " << path << " has " << tiers.size() << "\n";
    return 2;
  }
  const double block = j.value("block_bytes", 1048576.0);  // kvbench does not record these: the daemon's defaults
  const uint32_t depth = j.value("queue_depth", 2u);
  const double chunk = j.at("chunk_bytes").get<double>();
  std::vector<const nlohmann::json*> alone(2, nullptr);
  for (const auto& r : j.at("runs")) {
    for (size_t t = 0; t < 2; ++t) {
      if (r.at("label") == "only:" + tiers[t]) alone[t] = &r.at("steps");
    }
  }
  if (!alone[0] || !alone[1]) {
    std::cerr << "kvsim: --validate needs the runs only:" << tiers[0] << " and only:" << tiers[1] << " in " << path << "\n";
    return 2;
  }
  // Serial batching's idle time at each chunk boundary, per tier (kvbench --drain-probe).
  const std::vector<double> drain = j.value("chunk_drain_seconds", std::vector<double>{});
  std::printf("kvsim validate %s (kvbench): per-step bandwidths from only:%s and only:%s, block %.0f KiB, depth %u\n",
              path.c_str(), tiers[0].c_str(), tiers[1].c_str(), block / 1024, depth);
  if (drain.size() == 2) {
    std::printf("serial: %.2f ms of chunk drain per further chunk of a step (measured on %s)\n", 1e3 * drain[0],
                tiers[0].c_str());
  } else {
    std::printf("serial: no chunk_drain_seconds in the file (kvbench --drain-probe): modelled without drains\n");
  }
  std::printf("%-28s %12s %12s %8s\n", "policy", "measured_s", "model_s", "error");
  for (const auto& r : j.at("runs")) {
    const std::string label = r.at("label");
    if (label.rfind("only:", 0) == 0 || label.find('+') != std::string::npos) continue;  // references, writes
    const std::string policy = ReadPolicy(label);
    const auto& steps = r.at("steps");
    double model = 0;
    for (size_t i = 0; i < steps.size() && i < (*alone[0]).size() && i < (*alone[1]).size(); ++i) {
      std::vector<double> bw;
      for (size_t t = 0; t < 2; ++t) {
        const auto& a = (*alone[t])[i];
        bw.push_back(a.at("bytes").get<double>() / a.at("seconds").get<double>());
      }
      // Each step of an alone run starts on an idle tier: its first chunk's drain is in bw.
      model += ModelTime(policy, steps[i].at("bytes").get<double>(), block, depth, chunk,
                         drain.size() == 2 ? drain[0] : 0, bw, 1);
    }
    const double measured = r.at("total_seconds").get<double>();
    std::printf("%-28s %12.4f %12.4f %+7.1f%%\n", label.c_str(), measured, model, 100 * (model / measured - 1));
  }
  return 0;
}

// Predicts each policy's measured retrieval time in a kvcore_bench or kvbench JSON from the
// model, with the tiers' bandwidths measured alone in the same run, and prints the error.
int Validate(const std::string& path, double chunk_latency_s) {
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (j.contains("runs")) return ValidateKvbench(path, j);
    const auto& w = j.at("workload");
    const double block = w.at("block_bytes").get<double>();
    const uint32_t depth = w.at("queue_depth").get<uint32_t>();
    const double chunk = w.at("chunk_bytes").get<double>();
    std::vector<double> alone;
    for (const auto& t : j.at("tiers")) alone.push_back(t.at("alone_bps").get<double>());
    if (alone.size() != 2 || alone[0] <= 0 || alone[1] <= 0) {
      std::cerr << "kvsim: --validate needs two tiers with alone bandwidths (run only:0,only:1 too)\n";
      return 2;
    }
    std::printf("kvsim validate %s: tiers alone %.1f and %.1f MB/s, block %.0f KiB, depth %u\n", path.c_str(),
                alone[0] / 1e6, alone[1] / 1e6, block / 1024, depth);
    std::printf("%-14s %12s %12s %8s\n", "policy", "measured_s", "model_s", "error");
    for (const auto& p : j.at("policies")) {
      const std::string label = p.at("policy");
      if (label.rfind("only:", 0) == 0) continue;
      double model = 0;
      for (const auto& step : p.at("steps")) {
        model += ModelTime(label, step.at("bytes").get<double>(), block, depth, chunk, chunk_latency_s, alone);
      }
      const double measured = p.at("total_seconds").get<double>();
      std::printf("%-14s %12.4f %12.4f %+7.1f%%\n", label.c_str(), measured, model, 100 * (model / measured - 1));
    }
  } catch (const std::exception& e) {
    std::cerr << "kvsim: " << path << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}

nlohmann::json ToJson(const PolicyResult& r, const NodeConfig& node) {
  nlohmann::json slo = nlohmann::json::object();
  for (size_t i = 0; i < node.slo_s.size(); ++i) slo[std::to_string(node.slo_s[i])] = r.slo_attainment[i];
  return {{"policy", r.policy}, {"requests", r.requests}, {"steps", r.steps}, {"makespan_s", r.makespan_s},
          {"throughput_rps", r.throughput_rps}, {"throughput_tokens_per_s", r.throughput_tokens_per_s},
          {"ttft_mean_s", r.ttft_mean}, {"ttft_p50_s", r.ttft_p50}, {"ttft_p90_s", r.ttft_p90},
          {"ttft_p99_s", r.ttft_p99}, {"slo_attainment", slo}, {"retrieval_s", r.retrieval_s},
          {"bound_s", r.bound_s}, {"gap", r.gap}, {"forward_s", r.forward_s}, {"write_stall_s", r.write_stall_s},
          {"bytes_read_per_tier", r.bytes_read}, {"bytes_written_per_tier", r.bytes_written},
          {"secondary_dropped_bytes", r.secondary_dropped_bytes},
          {"memory_hit_blocks", r.memory_hit_blocks}, {"storage_hit_blocks", r.storage_hit_blocks},
          {"computed_blocks", r.computed_blocks}};
}

void Plot(const std::string& dir, const std::vector<PolicyResult>& results, const std::vector<std::pair<double, double>>& gap_vs_g) {
  // TTFT CDF per policy and gap vs static share, rendered by gnuplot (Debian's gnuplot-nox).
  std::ofstream cdf(dir + "/ttft_cdf.dat");
  for (size_t p = 0; p < results.size(); ++p) {
    std::vector<double> t = results[p].ttft;
    std::sort(t.begin(), t.end());
    cdf << "# " << results[p].policy << "\n";
    for (size_t i = 0; i < t.size(); i += std::max<size_t>(1, t.size() / 500)) cdf << t[i] << " " << (i + 1.0) / t.size() << "\n";
    cdf << "\n\n";
  }
  cdf.close();
  std::ofstream g(dir + "/gap_vs_g.dat");
  for (auto [share, gap] : gap_vs_g) g << share << " " << 100 * gap << "\n";
  g.close();
  std::ofstream gp(dir + "/plots.gp");
  gp << "set terminal png size 900,600\nset output '" << dir << "/ttft_cdf.png'\nset logscale x\n"
     << "set xlabel 'TTFT (s)'\nset ylabel 'fraction of requests'\nset key bottom right\nplot ";
  for (size_t p = 0; p < results.size(); ++p) {
    gp << (p ? ", " : "") << "'" << dir << "/ttft_cdf.dat' index " << p << " with lines lw 2 title '" << results[p].policy << "'";
  }
  gp << "\nunset logscale x\nset output '" << dir << "/gap_vs_g.png'\nset xlabel 'static share g on tier 0'\n"
     << "set ylabel 'retrieval gap to the bound (%)'\nplot '" << dir << "/gap_vs_g.dat' with linespoints lw 2 title 'static:g'\n";
  gp.close();
  const std::string cmd = "gnuplot '" + dir + "/plots.gp'";
  if (std::system(cmd.c_str()) != 0) std::cerr << "kvsim: gnuplot failed; data and script are in " << dir << "\n";
}

// Options of the multi-node mode (--nodes, --validate-nodes; docs/design.md section 10).
struct NodesOptions {
  uint32_t nodes = 0;
  std::string nvme_bw = "12e9", pfs_bw = "6e9", pfs_node_cap, step_bytes = "256MiB", load, gap;
  std::string gaps = "exponential";
  double window_s = 0;
  bool no_takeover = false;
  std::string validate_path;
};

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

int Main(int argc, char** argv) {
  CLI::App app{"kvsim: trace-driven simulator of a serving node whose prefix KV beyond GPU+host memory "
               "comes back from storage tiers; prints per-policy throughput, TTFT and retrieval gap"};
  std::string trace_path, profile_name = "32B", bw_text = "12e9,6e9", schedule, order_text = "recorded";
  std::string policies_text = "recompute,serial,fastest,static:0.5,static:0.75,completion", json_path, plot_dir;
  std::string memory_text = "64GiB", slo_text = "1,2,5", staging_text = "32GiB", write_bw_text, replication = "all";
  double rate = 1;
  uint64_t seed = 1;
  NodeConfig node;
  std::string validate_path;
  app.add_option("--trace", trace_path, "request trace (JSON lines: timestamp ms, input_length, output_length, hash_ids)")
      ->check(CLI::ExistingFile);
  app.add_option("--validate", validate_path,
                 "instead of simulating: predict the per-policy retrieval times measured in a kvcore_bench or kvbench --json file")
      ->check(CLI::ExistingFile);
  app.add_option("--model", profile_name, "model profile: 14B | 32B | 70B | 110B (KV bytes/token, forward time)")->capture_default_str();
  app.add_option("--memory", memory_text, "GPU + host KV capacity in front of storage (e.g. 64GiB)")->capture_default_str();
  app.add_option("--bw", bw_text, "read bandwidth per tier in bytes/s, comma-separated (tier 0 first; default: 4 NVMe drives and a PFS link)")->capture_default_str();
  app.add_option("--write-bw", write_bw_text, "write bandwidth per tier in bytes/s, comma-separated (default: as fast as each reads)");
  app.add_option("--replication", replication,
                 "where new KV is written, comma-separated to compare: all (every tier) | primary (tier 0 only) | "
                 "fraction:<f> (every tier for a share f of the blocks) | idle (tier 0, copies for the others only from "
                 "their idle write bandwidth, dropped oldest first instead of stalling) | reuse (tier 0, and a block read "
                 "back from tier 0 alone is copied to the others) | adaptive (idle and reuse)")
      ->capture_default_str();
  app.add_option("--schedule", schedule, "bandwidth over time: constant | periodic:<period_s>:<amplitude> (swings the last tier) | replay:<file> (step records as JSON, e.g. kvcore_bench --json, or one line of bytes/s per tier per step)");
  app.add_option("--rate", rate, "arrival-rate scale (2 = twice as fast)")->capture_default_str();
  app.add_option("--order", order_text, "arrival order: recorded | round-robin | random (sessions interleaved)")->capture_default_str();
  app.add_option("--seed", seed, "seed for --order random and --nodes gaps")->capture_default_str();
  app.add_option("--policies", policies_text, "comma-separated: recompute, serial, fastest, static:<g>, completion")->capture_default_str();
  app.add_option("--staging", staging_text, "staging memory for deferred writes; beyond it a step waits for writes")->capture_default_str();
  app.add_option("--token-budget", node.token_budget, "tokens per step")->capture_default_str();
  app.add_option("--max-running", node.max_running, "requests admitted at once")->capture_default_str();
  app.add_option("--queue-depth", node.queue_depth, "blocks in flight per tier (completion)")->capture_default_str();
  app.add_option("--slo", slo_text, "TTFT deadlines in seconds, comma-separated")->capture_default_str();
  app.add_option("--json", json_path, "write the full results as JSON here (--nodes: per node and aggregate)");
  app.add_option("--plot-dir", plot_dir, "write TTFT CDF and gap-vs-g PNG plots (gnuplot) into this directory");
  // Multi-node mode (nodes.h): bandwidths are bytes/s or a number with a unit, decimal for B
  // (300MB = 3e8 B/s) and binary for iB (300MiB); sizes take binary units as --memory does.
  NodesOptions nodes;
  auto* nodes_group = app.add_option_group(
      "Many nodes, one PFS",
      "Instead of a trace: N nodes, each reading its steps by completion routing from its own NVMe and one parallel "
      "file system that all share (fairly among the nodes reading it at that instant), with no coordination. "
      "Prints per node its step time, the bound D/(nvme + its PFS share), the PFS share of its bytes, and the "
      "aggregate against every node reading its NVMe alone. Bandwidths: bytes/s (3e8) or with a unit, decimal for B "
      "(300MB = 3e8) and binary for iB (300MiB); a list takes one value for all nodes or one per node. "
      "--json, --queue-depth and --seed apply.");
  nodes_group->add_option("--nodes", nodes.nodes, "number of nodes sharing the PFS (runs the multi-node model)");
  nodes_group->add_option("--nvme-bw", nodes.nvme_bw, "each node's NVMe read bandwidth (list)")->capture_default_str();
  nodes_group->add_option("--pfs-bw", nodes.pfs_bw, "the PFS's total read bandwidth, shared by all nodes")->capture_default_str();
  nodes_group->add_option("--pfs-node-cap", nodes.pfs_node_cap, "most one node takes from the PFS (its link; default: no cap)");
  nodes_group->add_option("--step-bytes", nodes.step_bytes, "bytes each step reads (list; e.g. 256MiB)")->capture_default_str();
  nodes_group->add_option("--node-load", nodes.load,
                          "per node, the fraction of time in (0,1] it reads with the PFS to itself: its gap between "
                          "steps is solo step time x (1/load - 1); 1 = back to back (list; default 1)");
  nodes_group->add_option("--node-gap", nodes.gap, "instead of --node-load: mean seconds between a step's end and the next step (list)")
      ->excludes("--node-load");
  nodes_group->add_option("--gaps", nodes.gaps, "gap distribution: exponential (independent nodes, --seed) | fixed")
      ->check(CLI::IsMember({"exponential", "fixed"}))
      ->capture_default_str();
  nodes_group->add_option("--window", nodes.window_s, "simulated seconds (default: 200 solo cycles of the slowest node)");
  nodes_group->add_flag("--no-takeover", nodes.no_takeover,
                        "no end-of-step handling: the PFS claims to the last block and the NVMe never takes over a PFS "
                        "straggler (one node is then exactly the two-tier completion model; the daemon does both)");
  nodes_group->add_option("--validate-nodes", nodes.validate_path,
                          "predict the per-node PFS shares measured in this JSON and say whether each is within 5 "
                          "points (exit 1 if not): {\"pfs_bps\": B, \"nodes\": [{\"node\": \"n0\", \"nvme_bps\": b, "
                          "\"step_bytes\": D, \"gap_s\": g, \"pfs_share\": 0.31, \"step_s\": t (optional)}, ...]}, "
                          "optional \"pfs_node_cap_bps\", \"block_bytes\", \"queue_depth\", \"gaps\", \"seed\", "
                          "\"window_s\", \"takeover\" (else the command line's); kvsim --nodes --json writes this format")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (!validate_path.empty()) return Validate(validate_path, node.chunk_latency_s);
  if (!nodes.validate_path.empty()) return ValidateNodes(nodes, node.queue_depth, seed, json_path);
  if (nodes.nodes > 0) return RunNodes(nodes, node.queue_depth, seed, json_path);
  if (trace_path.empty()) {
    std::cerr << "kvsim: --trace is required (or --validate, --nodes, --validate-nodes)\n";
    return 2;
  }

  auto profile = FindProfile(profile_name);
  auto memory = kvstream::ParseBytes(memory_text);
  auto order = ParseArrivalOrder(order_text);
  auto staging = kvstream::ParseBytes(staging_text);
  for (const absl::Status& s : {profile.status(), memory.status(), order.status(), staging.status()}) {
    if (!s.ok()) {
      std::cerr << "kvsim: " << s.message() << "\n";
      return 2;
    }
  }
  node.staging_bytes = static_cast<double>(*staging);
  std::vector<double> bw;
  try {
    bw = ParseList(bw_text);
    node.slo_s = ParseList(slo_text);
    if (!write_bw_text.empty()) node.write_bandwidth = ParseList(write_bw_text);
  } catch (const std::exception&) {
    std::cerr << "kvsim: --bw, --write-bw and --slo take comma-separated numbers\n";
    return 2;
  }
  if (!node.write_bandwidth.empty() &&
      (node.write_bandwidth.size() != bw.size() ||
       std::any_of(node.write_bandwidth.begin(), node.write_bandwidth.end(), [](double b) { return !(b > 0); }))) {
    std::cerr << "kvsim: --write-bw needs one positive bandwidth per tier of --bw\n";
    return 2;
  }
  std::vector<Replication> replications;
  std::stringstream rs(replication);
  for (std::string r; std::getline(rs, r, ',');) {
    auto parsed = ParseReplication(r);
    if (!parsed.ok()) {
      std::cerr << "kvsim: " << parsed.status().message() << "\n";
      return 2;
    }
    replications.push_back(*parsed);
  }
  if (replications.empty()) {
    std::cerr << "kvsim: --replication needs at least one policy\n";
    return 2;
  }
  if (bw.empty() || std::any_of(bw.begin(), bw.end(), [](double b) { return !(b > 0); }) || rate <= 0) {
    std::cerr << "kvsim: bandwidths and --rate must be positive\n";
    return 2;
  }
  std::vector<Policy> policies;
  std::stringstream ps(policies_text);
  for (std::string p; std::getline(ps, p, ',');) {
    auto policy = ParsePolicy(p);
    if (!policy.ok() || (policy->kind == PolicyKind::kStatic && bw.size() != 2)) {
      std::cerr << "kvsim: " << (policy.ok() ? "static:<g> needs exactly two tiers" : std::string(policy.status().message())) << "\n";
      return 2;
    }
    policies.push_back(*policy);
  }
  auto sched = MakeSchedule(bw, schedule);
  if (!sched.ok()) {
    std::cerr << "kvsim: " << sched.status().message() << "\n";
    return 2;
  }
  auto loaded = LoadTrace(trace_path);
  if (!loaded.ok()) {
    std::cerr << "kvsim: " << loaded.status().message() << "\n";
    return 2;
  }
  node.profile = *profile;
  node.memory_bytes = static_cast<double>(*memory);
  node.bandwidth = *sched;
  const std::vector<Request> trace = Arrange(*std::move(loaded), rate, *order, seed);

  // Storage demand from reuse distances (docs/design.md section 1), in trace blocks.
  std::vector<uint64_t> accesses;
  for (const Request& r : trace) accesses.insert(accesses.end(), r.blocks.begin(), r.blocks.end());
  const double block_kv = kTraceBlockTokens * node.profile.kv_bytes_per_token;
  const Demand demand = StorageDemand(ReuseDistances(accesses), static_cast<uint64_t>(node.memory_bytes / block_kv));

  // Each policy under each replication; a one-tier policy (recompute, serial, fastest) once, as
  // replication does not change it. Rows are labelled policy/replication when it varies.
  std::vector<PolicyResult> results;
  for (const Policy& p : policies) {
    const bool one_tier = p.kind == PolicyKind::kRecompute || p.kind == PolicyKind::kSerial || p.kind == PolicyKind::kFastest;
    for (size_t i = 0; i < (one_tier ? 1 : replications.size()); ++i) {
      node.replication = replications[i];
      results.push_back(Simulate(trace, node, p));
      if (!one_tier && replications.size() > 1) results.back().policy += "/" + replications[i].label();
    }
  }
  node.replication = replications.front();

  // Gap of static:g over the bound across g, on the completion policy's per-step demands.
  std::vector<std::pair<double, double>> gap_vs_g;
  if (bw.size() == 2) {
    for (int i = 0; i <= 20; ++i) {
      const double g = i / 20.0;
      gap_vs_g.emplace_back(g, Simulate(trace, node, Policy{PolicyKind::kStatic, g}).gap);
    }
  }

  std::printf("kvsim: %zu requests, model %s (%.0f KB/token, TP %u), memory %s, tiers %s B/s (writes %s), "
              "replication %s, rate x%g, order %s\n",
              trace.size(), profile_name.c_str(), node.profile.kv_bytes_per_token / 1e3, node.profile.tp,
              memory_text.c_str(), bw_text.c_str(), write_bw_text.empty() ? "as reads" : write_bw_text.c_str(),
              replication.c_str(), rate, order_text.c_str());
  std::printf("demand: V = %.1f GB reused, Pr[d > M] = %.3f, D = %.1f GB from storage\n\n",
              demand.reuses * block_kv / 1e9, demand.fraction(), demand.beyond * block_kv / 1e9);
  std::printf("%-20s %9s %9s %9s %9s %9s %8s %10s %9s %9s", "policy", "req/s", "ttft_mean", "ttft_p50", "ttft_p90",
              "ttft_p99", "gap", "retrieve_s", "wstall_s", "slo@");
  std::printf("%-7s %8s %s\n", (std::to_string(static_cast<int>(node.slo_s.empty() ? 0 : node.slo_s.front())) + "s").c_str(),
              "write_x", "GB written per tier");
  for (const PolicyResult& r : results) {
    // Write amplification: bytes written to all tiers over the new KV written once.
    double written = 0, first = r.bytes_written.empty() ? 0 : r.bytes_written[0];
    for (double b : r.bytes_written) written += b;
    std::printf("%-20s %9.3f %9.3f %9.3f %9.3f %9.3f %+7.1f%% %10.1f %9.1f %8.1f%% %7.2fx ", r.policy.c_str(),
                r.throughput_rps, r.ttft_mean, r.ttft_p50, r.ttft_p90, r.ttft_p99, 100 * r.gap, r.retrieval_s,
                r.write_stall_s, r.slo_attainment.empty() ? 0 : 100 * r.slo_attainment.front(),
                first > 0 ? written / first : 0);
    for (size_t k = 0; k < r.bytes_written.size(); ++k) std::printf("%s%.1f", k ? "/" : " ", r.bytes_written[k] / 1e9);
    if (r.secondary_dropped_bytes > 0) std::printf(" (%.1f GB of copies dropped)", r.secondary_dropped_bytes / 1e9);
    std::printf("\n");
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    j["trace"] = trace_path;
    j["model"] = profile_name;
    j["memory_bytes"] = node.memory_bytes;
    j["bandwidth_bps"] = bw;
    j["rate"] = rate;
    j["order"] = order_text;
    j["demand"] = {{"reused_bytes", demand.reuses * block_kv}, {"fraction_beyond_memory", demand.fraction()},
                   {"storage_bytes", demand.beyond * block_kv}};
    for (const PolicyResult& r : results) j["policies"].push_back(ToJson(r, node));
    for (auto [g, gap] : gap_vs_g) j["gap_vs_static_g"].push_back({{"g", g}, {"gap", gap}});
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  if (!plot_dir.empty()) Plot(plot_dir, results, gap_vs_g);
  return 0;
}

}  // namespace
}  // namespace kvsim

int main(int argc, char** argv) { return kvsim::Main(argc, argv); }
