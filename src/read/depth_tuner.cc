#include "read/depth_tuner.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace kvstream {

DepthTuner::DepthTuner(uint32_t start, uint32_t max)
    : start_(std::max<uint32_t>(start, 1)), max_(std::max(max, start_)), depth_(start_) {}

void DepthTuner::SetBacklogged(bool backlogged, int64_t now_ns) {
  if (backlogged == backlogged_) return;
  if (backlogged_) {
    window_ns_ += now_ns - since_ns_;
  } else {
    since_ns_ = now_ns;
  }
  backlogged_ = backlogged;
}

bool DepthTuner::Landed(uint64_t bytes, int64_t now_ns, std::string* why) {
  if (fixed() || !backlogged_) return false;  // a tier short of work says nothing of its depth
  window_bytes_ += bytes;
  ++window_reads_;
  const int64_t elapsed = window_ns_ + (now_ns - since_ns_);
  if (elapsed < kWindowNs || window_reads_ < kWindowReads) return false;
  const double bps = static_cast<double>(window_bytes_) * 1e9 / static_cast<double>(elapsed);
  window_ns_ = 0;
  since_ns_ = now_ns;
  window_bytes_ = 0;
  window_reads_ = 0;
  return Decide(bps, elapsed, why);
}

bool DepthTuner::Decide(double bps, int64_t window_ns, std::string* why) {
  if (phase_ == Phase::kHolding) {
    held_ns_ += window_ns;
    if (held_ns_ < kReprobeNs || depth_ >= max_) return false;
    held_ns_ = 0;
    phase_ = Phase::kTrying;  // this window is the first of a new trial, at depth_
    trial_windows_ = 0;
  }
  if (trial_windows_ == 0) {
    if (depth_ >= max_) {
      phase_ = Phase::kHolding;
      return false;
    }
    base_ = depth_;
  }
  trial_bps_[trial_windows_++] = bps;
  const double* s = trial_bps_;
  // After windows 3 and 5: the last window at the double (i) against the better of the windows
  // at the base around it.
  if (const int i = trial_windows_ - 2; trial_windows_ % 2 == 1 && i >= 1 &&
                                        s[i] < kGain * std::max(s[i - 1], s[i + 1])) {
    *why = absl::StrFormat("stays %u: %.3f GB/s at %u against %.3f and %.3f at %u", base_, s[i] / 1e9, Double(base_),
                           s[i - 1] / 1e9, s[i + 1] / 1e9, base_);
    phase_ = Phase::kHolding;
    return true;  // (already at base_)
  }
  if (trial_windows_ == kTrialWindows) {
    depth_ = Double(base_);
    *why = absl::StrFormat("%u: %.3f and %.3f GB/s against %.3f, %.3f and %.3f at %u", depth_, s[1] / 1e9, s[3] / 1e9,
                           s[0] / 1e9, s[2] / 1e9, s[4] / 1e9, base_);
    trial_windows_ = 0;  // and the next doubling is tried from here
    if (depth_ >= max_) phase_ = Phase::kHolding;
    return true;
  }
  depth_ = trial_windows_ % 2 == 1 ? Double(base_) : base_;
  *why = absl::StrFormat("%u for a window (trying %u against %u)", depth_, Double(base_), base_);
  return true;
}

}  // namespace kvstream
