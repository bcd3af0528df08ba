// kvsim's model against the worked examples of DESIGN.md section 2, reuse distances computed by
// hand, and the serving queue's prediction that faster retrieval matters more under load.
#include <catch2/catch.hpp>

#include <cmath>

#include "model.h"
#include "reuse.h"
#include "serving.h"

namespace kvsim {
namespace {

TEST_CASE("kvsim: a 75-25 split meets the bound at 3+1 and is 12.5 percent slower at 2+1") {
  const double d = 12e9;
  CHECK(StaticTime(d, 0.75, 3e9, 1e9) == Approx(BoundTime(d, {3e9, 1e9})));
  CHECK(StaticPenalty(0.75, 3e9, 1e9) == Approx(0).margin(1e-12));
  CHECK(StaticTime(d, 0.75, 2e9, 1e9) / BoundTime(d, {2e9, 1e9}) - 1 == Approx(0.125));
  CHECK(StaticPenalty(0.75, 2e9, 1e9) == Approx(0.125));
  // At 3 + 0.5 GB/s the split is slower than tier 0 alone.
  CHECK(StaticTime(d, 0.75, 3e9, 0.5e9) > FastestTime(d, 3e9));
}

TEST_CASE("kvsim: the static penalty is V-shaped in g with its minimum at phi") {
  const double b0 = 2e9, b1 = 1e9, phi = b0 / (b0 + b1);
  CHECK(StaticPenalty(phi, b0, b1) == Approx(0).margin(1e-12));
  double prev = INFINITY;
  for (double g = 0; g < phi - 1e-9; g += 0.05) {
    const double p = StaticPenalty(g, b0, b1);
    CHECK(p < prev);
    prev = p;
  }
  prev = 0;
  for (double g = phi + 0.05; g <= 1; g += 0.05) {
    const double p = StaticPenalty(g, b0, b1);
    CHECK(p > prev);
    prev = p;
  }
}

TEST_CASE("kvsim: the bound with late-starting tiers and completion routing at block granularity") {
  CHECK(BoundTime(6e9, {2e9, 1e9}) == Approx(2.0));
  CHECK(BoundTime(6e9, {2e9, 1e9}, {0, 1}) == Approx(7.0 / 3));  // 2(T) + 1(T-1) = 6
  CHECK(BoundTime(1e9, {2e9, 1e9}, {0, 10}) == Approx(0.5));     // done before tier 1 starts
  std::vector<double> bytes;
  const double block = 1 << 20;
  const double t = CompletionTime(256 * block, block, 1, {300e6, 100e6}, {}, &bytes);
  CHECK(bytes[0] / block == Approx(192).margin(1));
  CHECK(t <= BoundTime(256 * block, {300e6, 100e6}) + block / 100e6 + 1e-12);
  // Deeper queues lengthen the tail on the slow tier.
  CHECK(CompletionTime(256 * block, block, 8, {300e6, 100e6}) > t);
}

TEST_CASE("kvsim: reuse distances match a hand computation") {
  //                      a  b  c  a  b  b  d  a
  const auto d = ReuseDistances({1, 2, 3, 1, 2, 2, 4, 1});
  CHECK(d == std::vector<int64_t>{-1, -1, -1, 3, 3, 1, -1, 3});
  // Accesses with d > M come from storage: M = 2 -> the three reuses at distance 3.
  Demand m2 = StorageDemand(d, 2);
  CHECK(m2.reuses == 4);
  CHECK(m2.beyond == 3);
  CHECK(StorageDemand(d, 3).beyond == 0);
  CHECK(StorageDemand(d, 0).beyond == 4);
}

TEST_CASE("kvsim: demand falls as memory grows and is flat while every distance exceeds it") {
  std::vector<uint64_t> seq;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t b = 0; b < 10; ++b) seq.push_back(b);  // every reuse at distance 10
  }
  const auto d = ReuseDistances(seq);
  CHECK(StorageDemand(d, 1).beyond == StorageDemand(d, 9).beyond);
  CHECK(StorageDemand(d, 9).beyond == 20);
  CHECK(StorageDemand(d, 10).beyond == 0);
  uint64_t prev = UINT64_MAX;
  for (uint64_t m = 0; m < 12; ++m) {
    CHECK(StorageDemand(d, m).beyond <= prev);
    prev = StorageDemand(d, m).beyond;
  }
}

// Requests that each reuse a long prefix kept only on storage.
std::vector<Request> ReuseTrace(int n, double interval_s) {
  std::vector<Request> t;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.arrival_s = i * interval_s;
    r.output_tokens = 8;
    const uint64_t doc = static_cast<uint64_t>(i % 4) * 1000;
    for (uint64_t b = 0; b < 16; ++b) r.blocks.push_back(doc + b);
    r.blocks.push_back(1'000'000 + i);  // a fresh question at the end
    r.input_tokens = static_cast<uint32_t>(r.blocks.size() * kTraceBlockTokens);
    t.push_back(r);
  }
  return t;
}

TEST_CASE("kvsim: raising the arrival rate raises the TTFT gain of faster retrieval") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;  // everything reused comes from storage
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{2e9, 1e9}; };
  auto gain = [&](double interval) {
    const auto trace = ReuseTrace(200, interval);
    const double slow = Simulate(trace, node, {PolicyKind::kStatic, 0.5}).ttft_mean;
    const double fast = Simulate(trace, node, {PolicyKind::kCompletion}).ttft_mean;
    REQUIRE(fast < slow);
    return slow - fast;
  };
  const double light = gain(4.0), heavy = gain(2.0);
  INFO("TTFT gain at 1x " << light << " s, at 2x " << heavy << " s");
  CHECK(heavy > light);
}

}  // namespace
}  // namespace kvsim
