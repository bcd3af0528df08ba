// The deadline rules as pure arithmetic on passed-in times: a tier's usual read time, the
// deadline of a read, a stalled tier and when it is given up, how long a late read waits before
// it is hedged, and the end of a step under completion routing (a block left to faster holders, a
// straggler taken over). One rule per case; step_reader_deadlines_test runs them on the store.
#include "read/read_deadlines.h"

#include <catch2/catch.hpp>

#include <vector>

namespace kvstream {
namespace {

constexpr int64_t kMs = 1'000'000;

// 1 MiB blocks, deadlines between 0.5 and 2 s, tiers given up after 10 s.
StoreConfig Config() {
  StoreConfig config;
  config.block_size = 1 << 20;
  config.read_deadline_floor_seconds = 0.5;
  config.read_deadline_cap_seconds = 2.0;
  config.read_give_up_seconds = 10.0;
  return config;
}

// A tier reading `mbps` MB/s (2^20 bytes a MB here, so a block takes 1000/mbps ms).
TierPace Pace(double mbps, uint32_t in_flight = 0) { return {mbps * (1 << 20), true, in_flight}; }

TEST_CASE("an unmeasured tier's deadline is the cap") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  CHECK(d.Deadline(0) == 2000 * kMs);
}

TEST_CASE("the first read sets a tier's usual read time and later ones move it by a quarter") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 200 * kMs);
  CHECK(d.read_ns(0) == Approx(200 * kMs));
  d.Observe(0, 600 * kMs);
  CHECK(d.read_ns(0) == Approx(300 * kMs));
}

TEST_CASE("a read is late past four times its tier's usual read time") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 300 * kMs);
  CHECK(d.Deadline(0) == 1200 * kMs);
}

TEST_CASE("a deadline is never below the floor nor above the cap") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.Observe(0, 10 * kMs);
  d.Observe(1, 5000 * kMs);
  CHECK(d.Deadline(0) == 500 * kMs);
  CHECK(d.Deadline(1) == 2000 * kMs);
}

TEST_CASE("a block takes a tier its bandwidth in steps, else its usual read time") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  CHECK(d.BlockNs(0, TierPace{}) == 0);
  d.Observe(0, 40 * kMs);
  CHECK(d.BlockNs(0, TierPace{}) == Approx(40 * kMs));
  CHECK(d.BlockNs(0, Pace(100)) == Approx(10 * kMs));
}

TEST_CASE("a tier stalls with its first late read and answers again when its last one lands") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  CHECK(d.stall(0) == TierStall::kAnswering);
  CHECK(d.ReadLate(0, 100));
  CHECK_FALSE(d.ReadLate(0, 200));
  CHECK(d.stalled(0));
  CHECK(d.stalled_since_ns(0) == 100);
  CHECK(d.late_reads(0) == 2);
  CHECK_FALSE(d.LateReadLanded(0));
  CHECK(d.stalled(0));
  CHECK(d.LateReadLanded(0));
  CHECK(d.stall(0) == TierStall::kAnswering);
}

TEST_CASE("a stalled tier is given up once stalled for reads.give_up, and only once") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.ReadLate(1, 1000 * kMs);
  int64_t next = INT64_MAX;
  CHECK_FALSE(d.GiveUpIfStalledTooLong(1, 5000 * kMs, &next));
  CHECK(next == 11000 * kMs);  // when it will be
  CHECK(d.GiveUpIfStalledTooLong(1, 11000 * kMs, &next));
  CHECK(d.stall(1) == TierStall::kGivenUp);
  CHECK(d.given_up_mask() == 0b10);
  CHECK_FALSE(d.GiveUpIfStalledTooLong(1, 12000 * kMs, &next));
}

TEST_CASE("a tier that answers is never given up") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  int64_t next = INT64_MAX;
  CHECK_FALSE(d.GiveUpIfStalledTooLong(0, 100'000 * kMs, &next));
  CHECK(next == INT64_MAX);
}

TEST_CASE("no tier is given up while reads.give_up is 0") {
  StoreConfig config = Config();
  config.read_give_up_seconds = 0;
  ReadDeadlines d(config, 1);
  d.ReadLate(0, 0);
  int64_t next = INT64_MAX;
  CHECK_FALSE(d.gives_up());
  CHECK_FALSE(d.GiveUpIfStalledTooLong(0, 100'000 * kMs, &next));
  CHECK(next == INT64_MAX);
}

TEST_CASE("a tier whose late read was given up is given up with it") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.ReadLate(0, 0);
  CHECK(d.GiveUp(0));
  CHECK_FALSE(d.GiveUp(0));
  CHECK(d.given_up(0));
}

TEST_CASE("a tier given up answers again when its last late read lands") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.ReadLate(0, 0);
  d.GiveUp(0);
  CHECK(d.LateReadLanded(0));
  CHECK(d.stall(0) == TierStall::kAnswering);
  CHECK(d.given_up_mask() == 0);
}

TEST_CASE("a late read nobody else can take over fails its chunk reads.give_up after its issue") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  CHECK(d.GiveUpAt(300 * kMs) == 10'300 * kMs);
}

TEST_CASE("a late read is hedged at its tier's deadline when another holder reads a block sooner") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.Observe(0, 300 * kMs);  // deadline 1.2 s
  const std::vector<TierPace> pace = {Pace(100), Pace(100)};  // 10 ms a block
  CHECK(d.HedgeAfter(0, 0b10, pace) == 1200 * kMs);
}

