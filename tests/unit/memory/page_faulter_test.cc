// PageFaulter (memory/page_faulter.h): every piece of a region faulted in on its own thread, in
// order, each reported with its region's generation; Forget drops what has not started and
// returns only once no piece of the region is being faulted in; the default fault-in brings a
// memfd's pages in without changing a byte.
#include "memory/page_faulter.h"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "shared_memory.h"

namespace kvstream::testing {
namespace {

// What the faulter reported, in order, with a way to wait for it.
struct Reports {
  absl::Mutex mu;
  std::vector<std::tuple<const uint8_t*, uint64_t, size_t>> ready ABSL_GUARDED_BY(mu);
  PageFaulter::PieceReady Callback() {
    return [this](const uint8_t* base, uint64_t generation, size_t piece) {
      absl::MutexLock lock(&mu);
      ready.emplace_back(base, generation, piece);
    };
  }
  std::vector<std::tuple<const uint8_t*, uint64_t, size_t>> WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ready.size() >= n; };
    mu.Await(absl::Condition(&enough));
    return ready;
  }
};

TEST_CASE("every piece of each region is faulted in, in order, and reported with its generation") {
  Reports reports;
  absl::Mutex mu;
  std::vector<std::pair<uint8_t*, size_t>> faulted;
  std::vector<uint8_t> a(10), b(4);
  {
    PageFaulter faulter(reports.Callback(), [&](uint8_t* p, size_t size) {
      absl::MutexLock lock(&mu);
      faulted.emplace_back(p, size);
    });
    faulter.Add(a.data(), a.size(), 4, 7);  // pieces of 4, 4 and 2 bytes
    faulter.Add(b.data(), b.size(), 4, 8);
    const auto ready = reports.WaitFor(4);
    CHECK(ready == std::vector<std::tuple<const uint8_t*, uint64_t, size_t>>{
                       {a.data(), 7, 0}, {a.data(), 7, 1}, {a.data(), 7, 2}, {b.data(), 8, 0}});
  }
  absl::MutexLock lock(&mu);
  CHECK(faulted == std::vector<std::pair<uint8_t*, size_t>>{{a.data(), 4}, {a.data() + 4, 4}, {a.data() + 8, 2},
                                                            {b.data(), 4}});
}

TEST_CASE("Forget drops the pieces not started and returns once the one in progress is done") {
  Reports reports;
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> calls{0};
  std::atomic<bool> in_progress{false};
  std::vector<uint8_t> a(16), b(4);
  PageFaulter faulter(reports.Callback(), [&](uint8_t* p, size_t) {
    if (p != a.data()) return;
    in_progress = true;
    if (calls++ == 0) {
      entered.set_value();
      released.wait();
    }
    in_progress = false;
  });
  faulter.Add(a.data(), a.size(), 4, 1);
  faulter.Add(b.data(), b.size(), 4, 2);
  entered.get_future().wait();  // piece 0 of `a` is being faulted in
  std::atomic<bool> busy_on_return{true};
  std::thread forget([&] {
    faulter.Forget(a.data());
    busy_on_return = in_progress.load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Forget waits meanwhile (or has not begun)
  release.set_value();
  forget.join();
  CHECK_FALSE(busy_on_return);  // returned only once that piece was done
  const auto ready = reports.WaitFor(2);  // piece 0 of `a`, then `b`: a's other pieces were dropped
  CHECK(std::get<0>(ready[1]) == b.data());
  CHECK(calls == 1);
  faulter.Forget(b.data());  // nothing queued: returns at once
}

TEST_CASE("the default fault-in brings a memfd's pages in and leaves its bytes as they were") {
  const long page = sysconf(_SC_PAGESIZE);
  MappedSharedMemory memory(64 * page);
  std::memset(memory.data() + 3 * page, 0x5a, page);  // one page written; the others are holes
  std::vector<unsigned char> resident(64);
  REQUIRE(mincore(memory.data(), memory.size(), resident.data()) == 0);
  REQUIRE((resident[0] & 1) == 0);  // a hole before
  Reports reports;
  PageFaulter faulter(reports.Callback());
  faulter.Add(memory.data(), memory.size(), 16 * page, 1);
  reports.WaitFor(4);
  REQUIRE(mincore(memory.data(), memory.size(), resident.data()) == 0);
  for (unsigned char r : resident) CHECK((r & 1) == 1);
  for (long i = 0; i < 64 * page; ++i) {
    if (memory.data()[i] != (i / page == 3 ? 0x5a : 0)) FAIL("byte " << i << " changed");
  }
}

}  // namespace
}  // namespace kvstream::testing
