// AtomicHistogram (util/histogram.h): Prometheus-style buckets kept with atomics. A value is counted in
// the first bucket whose bound is at least it (Prometheus' `le`), or in the overflow bucket past
// the last bound; the count and the sum follow every value; a snapshot taken while other threads
// observe never goes backwards, and none of their values is lost.
#include "util/histogram.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

namespace kvstream::testing {
namespace {

TEST_CASE("a value is counted in the first bucket whose bound is at least it, past the last in the overflow") {
  AtomicHistogram h({1, 2, 5});
  const Histogram empty = h.Snapshot();
  CHECK(empty.upper == std::vector<double>{1, 2, 5});
  CHECK(empty.counts == std::vector<uint64_t>{0, 0, 0, 0});
  CHECK(empty.count == 0);
  CHECK(empty.sum == 0);
  for (double v : {0.5, 1.0, 1.5, 2.0, 5.0, 7.0, 1e9, -3.0}) h.Observe(v);
  const Histogram s = h.Snapshot();
  CHECK(s.counts == std::vector<uint64_t>{3, 2, 1, 2});  // -3, 0.5, 1 | 1.5, 2 | 5 | 7, 1e9
  CHECK(s.count == 8);
  CHECK(s.sum == Approx(0.5 + 1 + 1.5 + 2 + 5 + 7 + 1e9 - 3));
}

TEST_CASE("bounds past kMaxBuckets are dropped, and values above the last kept one overflow") {
  std::vector<double> upper(AtomicHistogram::kMaxBuckets + 6);
  std::iota(upper.begin(), upper.end(), 1.0);  // 1, 2, ..., 30
  AtomicHistogram h(upper);
  h.Observe(AtomicHistogram::kMaxBuckets);      // the last bound kept
  h.Observe(AtomicHistogram::kMaxBuckets + 3);  // a dropped bound's value
  const Histogram s = h.Snapshot();
  REQUIRE(s.upper.size() == AtomicHistogram::kMaxBuckets);
  REQUIRE(s.counts.size() == AtomicHistogram::kMaxBuckets + 1);
  CHECK(s.upper.back() == AtomicHistogram::kMaxBuckets);
  CHECK(s.counts[AtomicHistogram::kMaxBuckets - 1] == 1);
  CHECK(s.counts[AtomicHistogram::kMaxBuckets] == 1);
  CHECK(s.count == 2);
}

TEST_CASE("the standard bucket sets increase and fit the table") {
  for (const std::vector<double>& upper : {AtomicHistogram::SecondsBuckets(), AtomicHistogram::GapBuckets()}) {
    REQUIRE(!upper.empty());
    CHECK(upper.size() <= AtomicHistogram::kMaxBuckets);
    for (size_t i = 1; i < upper.size(); ++i) CHECK(upper[i - 1] < upper[i]);
  }
  AtomicHistogram gaps(AtomicHistogram::GapBuckets());
  gaps.Observe(-0.07);  // a step 7% faster than its bound: in (-10%, -5%]
  CHECK(gaps.Snapshot().counts[1] == 1);
}

TEST_CASE("snapshots during concurrent observes never go backwards, agree with themselves, and total exactly") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200'000;
  const std::vector<double> values = {0.5, 1.5, 3.0, 10.0};  // one per bucket; sums exact in a double
  AtomicHistogram h({1, 2, 5});
  std::atomic<bool> done{false};
  std::atomic<int> snapshots{0}, backwards{0}, inconsistent{0};  // checked on this thread (Catch2 is not thread-safe)
  std::thread reader([&] {
    Histogram last = h.Snapshot();
    while (!done.load()) {
      const Histogram s = h.Snapshot();
      for (size_t i = 0; i < s.counts.size(); ++i) backwards += s.counts[i] < last.counts[i];
      backwards += s.count < last.count;
      backwards += s.sum < last.sum;  // every value is positive
      uint64_t in_buckets = 0;
      for (uint64_t c : s.counts) in_buckets += c;
      inconsistent += s.count != in_buckets;  // /metrics' _count against its le="+Inf" bucket
      last = s;
      ++snapshots;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) h.Observe(values[(i + t) % values.size()]);
    });
  }
  for (std::thread& w : writers) w.join();
  done = true;
  reader.join();
  CHECK(snapshots > 0);
  CHECK(backwards == 0);
  CHECK(inconsistent == 0);
  const Histogram s = h.Snapshot();
  const uint64_t total = uint64_t{kThreads} * kPerThread;
  CHECK(s.count == total);
  CHECK(s.counts == std::vector<uint64_t>(4, total / 4));
  CHECK(s.sum == (0.5 + 1.5 + 3.0 + 10.0) * (total / 4));  // no addition lost to a race
}

}  // namespace
}  // namespace kvstream::testing
