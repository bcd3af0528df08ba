// Staging memory: images' buffers are kept and handed out again (no fresh pages per chunk), within
// a bound on the memory kept and taken together.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>

#include "format/chunk_format.h"
#include "memory/staging_memory.h"

namespace kvstream::testing {
namespace {

constexpr size_t kMiB = 1 << 20;

TEST_CASE("a buffer given back is handed out again for an image of its size class") {
  auto memory = StagingMemory::Create(64 * kMiB);
  uint8_t* first = nullptr;
  {
    StagingMemory::Buffer b = memory->Take(8 * kMiB + 4096);
    REQUIRE(b);
    first = b.get();
    CHECK(reinterpret_cast<uintptr_t>(first) % kFileAlignment == 0);
    CHECK(b.capacity() >= 8 * kMiB + 4096);
    std::memset(b.get(), 0xab, 8 * kMiB + 4096);  // every byte it promises is usable
    CHECK(memory->taken_bytes() == b.capacity());
    CHECK(memory->kept_bytes() == 0);
  }
  CHECK(memory->taken_bytes() == 0);
  CHECK(memory->kept_bytes() >= 8 * kMiB);
  StagingMemory::Buffer again = memory->Take(8 * kMiB + 8192);  // same 64 KiB class
  CHECK(again.get() == first);
  CHECK(memory->reused() == 1);
  CHECK(memory->allocated() == 1);
  CHECK(memory->kept_bytes() == 0);
  StagingMemory::Buffer other = memory->Take(kMiB);  // another class: a new allocation
  CHECK(memory->allocated() == 2);
  CHECK(memory->reused() == 1);
}

TEST_CASE("memory kept and taken together stay within the limit") {
  auto memory = StagingMemory::Create(4 * kMiB);
  {
    StagingMemory::Buffer a = memory->Take(2 * kMiB);
    StagingMemory::Buffer b = memory->Take(2 * kMiB);
    StagingMemory::Buffer c = memory->Take(2 * kMiB);  // taken beyond the limit: allowed, never kept
    REQUIRE((a && b && c));
    CHECK(memory->taken_bytes() == 6 * kMiB);
    c.Reset();
    CHECK(memory->kept_bytes() == 0);  // 4 MiB still taken
    b.Reset();
    CHECK(memory->kept_bytes() == 2 * kMiB);
  }
  CHECK(memory->kept_bytes() == 4 * kMiB);
  CHECK(memory->taken_bytes() == 0);
  // A miss frees kept buffers of other sizes until the new one fits beside them.
  StagingMemory::Buffer big = memory->Take(3 * kMiB);
  REQUIRE(big);
  CHECK(memory->kept_bytes() + memory->taken_bytes() <= 4 * kMiB);
  CHECK(memory->kept_bytes() == 0);
}

TEST_CASE("a buffer may outlive the staging memory that made it") {
  auto memory = StagingMemory::Create(16 * kMiB);
  const std::weak_ptr<StagingMemory> pool = memory;
  StagingMemory::Buffer b = memory->Take(kMiB);
  REQUIRE(b);
  memory.reset();
  CHECK_FALSE(pool.expired());  // the buffer's own reference keeps the pool
  std::memset(b.get(), 1, kMiB);
  StagingMemory::Buffer moved = std::move(b);
  CHECK(!b);
  REQUIRE(moved);
  moved.Reset();  // given back to a pool nobody else holds: it goes with its last buffer
  CHECK(pool.expired());
}

}  // namespace
}  // namespace kvstream::testing
