// kvcore_bench: a core-level benchmark of the storage engine (no daemon). Populates chunks on
// the given tier directories once, then runs the same steps under each policy, one store per
// policy over the same files, and prints per-policy step time, bytes per tier and gap to the
// aggregate-bandwidth bound, side by side.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "kvstream/store.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

struct Policy {
  std::string label;
  RoutingPolicy routing;
  BatchingPolicy batching = BatchingPolicy::kStep;
  int only_tier = -1;  // >= 0: a store with just this tier (its bandwidth alone)
};

absl::StatusOr<Policy> ParsePolicy(const std::string& text, size_t tiers) {
  Policy p;
  p.label = text;
  if (text == "serial") {
    p.routing = {RoutingKind::kFastest, 1};
    p.batching = BatchingPolicy::kSerial;
    return p;
  }
  if (text.rfind("only:", 0) == 0) {
    p.only_tier = std::atoi(text.c_str() + 5);
    if (p.only_tier < 0 || static_cast<size_t>(p.only_tier) >= tiers) {
      return absl::InvalidArgumentError("only:<i> needs a tier index");
    }
    return p;
  }
  std::vector<std::string> parts = absl::StrSplit(text, '+');
  auto routing = ParseRouting(parts[0]);
  if (!routing.ok()) return routing.status();
  p.routing = *routing;
  if (parts.size() == 2) {
    auto batching = ParseBatching(parts[1]);
    if (!batching.ok()) return batching.status();
    p.batching = *batching;
  } else if (parts.size() > 2) {
    return absl::InvalidArgumentError("policy is <routing>[+<batching>], serial or only:<i>");
  }
  return p;
}

struct Result {
  Policy policy;
  std::vector<StepRecord> steps;
  double total_seconds = 0;
  double bound_seconds = 0;
  uint64_t bytes = 0;
  std::vector<uint64_t> tier_bytes;
};

// Results as JSON; each policy keeps its step records (the same fields as Store::RecentSteps),
// which kvsim can replay (--schedule replay:FILE).
std::string Json(const std::vector<Result>& results, const std::vector<TierConfig>& tiers,
                 const std::vector<double>& alone_bps, const nlohmann::json& workload) {
  nlohmann::json j;
  j["workload"] = workload;
  for (size_t t = 0; t < tiers.size(); ++t) j["tiers"].push_back({{"name", tiers[t].name}, {"alone_bps", alone_bps[t]}});
  for (const Result& r : results) {
    nlohmann::json p = {{"policy", r.policy.label}, {"bytes", r.bytes}, {"total_seconds", r.total_seconds},
                        {"bound_seconds", r.bound_seconds}, {"tier_bytes", r.tier_bytes}};
    for (const StepRecord& s : r.steps) {
      nlohmann::json step = {{"id", s.id}, {"bytes", s.bytes}, {"wall_seconds", s.wall_seconds},
                             {"bound_seconds", s.bound_seconds}, {"gap", s.gap}};
      for (const TierStep& t : s.tiers) {
        step["tiers"].push_back({{"tier", t.tier}, {"blocks", t.blocks}, {"bytes", t.bytes},
                                 {"busy_seconds", t.busy_seconds}, {"bandwidth_bps", t.bandwidth_bps}});
      }
      p["steps"].push_back(step);
    }
    j["policies"].push_back(p);
  }
  return j.dump(2) + "\n";
}

