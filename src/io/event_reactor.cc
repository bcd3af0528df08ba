#include "io/event_reactor.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "absl/strings/str_cat.h"

namespace kvstream {

absl::StatusOr<std::unique_ptr<EventReactor>> EventReactor::Create() {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  return std::unique_ptr<EventReactor>(new EventReactor(fd));
}

EventReactor::~EventReactor() { close(fd_); }

int64_t EventReactor::NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void EventReactor::Wait(int64_t timeout_ns) {
  pollfd p{fd_, POLLIN, 0};
  const int timeout_ms = timeout_ns <= 0 ? 0 : static_cast<int>((timeout_ns + 999'999) / 1'000'000);
  if (poll(&p, 1, timeout_ms) > 0) {
    uint64_t value;
    // Resets the counter; completions posted after this read signal it again.
    [[maybe_unused]] ssize_t n = read(fd_, &value, sizeof(value));
  }
}

void EventReactor::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
}

}  // namespace kvstream
