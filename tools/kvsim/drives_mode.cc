// kvsim --drives (drives_mode.h).
#include "drives_mode.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "kvstream/policies.h"  // ParseBytes
#include "model.h"
#include "nodes_input.h"        // ParseRate

namespace kvsim {
namespace {

constexpr double kBlock = 1 << 20;  // the daemon's default block_size

enum class Placement { kInTurn, kHash };

struct Outcome {
  double mean = 0;  // step time / bound, averaged over the steps
  double worst = 0;
};

// `steps` steps of `requests` prefixes of `chunks` chunks each; every chunk on one of `drives`
// drives (tiers 0..drives-1), and on the replica tier (the last) too when there is one.
Outcome Simulate(Placement placement, uint32_t drives, const std::vector<double>& bw, uint32_t requests,
                 uint32_t chunks, uint32_t blocks_per_chunk, uint32_t depth, uint32_t steps, uint64_t seed) {
  const bool replica = bw.size() > drives;
  double sum = 0;
  for (double b : bw) sum += b;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> any_drive(0, drives - 1);
  Outcome out;
  for (uint32_t s = 0; s < steps; ++s) {
    std::vector<uint32_t> holders;
    for (uint32_t r = 0; r < requests; ++r) {
      const uint32_t start = any_drive(rng);  // where the drive cursor stood when this prefix was written
      for (uint32_t c = 0; c < chunks; ++c) {
        const uint32_t drive = placement == Placement::kInTurn ? (start + c) % drives : any_drive(rng);
        const uint32_t mask = (1u << drive) | (replica ? 1u << drives : 0u);
        holders.insert(holders.end(), blocks_per_chunk, mask);
      }
    }
    const double bound = static_cast<double>(holders.size()) * kBlock / sum;
    const double ratio = PlacedCompletionTime(kBlock, depth, bw, holders) / bound;
    out.mean += ratio / steps;
    out.worst = std::max(out.worst, ratio);
  }
  return out;
}

}  // namespace

int RunDrives(const DrivesOptions& o, uint32_t queue_depth, uint64_t seed) {
  auto drive_bw = ParseRate(o.drive_bw);
  auto step = kvstream::ParseBytes(o.step_bytes);
  auto chunk = kvstream::ParseBytes(o.chunk_bytes);
  absl::StatusOr<double> replica_bw = o.replica_bw == "0" ? absl::StatusOr<double>(0.0) : ParseRate(o.replica_bw);
  for (const absl::Status& s : {drive_bw.status(), step.status(), chunk.status(), replica_bw.status()}) {
    if (!s.ok()) {
      std::cerr << "kvsim: " << s.message() << "\n";
      return 2;
    }
  }
  if (o.drives > 31 || *chunk < kBlock || *chunk % static_cast<uint64_t>(kBlock) != 0 || o.requests == 0 ||
      o.steps == 0 || queue_depth == 0 || *step < *chunk * o.requests) {
    std::cerr << "kvsim: --drives takes 1 to 31 drives, chunks of whole MiB, at least one request and step, a "
                 "queue depth > 0, and a step of at least one chunk per request\n";
    return 2;
  }
  const auto blocks_per_chunk = static_cast<uint32_t>(*chunk / static_cast<uint64_t>(kBlock));
  const auto chunks = static_cast<uint32_t>(*step / *chunk / o.requests);
  std::vector<double> bw(o.drives, *drive_bw);
  if (*replica_bw > 0) bw.push_back(*replica_bw);
  const double one_drive = *drive_bw + *replica_bw;  // a tier on one drive, with the replica tier
  double sum = 0;
  for (double b : bw) sum += b;
  std::printf("kvsim --drives: %u drives at %.2f GB/s%s; steps of %u requests x %u chunks of %.0f MiB, "
              "1 MiB blocks, depth %u, %u steps\n",
              o.drives, *drive_bw / 1e9,
              *replica_bw > 0 ? (" + a tier holding every chunk at " + std::to_string(*replica_bw / 1e9).substr(0, 5) +
                                 " GB/s").c_str()
                              : " (no other replica: replication primary)",
              o.requests, chunks, static_cast<double>(*chunk) / (1 << 20), queue_depth, o.steps);
  std::printf("%-10s %12s %12s %22s\n", "placement", "time/bound", "worst step", "vs one drive + replica");
  for (Placement p : {Placement::kInTurn, Placement::kHash}) {
    const Outcome r = Simulate(p, o.drives, bw, o.requests, chunks, blocks_per_chunk, queue_depth, o.steps, seed);
    // A tier on one drive reads at best at one_drive; the drives' step takes bound x mean.
    std::printf("%-10s %12.3f %12.3f %21.2fx\n", p == Placement::kInTurn ? "in turn" : "hash", r.mean, r.worst,
                one_drive > 0 ? sum / one_drive / r.mean : 0);
  }
  return 0;
}

}  // namespace kvsim
