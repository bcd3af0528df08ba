// A Store restarted on the same tier directories: after a clean shutdown it takes the index each
// tier saved, after a crash it reads every chunk header; truncated files, temporaries and bad headers
// are removed or never indexed, files damaged while it was down are never served, and a background
// pass reconciles a saved index with the files. Persisted chunks read back byte-identical from both
// tiers.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("persisted chunks survive a restart and read back byte-identical from both tiers") {
  TempDir dir;
  auto chunks = Chunks(12, 1 << 20);
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    PutAll(*store, chunks);
    StoreStats s = store->Stats();
    CHECK(s.chunks == 12);
    CHECK(s.tiers[0].chunks == 12);
    CHECK(s.tiers[1].chunks == 12);
    CHECK(s.tiers[0].direct_io);
  }
  // Replicas are byte-identical files.
  for (const auto& [key, data] : chunks) {
    std::ifstream a(ChunkFile(dir.sub("t0"), key), std::ios::binary), b(ChunkFile(dir.sub("t1"), key), std::ios::binary);
    std::string ca((std::istreambuf_iterator<char>(a)), {}), cb((std::istreambuf_iterator<char>(b)), {});
    REQUIRE(!ca.empty());
    REQUIRE((ca == cb));
  }
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  CHECK(store->Stats().chunks == 12);
  CHECK(store->PrefixHits({"chunk-0", "chunk-1", "nope", "chunk-2"}) == 2);
  std::vector<std::vector<uint8_t>> buffers;
  StepRecord rec;
  auto results = ReadAll(*store, chunks, &buffers, &rec);
  for (size_t i = 0; i < chunks.size(); ++i) {
    INFO(results[i].status.ToString());
    REQUIRE(results[i].status.ok());
    REQUIRE((buffers[i] == chunks[i].second));
  }
  CHECK(rec.hits == 12);
  CHECK(rec.tiers[0].blocks > 0);
  CHECK(rec.tiers[1].blocks > 0);  // both tiers served the step
  CHECK(rec.bound_seconds > 0);
}

