// kvsim --trace (serving_mode.h): options to a NodeConfig, the simulations, and their report.
#include "serving_mode.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "kvstream/config.h"
#include "reuse.h"
#include "schedule.h"
#include "trace.h"

namespace kvsim {
namespace {

// What the serving options give, checked.
struct ServingSetup {
  NodeConfig node;                        // replication: the first of `replications`
  std::vector<double> bw;                 // --bw
  std::vector<Replication> replications;  // --replication, in order
  std::vector<Policy> policies;           // --policies, in order
  std::vector<Request> trace;             // arranged by --rate (or --load), --order and --seed
  size_t trace_requests = 0;              // in the whole trace, before --requests
  double rate = 1;                        // the arrival-rate scale applied (--rate, or --load's)
};

// Parses and checks the options and loads the trace: false, with a message on stderr, when one
// is bad.
bool Setup(const ServingOptions& o, ServingSetup* setup) {
  NodeConfig& node = setup->node;
  node = o.node;
  auto profile = FindProfile(o.profile_name);
  auto memory = kvstream::ParseBytes(o.memory_text);
  auto order = ParseArrivalOrder(o.order_text);
  auto staging = kvstream::ParseBytes(o.staging_text);
  for (const absl::Status& s : {profile.status(), memory.status(), order.status(), staging.status()}) {
    if (!s.ok()) {
      std::cerr << "kvsim: " << s.message() << "\n";
      return false;
    }
  }
  node.staging_bytes = static_cast<double>(*staging);
  std::vector<double>& bw = setup->bw;
  try {
    bw = ParseList(o.bw_text);
    node.slo_s = ParseList(o.slo_text);
    if (!o.write_bw_text.empty()) node.write_bandwidth = ParseList(o.write_bw_text);
  } catch (const std::exception&) {
    std::cerr << "kvsim: --bw, --write-bw and --slo take comma-separated numbers\n";
    return false;
  }
  if (!node.write_bandwidth.empty() &&
      (node.write_bandwidth.size() != bw.size() ||
       std::any_of(node.write_bandwidth.begin(), node.write_bandwidth.end(), [](double b) { return !(b > 0); }))) {
    std::cerr << "kvsim: --write-bw needs one positive bandwidth per tier of --bw\n";
    return false;
  }
  std::vector<Replication>& replications = setup->replications;
  std::stringstream rs(o.replication);
  for (std::string r; std::getline(rs, r, ',');) {
    auto parsed = ParseReplication(r);
    if (!parsed.ok()) {
      std::cerr << "kvsim: " << parsed.status().message() << "\n";
      return false;
    }
    replications.push_back(*parsed);
  }
  if (replications.empty()) {
    std::cerr << "kvsim: --replication needs at least one policy\n";
    return false;
  }
  if (bw.empty() || std::any_of(bw.begin(), bw.end(), [](double b) { return !(b > 0); }) || o.rate <= 0 || o.load < 0) {
    std::cerr << "kvsim: bandwidths and --rate must be positive (and --load not negative)\n";
    return false;
  }
  if (o.attention_text != "on" && o.attention_text != "off") {
    std::cerr << "kvsim: --attention is on or off\n";
    return false;
  }
  node.attention = o.attention_text == "on";
  std::vector<Policy>& policies = setup->policies;
  std::stringstream ps(o.policies_text);
  for (std::string p; std::getline(ps, p, ',');) {
    auto policy = ParsePolicy(p);
    if (!policy.ok() || (policy->kind == PolicyKind::kStatic && bw.size() != 2)) {
      std::cerr << "kvsim: " << (policy.ok() ? "static:<g> needs exactly two tiers" : std::string(policy.status().message())) << "\n";
      return false;
    }
    policies.push_back(*policy);
  }
  auto sched = MakeSchedule(bw, o.schedule);
  if (!sched.ok()) {
    std::cerr << "kvsim: " << sched.status().message() << "\n";
    return false;
  }
  absl::StatusOr<std::vector<Request>> loaded;
  if (!o.synthetic.empty()) {
    auto synthetic = ParseSynthetic(o.synthetic);
    if (synthetic.ok()) {
      loaded = LongDocTrace(*synthetic, o.seed);
    } else {
      loaded = synthetic.status();
    }
  } else {
    loaded = LoadTrace(o.trace_path);
  }
  if (!loaded.ok()) {
    std::cerr << "kvsim: " << loaded.status().message() << "\n";
    return false;
  }
  node.profile = *profile;
  node.memory_bytes = static_cast<double>(*memory);
  node.bandwidth = *sched;
  node.replication = replications.front();
  setup->trace_requests = loaded->size();
  // --requests takes the first arrivals of the arranged trace, and --load is measured on them.
  setup->rate = o.load > 0 ? 1 : o.rate;
  setup->trace = Arrange(*std::move(loaded), setup->rate, *order, o.seed);
  if (o.requests > 0 && o.requests < setup->trace.size()) setup->trace.resize(o.requests);
  if (o.load > 0) {
    setup->rate = OfferedLoadRate(setup->trace, node, o.load);
    for (Request& r : setup->trace) r.arrival_s /= setup->rate;
  }
  return true;
}

// Storage demand from reuse distances (docs/design.md section 1), in trace blocks of `block_kv`
// bytes of KV each.
Demand TraceDemand(const ServingSetup& s, double block_kv) {
  std::vector<uint64_t> accesses;
  for (const Request& r : s.trace) accesses.insert(accesses.end(), r.blocks.begin(), r.blocks.end());
  return StorageDemand(ReuseDistances(accesses), static_cast<uint64_t>(s.node.memory_bytes / block_kv));
}

// Each policy under each replication; a one-tier policy (recompute, serial, fastest) once, as
// replication does not change it. Rows are labelled policy/replication when it varies.
std::vector<PolicyResult> SimulatePolicies(const ServingSetup& s) {
  NodeConfig node = s.node;
  std::vector<PolicyResult> results;
  for (const Policy& p : s.policies) {
    const bool one_tier = p.kind == PolicyKind::kRecompute || p.kind == PolicyKind::kSerial || p.kind == PolicyKind::kFastest;
    for (size_t i = 0; i < (one_tier ? 1 : s.replications.size()); ++i) {
      node.replication = s.replications[i];
      results.push_back(Simulate(s.trace, node, p));
      if (!one_tier && s.replications.size() > 1) results.back().policy += "/" + s.replications[i].label();
    }
  }
  return results;
}

// Gap of static:g over the bound across g, on the completion policy's per-step demands (two
// tiers, when a static policy runs or there are plots to draw; none otherwise).
std::vector<std::pair<double, double>> GapVsStaticShare(const ServingOptions& o, const ServingSetup& s) {
  std::vector<std::pair<double, double>> gap_vs_g;
  const bool wanted = !o.plot_dir.empty() || std::any_of(s.policies.begin(), s.policies.end(), [](const Policy& p) {
                        return p.kind == PolicyKind::kStatic;
                      });
  if (s.bw.size() == 2 && wanted) {
    for (int i = 0; i <= 20; ++i) {
      const double g = i / 20.0;
      gap_vs_g.emplace_back(g, Simulate(s.trace, s.node, Policy{PolicyKind::kStatic, g}).gap);
    }
  }
  return gap_vs_g;
}

// The run's settings, the storage demand, and one row per policy.
void PrintReport(const ServingOptions& o, const ServingSetup& s, const Demand& demand, double block_kv,
                 const std::vector<PolicyResult>& results) {
  const NodeConfig& node = s.node;
  std::string requests = std::to_string(s.trace.size()) + " requests";
  if (s.trace.size() < s.trace_requests) requests += " (the first of " + std::to_string(s.trace_requests) + ")";
  char rate[96];
  std::snprintf(rate, sizeof(rate), "rate x%.4g", s.rate);
  if (o.load > 0) {
    std::snprintf(rate, sizeof(rate), "rate x%.4g (--load %g of recomputing every prompt)", s.rate, o.load);
  }
  std::printf("kvsim: %s%s, model %s (%.0f KB/token, TP %u), memory %s, tiers %s B/s (writes %s), "
              "replication %s, %s, order %s\n",
              o.synthetic.empty() ? "" : ("synthetic " + o.synthetic + ", ").c_str(), requests.c_str(),
              o.profile_name.c_str(), node.profile.kv_bytes_per_token / 1e3, node.profile.tp, o.memory_text.c_str(),
              o.bw_text.c_str(), o.write_bw_text.empty() ? "as reads" : o.write_bw_text.c_str(), o.replication.c_str(),
              rate, o.order_text.c_str());
  std::printf("loads %s; prefill %s\n",
              node.overlap ? "overlap forward passes (--overlap: a request waits for its own load, the others compute)"
                           : "are each step's T_ret, before its forward pass",
              node.attention ? "with the attention term" : "without the attention term (--attention off)");
  std::printf("demand: V = %.1f GB reused, Pr[d > M] = %.3f, D = %.1f GB from storage\n\n",
              demand.reuses * block_kv / 1e9, demand.fraction(), demand.beyond * block_kv / 1e9);
  std::printf("%-20s %9s %9s %9s %9s %9s %8s %10s %9s %9s %9s", "policy", "req/s", "ttft_mean", "ttft_p50", "ttft_p90",
              "ttft_p99", "gap", "retrieve_s", "wstall_s", "wdrop_GB", "slo@");
  std::printf("%-7s %8s %s\n", (std::to_string(static_cast<int>(node.slo_s.empty() ? 0 : node.slo_s.front())) + "s").c_str(),
              "write_x", "GB written per tier");
  for (const PolicyResult& r : results) {
    // Write amplification: bytes written to all tiers over the new KV written once.
    double written = 0, first = r.bytes_written.empty() ? 0 : r.bytes_written[0];
    for (double b : r.bytes_written) written += b;
    std::printf("%-20s %9.3f %9.3f %9.3f %9.3f %9.3f %+7.1f%% %10.1f %9.1f %9.1f %8.1f%% %7.2fx ", r.policy.c_str(),
                r.throughput_rps, r.ttft_mean, r.ttft_p50, r.ttft_p90, r.ttft_p99, 100 * r.gap, r.retrieval_s,
                r.write_stall_s, r.write_dropped_bytes / 1e9, r.slo_attainment.empty() ? 0 : 100 * r.slo_attainment.front(),
                first > 0 ? written / first : 0);
    for (size_t k = 0; k < r.bytes_written.size(); ++k) std::printf("%s%.1f", k ? "/" : " ", r.bytes_written[k] / 1e9);
    if (r.secondary_dropped_bytes > 0) std::printf(" (%.1f GB of copies dropped)", r.secondary_dropped_bytes / 1e9);
    if (r.policy.rfind("verdict", 0) == 0) {
      const uint64_t hits = r.storage_hit_blocks + r.hit_blocks_computed;
      std::printf(" (%.1f%% of storage hits computed)", hits ? 100.0 * r.hit_blocks_computed / hits : 0.0);
    }
    std::printf("\n");
  }
}

// One policy's result, an entry of --json's "policies".
nlohmann::json ToJson(const PolicyResult& r, const NodeConfig& node) {
  nlohmann::json slo = nlohmann::json::object();
  for (size_t i = 0; i < node.slo_s.size(); ++i) slo[std::to_string(node.slo_s[i])] = r.slo_attainment[i];
  return {{"policy", r.policy}, {"requests", r.requests}, {"steps", r.steps}, {"makespan_s", r.makespan_s},
          {"throughput_rps", r.throughput_rps}, {"throughput_tokens_per_s", r.throughput_tokens_per_s},
          {"ttft_mean_s", r.ttft_mean}, {"ttft_p50_s", r.ttft_p50}, {"ttft_p90_s", r.ttft_p90},
          {"ttft_p99_s", r.ttft_p99}, {"slo_attainment", slo}, {"retrieval_s", r.retrieval_s},
          {"bound_s", r.bound_s}, {"gap", r.gap}, {"forward_s", r.forward_s}, {"write_stall_s", r.write_stall_s},
          {"bytes_read_per_tier", r.bytes_read}, {"bytes_written_per_tier", r.bytes_written},
          {"secondary_dropped_bytes", r.secondary_dropped_bytes}, {"write_dropped_bytes", r.write_dropped_bytes},
          {"hit_blocks_computed", r.hit_blocks_computed},
          {"memory_hit_blocks", r.memory_hit_blocks}, {"storage_hit_blocks", r.storage_hit_blocks},
          {"computed_blocks", r.computed_blocks}};
}

// --json: the settings, the demand, every policy's result and the gap across static shares.
void WriteJson(const ServingOptions& o, const ServingSetup& s, const Demand& demand, double block_kv,
               const std::vector<PolicyResult>& results, const std::vector<std::pair<double, double>>& gap_vs_g) {
  const NodeConfig& node = s.node;
  nlohmann::json j;
  j["trace"] = o.synthetic.empty() ? o.trace_path : "synthetic:" + o.synthetic;
  j["requests"] = s.trace.size();
  j["overlap"] = node.overlap;
  j["attention"] = node.attention;
  j["model"] = o.profile_name;
  j["memory_bytes"] = node.memory_bytes;
  j["bandwidth_bps"] = s.bw;
  j["rate"] = s.rate;
  j["order"] = o.order_text;
  j["demand"] = {{"reused_bytes", demand.reuses * block_kv}, {"fraction_beyond_memory", demand.fraction()},
                 {"storage_bytes", demand.beyond * block_kv}};
  for (const PolicyResult& r : results) j["policies"].push_back(ToJson(r, node));
  for (auto [g, gap] : gap_vs_g) j["gap_vs_static_g"].push_back({{"g", g}, {"gap", gap}});
  std::ofstream(o.json_path) << j.dump(2) << "\n";
}

// --plot-dir: the data, a gnuplot script and the PNGs it renders.
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

}  // namespace

int RunServing(const ServingOptions& o) {
  ServingSetup s;
  if (!Setup(o, &s)) return 2;
  const double block_kv = kTraceBlockTokens * s.node.profile.kv_bytes_per_token;
  const Demand demand = TraceDemand(s, block_kv);
  const std::vector<PolicyResult> results = SimulatePolicies(s);
  const std::vector<std::pair<double, double>> gap_vs_g = GapVsStaticShare(o, s);
  PrintReport(o, s, demand, block_kv, results);
  if (!o.json_path.empty()) WriteJson(o, s, demand, block_kv, results, gap_vs_g);
  if (!o.plot_dir.empty()) Plot(o.plot_dir, results, gap_vs_g);
  return 0;
}

}  // namespace kvsim
