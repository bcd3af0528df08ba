// Reads that fail over to the other replica: a bit-flipped block caught by verification (on the
// I/O loop or by the verify pool, also when read straight into aligned memory) and a replica
// truncated under a running store (a short read). The bad copy is never served and leaves the
// index; a chunk bad on every tier is data loss.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"
#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

// Flips one byte of a file (a payload byte when offset is past the header).
void Flip(const std::string& path, off_t offset) {
  const int fd = open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t b;
  REQUIRE(pread(fd, &b, 1, offset) == 1);
  b ^= 0x40;
  REQUIRE(pwrite(fd, &b, 1, offset) == 1);
  close(fd);
}

TEST_CASE("a bit-flipped replica is never served and the other replica is while the bad copy is dropped") {
  // Verified on the I/O loop (0) and by a pool of verify threads (3): the same outcome.
  const int verify_threads = GENERATE(0, 3);
  CAPTURE(verify_threads);
  TempDir dir;
  auto chunks = Chunks(4, 1 << 20);
  StoreConfig config = TwoTiers(dir);
  config.verify_threads = verify_threads;
  // Every block from t0 first: under completion routing t1 may claim chunk-1's flipped block, and
  // then t0 never reads its bad copy and keeps it (the outcome this case checks would be timing).
  config.routing.kind = RoutingKind::kFastest;
  {
    auto store = OpenStoreOrSkip(config);
    PutAll(*store, chunks);
  }
  // Flip one payload byte of chunk-1 on tier 0 and of chunk-2 on both tiers.
  auto flip = Flip;
  flip(ChunkFile(dir.sub("t0"), "chunk-1"), 4096 + 300000);
  flip(ChunkFile(dir.sub("t0"), "chunk-2"), 4096 + 10);
  flip(ChunkFile(dir.sub("t1"), "chunk-2"), 4096 + 10);
  auto store = OpenStoreOrSkip(config);
  std::vector<std::vector<uint8_t>> buffers;
  auto results = ReadAll(*store, chunks, &buffers);
  CHECK(results[0].status.ok());
  REQUIRE(results[1].status.ok());
  CHECK((buffers[1] == chunks[1].second));
  CHECK(absl::IsDataLoss(results[2].status));
  CHECK(results[3].status.ok());
  StoreStats s = store->Stats();
  CHECK(s.tiers[0].checksum_failures + s.tiers[1].checksum_failures >= 2);
  auto look = store->Lookup({"chunk-1", "chunk-2"});
  CHECK(look[0].tier_mask == 2u);
  CHECK_FALSE(look[1].present);
  CHECK_FALSE(fs::exists(ChunkFile(dir.sub("t0"), "chunk-1")));
}

TEST_CASE("the verify pool never delivers a flipped block read straight into aligned memory") {
  TempDir dir;
  StoreConfig config = TwoTiers(dir);
  config.verify_threads = 2;
  config.io_engine = IoEngine::kUring;  // reads straight into the destination (threads bounce every block)
  auto chunks = Chunks(24, 1 << 20, 77);
  {
    auto store = OpenStoreOrSkip(config);
    PutAll(*store, chunks);
  }
  // Every third chunk is bad on t0 in its second block, every fifth on both tiers in its last.
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i % 3 == 0) Flip(ChunkFile(dir.sub("t0"), chunks[i].first), 4096 + (256 << 10) + 5);
    if (i % 5 == 0) {
      for (const char* t : {"t0", "t1"}) Flip(ChunkFile(dir.sub(t), chunks[i].first), 4096 + chunks[i].second.size() - 1);
    }
  }
  auto store = OpenStoreOrSkip(config);
  std::vector<AlignedBuffer> buffers;
  std::vector<ChunkRead> reads;
  for (const auto& [key, data] : chunks) {
    buffers.push_back(AllocateAligned(AlignUp(data.size(), 4096)));
    std::memset(buffers.back().get(), 0, data.size());
    reads.push_back({key, buffers.back().get(), AlignUp(data.size(), 4096)});
  }
  std::vector<ChunkResult> results;
  store->Retrieve(reads, &results);
  for (size_t i = 0; i < chunks.size(); ++i) {
    CAPTURE(i);
    if (i % 5 == 0) {
      CHECK(absl::IsDataLoss(results[i].status));
    } else {
      REQUIRE(results[i].status.ok());
      CHECK(std::memcmp(buffers[i].get(), chunks[i].second.data(), chunks[i].second.size()) == 0);
    }
  }
  StoreStats s = store->Stats();
  // Straight into the buffers, except the chunks whose bytes hashed wrong there: those are read
  // again through bounce buffers (the tier is judged in the store's memory), at least one block
  // each, at most each of their blocks once on each tier.
  const uint64_t bounced = s.tiers[0].bounce_reads + s.tiers[1].bounce_reads;
  constexpr uint64_t kBadChunks = 11, kBlocks = 4;  // i % 3 == 0 or i % 5 == 0 of 24; 1 MiB in 256 KiB
  INFO("bounce reads: " << bounced);
  CHECK(bounced >= kBadChunks);
  CHECK(bounced <= kBadChunks * kBlocks * 2);
  // The 5 chunks bad on both tiers fail on each; the others fail only where t0 was asked first.
  CHECK(s.tiers[0].checksum_failures >= 5);
  CHECK(s.tiers[1].checksum_failures >= 5);
}

TEST_CASE("a replica truncated under a running store gives a short read that fails over") {
  TempDir dir;
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  auto chunks = Chunks(2, 1 << 20);
  PutAll(*store, chunks);
  // Cut chunk-0 on both tiers' files differently: tier 0 mid-payload, tier 1 left intact.
  fs::resize_file(ChunkFile(dir.sub("t0"), "chunk-0"), 4096 + 100 * 1024);
  std::vector<std::vector<uint8_t>> buffers;
  auto results = ReadAll(*store, chunks, &buffers);
  REQUIRE(results[0].status.ok());
  CHECK((buffers[0] == chunks[0].second));
  REQUIRE(results[1].status.ok());
  StoreStats s = store->Stats();
  CHECK(s.tiers[0].read_errors >= 1);   // the read past the end: short, resubmitted, then EOF
  CHECK(s.tiers[0].resubmits >= 1);
  CHECK(store->Lookup({"chunk-0"})[0].tier_mask == 2u);
}

}  // namespace
}  // namespace kvstream::testing