// Damages chunk-0 on t0 (truncated), chunk-1 on t1 (a header byte), and leaves a temporary.
std::string DamageWhileDown(const TempDir& dir) {
  fs::resize_file(ChunkFile(dir.sub("t0"), "chunk-0"), 4096 + 100000);
  {
    std::fstream f(ChunkFile(dir.sub("t1"), "chunk-1"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  const std::string temp = ChunkFile(dir.sub("t0"), "chunk-2") + ".tmp.1234.1";
  std::ofstream(temp) << "half a chunk";
  return temp;
}

TEST_CASE("after a crash, truncated files and temporaries are removed at start and bad headers never indexed") {
  TempDir dir;
  auto chunks = Chunks(3, 512 << 10);
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    PutAll(*store, chunks);
  }
  for (const char* tier : {"t0", "t1"}) fs::remove(dir.sub(tier) + "/.kvstream.index");  // as after a crash
  const std::string temp = DamageWhileDown(dir);
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  CHECK_FALSE(fs::exists(temp));
  CHECK_FALSE(fs::exists(ChunkFile(dir.sub("t0"), "chunk-0")));
  CHECK_FALSE(fs::exists(ChunkFile(dir.sub("t1"), "chunk-1")));
  auto look = store->Lookup({"chunk-0", "chunk-1", "chunk-2"});
  CHECK(look[0].tier_mask == 2u);
  CHECK(look[1].tier_mask == 1u);
  CHECK(look[2].tier_mask == 3u);
  std::vector<std::vector<uint8_t>> buffers;
  auto results = ReadAll(*store, chunks, &buffers);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(results[i].status.ok());
    CHECK((buffers[i] == chunks[i].second));
  }
}

TEST_CASE("after a clean shutdown, files damaged while down are never served and leave") {
  TempDir dir;
  auto chunks = Chunks(3, 512 << 10);
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    PutAll(*store, chunks);
  }
  DamageWhileDown(dir);
  auto store = OpenStoreOrSkip(TwoTiers(dir));  // takes the saved index: no file is read at start
  // Leave only the damaged replicas: the truncated chunk-0 on t0, chunk-1 with a bad header on t1.
  REQUIRE(store->Evict({"chunk-0", "slow", 0, false}).ok());
  REQUIRE(store->Evict({"chunk-1", "fast", 0, false}).ok());
  std::vector<std::vector<uint8_t>> buffers;
  auto results = ReadAll(*store, chunks, &buffers);
  // Truncated: never served (a failed read, or a miss once the reconcile pass took it out first)...
  CHECK((absl::IsDataLoss(results[0].status) || absl::IsNotFound(results[0].status)));
  for (int i = 0; i < 500 && store->Stats().reconciling; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(store->Lookup({"chunk-0"})[0].present);  // ...and gone from the index and the disk
  CHECK_FALSE(fs::exists(ChunkFile(dir.sub("t0"), "chunk-0")));
  REQUIRE(results[1].status.ok());  // its payload is intact: every block matches its checksum
  CHECK((buffers[1] == chunks[1].second));
  REQUIRE(results[2].status.ok());
  CHECK((buffers[2] == chunks[2].second));
}

TEST_CASE("after a start from the saved index, a background pass reconciles it with the files") {
  TempDir dir;
  auto chunks = Chunks(12, 64 << 10);
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    PutAll(*store, chunks);
  }
  // While down: chunk-1's file deleted on t0, chunk-2's truncated on t0 (torn), chunk-3's copied
  // from t1 to t0 after t0's was deleted before the shutdown (a file the index lacks), and an
  // invalid file dropped into t0.
  fs::remove(ChunkFile(dir.sub("t0"), "chunk-1"));
  fs::resize_file(ChunkFile(dir.sub("t0"), "chunk-2"), 4096 + 1000);
  fs::remove(ChunkFile(dir.sub("t0"), "chunk-3"));
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));  // from the index: chunk-3 now only on t1
    store->Flush();
  }
  fs::copy_file(ChunkFile(dir.sub("t1"), "chunk-3"), ChunkFile(dir.sub("t0"), "chunk-3"));
  const std::string junk = ChunkFile(dir.sub("t0"), "not-a-chunk");
  fs::create_directories(fs::path(junk).parent_path());
  std::ofstream(junk) << "not a chunk file";

  auto store = OpenStoreOrSkip(TwoTiers(dir));
  for (int i = 0; i < 500 && store->Stats().reconciling; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE_FALSE(store->Stats().reconciling);
  auto look = store->Lookup({"chunk-1", "chunk-2", "chunk-3", "chunk-4"});
  CHECK(look[0].tier_mask == 2u);  // gone from t0: out of the index
  CHECK(look[1].tier_mask == 2u);  // torn on t0: out, and its file removed
  CHECK_FALSE(fs::exists(ChunkFile(dir.sub("t0"), "chunk-2")));
  CHECK(look[2].tier_mask == 3u);  // the copy on t0 is valid and the same version: indexed
  CHECK(look[3].tier_mask == 3u);
  CHECK_FALSE(fs::exists(junk));   // invalid: removed
  std::vector<std::vector<uint8_t>> buffers;
  auto results = ReadAll(*store, chunks, &buffers);
  for (size_t i = 0; i < chunks.size(); ++i) {
    INFO(i);
    REQUIRE(results[i].status.ok());
    CHECK((buffers[i] == chunks[i].second));
  }
}

TEST_CASE("a clean restart takes the index saved at shutdown, a crash restart reads every header") {
  TempDir dir;
  auto chunks = Chunks(20, 64 << 10);
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    PutAll(*store, chunks);
  }  // clean shutdown: each tier saves its index
  for (const char* tier : {"t0", "t1"}) CHECK(fs::exists(dir.sub(tier) + "/.kvstream.index"));
  // A file removed behind the daemon's back while it was down: the saved index still lists it.
  fs::remove(ChunkFile(dir.sub("t0"), "chunk-3"));
  {
    auto store = OpenStoreOrSkip(TwoTiers(dir));
    for (const char* tier : {"t0", "t1"}) CHECK_FALSE(fs::exists(dir.sub(tier) + "/.kvstream.index"));  // taken
    CHECK(store->Stats().chunks == 20);
    std::vector<std::vector<uint8_t>> buffers;
    auto results = ReadAll(*store, chunks, &buffers);
    for (size_t i = 0; i < chunks.size(); ++i) {
      INFO(i << ": " << results[i].status.ToString());
      REQUIRE(results[i].status.ok());  // chunk-3 came from t1
      CHECK((buffers[i] == chunks[i].second));
    }
    CHECK(store->Lookup({"chunk-3"})[0].tier_mask == 2u);  // the missing replica left the index
  }
  // A crash leaves no index: the next start reads the headers and finds the same chunks.
  for (const char* tier : {"t0", "t1"}) fs::remove(dir.sub(tier) + "/.kvstream.index");
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  CHECK(store->Stats().chunks == 20);
  CHECK(store->Lookup({"chunk-3"})[0].tier_mask == 2u);
}

}  // namespace
}  // namespace kvstream::testing
