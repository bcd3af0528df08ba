// Persists on real files: fsync policy chunk makes replicas durable and the persist callback names
// the tiers; bad persists (too large for staging, no key, no bytes) are refused without side
// effects.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("fsync policy chunk writes durable replicas and persist callbacks report the tiers") {
  TempDir dir;
  StoreConfig c = TwoTiers(dir);
  c.fsync = FsyncPolicy::kChunk;
  auto store = OpenStoreOrSkip(c);
  auto data = Payload(700000, 4);
  std::atomic<uint32_t> mask{0};
  REQUIRE(store->Persist("d", data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
    if (r.status.ok()) mask = r.tier_mask;
  }).ok());
  store->Flush();
  CHECK(mask == 3u);
  CHECK(fs::exists(ChunkFile(dir.sub("t1"), "d")));
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
