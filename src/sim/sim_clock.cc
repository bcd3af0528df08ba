#include "sim/sim_clock.h"

#include <algorithm>

namespace kvstream {

int64_t SimClock::NowNs() {
  absl::MutexLock lock(&mu_);
  return now_ns_;
}

bool SimClock::CanAdvanceLocked(int64_t* next) {
  if (paused_) return false;
  int64_t best = -1;
  for (Source* s : sources_) {
    const int64_t t = s->NextEventNs();
    if (t >= 0 && (best < 0 || t < best)) best = t;
  }
  *next = best;
  return best >= 0;
}

void SimClock::Wait(int64_t timeout_ns) {
  absl::MutexLock lock(&mu_);
  int64_t next = -1;
  while (!wake_ && !CanAdvanceLocked(&next)) {
    waiting_ = true;
    cv_.SignalAll();
    // Nothing due in virtual time: wait in real time for a wake or a resume.
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
    waiting_ = false;
    if (!wake_ && !paused_ && !CanAdvanceLocked(&next)) {
      if (timeout_ns > 0) break;  // idle loop: let it run its housekeeping
    }
  }
  waiting_ = false;
  if (wake_) {
    wake_ = false;
    return;
  }
  if (next >= 0) now_ns_ = std::max(now_ns_, next);
}

void SimClock::WaitUntil(int64_t deadline_ns) {
  absl::MutexLock lock(&mu_);
  int64_t next = -1;
  while (!wake_) {
    if (CanAdvanceLocked(&next)) {
      now_ns_ = std::max(now_ns_, std::min(next, deadline_ns));
      return;
    }
    if (!paused_) {  // nothing happens before the timer: time moves to it
      now_ns_ = std::max(now_ns_, deadline_ns);
      return;
    }
    waiting_ = true;
    cv_.SignalAll();
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
    waiting_ = false;
  }
  wake_ = false;
}

void SimClock::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
  cv_.SignalAll();
}

void SimClock::AddSource(Source* source) {
  absl::MutexLock lock(&mu_);
  sources_.push_back(source);
}

void SimClock::RemoveSource(Source* source) {
  absl::MutexLock lock(&mu_);
  sources_.erase(std::remove(sources_.begin(), sources_.end(), source), sources_.end());
}

void SimClock::Pause() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
}

void SimClock::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
  cv_.SignalAll();
}

void SimClock::WaitUntilQuiescent() {
  absl::MutexLock lock(&mu_);
  int64_t next;
  while (!(waiting_ && !wake_ && !CanAdvanceLocked(&next))) cv_.Wait(&mu_);
}

}  // namespace kvstream
