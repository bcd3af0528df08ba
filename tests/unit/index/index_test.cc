#include "index/index.h"

#include <catch2/catch.hpp>

#include "kvstream/key.h"

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

// Tenants: a 16-chunk tier, each tenant guaranteed a quarter of it (4 chunks).
constexpr uint64_t kFile = 4096 + 8192;  // a chunk's file: header page and payload
struct Tenants {
  Index idx{{16 * kFile}, UINT64_MAX, {0.25, 0}};
  std::vector<Victim> victims;
  static std::string K(const char* tenant, int i) { return NamespacedKey(tenant, "k" + std::to_string(i)); }
  // Writes chunk `i` of `tenant` as the replicator does: room made for it, then its replica added.
  bool Write(const char* tenant, int i, int64_t now_ns = 0) {
    if (!idx.MakeRoom(0, kFile, now_ns, &victims, K(tenant, i))) return false;
    idx.AddReplica(0, Meta(K(tenant, i), 8192));
    return true;
  }
  uint64_t Held(const char* tenant) const {
    const Tenant* t = idx.FindTenant(tenant);
    return t == nullptr ? 0 : t->used[0] / kFile;
  }
};

TEST_CASE("a tenant over its share evicts its own least recently used chunks, never another's within its share") {
  Tenants t;
  for (int i = 0; i < 4; ++i) REQUIRE(t.Write("ub", i));   // b: exactly its share
  for (int i = 0; i < 12; ++i) REQUIRE(t.Write("ua", i));  // a: the rest of the tier
  REQUIRE(t.idx.used(0) == 16 * kFile);
  for (int i = 12; i < 40; ++i) REQUIRE(t.Write("ua", i));  // a keeps writing: only its own go
  CHECK(t.Held("ua") == 12);
  CHECK(t.Held("ub") == 4);
  REQUIRE(t.victims.size() == 28);
  for (size_t v = 0; v < t.victims.size(); ++v) CHECK(t.victims[v].key == Tenants::K("ua", static_cast<int>(v)));
  // b's chunks all stay; b itself writing past its share evicts the tenant furthest over its
  // share (a), until both are over by as much, then whichever is further.
  for (int i = 0; i < 4; ++i) CHECK(t.idx.FindLive(Tenants::K("ub", i)) != nullptr);
  t.victims.clear();
  for (int i = 4; i < 8; ++i) REQUIRE(t.Write("ub", i));
  CHECK(t.Held("ub") == 8);
  CHECK(t.Held("ua") == 8);
  for (const Victim& v : t.victims) CHECK(KeyNamespace(v.key) == "ua");
}

TEST_CASE("a tenant with nothing yet takes room from the tenant furthest over its share, least recently used first") {
  Tenants t;
  for (int i = 0; i < 10; ++i) REQUIRE(t.Write("ua", i));
  for (int i = 0; i < 6; ++i) REQUIRE(t.Write("ub", i));
  t.idx.Touch(t.idx.Find(Tenants::K("ua", 0)));  // a's LRU order now 1, 2, ..., 9, 0
  REQUIRE(t.Write("uc", 0));
  REQUIRE(t.victims.size() == 1);
  CHECK(t.victims[0].key == Tenants::K("ua", 1));  // a is 6 over its share, b 2
  for (int i = 1; i < 4; ++i) REQUIRE(t.Write("uc", i));
  CHECK(t.Held("uc") == 4);
  CHECK(t.Held("ua") == 6);  // a stayed furthest over its share, so it gave all four
  CHECK(t.Held("ub") == 6);
}

TEST_CASE("locked chunks of a tenant over its share fail another's write rather than take from one within its share") {
  Tenants t;
  for (int i = 0; i < 12; ++i) REQUIRE(t.Write("ua", i));
  for (int i = 0; i < 4; ++i) REQUIRE(t.Write("ub", i));
  for (int i = 0; i < 12; ++i) REQUIRE(t.idx.Lock(t.idx.Find(Tenants::K("ua", i)), /*until_ns=*/1000));  // no lock limit
  CHECK_FALSE(t.Write("uc", 0, /*now_ns=*/10));  // a's are locked, b is within its share
  CHECK(t.victims.empty());
  CHECK(t.Write("uc", 0, /*now_ns=*/1000));  // the leases ended
  CHECK(t.Held("ub") == 4);
}

