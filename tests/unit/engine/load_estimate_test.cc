// The engine's load estimate (Store::LoadSeconds) on simulated tiers: none before a tier is
// measured, close to what the next step takes once it is, following a tier that slows, nothing for
// a chunk in staging, and unreachable for chunks only a stalled tier holds.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <thread>

#include "eventually.h"
#include "sim_rig.h"

namespace kvstream::testing {
namespace {

constexpr int kChunks = 16;
constexpr size_t kChunk = 4 * kBlock;

std::vector<std::string> Keys(const std::string& prefix, int count) {
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

std::vector<double> Estimate(Store& store, const std::vector<std::string>& keys) {
  return store.LoadSeconds(store.Lookup(keys));
}

TEST_CASE("a chunk on tiers not measured yet has no estimate, and a chunk in staging adds nothing") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", 2, kChunk);
  const std::vector<double> none = Estimate(*rig.engine, Keys("k", 2));
  CHECK(std::isnan(none[0]));
  CHECK(std::isnan(none[1]));

  rig.clock->Pause();  // the staged chunk stays in staging
  const std::vector<uint8_t> data(kChunk, 7);
  REQUIRE(rig.engine->TryPersist("staged", data.data(), data.size()).ok());
  const std::vector<double> staged = Estimate(*rig.engine, {"staged", "absent"});
  CHECK(staged[0] == 0);
  CHECK(staged[1] == 0);
  rig.clock->Resume();
}

TEST_CASE("once the tiers are measured, a step's estimate is within 10% of its time, cumulative per chunk") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", kChunks, kChunk);
  auto batch = SimRig::MakeBatch("k", kChunks, kChunk);
  for (int i = 0; i < 3; ++i) rig.engine->Retrieve(batch.reads);  // the tiers' rates settle
  const std::vector<double> est = Estimate(*rig.engine, Keys("k", kChunks));
  for (int i = 1; i < kChunks; ++i) CHECK(est[i] >= est[i - 1]);
  CHECK(est[kChunks / 2 - 1] == Approx(est[kChunks - 1] / 2).epsilon(0.15));
  const StepRecord step = rig.engine->Retrieve(batch.reads);
  INFO("estimate " << est.back() << " s, step " << step.wall_seconds << " s");
  CHECK(est.back() == Approx(step.wall_seconds).epsilon(0.10));
  CHECK(step.estimate_seconds == Approx(step.wall_seconds).epsilon(0.10));  // the step's own, at its start
  CHECK(rig.engine->Stats().load_estimate_error.count > 0);
}

TEST_CASE("when a tier slows down, the estimate follows within a few steps") {
  SimRig rig({300 * MBps, 300 * MBps});
  rig.Populate("k", kChunks, kChunk);
  auto batch = SimRig::MakeBatch("k", kChunks, kChunk);
  for (int i = 0; i < 3; ++i) rig.engine->Retrieve(batch.reads);
  const double fast = Estimate(*rig.engine, Keys("k", kChunks)).back();
  rig.devices[1]->SetBandwidth(30 * MBps);
  for (int i = 0; i < 8; ++i) rig.engine->Retrieve(batch.reads);
  const double slow = Estimate(*rig.engine, Keys("k", kChunks)).back();
  const StepRecord step = rig.engine->Retrieve(batch.reads);
  CHECK(slow > 1.5 * fast);  // 600 -> 330 MB/s
  CHECK(slow == Approx(step.wall_seconds).epsilon(0.10));
}

TEST_CASE("chunks only a stalled tier holds are unreachable, while those another tier holds are not") {
  StoreConfig config;
  config.replication = ReplicationPolicy::kPrimary;  // new chunks on t0 only
  SimRig rig({300 * MBps, 300 * MBps}, config);
  rig.Populate("only0_", 4, kChunk);
  config.replication = ReplicationPolicy::kAll;
  Policies all = rig.engine->policies();
  all.replication = ReplicationPolicy::kAll;
  REQUIRE(rig.engine->SetPolicies(all));
  rig.Populate("both", 4, kChunk);
  auto warm = SimRig::MakeBatch("both", 4, kChunk);
  for (int i = 0; i < 3; ++i) rig.engine->Retrieve(warm.reads);
  const std::vector<LookupEntry> only0 = rig.engine->Lookup(Keys("only0_", 4));
  const std::vector<LookupEntry> both = rig.engine->Lookup(Keys("both", 4));
  REQUIRE(only0[0].tier_mask == 1u);
  REQUIRE(both[0].tier_mask == 3u);
  CHECK(std::isfinite(rig.engine->LoadSeconds(only0).back()));

  // t0 hangs under a step's reads: once its read is late, t0 is stalled and counts for nothing.
  rig.devices[0]->SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kRead ? SimFault::Hang() : SimFault::None();
  });
  std::atomic<bool> done{false};
  auto step = SimRig::MakeBatch("both", 4, kChunk);
  rig.engine->RetrieveAsync(step.reads, nullptr, [&](StepRecord) { done = true; });
  REQUIRE(Eventually([&] { return rig.engine->Stats().tiers[0].stalled; }));
  CHECK(std::isinf(rig.engine->LoadSeconds(only0).back()));
  CHECK(std::isfinite(rig.engine->LoadSeconds(both).back()));
  rig.devices[0]->SetFaultHook(nullptr);
  rig.devices[0]->ReleaseHung();
  REQUIRE(Eventually([&] { return done.load(); }));
}

}  // namespace
}  // namespace kvstream::testing
