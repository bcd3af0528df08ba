// The engine's loop and calls: policies switched at run time, shutdown.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "sim_rig.h"

namespace kvstream::testing {
namespace {

TEST_CASE("policies switched at run time apply to the next step and never to a pending one") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", 8, 4 * kBlock);
  auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
  StepRecord first = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(first.routing == "completion");
  CHECK(first.tiers[1].blocks > 0);

  Policies fastest = rig.engine->policies();
  fastest.routing = *ParseRouting("fastest");
  fastest.writes = WritePolicy::kImmediate;
  CHECK(rig.engine->SetPolicies(fastest));  // idle: applies at once
  CHECK(ToString(rig.engine->policies().routing) == "fastest");
  CHECK(rig.engine->Stats().policies.writes == WritePolicy::kImmediate);
  StepRecord second = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(second.routing == "fastest");
  CHECK(second.tiers[1].blocks == 0);

  // Switching back while a step is pending: that step finishes under the old policy.
  rig.clock->Pause();
  std::atomic<bool> done{false};
  StepRecord pending;
  rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord r) {
    pending = r;
    done = true;
  });
  rig.clock->WaitUntilQuiescent();  // placed and reading
  Policies completion = fastest;
  completion.routing = *ParseRouting("completion");
  CHECK_FALSE(rig.engine->SetPolicies(completion));  // waits for the pending step
  CHECK(ToString(rig.engine->policies().routing) == "fastest");
  rig.clock->Resume();
  while (!done) std::this_thread::yield();
  CHECK(pending.routing == "fastest");
  CHECK(pending.tiers[1].blocks == 0);
  CHECK(ToString(rig.engine->policies().routing) == "completion");
  StepRecord last = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(last.routing == "completion");
  CHECK(last.tiers[1].blocks > 0);
}

TEST_CASE("calls after shutdown fail cleanly instead of hanging") {
  SimRig rig({300 * MBps});
  rig.Populate("k", 1, kBlock);
  rig.engine->Shutdown();
  auto batch = SimRig::MakeBatch("k", 1, kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  CHECK(absl::IsUnavailable(results[0].status));
  CHECK(rec.failed == 1);
  CHECK(absl::IsUnavailable(rig.engine->Persist("x", batch.buffers[0].data(), 10)));
  auto ev = rig.engine->Evict({"k0", "", 0, false});
  REQUIRE(ev.ok());
  CHECK(ev->replicas == 1);
}

}  // namespace
}  // namespace kvstream::testing

namespace kvstream::testing {
namespace {

// Runs the loop past its next tier check (virtual time moves only while it waits).
void PassTierCheck(SimRig& rig) {
  static uint64_t seed = 0;
  SimDevice& d = *rig.devices[0];
  d.SetFaultHook([](const SimOpInfo&) { return SimFault::Delay(600'000'000); });
  for (int i = 0; i < 2; ++i) {  // a slow write gives the loop something to wait for
    auto data = Payload(4096, ++seed);
    REQUIRE(rig.engine->Persist("tick", data.data(), data.size()).ok());
    rig.engine->Flush();
  }
  d.SetFaultHook(nullptr);
  REQUIRE(rig.engine->Evict({"no-such-key", "", 0, false}).ok());  // runs on the loop after its check
}

TEST_CASE("a tier whose directory was deleted is made again, empty, and its chunks leave the index") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", 4, kBlock);
  rig.devices[1]->SetCondition({TierCondition::State::kDeleted, "the tier directory /sim/t1 was deleted"});
  PassTierCheck(rig);
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 1u);  // only t0 still holds it
  const TierStats t1 = rig.engine->Stats().tiers[1];
  CHECK(t1.readable);
  CHECK(t1.writable);  // made again and in use
  CHECK(t1.condition.empty());
  auto data = Payload(kBlock, 9);
  PersistResult result;
  REQUIRE(rig.engine->Persist("after", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
    result = r;
  }).ok());
  rig.engine->Flush();
  CHECK(result.tier_mask == 3u);
}

