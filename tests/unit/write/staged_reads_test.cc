// A persist is answered once its chunk is staged, so from then on the chunk is the store's: lookups
// find it, steps read it from staging memory (served by no tier), and a lock taken on it meanwhile
// moves to its index entry once a replica is written. Here the writes hang on both simulated tiers
// until released, which holds every chunk in the window between staging and its first replica that
// a client otherwise hits only by chance.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

// Writes hang on every tier while `hold` is set; Release lets them (and later ones) complete.
struct HeldWrites {
  explicit HeldWrites(SimRig& rig) : rig(rig) {
    for (SimDevice* d : rig.devices) {
      d->SetFaultHook([hold = hold](const SimOpInfo& op) {
        return op.op == SimOp::kWrite && *hold ? SimFault::Hang() : SimFault::None();
      });
    }
  }
  // A case that fails midway still lets the store drain its writes as it shuts down.
  ~HeldWrites() { Let(); }
  void Release() {
    Let();
    rig.engine->Flush();
  }
  void Let() {
    *hold = false;
    for (SimDevice* d : rig.devices) d->ReleaseHung();
  }
  SimRig& rig;
  std::shared_ptr<std::atomic<bool>> hold = std::make_shared<std::atomic<bool>>(true);  // the hooks outlive this
};

// Reads `key` into a buffer of `capacity` bytes: its result and the bytes.
std::pair<ChunkResult, std::vector<uint8_t>> ReadOne(SimRig& rig, const std::string& key, size_t capacity) {
  std::vector<uint8_t> buffer(capacity);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve({{key, buffer.data(), buffer.size()}}, &results);
  buffer.resize(results[0].size);
  return {results[0], buffer};
}

size_t Reads(const SimRig& rig) {
  size_t n = 0;
  for (SimDevice* d : rig.devices) {
    for (const SimOpRecord& op : d->ops()) n += op.kind == IoKind::kRead;
  }
  return n;
}

TEST_CASE("a staged chunk is found by lookups and read from staging before any replica is written") {
  SimRig rig({300 * MBps, 100 * MBps});
  HeldWrites writes(rig);
  const auto data = Payload(3 * kBlock + 100, 1);
  std::atomic<int> written{0};
  REQUIRE(rig.engine->Persist("k", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
    if (r.status.ok()) written = static_cast<int>(r.tier_mask);
  }).ok());

  const LookupEntry staged = rig.engine->Lookup({"k"})[0];
  CHECK(staged.present);
  CHECK(staged.size == data.size());
  CHECK(staged.tier_mask == 0);  // written nowhere yet
  CHECK(rig.engine->PrefixHits({"k", "other"}) == 1);
  auto [result, bytes] = ReadOne(rig, "k", 4 * kBlock);
  REQUIRE(result.status.ok());
  CHECK(result.tier_mask == 0);  // served by no tier
  CHECK(bytes == data);
  CHECK(Reads(rig) == 0);
  CHECK(written == 0);

  writes.Release();
  CHECK(written == 3);
  CHECK(rig.engine->Lookup({"k"})[0].tier_mask == 3u);
  auto [from_tiers, again] = ReadOne(rig, "k", 4 * kBlock);
  REQUIRE(from_tiers.status.ok());
  CHECK(from_tiers.tier_mask != 0);
  CHECK(again == data);
}

TEST_CASE("a newer version in staging is what lookups and steps see, not the one on the tiers") {
  SimRig rig({300 * MBps, 100 * MBps});
  const auto old = rig.Populate("k", 1, 2 * kBlock)[0];
  HeldWrites writes(rig);
  const auto fresh = Payload(kBlock + 7, 2);
  REQUIRE(rig.engine->Persist("k0", fresh.data(), fresh.size()).ok());
  CHECK(rig.engine->Lookup({"k0"})[0].size == fresh.size());
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 0);  // the newest version is written nowhere
  CHECK(ReadOne(rig, "k0", 2 * kBlock).second == fresh);
  writes.Release();
  CHECK(ReadOne(rig, "k0", 2 * kBlock).second == fresh);
  CHECK(old != fresh);
}

TEST_CASE("a staged chunk larger than the destination is out of range, and nothing is copied") {
  SimRig rig({300 * MBps});
  HeldWrites writes(rig);
  const auto data = Payload(kBlock, 3);
  REQUIRE(rig.engine->Persist("k", data.data(), data.size()).ok());
  std::vector<uint8_t> small(kBlock - 1, 0xee);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve({{"k", small.data(), small.size()}}, &results);
  CHECK(absl::IsOutOfRange(results[0].status));
  CHECK(small == std::vector<uint8_t>(kBlock - 1, 0xee));
  writes.Release();
}

TEST_CASE("a lock taken while the chunk is only staged moves to it once written") {
  SimRig rig({300 * MBps, 100 * MBps});
  HeldWrites writes(rig);
  const auto data = Payload(kBlock, 4);
  REQUIRE(rig.engine->Persist("k", data.data(), data.size()).ok());
  const LookupEntry locked = rig.engine->LookupAndLock({"k"}, 3600)[0];
  CHECK(locked.present);
  CHECK(locked.locked);
  rig.engine->LookupAndLock({"k"}, 3600);
  CHECK(rig.engine->Unlock({"k"}) == 1);  // one of the two, while staged

  writes.Release();
  CHECK(rig.engine->Unlock({"k"}) == 1);  // the other one moved to the index
  CHECK(rig.engine->Unlock({"k"}) == 0);
}

TEST_CASE("under a limit on locked bytes a chunk only staged is found but not locked") {
  // Staging cannot count a tenant's locked bytes, and the limit must hold: no lock is taken
  // there (the chunk cannot be evicted while staged), and none moves to the index later.
  StoreConfig config;
  config.tenant_tier_share = 0.25;
  config.tenant_locked_bytes = 64 * kBlock;
  SimRig rig({300 * MBps, 100 * MBps}, config);
  HeldWrites writes(rig);
  const auto data = Payload(kBlock, 5);
  REQUIRE(rig.engine->Persist("k", data.data(), data.size()).ok());
  const LookupEntry found = rig.engine->LookupAndLock({"k"}, 3600)[0];
  CHECK(found.present);
  CHECK_FALSE(found.locked);
  CHECK(rig.engine->Unlock({"k"}) == 0);
  writes.Release();
  CHECK(rig.engine->Unlock({"k"}) == 0);  // nothing moved to the index
  CHECK(rig.engine->LookupAndLock({"k"}, 3600)[0].locked);  // written: locked within the limit
  CHECK(rig.engine->Unlock({"k"}) == 1);
}

TEST_CASE("a staged chunk whose every replica fails leaves staging and is a miss") {
  SimRig rig({300 * MBps, 100 * MBps});
  for (SimDevice* d : rig.devices) {
    d->SetFaultHook([](const SimOpInfo& op) { return op.op == SimOp::kWrite ? SimFault::Error(EIO) : SimFault::None(); });
  }
  const auto data = Payload(kBlock, 5);
  REQUIRE(rig.engine->Persist("k", data.data(), data.size()).ok());
  rig.engine->Flush();
  CHECK_FALSE(rig.engine->Lookup({"k"})[0].present);
  CHECK(absl::IsNotFound(ReadOne(rig, "k", kBlock).first.status));
}

}  // namespace
}  // namespace kvstream::testing
