// What one step did, per tier, and how far it was from the aggregate-bandwidth bound
// D / sum_k b_k (docs/design-notes.md). TierUse accumulates a tier's busy time and bytes while the
// step reads; MakeStepRecord turns them into a StepRecord (pure: no clock, no I/O); StepHistory
// keeps the most recent records for Stats and kvstreamctl.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvstream/types.h"

namespace kvstream {

// One tier's part in one step: blocks and bytes it delivered and the time it had at least one
// of the step's reads in flight.
struct TierUse {
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint32_t in_flight = 0;
  int64_t busy_since_ns = 0;
  int64_t busy_ns = 0;
  bool step_ended = false;  // busy_ns is final: reads landing later count nothing

  void ReadStarted(int64_t now_ns) {
    if (in_flight++ == 0) busy_since_ns = now_ns;
  }
  void ReadEnded(int64_t now_ns) {
    if (--in_flight == 0 && !step_ended) busy_ns += now_ns - busy_since_ns;
  }
  // The step ends with reads of it still in flight (abandoned for another tier's copy): its busy
  // time counts up to its end, not to when those reads land (and not 0 when one was in flight
  // from the tier's first read for the step to its end).
  void StepEnded(int64_t now_ns) {
    if (in_flight > 0) busy_ns += now_ns - busy_since_ns;
    step_ended = true;
  }
};

// Weight of a new step in a tier's reference (a moving average).
inline constexpr double kReferenceWeight = 0.25;
// A step whose bandwidth is this many times above (or below) the reference has moved away from it;
// two such steps in a row, the same way, are a change of the tier's rate (ReferenceRate::Add).
inline constexpr double kReferenceShift = 1.5;

// A tier's reference bandwidth: its bytes over its busy time in recent steps, both moving averages
// (each step's weighted kReferenceWeight against the steps before), so a step counts by how long
// the tier was busy in it. An average of per-step bandwidths would count a step in which the tier
// read a few blocks in a burst (a throttle's credit, the other rank's step draining the tier's
// queue) as much as one it read all along: with two rank steps sharing the tiers, bursts of several
// times a tier's cap in one step and a fraction of it in the other averaged to up to 1.4x what it
// delivered (tmpfs tiers capped at 2000/700 MB/s).
// A change of the tier's rate (a cap moved, a device slowing down) shows as two steps in a row
// beyond kReferenceShift the same way; the reference then restarts from those two, instead of
// taking about ten steps to follow (0.75^n of the old rate left after n steps). Bursts alternate
// (one rank's step fast, the other's slow) and never restart it.
struct ReferenceRate {
  ReferenceRate() = default;
  ReferenceRate(double bytes, double seconds) : bytes(bytes), seconds(seconds) {}  // a reference already set

  double bytes = 0;
  double seconds = 0;
  double bps() const { return seconds > 0 ? bytes / seconds : 0; }
  // Adds a step in which the tier read `step_bytes` in `step_seconds` of busy time (both > 0).
  void Add(double step_bytes, double step_seconds) {
    if (seconds <= 0) {  // the first step sets it
      bytes = step_bytes;
      seconds = step_seconds;
      return;
    }
    const double ratio = step_bytes / step_seconds / bps();
    const int shift = ratio > kReferenceShift ? 1 : ratio < 1 / kReferenceShift ? -1 : 0;
    if (shift != 0 && shift == last_shift_) {  // moved: restart from the two steps
      bytes = (last_bytes_ + step_bytes) / 2;
      seconds = (last_seconds_ + step_seconds) / 2;
      last_shift_ = 0;
      return;
    }
    last_shift_ = shift;
    last_bytes_ = step_bytes;
    last_seconds_ = step_seconds;
    bytes = (1 - kReferenceWeight) * bytes + kReferenceWeight * step_bytes;
    seconds = (1 - kReferenceWeight) * seconds + kReferenceWeight * step_seconds;
  }

 private:
  int last_shift_ = 0;  // the last step's: +1 above the reference by kReferenceShift, -1 below, 0 within
  double last_bytes_ = 0;
  double last_seconds_ = 0;
};

struct StepRecordInput {
  const std::vector<ChunkResult>* results = nullptr;
  const std::vector<TierUse>* use = nullptr;         // per tier
  const std::vector<std::string>* tier_names = nullptr;
  uint32_t eligible = 0;                             // tiers holding at least one chunk of the step
  int64_t wall_ns = 0;
  Policies policies;                                 // the ones the step ran under
  double estimate_seconds = 0;                       // the load estimate at its start (NaN: none)
};

// The step's record: counts, bytes, per-tier blocks/bytes/busy/bandwidth, and the bound from the
// bandwidth of the eligible tiers (each tier's bandwidth in this step, or its reference when it
// read nothing). Adds the step's bytes and busy time of each tier that read to its `reference`
// (per tier). The record's id is left 0 (StepHistory assigns it); start_unix_ns is the caller's.
StepRecord MakeStepRecord(const StepRecordInput& in, std::vector<ReferenceRate>* reference);

class StepHistory {
 public:
  static constexpr size_t kLimit = 1024;

  // Assigns the record its id and keeps it (dropping the oldest beyond kLimit).
  void Add(StepRecord* record);
  // The most recent records, oldest first (at most `max` of them).
  std::vector<StepRecord> Recent(size_t max) const;
  uint64_t count() const;

 private:
  mutable absl::Mutex mu_;
  std::deque<StepRecord> records_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstream
