// kvsim: trace-driven simulator of a serving node reading prefix KV through KVStream.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvstream/config.h"
#include "model.h"
#include "schedule.h"
#include "reuse.h"
#include "serving.h"
#include "trace.h"

namespace kvsim {
namespace {

// The model's time for a step of `d` bytes under policy `label`, the tiers reading `alone`
// bytes/s each when alone; NAN for a policy the model does not know.
double ModelTime(const std::string& label, double d, double block, uint32_t depth, double chunk, double chunk_latency_s,
                 const std::vector<double>& alone) {
  if (label == "completion") return CompletionTime(d, block, depth, alone);
  if (label == "fastest") return FastestTime(d, alone[0]);
  if (label == "serial") return SerialTime(d, static_cast<uint64_t>(std::ceil(d / chunk)), chunk_latency_s, alone[0]);
  if (label.rfind("static:", 0) == 0) return StaticTime(d, std::stod(label.substr(7)), alone[0], alone[1]);
  return NAN;
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
  std::printf("kvsim validate %s (kvbench): per-step bandwidths from only:%s and only:%s, block %.0f KiB, depth %u\n",
              path.c_str(), tiers[0].c_str(), tiers[1].c_str(), block / 1024, depth);
  std::printf("%-28s %12s %12s %8s\n", "policy", "measured_s", "model_s", "error");
  for (const auto& r : j.at("runs")) {
    const std::string label = r.at("label");
    if (label.rfind("only:", 0) == 0 || label.find('+') != std::string::npos) continue;  // references, writes
    const auto& steps = r.at("steps");
    double model = 0;
    for (size_t i = 0; i < steps.size() && i < (*alone[0]).size() && i < (*alone[1]).size(); ++i) {
      std::vector<double> bw;
      for (size_t t = 0; t < 2; ++t) {
        const auto& a = (*alone[t])[i];
        bw.push_back(a.at("bytes").get<double>() / a.at("seconds").get<double>());
      }
      // Serial per request pays no extra latency here: kvbench's serial reads chunk after chunk
      // on the daemon, whose per-chunk cost is inside the measured alone bandwidths.
      model += ModelTime(label, steps[i].at("bytes").get<double>(), block, depth, chunk, 0, bw);
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
  app.add_option("--seed", seed, "seed for --order random")->capture_default_str();
  app.add_option("--policies", policies_text, "comma-separated: recompute, serial, fastest, static:<g>, completion")->capture_default_str();
  app.add_option("--staging", staging_text, "staging memory for deferred writes; beyond it a step waits for writes")->capture_default_str();
  app.add_option("--token-budget", node.token_budget, "tokens per step")->capture_default_str();
  app.add_option("--max-running", node.max_running, "requests admitted at once")->capture_default_str();
  app.add_option("--queue-depth", node.queue_depth, "blocks in flight per tier (completion)")->capture_default_str();
  app.add_option("--slo", slo_text, "TTFT deadlines in seconds, comma-separated")->capture_default_str();
  app.add_option("--json", json_path, "write the full results as JSON here");
  app.add_option("--plot-dir", plot_dir, "write TTFT CDF and gap-vs-g PNG plots (gnuplot) into this directory");
  CLI11_PARSE(app, argc, argv);
  if (!validate_path.empty()) return Validate(validate_path, node.chunk_latency_s);
  if (trace_path.empty()) {
    std::cerr << "kvsim: --trace is required (or --validate)\n";
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
