// The whole store on real files with io_uring: persist, restart, read back; corrupt and truncated
// files; temporaries; eviction; directory locking; buffered fallback.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "format/chunk_format.h"
#include "io/aligned_buffer.h"
#include "kvstream/store.h"
#include "store_open.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

StoreConfig TwoTiers(const TempDir& dir, uint64_t capacity = 1ull << 30) {
  StoreConfig c;
  c.block_size = 256 << 10;
  c.tiers.push_back({"fast", dir.sub("t0"), capacity});
  c.tiers.push_back({"slow", dir.sub("t1"), capacity});
  return c;
}

void PutAll(Store& store, const std::vector<std::pair<std::string, std::vector<uint8_t>>>& chunks) {
  for (const auto& [key, data] : chunks) REQUIRE(store.Persist(key, data.data(), data.size()).ok());
  store.Flush();
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> Chunks(int n, size_t size, uint64_t seed = 1) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (int i = 0; i < n; ++i) out.emplace_back("chunk-" + std::to_string(i), Payload(size + i * 4097, seed + i));
  return out;
}

// Reads every chunk back into fresh buffers; returns the results.
std::vector<ChunkResult> ReadAll(Store& store, const std::vector<std::pair<std::string, std::vector<uint8_t>>>& chunks,
                                 std::vector<std::vector<uint8_t>>* buffers, StepRecord* record = nullptr) {
  buffers->assign(chunks.size(), {});
  std::vector<ChunkRead> reads;
  for (size_t i = 0; i < chunks.size(); ++i) {
    (*buffers)[i].assign(chunks[i].second.size(), 0);
    reads.push_back({chunks[i].first, (*buffers)[i].data(), (*buffers)[i].size()});
  }
  std::vector<ChunkResult> results;
  StepRecord rec = store.Retrieve(reads, &results);
  if (record) *record = rec;
  return results;
}

std::string ChunkFile(const std::string& tier_dir, const std::string& key) {
  return tier_dir + "/" + RelativeChunkPath(FileStem(key));
}

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
  CHECK(s.tiers[0].bounce_reads + s.tiers[1].bounce_reads == 0);  // straight into the buffers
  // The 5 chunks bad on both tiers fail on each; the others fail only where t0 was asked first.
  CHECK(s.tiers[0].checksum_failures >= 5);
  CHECK(s.tiers[1].checksum_failures >= 5);
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

TEST_CASE("a tier directory is locked against a second store") {
  TempDir dir;
  auto first = OpenStoreOrSkip(TwoTiers(dir));
  auto second = Store::Open(TwoTiers(dir));
  REQUIRE_FALSE(second.ok());
  CHECK(absl::IsFailedPrecondition(second.status()));
  CHECK(std::string(second.status().message()).find("in use") != std::string::npos);
}

TEST_CASE("an unwritable tier path is a clear error") {
  TempDir dir;
  std::ofstream(dir.sub("file")) << "x";
  StoreConfig c;
  c.tiers.push_back({"t", dir.sub("file") + "/sub", 1 << 30});
  auto store = Store::Open(c);
  REQUIRE_FALSE(store.ok());
  CHECK(std::string(store.status().message()).find("tier 't'") != std::string::npos);
}

TEST_CASE("unaligned destinations and tails read through bounce buffers") {
  TempDir dir;
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  auto data = Payload((1 << 20) + 33, 9);
  REQUIRE(store->Persist("odd", data.data(), data.size()).ok());
  store->Flush();
  std::vector<uint8_t> buffer(data.size() + 1);
  std::vector<ChunkResult> results;
  store->Retrieve({{"odd", buffer.data() + 1, data.size()}}, &results);
  REQUIRE(results[0].status.ok());
  CHECK(std::memcmp(buffer.data() + 1, data.data(), data.size()) == 0);
  StoreStats s = store->Stats();
  CHECK(s.tiers[0].bounce_reads + s.tiers[1].bounce_reads >= 4);
}

TEST_CASE("tmpfs tiers fall back to buffered I/O and say so") {
  if (!fs::is_directory("/dev/shm")) {
    std::cerr << "SKIPPED: no /dev/shm\n";
    std::exit(kSkipExitCode);
  }
  TempDir dir("/dev/shm");
  StoreConfig c;
  c.tiers.push_back({"mem", dir.sub("t"), 1 << 30});
  auto store = OpenStoreOrSkip(c);
  auto data = Payload(300000, 3);
  REQUIRE(store->Persist("m", data.data(), data.size()).ok());
  store->Flush();
  std::vector<uint8_t> out(data.size());
  std::vector<ChunkResult> results;
  store->Retrieve({{"m", out.data(), out.size()}}, &results);
  REQUIRE(results[0].status.ok());
  CHECK((out == data));
  // Kernels before 6.6 have no O_DIRECT on tmpfs; either way the stats tell which I/O is used.
  const TierStats t = store->Stats().tiers[0];
  INFO("direct_io=" << t.direct_io);
  CHECK((t.direct_io ? t.mem_alignment >= 4096 : t.mem_alignment == 1));
}

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

}  // namespace
}  // namespace kvstream::testing

namespace kvstream::testing {
namespace {

TEST_CASE("reads into registered memory use fixed buffers and stay correct") {
  TempDir dir;
  auto store = OpenStoreOrSkip(TwoTiers(dir));
  auto chunks = Chunks(4, 1 << 20);
  PutAll(*store, chunks);
  const size_t slot = 2 << 20;
  std::unique_ptr<uint8_t, decltype(&std::free)> arena(
      static_cast<uint8_t*>(std::aligned_alloc(4096, 4 * slot)), &std::free);
  absl::Status reg = store->RegisterMemory(arena.get(), 4 * slot);
  if (absl::IsUnimplemented(reg) || absl::IsResourceExhausted(reg)) {
    std::cerr << "SKIPPED: registered buffers unavailable: " << reg << "\n";
    std::exit(kSkipExitCode);
  }
  REQUIRE(reg.ok());
  auto read_into_arena = [&] {
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < chunks.size(); ++i) reads.push_back({chunks[i].first, arena.get() + i * slot, slot});
    std::vector<ChunkResult> results;
    store->Retrieve(reads, &results);
    for (size_t i = 0; i < chunks.size(); ++i) {
      REQUIRE(results[i].status.ok());
      REQUIRE(std::memcmp(arena.get() + i * slot, chunks[i].second.data(), chunks[i].second.size()) == 0);
    }
  };
  const auto fixed = [&] { return store->Stats().tiers[0].fixed_ops + store->Stats().tiers[1].fixed_ops; };
  const uint64_t before = fixed();
  read_into_arena();
  const uint64_t after = fixed();
  CHECK(after - before >= 4 * 4);  // every block of the 4 chunks
  store->UnregisterMemory(arena.get());
  std::memset(arena.get(), 0, 4 * slot);
  read_into_arena();
  CHECK(fixed() - after < 4);  // now plain buffers (only bounced tails may still be fixed)
}

}  // namespace
}  // namespace kvstream::testing

namespace kvstream::testing {
namespace {

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

namespace kvstream::testing {
namespace {

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