TEST_CASE("a read-only tier gets no replicas but is read, a tier out of reach is neither (by state, not message)") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 4, kBlock);
  rig.devices[1]->SetCondition({TierCondition::State::kReadOnly, "the file system of /sim/t1 is mounted ro"});
  PassTierCheck(rig);
  TierStats t1 = rig.engine->Stats().tiers[1];
  CHECK(t1.readable);
  CHECK_FALSE(t1.writable);
  CHECK(t1.condition.find("mounted ro") != std::string::npos);
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 3u);  // still read there
  auto fresh = Payload(kBlock, 10);
  PersistResult result;
  REQUIRE(rig.engine->Persist("new", fresh.data(), fresh.size(), [&](const std::string&, const PersistResult& r) {
    result = r;
  }).ok());
  rig.engine->Flush();
  CHECK(result.status.ok());
  CHECK(result.tier_mask == 1u);
  CHECK(result.lost_mask == 2u);
  CHECK(result.lost_reason.find("mounted ro") != std::string::npos);

  rig.devices[1]->SetCondition({TierCondition::State::kDetached, "another directory is now at /sim/t1 (unmounted)"});
  PassTierCheck(rig);
  t1 = rig.engine->Stats().tiers[1];
  CHECK_FALSE(t1.readable);
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 1u);
  auto batch = SimRig::MakeBatch("k", 4, kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rec.tiers[1].blocks == 0);

  rig.devices[1]->SetCondition({});
  PassTierCheck(rig);
  CHECK(rig.engine->Stats().tiers[1].readable);
  CHECK(rig.engine->Stats().tiers[1].writable);
}

TEST_CASE("a tier whose file system does not answer is stalled, neither read nor written, its chunks kept") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 4, kBlock);
  rig.devices[1]->SetCondition({TierCondition::State::kNotAnswering,
                                "the file system of /sim/t1 does not answer (checking the tier directory has waited "
                                "over 1 s)"});
  PassTierCheck(rig);
  TierStats t1 = rig.engine->Stats().tiers[1];
  CHECK(t1.stalled);  // health names it stalled
  CHECK_FALSE(t1.readable);
  CHECK_FALSE(t1.writable);
  CHECK(t1.condition.find("does not answer") != std::string::npos);
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 3u);  // kept: it comes back when it answers
  auto batch = SimRig::MakeBatch("k", 4, kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rec.tiers[1].blocks == 0);  // served by t0
  auto fresh = Payload(kBlock, 11);
  PersistResult result;
  REQUIRE(rig.engine->Persist("new", fresh.data(), fresh.size(), [&](const std::string&, const PersistResult& r) {
    result = r;
  }).ok());
  rig.engine->Flush();
  CHECK(result.tier_mask == 1u);
  CHECK(result.lost_mask == 2u);

  rig.devices[1]->SetCondition({});
  PassTierCheck(rig);
  t1 = rig.engine->Stats().tiers[1];
  CHECK_FALSE(t1.stalled);
  CHECK(t1.readable);
  CHECK(t1.writable);
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 3u);
}

TEST_CASE("a replica for a tier out of reach fails outside the tier's condition lock, which Stats takes under the index's") {
  StoreConfig config;
  config.replication = ReplicationPolicy::kAdaptive;  // t1's replica starts once t0's is durable: the job then ends
  SimRig rig({300 * MBps, 100 * MBps}, config);
  rig.devices[1]->SetCondition({TierCondition::State::kDetached, "the file system of /sim/t1 cannot be reached"});
  PassTierCheck(rig);
  CHECK_FALSE(rig.engine->Stats().tiers[1].writable);  // the index's lock, then t1's condition lock
  auto data = Payload(kBlock, 11);
  PersistResult result;
  REQUIRE(rig.engine->Persist("late", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
    result = r;
  }).ok());
  rig.engine->Flush();  // the other order (t1's condition lock, then the index's) was a potential deadlock: abort
  CHECK(result.tier_mask == 1u);
  CHECK(rig.engine->Stats().tiers[0].chunks >= 1);
}

TEST_CASE("a persist that finds staging full is dropped and counted under when_full drop, refused under wait") {
  for (const bool drop : {true, false}) {
    INFO("drop " << drop);
    StoreConfig config;
    config.staging_limit_bytes = 6 * kBlock;
    config.staging_drop_when_full = drop;
    SimRig rig({300 * MBps}, config);
    rig.clock->Pause();  // nothing is written: staging stays full
    const std::vector<uint8_t> data(4 * kBlock, 1);
    REQUIRE(rig.engine->TryPersist("a", data.data(), data.size()).ok());
    const absl::Status second = rig.engine->TryPersist("b", data.data(), data.size());
    CHECK(absl::IsResourceExhausted(second));
    CHECK(absl::StrContains(second.message(), "dropped") == drop);
    const StoreStats stats = rig.engine->Stats();
    CHECK(stats.persists_dropped == (drop ? 1u : 0u));
    CHECK(stats.persist_dropped_bytes == (drop ? data.size() : 0u));
    CHECK_FALSE(rig.engine->Lookup({"b"})[0].present);  // nothing of it was kept
    rig.clock->Resume();
  }
}

}  // namespace
}  // namespace kvstream::testing
