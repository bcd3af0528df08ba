// SimRig: an Engine over SimDevices on a virtual clock, for deterministic tests of the step pool,
// routing, the step reader, the write stager and the replicator, with faults injected per device;
// MakeStep, a Step for the step pool and routing as pure logic.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine.h"
#include "read/step_pool.h"
#include "sim/sim_clock.h"
#include "sim/sim_device.h"
#include "test_util.h"

namespace kvstream::testing {

inline constexpr uint32_t kBlock = 1 << 20;

// A config of `tiers` simulated tiers named t0, t1, ... with `depth` reads in flight each.
inline StoreConfig SimConfig(size_t tiers, uint32_t depth = 2) {
  StoreConfig c;
  for (size_t i = 0; i < tiers; ++i) {
    TierConfig t;
    t.name = "t" + std::to_string(i);
    t.path = "/sim/" + t.name;
    t.capacity_bytes = 64ull << 30;
    t.queue_depth = depth;
    c.tiers.push_back(t);
  }
  return c;
}

// A config of two simulated tiers under `routing` ("completion", "static:0.75", "fastest").
inline StoreConfig WithRouting(std::string_view routing, uint32_t depth = 2) {
  StoreConfig c = SimConfig(2, depth);
  c.routing = *ParseRouting(routing);
  return c;
}

struct SimRig {
  std::shared_ptr<SimClock> clock = std::make_shared<SimClock>();
  std::vector<SimDevice*> devices;
  std::unique_ptr<Engine> engine;

  // One tier per bandwidth (bytes/s). `tweak` adjusts the config before it is validated.
  // `prefill` may put files on the devices before the engine scans them.
  explicit SimRig(const std::vector<double>& bandwidths, StoreConfig config = {}, int64_t latency_ns = 0,
                  const std::function<void(std::vector<SimDevice*>&)>& prefill = nullptr) {
    config.block_size = kBlock;
    config.verify_threads = 0;  // inline: deterministic on the virtual clock
    if (config.tiers.empty()) config.tiers = SimConfig(bandwidths.size()).tiers;
    auto valid = ValidateConfig(config);
    if (!valid.ok()) throw std::runtime_error(std::string(valid.status().message()));
    std::vector<std::unique_ptr<TierDevice>> devs;
    for (double bw : bandwidths) {
      auto d = std::make_unique<SimDevice>(clock.get(), bw, latency_ns);
      devices.push_back(d.get());
      devs.push_back(std::move(d));
    }
    if (prefill) prefill(devices);
    auto e = Engine::Create(*valid, std::move(devs), clock);
    if (!e.ok()) throw std::runtime_error(std::string(e.status().message()));
    engine = *std::move(e);
  }
  ~SimRig() {
    clock->Resume();
    engine.reset();
  }

  // Persists `count` chunks of `size` bytes named prefix0.. and waits until written.
  std::vector<std::vector<uint8_t>> Populate(const std::string& prefix, int count, size_t size) {
    std::vector<std::vector<uint8_t>> data;
    for (int i = 0; i < count; ++i) {
      data.push_back(Payload(size, std::hash<std::string>{}(prefix) + i));
      auto s = engine->Persist(prefix + std::to_string(i), data.back().data(), size);
      if (!s.ok()) throw std::runtime_error(std::string(s.message()));
    }
    engine->Flush();
    for (SimDevice* d : devices) d->ClearOps();
    return data;
  }

  struct Batch {
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<ChunkRead> reads;
  };
  static Batch MakeBatch(const std::string& prefix, int count, size_t size) {
    Batch b;
    b.buffers.resize(count);
    for (int i = 0; i < count; ++i) {
      b.buffers[i].assign(size, 0);
      b.reads.push_back({prefix + std::to_string(i), b.buffers[i].data(), size});
    }
    return b;
  }
};

// A step for the step pool as pure logic: one chunk per (holders, blocks) pair, holders a tier mask.
inline Step MakeStep(std::vector<std::pair<uint32_t, uint32_t>> chunks) {
  Step s;
  for (auto [holders, blocks] : chunks) s.AddChunk(holders, blocks);
  return s;
}

// Every chunk came back OK and byte-identical to `data`.
inline void RequireIntact(const SimRig::Batch& b, const std::vector<std::vector<uint8_t>>& data,
                          const std::vector<ChunkResult>& results) {
  for (size_t i = 0; i < data.size(); ++i) {
    INFO("chunk " << i << ": " << results[i].status.ToString());
    REQUIRE(results[i].status.ok());
    REQUIRE(std::memcmp(b.buffers[i].data(), data[i].data(), data[i].size()) == 0);
  }
}

}  // namespace kvstream::testing
