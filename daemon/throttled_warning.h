// ThrottledWarning: a warning that something a client can cause at will (a refused connection,
// an accept that found no descriptor) is logged at most once per interval, with how many times it
// happened since the last line, so no client can flood the log. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class ThrottledWarning {
 public:
  static constexpr int64_t kDefaultIntervalMs = 10'000;

  explicit ThrottledWarning(int64_t interval_ms = kDefaultIntervalMs) : interval_ms_(interval_ms) {}
  // Counts one occurrence at `now_ms` (steady clock) and logs `message` unless a line went out
  // less than an interval ago.
  void Warn(int64_t now_ms, const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t interval_ms_;
  absl::Mutex mu_;
  int64_t logged_ms_ ABSL_GUARDED_BY(mu_) = 0;
  bool logged_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;  // occurrences since the last line
};

}  // namespace kvstream
