// LatencyHistogram: a Prometheus-style distribution kept with atomics, so the loop thread observes
// and any thread snapshots without a lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "kvstream/types.h"

namespace kvstream {

class AtomicHistogram {
 public:
  // `upper`: bucket bounds, increasing (at most kMaxBuckets).
  explicit AtomicHistogram(std::vector<double> upper);

  void Observe(double value);
  Histogram Snapshot() const;

  static constexpr size_t kMaxBuckets = 24;
  // 100 us .. 10 s, for I/O and step times in seconds.
  static std::vector<double> SecondsBuckets();
  // -10% .. +500%, for a step's gap to its bound.
  static std::vector<double> GapBuckets();
  // Relative errors |estimate - actual| / actual.
  static std::vector<double> ErrorBuckets();

 private:
  std::vector<double> upper_;
  std::array<std::atomic<uint64_t>, kMaxBuckets + 1> counts_{};
  std::atomic<double> sum_{0};
};

}  // namespace kvstream
