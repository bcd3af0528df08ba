// The load model as arithmetic: the aggregate-bandwidth bound with per-tier delays, and the bound
// over the unions of holder sets when tiers hold different chunks.
#include "model/load_model.h"

#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

namespace kvstream {
namespace {

TEST_CASE("the bound of bytes every tier holds is the bytes over the sum of the bandwidths") {
  const std::vector<TierRate> tiers = {{300e6, 0}, {150e6, 0}};
  CHECK(BoundTime(450e6, tiers) == Approx(1.0));
  CHECK(BoundTime(0, tiers) == 0);
  CHECK(BoundTime(300e6, tiers, 0b01) == Approx(1.0));  // tier 0 alone
}

TEST_CASE("a tier's delay holds its bandwidth back until it has passed") {
  // Tier 1 starts at 1 s: by then tier 0 read 100 MB; the other 100 MB at 200 MB/s take 0.5 s.
  const std::vector<TierRate> tiers = {{100e6, 0}, {100e6, 1.0}};
  CHECK(BoundTime(200e6, tiers) == Approx(1.5));
  // Bytes tier 0 reads alone before tier 1 starts: tier 1 never helps.
  CHECK(BoundTime(50e6, tiers) == Approx(0.5));
}

TEST_CASE("no present tier, or bytes no present tier holds, take forever") {
  const std::vector<TierRate> tiers = {{0, 0}, {100e6, 0}};
  CHECK(std::isinf(BoundTime(1, tiers, 0b01)));
  LoadModel m(tiers);
  CHECK(m.Add(100e6, 0b10) == Approx(1.0));
  CHECK(std::isinf(m.Add(1, 0b01)));  // only the absent tier holds it
  CHECK(std::isinf(m.Add(100e6, 0b10)));  // and the whole set stays unreachable
}

TEST_CASE("bytes only one tier holds are bounded by that tier, not by the sum") {
  // 300 MB only on tier 0 (100 MB/s) and 100 MB on both (200 MB/s together): tier 0 alone needs
  // 3 s for its own bytes; all 400 MB over 200 MB/s would claim 2 s.
  LoadModel m({{100e6, 0}, {100e6, 0}});
  CHECK(m.Add(100e6, 0b11) == Approx(0.5));
  CHECK(m.Add(300e6, 0b01) == Approx(3.0));
  CHECK(m.seconds() == Approx(3.0));
}

TEST_CASE("the answer is cumulative: each chunk added never lowers it") {
  LoadModel m({{300e6, 0.01}, {150e6, 0.002}});
  double last = 0;
  for (int i = 0; i < 100; ++i) {
    const double t = m.Add(16 << 20, i % 3 == 0 ? 0b01 : 0b11);
    CHECK(t >= last);
    last = t;
  }
  // 1600 MiB, 34 of those only on tier 0: the shared bound dominates.
  CHECK(last == Approx(BoundTime(100.0 * (16 << 20), m.tiers())).epsilon(1e-9));
}

TEST_CASE("the model's bound of one holder set is BoundTime's, whatever the tiers' delays and presence") {
  // The model walks its present tiers in the order they start, sorted once (a Lookup asks it per
  // entry); BoundTime sorts per call. Tiers out of delay order, one absent, every holder set.
  const std::vector<TierRate> tiers = {{100e6, 0.030}, {0, 0}, {300e6, 0.001}, {50e6, 0.2}, {200e6, 0.010}};
  for (uint32_t holders = 1; holders < 32; ++holders) {
    for (double bytes : {1e3, 1e6, 5e6, 2e7, 1e8, 1e9}) {
      LoadModel m(tiers);
      const double t = m.Add(bytes, holders);
      const double want = BoundTime(bytes, tiers, holders);
      INFO("holders " << holders << ", " << bytes << " bytes");
      if (std::isinf(want)) {
        CHECK(std::isinf(t));
      } else {
        CHECK(t == Approx(want).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("many holder sets still bound every set alone and all of them together") {
  std::vector<TierRate> tiers(12, TierRate{100e6, 0});
  LoadModel m(tiers);
  for (uint32_t k = 0; k < 12; ++k) m.Add(100e6, 1u << k);  // 12 groups: past the exact limit
  CHECK(m.seconds() == Approx(1.0));
  m.Add(200e6, 1u << 3);
  CHECK(m.seconds() == Approx(3.0));  // tier 3 alone now has 300 MB
}

TEST_CASE("the host's verification bounds the whole when it is slower than the tiers together") {
  // 6 GB/s of tiers, verified at 4 GB/s: 400 MB take 0.1 s, not 0.067.
  LoadModel host({{3e9, 0}, {3e9, 0}}, 4e9);
  CHECK(host.Add(200e6, 0b11) == Approx(0.05));
  CHECK(host.Add(200e6, 0b11) == Approx(0.1));
  CHECK(host.Add(600e6, 0b01) == Approx(0.25));  // 1 GB at the host's 4 GB/s, over tier 0's 600 MB alone
  CHECK(host.Add(900e6, 0b01) == Approx(0.5));   // tier 0 alone with 1.5 GB: the slower stage again
  // Slower tiers: the host's rate does not show.
  LoadModel tiers({{300e6, 0}, {150e6, 0}}, 4e9);
  CHECK(tiers.Add(450e6, 0b11) == Approx(1.0));
  // No host rate (the verification keeps up, or is not measured): no bound.
  CHECK(LoadModel({{3e9, 0}, {3e9, 0}}).Add(600e6, 0b11) == Approx(0.1));
  // Bytes no present tier holds still take forever.
  CHECK(std::isinf(LoadModel({{0, 0}, {3e9, 0}}, 4e9).Add(1, 0b01)));
}

TEST_CASE("a tier not usable or not measured is absent, and a measured one is delayed by its latency") {
  CHECK(RateOf({.usable = false, .bps = 300e6}, 1 << 20).bps == 0);
  CHECK(RateOf({.usable = true, .bps = 0}, 1 << 20).bps == 0);
  // 4 reads of 1 MB at 100 MB/s queue 40 ms ahead of a read; a usual read time of 50 ms leaves 10 ms.
  const TierRate r = RateOf({.bps = 100e6, .usual_read_s = 0.050, .depth = 4}, 1e6);
  CHECK(r.bps == 100e6);
  CHECK(r.delay_s == Approx(0.010));
}

TEST_CASE("a read in flight well past the usual read time delays its tier before any deadline fires") {
  const TierReading usual{.bps = 100e6, .usual_read_s = 0.050, .depth = 4, .oldest_read_age_s = 0.090};
  CHECK(RateOf(usual, 1e6).delay_s == Approx(0.010));  // under twice the usual time: just latency
  TierReading stalling = usual;
  stalling.oldest_read_age_s = 0.5;
  CHECK(RateOf(stalling, 1e6).delay_s == Approx(0.5));
  // Chunks it alone holds now wait at least that long; with a healthy tier beside it they do not.
  LoadModel alone({RateOf(stalling, 1e6)});
  CHECK(alone.Add(1e6, 0b1) > 0.5);
  LoadModel beside({RateOf(stalling, 1e6), {100e6, 0}});
  CHECK(beside.Add(1e6, 0b11) == Approx(0.01));
}

}  // namespace
}  // namespace kvstream
