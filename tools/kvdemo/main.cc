// kvdemo: a small client workload against a running kvstreamd, as one tensor-parallel rank:
// persist chunks (replicated to every tier), retrieve them all in one step, verify every byte.
// Usage: kvdemo [--socket PATH] [--chunks N] [--chunk-size BYTES]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <random>

#include "kvstream/client.h"

int main(int argc, char** argv) {
  CLI::App app{"kvdemo: persist chunks through kvstreamd, then retrieve them in one step and verify them"};
  std::string socket = "/run/kvstream/kvstreamd.sock", size_text = "4MiB";
  int chunks = 16;
  app.add_option("--socket", socket, "kvstreamd's control socket")->capture_default_str();
  app.add_option("--chunks", chunks, "chunks to persist and retrieve")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--chunk-size", size_text, "bytes per chunk")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto size = kvstream::ParseBytes(size_text);
  if (!size.ok() || *size == 0) {
    std::fprintf(stderr, "kvdemo: bad --chunk-size\n");
    return 2;
  }
  const uint64_t slot = (*size + 4095) / 4096 * 4096;
  // Half the arena holds what we persist, the other half receives the retrieve.
  auto client = kvstream::Client::Attach(socket, {"kvdemo", 0, 1, 2 * slot * chunks});
  if (!client.ok()) {
    std::fprintf(stderr, "kvdemo: %s\n", client.status().ToString().c_str());
    return 1;
  }
  kvstream::Client& c = **client;
  std::mt19937_64 rng(42);
  std::vector<kvstream::ChunkRange> put, get;
  for (int i = 0; i < chunks; ++i) {
    uint8_t* p = c.arena() + i * slot;
    for (uint64_t b = 0; b < *size; ++b) p[b] = static_cast<uint8_t>(rng());
    put.push_back({"kvdemo/" + std::to_string(i), i * slot, *size});
    get.push_back({"kvdemo/" + std::to_string(i), (chunks + i) * slot, slot});
  }
  std::vector<kvstream::PersistResult> written;
  if (absl::Status s = c.Persist(put, &written); !s.ok()) {
    std::fprintf(stderr, "kvdemo: persist: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("kvdemo: persisted %d chunks of %s (written to tier mask 0x%x, %s)\n", chunks, size_text.c_str(),
              written[0].tier_mask, written[0].durable() ? "synced: durable" : "not synced");
  std::vector<kvstream::ChunkResult> results;
  auto step = c.Retrieve(get, &results);
  if (!step.ok()) {
    std::fprintf(stderr, "kvdemo: retrieve: %s\n", step.status().ToString().c_str());
    return 1;
  }
  int intact = 0;
  for (int i = 0; i < chunks; ++i) {
    intact += results[i].status.ok() && std::memcmp(c.arena() + (chunks + i) * slot, c.arena() + i * slot, *size) == 0;
  }
  std::printf("kvdemo: retrieved %d chunks in one step in %.4f s (bound %.4f s, gap %+.1f%%); %d/%d byte-identical\n",
              chunks, step->wall_seconds, step->bound_seconds, 100 * step->gap, intact, chunks);
  for (const kvstream::TierStep& t : step->tiers) {
    std::printf("  tier %-6s %5llu blocks %8.1f MiB  %8.1f MB/s\n", t.tier.c_str(),
                static_cast<unsigned long long>(t.blocks), t.bytes / 1048576.0, t.bandwidth_bps / 1e6);
  }
  return intact == chunks ? 0 : 1;
}
