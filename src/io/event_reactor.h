#pragma once

#include "absl/status/statusor.h"
#include "io/reactor.h"

namespace kvstream {

// Real-time reactor. Every FileDevice registers event_fd() with its rings, so one poll() covers
// completions on all tiers and wake-ups from client threads.
class EventReactor final : public Reactor {
 public:
  static absl::StatusOr<std::unique_ptr<EventReactor>> Create();
  ~EventReactor() override;

  int64_t NowNs() override;
  void Wait(int64_t timeout_ns) override;
  void WaitUntil(int64_t deadline_ns) override { Wait(deadline_ns - NowNs()); }
  void Wake() override;
  int event_fd() const { return fd_; }

 private:
  explicit EventReactor(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvstream
