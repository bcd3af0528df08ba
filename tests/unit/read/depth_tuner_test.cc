// The read queue depth under `queue_depth: auto`: DepthTuner as pure logic on a modelled tier
// whose bandwidth depends on its depth, then the engine on simulated tiers with latency, where a
// deeper queue pays (and one without, where it does not).
#include "read/depth_tuner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

constexpr uint64_t kRead = 1 << 20;

// A tier's bandwidth at a depth, at a time.
using Bandwidth = std::function<double(uint32_t depth, int64_t now_ns)>;

struct Run {
  uint32_t deepest = 0;  // the deepest the tuner tried
  uint32_t settled = 0;  // the depth at the end
};

// Feeds the tuner `reads` landings of a backlogged tier reading at `bps`.
Run Drive(DepthTuner* tuner, const Bandwidth& bps, int reads, int64_t* now) {
  Run run{tuner->depth(), 0};
  tuner->SetBacklogged(true, *now);
  std::string why;
  for (int i = 0; i < reads; ++i) {
    *now += static_cast<int64_t>(static_cast<double>(kRead) * 1e9 / bps(tuner->depth(), *now));
    if (tuner->Landed(kRead, *now, &why)) CHECK(!why.empty());
    run.deepest = std::max(run.deepest, tuner->depth());
  }
  run.settled = tuner->depth();
  return run;
}

// A tier at `per_read_bps` per read in flight, up to `most`.
Bandwidth Scales(double per_read_bps, double most) {
  return [=](uint32_t depth, int64_t) { return std::min(per_read_bps * depth, most); };
}

TEST_CASE("a given depth never changes") {
  DepthTuner tuner(4, 4);
  int64_t now = 0;
  CHECK(tuner.fixed());
  const Run r = Drive(&tuner, Scales(1e8, 1e10), 5000, &now);
  CHECK(r.deepest == 4);
  CHECK(r.settled == 4);
}

TEST_CASE("the depth doubles while the bandwidth follows, and stops where it stops") {
  DepthTuner tuner(2, 32);
  int64_t now = 0;
  // 250 MB/s per read in flight up to 1 GB/s: 4 reads fill it, 8 add nothing.
  const Run r = Drive(&tuner, Scales(2.5e8, 1e9), 3000, &now);
  CHECK(r.deepest == 8);  // tried
  CHECK(r.settled == 4);
  CHECK_FALSE(tuner.trying());
}

TEST_CASE("a tier that reads as fast at any depth keeps the smallest") {
  DepthTuner tuner(2, 32);
  int64_t now = 0;
  const Run r = Drive(&tuner, [](uint32_t, int64_t) { return 3e8; }, 2000, &now);
  CHECK(r.deepest == 4);
  CHECK(r.settled == 2);
}

TEST_CASE("the depth stops at its ceiling") {
  DepthTuner tuner(2, 24);
  int64_t now = 0;
  const Run r = Drive(&tuner, Scales(1e8, 1e12), 40000, &now);
  CHECK(r.deepest == 24);
  CHECK(r.settled == 24);
}

TEST_CASE("a bandwidth that changes by itself, not with the depth, does not deepen a tier") {
  // A cap that switches between 150 and 50 MB/s (bench.sh's fluctuating tier), at several periods.
  const int64_t period_ns = GENERATE(int64_t{700'000'000}, int64_t{1'000'000'000}, int64_t{2'200'000'000},
                                     int64_t{5'000'000'000});
  DepthTuner tuner(2, 32);
  int64_t now = 0;
  const Run r = Drive(&tuner, [=](uint32_t, int64_t t) { return (t / period_ns) % 2 == 0 ? 1.5e8 : 5e7; }, 8000,
                      &now);
  INFO("period " << period_ns << " ns, " << now / 1e9 << " s");
  CHECK(r.settled == 2);
  // So does one that ramps up while a trial runs.
  DepthTuner ramp(2, 32);
  now = 0;
  CHECK(Drive(&ramp, [](uint32_t, int64_t t) { return 5e7 + 1e8 * (t / 1e9); }, 3000, &now).settled == 2);
}

TEST_CASE("only time with work waiting measures: a tier short of work keeps its depth") {
  DepthTuner tuner(2, 32);
  int64_t now = 0;
  std::string why;
  for (int i = 0; i < 5000; ++i) {  // reads land with nothing more to claim: never backlogged
    now += 1'000'000;
    CHECK_FALSE(tuner.Landed(kRead, now, &why));
  }
  // Backlogged only between reads, in short spells: their time adds up, the idle time does not.
  const auto bps = Scales(2.5e8, 1e9);
  for (int i = 0; i < 6000; ++i) {
    if (i % 8 == 0) {
      tuner.SetBacklogged(false, now);
      now += 50'000'000;  // idle: counted nowhere
      tuner.SetBacklogged(true, now);
    }
    now += static_cast<int64_t>(kRead * 1e9 / bps(tuner.depth(), now));
    tuner.Landed(kRead, now, &why);
  }
  CHECK(tuner.depth() == 4);
}

TEST_CASE("a tier that becomes deeper later is probed again and grows") {
  DepthTuner tuner(2, 32);
  int64_t now = 0;
  CHECK(Drive(&tuner, [](uint32_t, int64_t) { return 1e9; }, 1000, &now).settled == 2);
  // Its reads now take longer (another node's load on a shared file system): depth pays.
  const int64_t start = now;
  const Run r = Drive(&tuner, Scales(1e8, 8e8), 30000, &now);
  CHECK(now - start > DepthTuner::kReprobeNs);
  CHECK(r.settled == 8);
  CHECK(r.deepest == 16);  // tried, and went back
}

// The engine on a simulated tier whose reads complete `latency` after their transfer: a read
// holds its slot for block/bandwidth + latency, so one slot reads at 1 MiB / (1 ms + 3 ms) and
// four fill the 1 GB/s tier.
TEST_CASE("under queue_depth auto the engine deepens a tier with latency, not one without") {
  const int64_t latency_ns = GENERATE(int64_t{0}, int64_t{3'000'000});
  SimRig rig({1e9}, SimConfig(1, /*depth=*/0), latency_ns);
  auto data = rig.Populate("k", 16, 4 * kBlock);
  CHECK(rig.engine->Stats().tiers[0].queue_depth == DefaultQueueDepth(kBlock));
  auto batch = SimRig::MakeBatch("k", 16, 4 * kBlock);
  std::vector<ChunkResult> results;
  for (int step = 0; step < 24; ++step) {
    rig.engine->Retrieve(batch.reads, &results);
    RequireIntact(batch, data, results);
  }
  INFO("latency " << latency_ns << " ns");
  CHECK(rig.engine->Stats().tiers[0].queue_depth == (latency_ns > 0 ? 4u : 2u));
}

TEST_CASE("a given queue_depth is the depth, and auto's ceiling is set by validation") {
  StoreConfig c = SimConfig(2, 0);
  c.tiers[1].queue_depth = 3;
  auto v = ValidateConfig(c);
  REQUIRE(v.ok());
  CHECK(v->tiers[0].queue_depth == DefaultQueueDepth(c.block_size));
  CHECK(v->tiers[0].queue_depth_max == AutoMaxQueueDepth(c.block_size));
  CHECK(AutoMaxQueueDepth(1 << 20) == 32);
  CHECK(AutoMaxQueueDepth(64 << 10) == 128);
  CHECK(v->tiers[1].queue_depth == 3);
  CHECK(v->tiers[1].queue_depth_max == 3);
  auto again = ValidateConfig(*v);  // idempotent
  REQUIRE(again.ok());
  CHECK(again->tiers[0].queue_depth_max == AutoMaxQueueDepth(c.block_size));
  c.tiers[1].queue_depth_max = 2;  // below its depth
  CHECK_FALSE(ValidateConfig(c).ok());
}

}  // namespace
}  // namespace kvstream::testing
