// BufferSlots (io/buffer_slots.h): the table of a device's registered buffers. Which slot is free,
// taken and released, and which slot, if any, holds all of an op's buffer.
#include "io/buffer_slots.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

namespace kvstream::testing {
namespace {

TEST_CASE("a fresh table hands out its slots lowest first until every one holds memory") {
  std::vector<uint8_t> memory(3 * 4096);
  BufferSlots slots;
  CHECK(slots.Free() == -1);  // no table yet
  slots.Reset(3);
  for (int want = 0; want < 3; ++want) {
    REQUIRE(slots.Free() == want);
    CHECK_FALSE(slots.Holds(want));
    slots.Take(want, memory.data() + want * 4096, 4096);
    CHECK(slots.Holds(want));
  }
  CHECK(slots.Free() == -1);
}

TEST_CASE("a released slot holds nothing, covers nothing and is handed out again") {
  std::vector<uint8_t> memory(2 * 4096);
  BufferSlots slots;
  slots.Reset(2);
  slots.Take(0, memory.data(), 4096);
  slots.Take(1, memory.data() + 4096, 4096);
  REQUIRE(slots.Covering(memory.data() + 4096, 100) == 1);
  slots.Release(1);
  CHECK_FALSE(slots.Holds(1));
  CHECK(slots.Covering(memory.data() + 4096, 100) == -1);
  CHECK(slots.Covering(memory.data(), 100) == 0);  // the other slot is untouched
  CHECK(slots.Free() == 1);
  slots.Take(1, memory.data() + 4096, 4096);
  CHECK(slots.Free() == -1);
}

TEST_CASE("a slot taken out of order leaves the free list without it") {
  std::vector<uint8_t> memory(4096);
  BufferSlots slots;
  slots.Reset(3);
  slots.Take(2, memory.data(), 4096);  // not the one Free named
  CHECK(slots.Free() == 0);
  slots.Take(0, memory.data() + 1024, 1024);
  CHECK(slots.Free() == 1);
  slots.Take(1, memory.data() + 2048, 1024);
  CHECK(slots.Free() == -1);
}

TEST_CASE("Holds is false for slots outside the table") {
  BufferSlots slots;
  slots.Reset(2);
  CHECK_FALSE(slots.Holds(-1));
  CHECK_FALSE(slots.Holds(2));
  CHECK_FALSE(slots.Holds(1000));
}

TEST_CASE("Covering names the slot that holds all of a buffer, and no slot for one it holds part of") {
  // Two slots side by side, [4096, 12288) and [12288, 16384) of `memory`, with gaps around them.
  std::vector<uint8_t> memory(5 * 4096);
  uint8_t* const a = memory.data() + 4096;
  uint8_t* const b = memory.data() + 3 * 4096;
  BufferSlots slots;
  slots.Reset(4);
  CHECK(slots.Covering(a, 1) == -1);  // nothing registered
  slots.Take(0, a, 2 * 4096);
  slots.Take(1, b, 4096);

  SECTION("inside") {
    CHECK(slots.Covering(a, 2 * 4096) == 0);  // exactly the slot
    CHECK(slots.Covering(a, 1) == 0);         // its first byte
    CHECK(slots.Covering(a + 100, 4096) == 0);
    CHECK(slots.Covering(b - 1, 1) == 0);     // its last byte
    CHECK(slots.Covering(b, 4096) == 1);
    CHECK(slots.Covering(b + 4095, 1) == 1);
  }
  SECTION("straddling an end") {
    CHECK(slots.Covering(a - 1, 2) == -1);        // starts before the slot
    CHECK(slots.Covering(a + 4096, 4097) == -1);  // ends past it, into the next slot
    CHECK(slots.Covering(b - 4096, 2 * 4096) == -1);  // over both: no one slot holds it
    CHECK(slots.Covering(b + 1, 4096) == -1);     // past the last slot's end
  }
  SECTION("outside") {
    CHECK(slots.Covering(memory.data(), 4096) == -1);         // before every slot
    CHECK(slots.Covering(b + 4096, 1) == -1);                 // just after the last
    CHECK(slots.Covering(memory.data() + 4 * 4096, 4096) == -1);
  }
}

TEST_CASE("Reset forgets every slot's memory") {
  std::vector<uint8_t> memory(4096);
  BufferSlots slots;
  slots.Reset(2);
  slots.Take(0, memory.data(), 4096);
  slots.Take(1, memory.data() + 2048, 1024);
  slots.Reset(2);
  CHECK_FALSE(slots.Holds(0));
  CHECK_FALSE(slots.Holds(1));
  CHECK(slots.Covering(memory.data(), 1) == -1);
  CHECK(slots.Free() == 0);
}

}  // namespace
}  // namespace kvstream::testing
