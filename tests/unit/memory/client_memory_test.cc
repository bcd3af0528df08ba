// Client memory that may shrink (memory/client_memory.h): reads and writes through the file, and hashing
// under the SIGBUS guard, with the client truncating the memory away.
#include "memory/client_memory.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "format/chunk_format.h"
#include "shared_memory.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr size_t kSize = 1 << 20;

// xxh3-64 of client memory under the guard, as the block verifier hashes a block landed there.
absl::StatusOr<uint64_t> GuardedChecksum(const uint8_t* data, size_t size) {
  uint64_t sum = 0;
  if (absl::Status s = GuardedAccess([&] { sum = Checksum(data, size); }); !s.ok()) return s;
  return sum;
}

TEST_CASE("hashing client memory that was truncated away is an error, not a crash") {
  MappedSharedMemory m(kSize);
  const auto payload = Payload(kSize, 9);
  std::memcpy(m.data(), payload.data(), kSize);
  auto sum = GuardedChecksum(m.data(), kSize);
  REQUIRE(sum.ok());
  CHECK(*sum == Checksum(payload.data(), kSize));
  REQUIRE(ftruncate(m.fd(), kSize / 2) == 0);  // the second half is gone
  CHECK(GuardedChecksum(m.data(), kSize / 2).ok());
  for (int i = 0; i < 3; ++i) {  // and again: the guard is armed each time
    auto gone = GuardedChecksum(m.data(), kSize);
    REQUIRE_FALSE(gone.ok());
    CHECK(absl::IsFailedPrecondition(gone.status()));
  }
  // On other threads too, concurrently.
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) errors += !GuardedChecksum(m.data() + kSize / 4, kSize / 2).ok();
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors == 200);
  // Grown back: fresh zero pages, hashed like any memory.
  REQUIRE(ftruncate(m.fd(), kSize) == 0);
  const std::vector<uint8_t> zeros(kSize / 2);
  auto regrown = GuardedChecksum(m.data() + kSize / 2, kSize / 2);
  REQUIRE(regrown.ok());
  CHECK(*regrown == Checksum(zeros.data(), zeros.size()));
}

TEST_CASE("a SIGBUS outside a guarded hash still terminates the process") {
  MappedSharedMemory m(kSize);
  CHECK(GuardedChecksum(m.data(), 4096).ok());  // the handler is installed
  const pid_t child = fork();
  if (child == 0) {
    if (ftruncate(m.fd(), 0) != 0) _exit(2);
    volatile uint8_t byte = m.data()[0];  // a plain load from a vanished page
    (void)byte;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}

TEST_CASE("guarded copies into client memory land, and fail instead of crashing once it is gone") {
  MappedSharedMemory m(kSize);
  const auto payload = Payload(8192, 4);
  REQUIRE(GuardedCopy(m.data() + 4096, payload.data(), payload.size()).ok());
  std::vector<uint8_t> back(8192);
  REQUIRE(ReadClientMemory({m.fd(), 4096, back.size()}, back.data()).ok());  // the file holds them
  CHECK(back == payload);
  REQUIRE(ftruncate(m.fd(), 8192) == 0);
  CHECK(absl::IsFailedPrecondition(ReadClientMemory({m.fd(), 4096, back.size()}, back.data())));
  CHECK(absl::IsFailedPrecondition(GuardedCopy(m.data() + 4096, payload.data(), payload.size())));
  struct stat st;
  REQUIRE(fstat(m.fd(), &st) == 0);
  CHECK(st.st_size == 8192);  // a store into a vanished page does not grow the file back
  REQUIRE(GuardedCopy(m.data(), payload.data(), 4096).ok());  // what is still there takes copies
}

}  // namespace
}  // namespace kvstream::testing
