// MissCache: a miss is remembered until it ends; past the capacity the oldest goes first, one at a
// time, never the whole cache.
#include "index/miss_cache.h"

#include <catch2/catch.hpp>

#include <string>

namespace kvstream::testing {
namespace {

TEST_CASE("a miss is remembered until it ends, then forgotten") {
  MissCache misses(8);
  misses.Add("a", 100, 0);
  CHECK(misses.Holds("a", 0));
  CHECK(misses.Holds("a", 99));
  CHECK_FALSE(misses.Holds("a", 100));
  CHECK_FALSE(misses.Holds("a", 50));  // forgotten once seen ended
  CHECK_FALSE(misses.Holds("b", 0));
}

TEST_CASE("past its capacity the cache forgets the oldest miss only") {
  constexpr size_t kCapacity = 1000;
  MissCache misses(kCapacity);
  for (size_t i = 0; i < kCapacity; ++i) misses.Add("k" + std::to_string(i), 1'000'000 + i, 0);
  CHECK(misses.size() == kCapacity);
  misses.Add("new", 2'000'000, 1);  // full: only k0 goes
  CHECK(misses.size() == kCapacity);
  CHECK_FALSE(misses.Holds("k0", 1));
  for (size_t i = 1; i < kCapacity; ++i) REQUIRE(misses.Holds("k" + std::to_string(i), 1));
  CHECK(misses.Holds("new", 1));
}

TEST_CASE("ended misses are dropped as new ones come, and a name added again keeps its new end") {
  MissCache misses(4);
  misses.Add("a", 10, 0);
  misses.Add("b", 20, 0);
  CHECK_FALSE(misses.Holds("a", 15));  // ended
  misses.Add("a", 25, 15);             // again, later
  misses.Add("c", 30, 21);             // b has ended and is dropped; a's old entry is stale
  CHECK(misses.size() == 2);
  CHECK(misses.Holds("a", 22));
  CHECK(misses.Holds("c", 22));
  CHECK_FALSE(misses.Holds("b", 22));
}

}  // namespace
}  // namespace kvstream::testing
