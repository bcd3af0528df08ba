// Reactor: the clock and the wait of the I/O completion loop. EventReactor uses the monotonic
// clock and one eventfd that every io_uring ring signals; SimClock (tests) runs virtual time.
#pragma once

#include <cstdint>

namespace kvstream {

class Reactor {
 public:
  virtual ~Reactor() = default;
  virtual int64_t NowNs() = 0;
  // Blocks until Wake() was called, an I/O completion may be ready, or timeout_ns passed (the
  // idle loop's housekeeping period: a virtual clock does not move for it).
  virtual void Wait(int64_t timeout_ns) = 0;
  // As Wait, but until the clock reads deadline_ns: a timer of the loop (a read's deadline), which
  // a virtual clock moves to when nothing happens before it.
  virtual void WaitUntil(int64_t deadline_ns) = 0;
  // Makes the current or next Wait return. Any thread.
  virtual void Wake() = 0;
};

}  // namespace kvstream