TEST_CASE("a late read waits as long as the fastest other holder needs for a block") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 3);
  d.Observe(0, 10 * kMs);  // deadline 0.5 s (the floor)
  const std::vector<TierPace> pace = {Pace(100), Pace(0.5), Pace(0.25)};  // 2 s and 4 s a block
  CHECK(d.HedgeAfter(0, 0b110, pace) == 2000 * kMs);
}

TEST_CASE("a stalled or unreadable holder does not count in a hedge's delay") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 3);
  d.Observe(0, 10 * kMs);
  std::vector<TierPace> pace = {Pace(100), Pace(0.5), Pace(0.25)};
  pace[2].readable = false;
  d.ReadLate(1, 0);
  CHECK(d.HedgeAfter(0, 0b110, pace) == 500 * kMs);  // the deadline alone
}

TEST_CASE("a tier with no read in flight never leaves a block to others") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.Observe(0, 1000 * kMs);
  const std::vector<TierPace> pace = {Pace(1, 0), Pace(1000, 0)};
  CHECK_FALSE(d.LeavesToOthers(0, 0b10, 0, pace));
}

TEST_CASE("a tier leaves a block to others that read it and all they have before its own read lands") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.Observe(0, 100 * kMs);
  // Tier 1 reads a block in 10 ms: 4 in flight, 4 unclaimed and this one take 90 ms.
  const std::vector<TierPace> pace = {Pace(10, 1), Pace(100, 4)};
  CHECK(d.LeavesToOthers(0, 0b10, 4, pace));
  CHECK_FALSE(d.LeavesToOthers(0, 0b10, 6, pace));  // 110 ms: later than its own read
}

TEST_CASE("a tier never leaves a block while another holder's bandwidth is unmeasured") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 3);
  d.Observe(0, 1000 * kMs);
  const std::vector<TierPace> pace = {Pace(1, 1), Pace(100), TierPace{0, true, 0}};
  CHECK_FALSE(d.LeavesToOthers(0, 0b110, 0, pace));
}

TEST_CASE("a tier never leaves a block when no other holder answers") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 2);
  d.Observe(0, 1000 * kMs);
  d.ReadLate(1, 0);
  const std::vector<TierPace> pace = {Pace(1, 1), Pace(100, 1)};
  CHECK_FALSE(d.LeavesToOthers(0, 0b10, 0, pace));
}

TEST_CASE("a read that would land much later than an idle tier could read it straggles") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 1000 * kMs);
  int64_t recheck = INT64_MAX;
  // 100 ms in flight, about 900 ms to go; the idle tier needs 10 ms (margin 40 ms).
  CHECK(d.Straggles(0, 0, 10 * kMs, 100 * kMs, &recheck));
}

TEST_CASE("a read in flight twice its tier's usual time straggles") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 100 * kMs);
  int64_t recheck = INT64_MAX;
  CHECK_FALSE(d.Straggles(0, 0, 10 * kMs, 200 * kMs, &recheck));
  CHECK(d.Straggles(0, 0, 10 * kMs, 201 * kMs, &recheck));
}

TEST_CASE("a read about to land does not straggle and is looked at again once overdue") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 100 * kMs);
  int64_t recheck = INT64_MAX;
  CHECK_FALSE(d.Straggles(0, 5 * kMs, 10 * kMs, 80 * kMs, &recheck));
  CHECK(recheck == 205 * kMs + 1);  // issued at 5 ms, overdue 200 ms later
}

TEST_CASE("a read straggles only when it would land at least ten milliseconds late") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  d.Observe(0, 12 * kMs);
  int64_t recheck = INT64_MAX;
  // The idle tier needs 1 ms (4 ms of margin), but a straggler lands at least 10 ms late: 3 ms in
  // flight, 9 ms to go, is not one.
  CHECK_FALSE(d.Straggles(0, 0, 1 * kMs, 3 * kMs, &recheck));
  CHECK(d.Straggles(0, 0, 1 * kMs, 24 * kMs + 1, &recheck));  // 2x 12 ms
}

TEST_CASE("the reads of an unmeasured tier never straggle") {
  const StoreConfig config = Config();
  ReadDeadlines d(config, 1);
  int64_t recheck = INT64_MAX;
  CHECK_FALSE(d.Straggles(0, 0, 10 * kMs, 100'000 * kMs, &recheck));
  CHECK(recheck == INT64_MAX);
}

}  // namespace
}  // namespace kvstream
