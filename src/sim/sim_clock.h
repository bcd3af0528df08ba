// SimClock: a Reactor with virtual time for deterministic tests and simulation. Time moves only
// when the I/O loop waits: it jumps to the earliest pending completion of any SimDevice.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "io/reactor.h"

namespace kvstream {

class SimClock final : public Reactor {
 public:
  // Something with completions due at virtual times (a SimDevice).
  class Source {
   public:
    virtual ~Source() = default;
    // Earliest pending completion time, or -1 when nothing is pending. Called under the clock's
    // lock: it must not call back into the clock.
    virtual int64_t NextEventNs() = 0;
  };

  int64_t NowNs() override;
  void Wait(int64_t timeout_ns) override;
  void WaitUntil(int64_t deadline_ns) override;
  void Wake() override;

  void AddSource(Source* source);
  void RemoveSource(Source* source);

  // While paused, Wait returns only on Wake and time does not move (tests stage work "during" a
  // step this way).
  void Pause();
  void Resume();
  // Blocks until the loop is inside Wait with nothing to wake it and time cannot move: paused, or
  // nothing pending. After it returns, the loop has handled everything submitted before the call.
  void WaitUntilQuiescent();

 private:
  bool CanAdvanceLocked(int64_t* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  absl::CondVar cv_;  // a wake, a resume, or the loop starting to wait
  int64_t now_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Source*> sources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstream
