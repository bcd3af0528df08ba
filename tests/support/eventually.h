// Eventually: waiting in real time for what another thread or process does in its own time.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace kvstream::testing {

// True once `done()` is, polling every 10 ms for up to 10 s.
inline bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

}  // namespace kvstream::testing
