#include "util/histogram.h"

#include <algorithm>

namespace kvstream {

AtomicHistogram::AtomicHistogram(std::vector<double> upper) : upper_(std::move(upper)) {
  if (upper_.size() > kMaxBuckets) upper_.resize(kMaxBuckets);
}

void AtomicHistogram::Observe(double value) {
  const size_t bucket = std::lower_bound(upper_.begin(), upper_.end(), value) - upper_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

Histogram AtomicHistogram::Snapshot() const {
  Histogram h;
  h.upper = upper_;
  h.count = 0;  // the buckets' sum, so _count and le="+Inf" agree in every scrape
  for (size_t i = 0; i <= upper_.size(); ++i) {
    h.counts.push_back(counts_[i].load(std::memory_order_relaxed));
    h.count += h.counts.back();
  }
  h.sum = sum_.load(std::memory_order_relaxed);
  return h;
}

std::vector<double> AtomicHistogram::SecondsBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> AtomicHistogram::ErrorBuckets() {
  return {0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1, 2, 5};
}

std::vector<double> AtomicHistogram::GapBuckets() {
  return {-0.1, -0.05, 0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
}

}  // namespace kvstream