TEST_CASE("a lock past a tenant's locked bytes is not granted, and unlocks, ended leases and evictions give them back") {
  Index idx({16 * kFile}, UINT64_MAX, {0.25, 4 * kFile});
  for (int i = 0; i < 8; ++i) idx.AddReplica(0, Meta(Tenants::K("ua", i), 8192));
  idx.AddReplica(0, Meta(Tenants::K("ub", 0), 8192));
  auto lock = [&](const char* tenant, int i, int64_t until_ns, int64_t now_ns) {
    return idx.Lock(idx.Find(Tenants::K(tenant, i)), until_ns, now_ns);
  };
  for (int i = 0; i < 4; ++i) CHECK(lock("ua", i, 1000, 0));
  CHECK_FALSE(lock("ua", 4, 1000, 0));  // a fifth chunk: past a's limit
  CHECK(idx.Find(Tenants::K("ua", 4))->locks == 0);
  CHECK(lock("ua", 0, 2000, 0));        // a second lock of a locked chunk costs nothing more
  CHECK(lock("ub", 0, 1000, 0));        // b's limit is its own
  CHECK(idx.FindTenant("ua")->locked_bytes == 4 * kFile);
  CHECK(idx.Unlock(Tenants::K("ua", 1)));
  CHECK(lock("ua", 4, 1000, 0));        // an unlock gave its bytes back
  CHECK_FALSE(lock("ua", 5, 1000, 500));
  CHECK(lock("ua", 5, 3000, 1000));     // leases ended at 1000 (2, 3, 4; not 0, renewed to 2000)
  CHECK(idx.FindTenant("ua")->locked_bytes == 2 * kFile);
  std::vector<Victim> victims;
  idx.EvictLru(0, UINT64_MAX, &victims);  // explicit eviction removes locked chunks too
  CHECK(idx.FindTenant("ua") == nullptr);
  CHECK(idx.tenant_count() == 0);
}

TEST_CASE("tenants come back from the keys when the index is rebuilt from the tiers' files") {
  Tenants t;
  for (int i = 0; i < 12; ++i) REQUIRE(t.Write("ua", i));
  for (int i = 0; i < 4; ++i) REQUIRE(t.Write("ub", i));
  Index rebuilt({16 * kFile}, UINT64_MAX, {0.25, 0});
  for (const ChunkMeta& m : t.idx.Replicas(0)) rebuilt.AddReplica(0, std::make_shared<const ChunkMeta>(m));
  REQUIRE(rebuilt.FindTenant("ua") != nullptr);
  CHECK(rebuilt.FindTenant("ua")->used[0] == 12 * kFile);
  CHECK(rebuilt.FindTenant("ub")->used[0] == 4 * kFile);
  std::vector<Victim> victims;
  REQUIRE(rebuilt.MakeRoom(0, kFile, 0, &victims, Tenants::K("ua", 99)));
  REQUIRE(victims.size() == 1);
  CHECK(victims[0].key == Tenants::K("ua", 0));  // its least recently used, as before the restart
}

TEST_CASE("without a tier share every key is one tenant's: one LRU, namespaces or not") {
  Index idx({3 * kFile});
  idx.AddReplica(0, Meta(Tenants::K("ua", 0), 8192));
  idx.AddReplica(0, Meta("plain", 8192));
  idx.AddReplica(0, Meta(Tenants::K("ub", 0), 8192));
  CHECK(idx.tenant_count() == 1);
  std::vector<Victim> victims;
  REQUIRE(idx.MakeRoom(0, kFile, 0, &victims, Tenants::K("ub", 1)));
  REQUIRE(victims.size() == 1);
  CHECK(victims[0].key == Tenants::K("ua", 0));  // the least recently used of all
}

}  // namespace
}  // namespace kvstream
