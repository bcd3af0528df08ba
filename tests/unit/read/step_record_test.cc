// A step's record as pure arithmetic: counts, per-tier bandwidth, the bound D / sum_k b_k over the
// eligible tiers, the gap, and each tier's reference bandwidth (bytes over busy time in recent
// steps); the history's ids and limit.
#include "read/step_record.h"

#include <catch2/catch.hpp>

namespace kvstream {
namespace {

TierUse Use(uint64_t bytes, double busy_seconds) {
  TierUse u;
  u.blocks = bytes >> 20;
  u.bytes = bytes;
  u.busy_ns = static_cast<int64_t>(busy_seconds * 1e9);
  return u;
}

StepRecordInput Input(const std::vector<ChunkResult>& results, const std::vector<TierUse>& use,
                      const std::vector<std::string>& names, uint32_t eligible, double wall_seconds) {
  return {&results, &use, &names, eligible, static_cast<int64_t>(wall_seconds * 1e9), Policies{}};
}

TEST_CASE("the bound is the bytes over the sum of the eligible tiers' bandwidths in the step") {
  const std::vector<ChunkResult> results = {{0, absl::OkStatus(), 300'000'000, 3},
                                            {1, absl::NotFoundError("x"), 0, 0},
                                            {2, absl::DataLossError("y"), 0, 0}};
  const std::vector<TierUse> use = {Use(200'000'000, 1.0), Use(100'000'000, 1.0)};  // 200 and 100 MB/s
  const std::vector<std::string> names = {"t0", "t1"};
  std::vector<ReferenceRate> reference(2);
  StepRecord rec = MakeStepRecord(Input(results, use, names, 3, 1.1), &reference);
  CHECK(rec.chunks == 3);
  CHECK(rec.hits == 1);
  CHECK(rec.misses == 1);
  CHECK(rec.failed == 1);
  CHECK(rec.bytes == 300'000'000);
  CHECK(rec.bound_seconds == Approx(1.0));
  CHECK(rec.gap == Approx(0.1));
  CHECK(rec.tiers[0].bandwidth_bps == Approx(200e6));
  CHECK(rec.tiers[1].eligible);
  CHECK(reference[0].bps() == Approx(200e6));  // the first step sets the reference
  CHECK(rec.routing == "completion");
}

TEST_CASE("an eligible tier that read nothing counts with its reference bandwidth") {
  const std::vector<ChunkResult> results = {{0, absl::OkStatus(), 100'000'000, 1}};
  const std::vector<TierUse> use = {Use(100'000'000, 1.0), TierUse{}};
  const std::vector<std::string> names = {"t0", "t1"};
  std::vector<ReferenceRate> reference = {{80e6, 1.0}, {100e6, 1.0}};
  StepRecord rec = MakeStepRecord(Input(results, use, names, 3, 1.0), &reference);
  CHECK(rec.tiers[1].bandwidth_bps == Approx(100e6));
  CHECK(rec.bound_seconds == Approx(0.5));  // 100 MB over 100 + 100 MB/s
  CHECK(reference[0].bps() == Approx(0.75 * 80e6 + 0.25 * 100e6));  // 1 s busy, as the reference's
  CHECK(reference[1].bps() == Approx(100e6));  // unchanged: no bytes this step

  // A tier that holds none of the step's chunks is not in the bound.
  std::vector<ReferenceRate> reference2 = {{80e6, 1.0}, {100e6, 1.0}};
  StepRecord alone = MakeStepRecord(Input(results, use, names, 1, 1.0), &reference2);
  CHECK(alone.bound_seconds == Approx(1.0));
}

TEST_CASE("a chunk served from staging is a hit but no tier's bytes in the bound") {
  const std::vector<ChunkResult> results = {{0, absl::OkStatus(), 100'000'000, 1},
                                            {1, absl::OkStatus(), 50'000'000, 0}};  // served by no tier
  const std::vector<TierUse> use = {Use(100'000'000, 1.0)};
  const std::vector<std::string> names = {"t0"};
  std::vector<ReferenceRate> reference(1);
  StepRecord rec = MakeStepRecord(Input(results, use, names, 1, 1.0), &reference);
  CHECK(rec.hits == 2);
  CHECK(rec.bytes == 150'000'000);
  CHECK(rec.bound_seconds == Approx(1.0));  // 100 MB over 100 MB/s

  const std::vector<ChunkResult> only_staged = {{0, absl::OkStatus(), 50'000'000, 0}};
  StepRecord none = MakeStepRecord(Input(only_staged, {TierUse{}}, names, 0, 0.001), &reference);
  CHECK(none.bound_seconds == 0);
  CHECK(none.gap == 0);
}

TEST_CASE("a step that served nothing has no bound and no gap") {
  const std::vector<ChunkResult> results = {{0, absl::NotFoundError("x"), 0, 0}};
  const std::vector<TierUse> use = {TierUse{}};
  const std::vector<std::string> names = {"t0"};
  std::vector<ReferenceRate> reference(1);
  StepRecord rec = MakeStepRecord(Input(results, use, names, 0, 0.001), &reference);
  CHECK(rec.bound_seconds == 0);
  CHECK(rec.gap == 0);
}

TEST_CASE("the reference is bytes over busy time: a step counts by how long the tier was busy in it") {
  const std::vector<std::string> names = {"t0"};
  const std::vector<ChunkResult> results = {{0, absl::OkStatus(), 100'000'000, 1}};
  std::vector<ReferenceRate> reference(1);
  // Two rank steps sharing a tier capped at 1 GB/s: one gets a burst (100 MB in 25 ms), the other
  // the rest of the 200 ms (100 MB in 175 ms), over and over.
  for (int i = 0; i < 20; ++i) {
    MakeStepRecord(Input(results, {Use(100'000'000, 0.025)}, names, 1, 0.1), &reference);
    MakeStepRecord(Input(results, {Use(100'000'000, 0.175)}, names, 1, 0.2), &reference);
  }
  // 200 MB per 0.2 s busy: 1 GB/s, within the swing of the last step's weight (an average of the
  // steps' bandwidths, 4 and 0.57 GB/s, would swing between 2 and 2.5 GB/s).
  CHECK(reference[0].bps() == Approx(1e9).epsilon(0.3));
  CHECK(reference[0].bps() < 1.3e9);
  // Steady steps converge to their rate; a change moves it by the step's weight in busy time.
  ReferenceRate r;
  r.Add(100e6, 1.0);
  CHECK(r.bps() == Approx(100e6));
  r.Add(50e6, 1.0);  // half as fast over as long: 0.75 * 100 + 0.25 * 50
  CHECK(r.bps() == Approx(87.5e6));
}

TEST_CASE("a tier's rate that moves restarts its reference after two steps the same way") {
  ReferenceRate r;
  for (int i = 0; i < 10; ++i) r.Add(150e6, 1.0);
  CHECK(r.bps() == Approx(150e6));
  r.Add(50e6, 1.0);  // one step a third as fast: a burst or a move; the average takes its weight
  CHECK(r.bps() == Approx(125e6));
  r.Add(50e6, 1.0);  // the second: a move, the reference is the two steps
  CHECK(r.bps() == Approx(50e6));
  r.Add(150e6, 1.0);  // and back
  r.Add(150e6, 1.0);
  CHECK(r.bps() == Approx(150e6));
}

TEST_CASE("steps alternating above and below a tier's reference never restart it") {
  ReferenceRate r(100e6, 1.0);
  for (int i = 0; i < 8; ++i) {
    r.Add(400e6, 1.0);  // a burst on the throttle's credit
    r.Add(20e6, 1.0);   // then a slow step
    CHECK(r.bps() > 100e6);  // moved only by the averages' weight, never to one step's rate
    CHECK(r.bps() < 250e6);
  }
  ReferenceRate s(100e6, 1.0);
  s.Add(140e6, 1.0);  // within kReferenceShift: steady
  s.Add(140e6, 1.0);
  CHECK(s.bps() < 125e6);
}

TEST_CASE("busy time counts while at least one of the step's reads is in flight") {
  TierUse u;
  u.ReadStarted(100);
  u.ReadStarted(150);
  u.ReadEnded(200);
  u.ReadEnded(300);  // busy 100..300
  u.ReadStarted(1000);
  u.ReadEnded(1100);
  CHECK(u.busy_ns == 300);
  CHECK(u.in_flight == 0);
}

TEST_CASE("a step that ends with a read still in flight counts that tier busy until its end") {
  TierUse u;
  u.ReadStarted(100);
  u.ReadStarted(150);
  u.ReadEnded(200);  // the other one was abandoned for another tier's copy and has not landed
  u.StepEnded(400);
  CHECK(u.busy_ns == 300);  // not 0: in flight since the tier first read for the step
  u.ReadEnded(900);         // lands after the record was made: adds nothing
  CHECK(u.in_flight == 0);
  CHECK(u.busy_ns == 300);
}

TEST_CASE("the history numbers records and keeps the most recent") {
  StepHistory history;
  for (size_t i = 0; i < StepHistory::kLimit + 10; ++i) {
    StepRecord r;
    history.Add(&r);
    CHECK(r.id == i);
  }
  CHECK(history.count() == StepHistory::kLimit + 10);
  auto recent = history.Recent(3);
  REQUIRE(recent.size() == 3);
  CHECK(recent.back().id == StepHistory::kLimit + 9);
  CHECK(recent.front().id == StepHistory::kLimit + 7);
  CHECK(history.Recent(1u << 20).size() == StepHistory::kLimit);
}

}  // namespace
}  // namespace kvstream
