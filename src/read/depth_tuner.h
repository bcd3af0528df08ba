// DepthTuner: a tier's read queue depth (the blocks it has in flight) where the config leaves it
// to the daemon (`queue_depth: auto`). Too few and a fast device idles between reads; too many
// and a step's last blocks wait in a tier the others cannot help (the tail). So the depth starts
// at the smallest that keeps a device busy and doubles while doubling raises the bandwidth the
// tier reads at while it has work waiting for a slot ("backlogged"), up to a ceiling; then it
// holds, and after kReprobeNs of backlogged time it tries again (a tier's bandwidth moves: a
// shared file system under other nodes' load). A trial alternates windows at the depth and at
// its double, d 2d d 2d d, and keeps the double only if each of its windows reads kGain more
// than both windows around it: a tier whose bandwidth changes on its own (a cap that changes
// between steps, another node's load, a throttle's bursts) is not mistaken for one that reads
// faster deeper. Loop thread only; pure logic on the times it is given.
#pragma once

#include <cstdint>
#include <string>

namespace kvstream {

class DepthTuner {
 public:
  static constexpr int64_t kWindowNs = 100'000'000;  // backlogged time per measurement...
  static constexpr uint32_t kWindowReads = 16;       // ...and reads landed in it
  static constexpr double kGain = 1.10;              // what a doubling must add to be kept
  static constexpr int64_t kReprobeNs = 10'000'000'000;

  // A depth that starts at `start` and may grow up to `max`; fixed at `start` when max <= start.
  DepthTuner(uint32_t start, uint32_t max);

  uint32_t depth() const { return depth_; }
  bool fixed() const { return max_ <= start_; }
  // Whether depth() is a trial (measured against the depth before it) rather than settled.
  bool trying() const { return phase_ == Phase::kTrying; }

  // From `now_ns` on, whether the tier has blocks to read that it cannot take for want of depth.
  void SetBacklogged(bool backlogged, int64_t now_ns);
  // A read of `bytes` landed at `now_ns`. True when depth() changed; `*why` then says how.
  bool Landed(uint64_t bytes, int64_t now_ns, std::string* why);

 private:
  enum class Phase : uint8_t { kTrying, kHolding };
  static constexpr int kTrialWindows = 5;  // d 2d d 2d d

  // One window's bandwidth measured: the next depth to read at.
  bool Decide(double bps, int64_t window_ns, std::string* why);
  uint32_t Double(uint32_t d) const { return d >= max_ / 2 ? max_ : d * 2; }

  uint32_t start_;
  uint32_t max_;
  uint32_t depth_;
  Phase phase_ = Phase::kTrying;
  bool backlogged_ = false;
  int64_t since_ns_ = 0;  // backlogged since (while backlogged_)
  int64_t window_ns_ = 0;  // backlogged time of this window before since_ns_
  uint64_t window_bytes_ = 0;
  uint32_t window_reads_ = 0;
  uint32_t base_ = 0;            // the depth a trial doubles (depth_ while holding)
  double trial_bps_[kTrialWindows] = {};  // the trial's windows so far
  int trial_windows_ = 0;
  int64_t held_ns_ = 0;  // backlogged time since the depth was last settled
};

}  // namespace kvstream
