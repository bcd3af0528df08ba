// The engine's loop and calls: policies switched at run time, shutdown.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

constexpr double MBps = 1e6;

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
