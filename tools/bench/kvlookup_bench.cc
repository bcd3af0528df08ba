// kvlookup_bench: what the daemon's load estimate adds to a Lookup (docs/design.md, "Load or
// recompute"). On a running kvstreamd it stores --keys chunks (on every tier: replication all),
// reads them once so every tier is measured (before that the estimate is NaN and costs nothing),
// then times Lookups of all the keys with estimate_load off and on, alternated: --rounds rounds
// of --calls calls per mode, the mode that goes first changing each round, after untimed warm-up
// calls of both. Prints each mode's p50 and p99 call time (client side: request built to reply
// parsed) and the ratio of the p99s; exit 3 when that ratio is over --check.
// Usage: kvlookup_bench --socket PATH [--keys N] [--rounds R] [--calls C] [--check RATIO]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kvstream/client.h"
#include "kvstream/key.h"
#include "kvstream/policies.h"

namespace {

double Quantile(std::vector<double> v, double q) {  // nearest rank
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  return v[static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1];
}

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "kvlookup_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvlookup_bench: Lookup latency with the daemon's load estimate off and on, alternated"};
  std::string socket, size_text = "64KiB", prefix = "kvlookup/";
  int keys = 1000, rounds = 10, calls = 500, warm_up = 200;
  double check = 1.10;
  app.add_option("--socket", socket, "kvstreamd's control socket")->required();
  app.add_option("--keys", keys, "keys per Lookup (all stored)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds, each timing both modes")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--calls", calls, "timed calls per mode per round")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warm-up", warm_up, "untimed calls per mode first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--chunk-size", size_text, "bytes per stored chunk")->capture_default_str();
  app.add_option("--key-prefix", prefix, "the keys are PREFIX0, PREFIX1, ...")->capture_default_str();
  app.add_option("--check", check, "exit 3 when p99 with the estimate / p99 without is over this")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const auto size = kvstream::ParseBytes(size_text);
  if (!size.ok() || *size == 0) return Fail("--chunk-size", size.ok() ? absl::InvalidArgumentError("0") : size.status());
  const uint64_t slot = (*size + 4095) / 4096 * 4096;

  auto client = kvstream::Client::Attach(socket, {"kvlookup_bench", 0, 1, slot * static_cast<uint64_t>(keys)});
  if (!client.ok()) return Fail("attach", client.status());
  kvstream::Client& c = **client;
  auto stats = c.Stats();
  if (!stats.ok()) return Fail("stats", stats.status());
  const uint32_t all_tiers = (1u << stats->tiers.size()) - 1;

  // Store the chunks (skipping those there already on every tier), then read them once.
  std::vector<std::string> names;
  std::vector<kvstream::ChunkRange> chunks;
  for (int i = 0; i < keys; ++i) {
    names.push_back(prefix + std::to_string(i));
    chunks.push_back({names.back(), i * slot, *size});
  }
  std::memset(c.arena(), 0x5a, slot * keys);
  auto found = c.Lookup(names);
  if (!found.ok()) return Fail("lookup", found.status());
  std::vector<kvstream::ChunkRange> missing;
  for (int i = 0; i < keys; ++i) {
    if (!(*found)[i].present || (*found)[i].tier_mask != all_tiers) missing.push_back(chunks[i]);
  }
  std::vector<kvstream::PersistResult> persisted;
  if (!missing.empty()) {
    if (absl::Status s = c.Persist(missing, &persisted); !s.ok()) return Fail("persist", s);
  }
  for (const auto& p : persisted) {
    if (!p.status.ok()) return Fail("persist", p.status);
  }
  auto step = c.Retrieve(chunks);
  if (!step.ok()) return Fail("retrieve", step.status());
  found = c.Lookup(names);
  if (!found.ok()) return Fail("lookup", found.status());
  const auto on_all = std::count_if(found->begin(), found->end(),
                                    [&](const kvstream::LookupEntry& e) { return e.present && e.tier_mask == all_tiers; });
  if (on_all != keys) {
    std::fprintf(stderr, "kvlookup_bench: %ld of %d keys are on every tier\n", static_cast<long>(on_all), keys);
    return 1;
  }

  std::vector<double> load;
  std::vector<double> seconds[2];  // [0] without the estimate, [1] with
  double estimate = NAN;
  auto call = [&](int mode) -> absl::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.Lookup(names, nullptr, 0, mode ? &load : nullptr);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) return r.status();
    if (mode) estimate = load.back();
    return s;
  };
  for (int i = 0; i < warm_up; ++i) {
    for (int mode : {0, 1}) {
      if (auto s = call(mode); !s.ok()) return Fail("lookup", s.status());
    }
  }
  if (!std::isfinite(estimate)) {
    std::fprintf(stderr, "kvlookup_bench: the daemon's estimate is %g: a tier is not measured, the estimate skipped\n",
                 estimate);
    return 1;
  }
  for (int round = 0; round < rounds; ++round) {
    for (int first : {0, 1}) {
      const int mode = (round + first) % 2;
      for (int i = 0; i < calls; ++i) {
        auto s = call(mode);
        if (!s.ok()) return Fail("lookup", s.status());
        seconds[mode].push_back(*s);
      }
    }
  }
  std::printf("Lookup of %d keys (on all %zu tiers), %d rounds x %d calls per mode, alternated; the estimate for "
              "all of them: %.3f s\n",
              keys, stats->tiers.size(), rounds, calls, estimate);
  const char* names_of[2] = {"estimate_load off", "estimate_load on"};
  for (int mode : {0, 1}) {
    std::printf("  %-18s p50 %8.1f us   p99 %8.1f us   (%zu calls)\n", names_of[mode], 1e6 * Quantile(seconds[mode], 0.5),
                1e6 * Quantile(seconds[mode], 0.99), seconds[mode].size());
  }
  const double ratio = Quantile(seconds[1], 0.99) / Quantile(seconds[0], 0.99);
  const bool pass = ratio <= check;
  std::printf("  p99 on / off = %.3f: %s (limit %.2f); p50 on / off = %.3f\n", ratio, pass ? "PASS" : "FAIL", check,
              Quantile(seconds[1], 0.5) / Quantile(seconds[0], 0.5));
  return pass ? 0 : 3;
}
