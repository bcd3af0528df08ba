// The router as pure logic: who claims which block, without devices or time.
#include "router.h"

#include <catch2/catch.hpp>

#include <set>

namespace kvstream {
namespace {

PoolBatch Batch(std::vector<std::pair<uint32_t, uint32_t>> chunks) {  // (holders, blocks)
  PoolBatch b;
  for (auto [holders, blocks] : chunks) b.AddChunk(holders, blocks);
  return b;
}

TEST_CASE("two tiers claim from opposite ends and meet") {
  Router r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kStep);
  PoolBatch b = Batch({{3, 4}, {3, 4}});
  r.Add(&b);
  BlockRef x;
  REQUIRE(r.Claim(0, &x));
  CHECK(x.block == 0);
  REQUIRE(r.Claim(1, &x));
  CHECK(x.block == 7);
  std::set<uint32_t> seen{0, 7};
  int by0 = 1;
  while (true) {
    bool any = false;
    if (r.Claim(0, &x)) { seen.insert(x.block); ++by0; any = true; }
    if (r.Claim(0, &x)) { seen.insert(x.block); ++by0; any = true; }
    if (r.Claim(1, &x)) { seen.insert(x.block); any = true; }
    if (!any) break;
  }
  CHECK(seen.size() == 8);  // every block claimed exactly once
  CHECK(by0 == 5);          // 0, then 1 2, then 3 4; tier 1 took 7, 6, 5
}

TEST_CASE("a block is claimable only by tiers holding its chunk") {
  Router r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kStep);
  PoolBatch b = Batch({{1, 2}, {2, 2}});  // chunk 0 only on tier 0, chunk 1 only on tier 1
  r.Add(&b);
  BlockRef x;
  std::vector<uint32_t> t0, t1;
  while (r.Claim(0, &x)) t0.push_back(x.block);
  while (r.Claim(1, &x)) t1.push_back(x.block);
  CHECK(t0 == std::vector<uint32_t>{0, 1});
  CHECK(t1 == std::vector<uint32_t>{3, 2});
}

TEST_CASE("static placement pins share g of replicated blocks to the first tier") {
  Router r(2, {RoutingKind::kStatic, 0.75}, BatchingPolicy::kStep);
  PoolBatch b = Batch({{3, 8}, {3, 8}});
  r.Add(&b);
  BlockRef x;
  int n0 = 0, n1 = 0;
  while (r.Claim(0, &x)) ++n0;
  while (r.Claim(1, &x)) ++n1;
  CHECK(n0 == 12);
  CHECK(n1 == 4);
}

TEST_CASE("fastest pins every block to the first holder") {
  Router r(2, {RoutingKind::kFastest, 0}, BatchingPolicy::kStep);
  PoolBatch b = Batch({{3, 4}, {2, 4}});
  r.Add(&b);
  BlockRef x;
  int n0 = 0, n1 = 0;
  while (r.Claim(1, &x)) ++n1;
  while (r.Claim(0, &x)) ++n0;
  CHECK(n0 == 4);
  CHECK(n1 == 4);  // chunk 1 is only on tier 1
}

TEST_CASE("a failed block goes to another holder and the chunk fails when none remains") {
  Router r(2, {RoutingKind::kFastest, 0}, BatchingPolicy::kStep);
  PoolBatch b = Batch({{3, 2}});
  r.Add(&b);
  BlockRef a, c;
  REQUIRE(r.Claim(0, &a));
  REQUIRE(r.Claim(0, &c));
  BlockRef none;
  CHECK_FALSE(r.Claim(1, &none));  // pinned to tier 0
  r.Fail(a, 0);
  CHECK(Router::ChunkOutcome(b, 0) == Router::Outcome::kPending);
  BlockRef again;
  REQUIRE(r.Claim(1, &again));  // unpinned after the failure, tier 1 takes it
  CHECK(again.block == a.block);
  r.Done(c);  // tier 0's other block arrived intact anyway
  r.Fail(again, 1);
  CHECK(Router::ChunkOutcome(b, 0) == Router::Outcome::kFailed);
}

TEST_CASE("serial batching releases one chunk at a time from the oldest batch") {
  Router r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kSerial);
  PoolBatch b1 = Batch({{3, 2}, {3, 2}});
  PoolBatch b2 = Batch({{3, 2}});
  r.Add(&b1);
  r.Add(&b2);
  BlockRef x, y, z;
  REQUIRE(r.Claim(0, &x));
  REQUIRE(r.Claim(1, &y));
  CHECK_FALSE(r.Claim(0, &z));  // chunk 0 fully claimed; chunk 1 waits
  r.Done(x);
  r.Done(y);
  REQUIRE(Router::ChunkOutcome(b1, 0) == Router::Outcome::kComplete);
  r.Finish(&b1, 0);
  REQUIRE(r.Claim(0, &z));
  CHECK(z.batch == &b1);
  CHECK(b1.blocks[z.block].chunk == 1);
}

TEST_CASE("step batching serves the oldest batch first and moves on when a tier cannot help") {
  Router r(2, {RoutingKind::kCompletion, 0}, BatchingPolicy::kStep);
  PoolBatch b1 = Batch({{2, 2}});  // only tier 1
  PoolBatch b2 = Batch({{3, 2}});
  r.Add(&b1);
  r.Add(&b2);
  BlockRef x;
  REQUIRE(r.Claim(0, &x));
  CHECK(x.batch == &b2);
  REQUIRE(r.Claim(1, &x));
  CHECK(x.batch == &b1);
}

}  // namespace
}  // namespace kvstream
