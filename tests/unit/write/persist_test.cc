// Persists on real files: the persist callback names the tiers written and, under fsync policy
// chunk only, the same tiers as synced (durable); bad persists (too large for staging, no key, no
// bytes) are refused without side effects.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("persist callbacks report the tiers written and only under fsync chunk the same tiers synced") {
  const FsyncPolicy fsync = GENERATE(FsyncPolicy::kNone, FsyncPolicy::kChunk);
  CAPTURE(ToString(fsync));
  const uint32_t synced = fsync == FsyncPolicy::kChunk ? 3u : 0u;
  TempDir dir;
  StoreConfig c = TwoTiers(dir);
  c.fsync = fsync;
  auto store = OpenStoreOrSkip(c);
  auto data = Payload(700000, 4);
  auto persist = [&] {
    PersistResult result;
    REQUIRE(store->Persist("d", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
      result = r;
    }).ok());
    store->Flush();
    return result;
  };
  const PersistResult first = persist();
  CHECK(first.status.ok());
  CHECK(first.tier_mask == 3u);
  CHECK(first.synced_mask == synced);
  CHECK(first.durable() == (synced != 0));
  CHECK(fs::exists(ChunkFile(dir.sub("t1"), "d")));
  // The same bytes again: the replicas already there answer, synced as they were written.
  const PersistResult again = persist();
  CHECK(again.tier_mask == 3u);
  CHECK(again.synced_mask == synced);
}

TEST_CASE("under fsync chunk the same bytes persisted after a restart are synced again and under none they stand") {
  const FsyncPolicy fsync = GENERATE(FsyncPolicy::kNone, FsyncPolicy::kChunk);
  CAPTURE(ToString(fsync));
  TempDir dir;
  StoreConfig c = TwoTiers(dir);
  c.fsync = fsync;
  auto data = Payload(300000, 9);
  auto persist = [&](Store& store) {
    PersistResult result;
    REQUIRE(store.Persist("r", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
      result = r;
    }).ok());
    store.Flush();
    return result;
  };
  persist(*OpenStoreOrSkip(c));
  // Found on the tiers at start: their history is unknown, so they count as written only.
  auto store = OpenStoreOrSkip(c);
  const uint64_t written_before = store->Stats().tiers[0].replicas_written;
  const PersistResult again = persist(*store);
  CHECK(again.tier_mask == 3u);
  CHECK(again.synced_mask == (fsync == FsyncPolicy::kChunk ? 3u : 0u));
  CHECK(store->Stats().tiers[0].replicas_written == written_before + (fsync == FsyncPolicy::kChunk ? 1u : 0u));
}

TEST_CASE("bad persists are refused without side effects") {
  TempDir dir;
  StoreConfig c = TwoTiers(dir);
  c.staging_limit_bytes = 1 << 20;
  auto store = OpenStoreOrSkip(c);
  std::vector<uint8_t> big(2 << 20);
  CHECK(absl::IsInvalidArgument(store->Persist("big", big.data(), big.size())));
  CHECK(absl::IsInvalidArgument(store->Persist("", big.data(), 10)));
  CHECK(absl::IsInvalidArgument(store->Persist("empty", big.data(), 0)));
  store->Flush();
  CHECK(store->Stats().chunks == 0);
  CHECK(store->Stats().staged_bytes == 0);
}

}  // namespace
}  // namespace kvstream::testing
