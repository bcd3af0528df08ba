#include "index/index.h"

#include <catch2/catch.hpp>

namespace kvstream {
namespace {

std::shared_ptr<const ChunkMeta> Meta(const std::string& key, uint64_t size, uint64_t checksum = 1) {
  auto m = std::make_shared<ChunkMeta>();
  m->key = key;
  m->payload_size = size;
  m->payload_checksum = checksum;
  m->segment_size = 4096;
  m->segment_checksums.assign(SegmentCount(size, 4096), 0);
  return m;
}

TEST_CASE("replicas are tracked per tier with used bytes") {
  Index idx({1 << 20, 1 << 20});
  idx.AddReplica(0, Meta("a", 8192));
  idx.AddReplica(1, Meta("a", 8192));
  CHECK(idx.Find("a")->tiers == 3u);
  CHECK(idx.used(0) == 4096 + 8192);
  CHECK(idx.size() == 1);
  CHECK(idx.RemoveReplica("a", 0));
  CHECK(idx.Find("a")->tiers == 2u);
  CHECK(idx.used(0) == 0);
  CHECK(idx.RemoveReplica("a", 1));
  CHECK(idx.Find("a") == nullptr);
  CHECK(idx.size() == 0);
}

TEST_CASE("MakeRoom evicts the least recently used unpinned replicas of that tier only") {
  const uint64_t file = 4096 + 8192;
  Index idx({3 * file, 3 * file});
  for (const char* k : {"a", "b", "c"}) {
    idx.AddReplica(0, Meta(k, 8192));
    idx.AddReplica(1, Meta(k, 8192));
  }
  idx.Touch(idx.Find("a"));   // LRU order now b, c, a
  idx.Pin(idx.Find("b"));     // b is being read
  std::vector<Victim> victims;
  REQUIRE(idx.MakeRoom(0, file, 0, &victims));
  REQUIRE(victims.size() == 1);
  CHECK(victims[0].key == "c");
  CHECK(victims[0].tier == 0);
  CHECK(idx.Find("c")->tiers == 2u);  // still on tier 1
  CHECK(idx.used(0) == 2 * file);
  victims.clear();
  idx.Reserve(0, file);
  CHECK_FALSE(idx.MakeRoom(0, 2 * file, 0, &victims));  // only "a" is evictable: not enough
  CHECK(victims.empty());
  CHECK_FALSE(idx.MakeRoom(0, 4 * file, 0, &victims));  // larger than the tier
}

TEST_CASE("a locked entry is kept from capacity eviction until unlocked or its lease ends") {
  const uint64_t file = 4096 + 8192;
  Index idx({2 * file});
  idx.AddReplica(0, Meta("a", 8192));
  idx.AddReplica(0, Meta("b", 8192));  // LRU order a, b
  idx.Lock(idx.Find("a"), 1000);       // until t = 1000 ns
  idx.Lock(idx.Find("a"), 500);        // a second lock; the latest lease holds
  std::vector<Victim> victims;
  REQUIRE(idx.MakeRoom(0, file, 100, &victims));
  REQUIRE(victims.size() == 1);
  CHECK(victims[0].key == "b");  // a is locked: the next least recently used goes
  idx.AddReplica(0, Meta("b", 8192));
  victims.clear();
  CHECK_FALSE(idx.MakeRoom(0, 2 * file, 999, &victims));  // a still locked: no room
  CHECK(victims.empty());
  SECTION("unlocked by every holder") {
    CHECK(idx.Unlock("a"));
    CHECK(idx.Unlock("a"));
    CHECK_FALSE(idx.Unlock("a"));  // none left
    REQUIRE(idx.MakeRoom(0, 2 * file, 999, &victims));
    CHECK(victims.size() == 2);
  }
  SECTION("the lease ends (a holder crashed)") {
    CHECK(idx.Unlock("a"));  // one of two released
    REQUIRE(idx.MakeRoom(0, 2 * file, 1000, &victims));
    CHECK(victims.size() == 2);
  }
  CHECK_FALSE(idx.Unlock("missing"));
}

TEST_CASE("a new version of a key replaces the old replicas") {
  Index idx({1 << 20, 1 << 20});
  idx.AddReplica(0, Meta("a", 8192, 1));
  idx.AddReplica(1, Meta("a", 8192, 1));
  auto stale = idx.AddReplica(0, Meta("a", 8192, 2));
  REQUIRE(stale.size() == 1);
  CHECK(stale[0].tier == 1);
  CHECK(idx.Find("a")->tiers == 1u);
  CHECK(idx.Find("a")->meta->payload_checksum == 2);
  CHECK(idx.used(0) == 4096 + 8192);
  CHECK(idx.used(1) == 0);
}

TEST_CASE("a pinned entry outlives its last replica until unpinned") {
  Index idx({1 << 20});
  idx.AddReplica(0, Meta("a", 4096));
  idx.Pin(idx.Find("a"));
  idx.RemoveReplica("a", 0);
  CHECK(idx.FindLive("a") == nullptr);
  CHECK(idx.Find("a") != nullptr);
  idx.Unpin("a");
  CHECK(idx.Find("a") == nullptr);
}

TEST_CASE("past the limit the least recently used foreign keys are forgotten, pinned, locked, recent and own ones kept") {
  Index idx({1 << 20, 1 << 20}, /*foreign_limit=*/3);
  auto found = [&](const char* key, int64_t at) {
    idx.AddReplica(1, Meta(key, 8192), /*foreign=*/true);
    idx.Find(key)->foreign_checked_ns = at;
  };
  found("a", 10);
  found("b", 10);
  found("c", 10);
  idx.AddReplica(0, Meta("c", 8192));  // "c" is also this node's own on tier 0
  idx.Touch(idx.Find("a"));  // foreign LRU order now b, c, a
  found("d", 10);
  CHECK(idx.foreign_keys() == 4);   // nothing is forgotten by adding
  CHECK(idx.foreign_over_limit());
  CHECK(idx.ForgetForeign(100, 50) == 1);
  CHECK(idx.Find("b") == nullptr);  // forgotten: the least recently used
  CHECK(idx.foreign_keys() == 3);
  CHECK(idx.foreign_replicas(1) == 3);
  CHECK(idx.size() == 3);
  // Pinned, locked and recently found keys stay; the next least recently used goes instead.
  // Forgetting "c" keeps its own replica on tier 0 (its file is this node's: nothing is removed).
  idx.Pin(idx.Find("a"));
  idx.Lock(idx.Find("d"), /*until_ns=*/1000);
  found("e", 60);  // found after `found_since` below
  CHECK(idx.ForgetForeign(100, 50) == 1);
  REQUIRE(idx.Find("c") != nullptr);
  CHECK(idx.Find("c")->tiers == 1u);
  CHECK(idx.Find("c")->foreign == 0u);
  CHECK(idx.used(0) == 4096 + 8192);
  CHECK(idx.foreign_keys() == 3);  // a (pinned), d (locked), e (recent)
  found("f", 70);
  CHECK(idx.ForgetForeign(100, 50) == 0);  // every other key is pinned, locked or recent: the limit yields
  CHECK(idx.foreign_keys() == 4);
  CHECK(idx.ForgetForeign(2000, 50) == 1);  // d's lease ended: d is the least recently used left
  CHECK(idx.Find("d") == nullptr);
  CHECK(idx.foreign_forgotten() == 3);
  // A foreign key that becomes this node's own leaves the foreign keys.
  idx.AddReplica(1, Meta("f", 8192));
  CHECK(idx.foreign_keys() == 2);
  CHECK(idx.Find("f")->foreign == 0u);
  idx.Unpin("a");
  CHECK(idx.DropTier(1) == 3);  // a, e (foreign) and f (own)
  CHECK(idx.foreign_keys() == 0);
}

TEST_CASE("EvictLru frees at least the requested bytes oldest first") {
  Index idx({1 << 20});
  for (const char* k : {"a", "b", "c"}) idx.AddReplica(0, Meta(k, 4096));
  std::vector<Victim> victims;
  idx.EvictLru(0, 8193, &victims);
  REQUIRE(victims.size() == 2);
  CHECK(victims[0].key == "a");
  CHECK(victims[1].key == "b");
}

}  // namespace
}  // namespace kvstream