int Main(int argc, char** argv) {
  CLI::App app{"kvcore_bench: step retrieval time of every routing/batching policy on real tier "
               "directories, side by side, against the aggregate-bandwidth bound"};
  std::vector<std::string> tier_specs;
  std::string chunk_size_text = "8MiB", block_size_text = "1MiB", json_path;
  int requests = 4, chunks_per_request = 8, steps = 6, depth = 0;
  std::string policies_text = "only:0,only:1,completion,static:0.5,static:0.67,fastest,serial";
  app.add_option("--tier", tier_specs, "NAME=DIR, in read-preference order (repeat; at least one)")->required();
  app.add_option("--chunk-size", chunk_size_text, "bytes per chunk")->capture_default_str();
  app.add_option("--block-size", block_size_text, "bytes per read block")->capture_default_str();
  app.add_option("--requests", requests, "requests per step")->capture_default_str();
  app.add_option("--chunks", chunks_per_request, "chunks per request")->capture_default_str();
  app.add_option("--steps", steps, "measured steps per policy (each reads distinct chunks)")->capture_default_str();
  app.add_option("--queue-depth", depth, "reads in flight per tier (0 = default)")->capture_default_str();
  app.add_option("--policies", policies_text,
                 "comma-separated: completion | static:<g> | fastest, optionally +serial; serial "
                 "(= fastest+serial, LMCache-like); only:<i> (tier i alone)")->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  bool register_buffers = false;
  int settle_seconds = 3;
  app.add_option("--settle", settle_seconds, "seconds to wait after populating, before timing")->capture_default_str();
  app.add_flag("--register", register_buffers, "register the destination buffers for fixed-buffer reads");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto chunk_size = ParseBytes(chunk_size_text);
  auto block_size = ParseBytes(block_size_text);
  if (!chunk_size.ok() || !block_size.ok()) {
    std::cerr << "bad size: " << (chunk_size.ok() ? block_size.status() : chunk_size.status()) << "\n";
    return 2;
  }
  StoreConfig base;
  base.block_size = static_cast<uint32_t>(*block_size);
  base.staging_limit_bytes = std::max<uint64_t>(256ull << 20, 4 * *chunk_size);
  for (const std::string& spec : tier_specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) {
      std::cerr << "--tier wants NAME=DIR, got '" << spec << "'\n";
      return 2;
    }
    TierConfig t;
    t.name = spec.substr(0, eq);
    t.path = spec.substr(eq + 1);
    t.capacity_bytes = 1ull << 40;
    t.queue_depth = static_cast<uint32_t>(depth);
    base.tiers.push_back(t);
  }
  std::vector<Policy> policies;
  for (const std::string& p : std::vector<std::string>(absl::StrSplit(policies_text, ','))) {
    auto policy = ParsePolicy(p, base.tiers.size());
    if (!policy.ok()) {
      std::cerr << "policy '" << p << "': " << policy.status().message() << "\n";
      return 2;
    }
    policies.push_back(*policy);
  }

  const int per_step = requests * chunks_per_request;
  const int total_chunks = per_step * steps;
  auto key = [](int i) { return "bench/" + std::to_string(i); };
  {  // Populate once, replicated to every tier.
    auto store = Store::Open(base);
    if (!store.ok()) {
      std::cerr << "open: " << store.status() << "\n";
      return 1;
    }
    std::vector<std::string> keys;
    for (int i = 0; i < total_chunks; ++i) keys.push_back(key(i));
    auto present = (*store)->Lookup(keys);
    const uint32_t all = (1u << base.tiers.size()) - 1;
    std::vector<uint8_t> payload(*chunk_size);
    std::mt19937_64 rng(1);
    int written = 0;
    for (int i = 0; i < total_chunks; ++i) {
      if (present[i].present && present[i].tier_mask == all && present[i].size == *chunk_size) continue;
      for (size_t b = 0; b + 8 <= payload.size(); b += 8) {
        const uint64_t x = rng();
        std::memcpy(&payload[b], &x, 8);
      }
      if (auto s = (*store)->Persist(key(i), payload.data(), payload.size()); !s.ok()) {
        std::cerr << "persist: " << s << "\n";
        return 1;
      }
      ++written;
    }
    (*store)->Flush();
    std::fprintf(stderr, "populated %d chunks of %llu bytes (%d already present)\n", written,
                 static_cast<unsigned long long>(*chunk_size), total_chunks - written);
  }
  // Let the population's writes drain below the tiers before anything is timed.
  sync();
  std::this_thread::sleep_for(std::chrono::seconds(settle_seconds));

  // One page-aligned destination area, as a session arena would be: reads go straight in by O_DIRECT.
  const size_t slot = (*chunk_size + 4095) / 4096 * 4096;
  std::unique_ptr<uint8_t, decltype(&std::free)> arena(
      static_cast<uint8_t*>(std::aligned_alloc(4096, slot * per_step)), &std::free);
  std::memset(arena.get(), 0, slot * per_step);
  std::vector<uint8_t*> dst(per_step);
  for (int i = 0; i < per_step; ++i) dst[i] = arena.get() + i * slot;

  std::vector<Result> results;
  std::vector<double> alone_bps(base.tiers.size(), 0);
  for (const Policy& policy : policies) {
    StoreConfig c = base;
    c.routing = policy.routing;
    c.batching = policy.batching;
    if (policy.only_tier >= 0) c.tiers = {base.tiers[policy.only_tier]};
    auto store = Store::Open(c);
    if (!store.ok()) {
      std::cerr << "open: " << store.status() << "\n";
      return 1;
    }
    if (register_buffers) {
      if (absl::Status s = (*store)->RegisterMemory(arena.get(), slot * per_step); !s.ok()) {
        std::cerr << "register: " << s << " (continuing with plain buffers)\n";
      }
    }
    Result r;
    r.policy = policy;
    r.tier_bytes.assign(base.tiers.size(), 0);
    for (int s = 0; s < steps; ++s) {
      std::vector<ChunkRead> reads;
      for (int i = 0; i < per_step; ++i) reads.push_back({key(s * per_step + i), dst[i], *chunk_size});
      std::vector<ChunkResult> chunk_results;
      StepRecord rec = (*store)->Retrieve(reads, &chunk_results);
      if (rec.hits != static_cast<uint32_t>(per_step)) {
        std::cerr << policy.label << ": step " << s << " had " << rec.hits << " hits of " << per_step << "\n";
        return 1;
      }
      r.total_seconds += rec.wall_seconds;
      r.bytes += rec.bytes;
      for (const TierStep& ts : rec.tiers) {
        for (size_t t = 0; t < base.tiers.size(); ++t) {
          if (base.tiers[t].name == ts.tier) r.tier_bytes[t] += ts.bytes;
        }
      }
      r.steps.push_back(std::move(rec));
    }
    if (policy.only_tier >= 0) alone_bps[policy.only_tier] = r.bytes / r.total_seconds;
    results.push_back(std::move(r));
  }
  const double sum_alone = std::accumulate(alone_bps.begin(), alone_bps.end(), 0.0);
  double serial_time = 0;
  for (Result& r : results) {
    if (sum_alone > 0) r.bound_seconds = r.bytes / sum_alone;
    if (r.policy.label == "serial") serial_time = r.total_seconds;
  }

  std::printf("%d steps x %d requests x %d chunks of %s, block %s\n", steps, requests, chunks_per_request,
              chunk_size_text.c_str(), block_size_text.c_str());
  for (size_t t = 0; t < base.tiers.size(); ++t) {
    std::printf("tier %-8s alone: %8.1f MB/s\n", base.tiers[t].name.c_str(), alone_bps[t] / 1e6);
  }
  std::printf("bound D/sum(b_alone) per step: %.4f s\n\n",
              sum_alone > 0 ? results[0].bytes / sum_alone / steps : 0.0);
  std::printf("%-16s %10s %10s %9s %9s", "policy", "step_s", "MB/s", "gap", "vs_serial");
  for (const TierConfig& t : base.tiers) std::printf(" %8s", (t.name + "%").c_str());
  std::printf("\n");
  for (const Result& r : results) {
    const double step = r.total_seconds / r.steps.size();
    const double gap = r.bound_seconds > 0 ? r.total_seconds / r.bound_seconds - 1 : 0;
    std::printf("%-16s %10.4f %10.1f %+8.1f%%", r.policy.label.c_str(), step, r.bytes / r.total_seconds / 1e6, 100 * gap);
    if (serial_time > 0) {
      std::printf(" %8.2fx", serial_time / r.total_seconds);
    } else {
      std::printf(" %9s", "-");
    }
    for (uint64_t b : r.tier_bytes) std::printf(" %7.1f%%", r.bytes ? 100.0 * b / r.bytes : 0.0);
    std::printf("\n");
  }
  if (!json_path.empty()) {
    const StoreConfig effective = *ValidateConfig(base);
    const nlohmann::json workload = {{"chunk_bytes", *chunk_size}, {"chunks_per_step", per_step},
                                     {"block_bytes", base.block_size}, {"queue_depth", effective.tiers[0].queue_depth}};
    std::ofstream(json_path) << Json(results, base.tiers, alone_bps, workload);
  }
  return 0;
}

}  // namespace
}  // namespace kvstream

int main(int argc, char** argv) { return kvstream::Main(argc, argv); }
