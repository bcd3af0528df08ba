// Eviction on real files: LRU keeps each tier under its capacity, what the index holds is what is
// on disk, and explicit eviction by key, by tier and of everything.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("LRU eviction keeps each tier under its capacity") {
  TempDir dir;
  const size_t size = 1 << 20;
  const uint64_t file = 4096 + size;
  StoreConfig c = TwoTiers(dir, 5 * file);
  c.tiers[1].capacity_bytes = 3 * file;
  auto store = OpenStoreOrSkip(c);
  std::vector<uint8_t> data = Payload(size, 5);
  for (int i = 0; i < 8; ++i) {
    REQUIRE(store->Persist("e" + std::to_string(i), data.data(), data.size()).ok());
    store->Flush();
    StoreStats s = store->Stats();
    REQUIRE(s.tiers[0].used_bytes <= s.tiers[0].capacity_bytes);
    REQUIRE(s.tiers[1].used_bytes <= s.tiers[1].capacity_bytes);
  }
  auto look = store->Lookup({"e0", "e2", "e3", "e4", "e5", "e7"});
  CHECK_FALSE(look[0].present);
  CHECK(look[1].tier_mask == 0u);
  CHECK(look[2].tier_mask == 1u);   // only the larger tier still has it
  CHECK(look[5].tier_mask == 3u);
  StoreStats s = store->Stats();
  CHECK(s.tiers[0].chunks == 5);
  CHECK(s.tiers[1].chunks == 3);
  CHECK(s.tiers[0].evictions == 3);
  // What the index says is what is on disk.
  size_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.sub("t1"))) files += e.path().extension() == ".kvc";
  CHECK(files == 3);
  // Explicit eviction by key and of everything.
  auto ev = store->Evict({"e7", "slow", 0, false});
  REQUIRE(ev.ok());
  CHECK(ev->replicas == 1);
  CHECK(store->Lookup({"e7"})[0].tier_mask == 1u);
  CHECK(absl::IsNotFound(store->Evict({"", "nosuch", 0, true}).status()));
  ev = store->Evict({"", "", 0, true});
  REQUIRE(ev.ok());
  CHECK(store->Stats().chunks == 0);
}

}  // namespace
}  // namespace kvstream::testing
