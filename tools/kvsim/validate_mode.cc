// kvsim --validate (validate_mode.h).
#include "validate_mode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model.h"

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

}  // namespace

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

}  // namespace kvsim
