// Helpers for the tests of the I/O engines (io/io_queue.h: UringQueue, ThreadQueue).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include "io/io_queue.h"

namespace kvstream::testing {

// Reaps until `n` completions came out (10 s at most).
inline std::vector<IoCompletion> ReapAll(IoQueue& queue, size_t n) {
  using namespace std::chrono_literals;
  std::vector<IoCompletion> out;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (out.size() < n) {
    queue.Reap(&out);
    if (out.size() < n) std::this_thread::sleep_for(1ms);
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
  return out;
}

}  // namespace kvstream::testing
