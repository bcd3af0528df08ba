// The step pool (M1): as pure logic (which step and which chunk a tier may claim from, what a
// failure does, when a chunk is complete or failed; no devices, no time), then steps of two
// sessions pooled on simulated tiers in virtual time.
#include "read/step_pool.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

TEST_CASE("a failed block goes to another holder and the chunk fails when none remains") {
  StepPool r(2, {RoutingKind::kFastest, 0}, BatchingPolicy::kStep);
  Step b = MakeStep({{3, 2}});
  r.Add(&b);
  BlockRef a, c;
  REQUIRE(r.Claim(0, &a));
  REQUIRE(r.Claim(0, &c));
  BlockRef none;
  CHECK_FALSE(r.Claim(1, &none));  // pinned to tier 0
  r.Fail(a, 0);
  CHECK(StepPool::ChunkOutcome(b, 0) == StepPool::Outcome::kPending);
  BlockRef again;
  REQUIRE(r.Claim(1, &again));  // unpinned after the failure, tier 1 takes it
  CHECK(again.block == a.block);
  r.Done(c);  // tier 0's other block arrived intact anyway
  r.Fail(again, 1);
  CHECK(StepPool::ChunkOutcome(b, 0) == StepPool::Outcome::kFailed);
}

TEST_CASE("a block retried goes back to the pool and every holder keeps the chunk") {
  StepPool r(2, {RoutingKind::kFastest, 0}, BatchingPolicy::kStep);
  Step b = MakeStep({{3, 1}});
  r.Add(&b);
  BlockRef a;
  REQUIRE(r.Claim(0, &a));
  r.Retry(a);  // its bytes said nothing of tier 0
  CHECK(b.chunks[0].holders == 3u);
  CHECK(StepPool::ChunkOutcome(b, 0) == StepPool::Outcome::kPending);
  BlockRef again;
  REQUIRE(r.Claim(0, &again));  // tier 0 may read it again
  CHECK(again.block == a.block);
  r.Retry(again);
  REQUIRE(r.Claim(1, &again));  // and so may tier 1: no longer pinned
  r.Done(again);
  CHECK(StepPool::ChunkOutcome(b, 0) == StepPool::Outcome::kComplete);
}

TEST_CASE("blocks pinned to a stalled tier go to the other holders, those only it holds stay") {
  StepPool r(2, {RoutingKind::kFastest, 0}, BatchingPolicy::kStep);
  Step b = MakeStep({{3, 3}, {1, 1}});  // chunk 0 on both tiers, chunk 1 on tier 0 only
  r.Add(&b);
  BlockRef first;
  REQUIRE(r.Claim(0, &first));  // tier 0 reads one block, then stalls
  BlockRef none;
  CHECK_FALSE(r.Claim(1, &none));  // everything is pinned to tier 0
  r.ReleasePins(0);
  std::vector<uint32_t> taken;
  for (BlockRef ref; r.Claim(1, &ref);) taken.push_back(ref.block);
  std::sort(taken.begin(), taken.end());
  CHECK(taken == std::vector<uint32_t>{1, 2});  // chunk 0's other blocks; chunk 1 waits for tier 0
  BlockRef last;
  REQUIRE(r.Claim(0, &last));
  CHECK(last.block == 3);
}

TEST_CASE("serial batching releases one chunk at a time from the oldest step") {
  StepPool r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kSerial);
  Step b1 = MakeStep({{3, 2}, {3, 2}});
  Step b2 = MakeStep({{3, 2}});
  r.Add(&b1);
  r.Add(&b2);
  BlockRef x, y, z;
  REQUIRE(r.Claim(0, &x));
  REQUIRE(r.Claim(1, &y));
  CHECK_FALSE(r.Claim(0, &z));  // chunk 0 fully claimed; chunk 1 waits
  r.Done(x);
  r.Done(y);
  REQUIRE(StepPool::ChunkOutcome(b1, 0) == StepPool::Outcome::kComplete);
  r.Finish(&b1, 0);
  REQUIRE(r.Claim(0, &z));
  CHECK(z.step == &b1);
  CHECK(b1.blocks[z.block].chunk == 1);
}

TEST_CASE("step batching serves the oldest step first and moves on when a tier cannot help") {
  StepPool r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kStep);
  Step b1 = MakeStep({{2, 2}});  // only tier 1
  Step b2 = MakeStep({{3, 2}});
  r.Add(&b1);
  r.Add(&b2);
  BlockRef x;
  REQUIRE(r.Claim(0, &x));
  CHECK(x.step == &b2);
  REQUIRE(r.Claim(1, &x));
  CHECK(x.step == &b1);
}

TEST_CASE("concurrent steps share one pool and keep both tiers busy") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("a", 8, 4 * kBlock);
  rig.Populate("b", 8, 4 * kBlock);
  auto a = SimRig::MakeBatch("a", 8, 4 * kBlock);
  auto b = SimRig::MakeBatch("b", 8, 4 * kBlock);
  rig.clock->Pause();
  std::atomic<int> done{0};
  StepRecord ra, rb;
  rig.engine->RetrieveAsync(a.reads, nullptr, [&](StepRecord r) { ra = r; ++done; });
  rig.engine->RetrieveAsync(b.reads, nullptr, [&](StepRecord r) { rb = r; ++done; });
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  while (done < 2) std::this_thread::yield();
  CHECK(ra.hits == 8);
  CHECK(rb.hits == 8);
  const double total = 64.0 * kBlock / (400 * MBps);
  // The later batch ends when all 64 blocks are read at the aggregate bandwidth, plus at most the
  // blocks in flight on the slow tier when the pool ran dry (depth 2).
  CHECK(std::max(ra.wall_seconds, rb.wall_seconds) <= total + 2 * kBlock / (100 * MBps));
  CHECK(std::min(ra.wall_seconds, rb.wall_seconds) < total * 0.75);  // FIFO: the first finishes early
}

}  // namespace
}  // namespace kvstream::testing
