// UnixNowNs: the wall clock in nanoseconds since the Unix epoch, as chunk headers
// (created_unix_ns), step records and the reconcile pass stamp it. Not for intervals: those are
// measured on the steady clock (the loop's Reactor).
#pragma once

#include <chrono>
#include <cstdint>

namespace kvstream {

inline int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace kvstream
