// The I/O engine a store's tiers use (StoreConfig::io_engine): with `threads` (io/thread_queue.h)
// a store on real files persists, reads back byte-identical across both tiers, flips no byte
// unnoticed and restarts from its saved index, as on io_uring; `auto` uses io_uring where the
// kernel has it. The daemon under a seccomp filter that denies io_uring is tests/ops' concern.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

StoreConfig ThreadEngine(const TempDir& dir) {
  StoreConfig c = TwoTiers(dir);
  c.io_engine = IoEngine::kThreads;
  return c;
}

TEST_CASE("a store on the thread engine persists and reads back byte-identical from both tiers") {
  TempDir dir;
  const NamedChunks chunks = Chunks(12, 3 << 20);
  {
    auto store = OpenStoreOrSkip(ThreadEngine(dir));
    PutAll(*store, chunks);
    std::vector<std::vector<uint8_t>> out;
    StepRecord record;
    for (const ChunkResult& r : ReadAll(*store, chunks, &out, &record)) REQUIRE(r.status.ok());
    for (size_t i = 0; i < chunks.size(); ++i) CHECK((out[i] == chunks[i].second));
    REQUIRE(record.tiers.size() == 2);
    CHECK(record.tiers[0].blocks > 0);  // both tiers read (completion routing)
    CHECK(record.tiers[1].blocks > 0);
    CHECK_FALSE(store->Stats().tiers[0].fixed_buffers);  // no registered buffers without io_uring
  }
  // Restarted (from the saved index), on the thread engine again.
  auto store = OpenStoreOrSkip(ThreadEngine(dir));
  std::vector<std::vector<uint8_t>> out;
  for (const ChunkResult& r : ReadAll(*store, chunks, &out)) REQUIRE(r.status.ok());
  for (size_t i = 0; i < chunks.size(); ++i) CHECK((out[i] == chunks[i].second));
}

TEST_CASE("on the thread engine a flipped byte in one replica is never served") {
  TempDir dir;
  StoreConfig c = ThreadEngine(dir);
  const NamedChunks chunks = Chunks(1, 2 << 20);
  {
    auto store = OpenStoreOrSkip(c);
    PutAll(*store, chunks);
  }
  const std::string file = ChunkFile(c.tiers[0].path, chunks[0].first);
  FILE* f = std::fopen(file.c_str(), "r+b");
  REQUIRE(f != nullptr);
  std::fseek(f, -100, SEEK_END);  // in the payload's last segment
  const int byte = std::fgetc(f);
  std::fseek(f, -100, SEEK_END);
  std::fputc(byte ^ 0x40, f);
  std::fclose(f);
  auto store = OpenStoreOrSkip(c);
  std::vector<std::vector<uint8_t>> out;
  const std::vector<ChunkResult> results = ReadAll(*store, chunks, &out);
  REQUIRE(results[0].status.ok());  // served from the other tier's replica
  CHECK((out[0] == chunks[0].second));
}

TEST_CASE("io_engine io_uring and auto open where the kernel has io_uring") {
  for (IoEngine engine : {IoEngine::kUring, IoEngine::kAuto}) {
    TempDir dir;
    StoreConfig c = TwoTiers(dir);
    c.io_engine = engine;
    auto store = OpenStoreOrSkip(c);  // skips where io_uring is unavailable
    const NamedChunks chunks = Chunks(2, 1 << 20);
    PutAll(*store, chunks);
    std::vector<std::vector<uint8_t>> out;
    for (const ChunkResult& r : ReadAll(*store, chunks, &out)) CHECK(r.status.ok());
  }
}

TEST_CASE("tiers whose reads are CPU copies (tmpfs) read on copy threads and serve intact bytes") {
  // A read from tmpfs, O_DIRECT or not, is a copy, which io_uring would do on the loop's thread
  // inside the submission.
  REQUIRE(std::filesystem::is_directory("/dev/shm"));
  setenv("KVSTREAM_COPY_THREADS", "1", 1);  // as on a node with the cores for them
  TempDir dir("/dev/shm");
  StoreConfig c = TwoTiers(dir);
  c.io_engine = IoEngine::kAuto;
  for (TierConfig& t : c.tiers) t.queue_depth = 4;
  auto store = OpenStoreOrSkip(c);
  const StoreStats stats = store->Stats();
  const char* engine = std::getenv("KVSTREAM_IO_ENGINE");
  const bool threads = engine != nullptr && std::string_view(engine) == "threads";
  for (const TierStats& t : stats.tiers) {
    CHECK(t.io_engine == (threads ? "threads" : "io_uring, reads on threads"));
  }
  const NamedChunks chunks = Chunks(16, 3 << 20);
  PutAll(*store, chunks);
  std::vector<std::vector<uint8_t>> out;
  StepRecord record;
  for (const ChunkResult& r : ReadAll(*store, chunks, &out, &record)) REQUIRE(r.status.ok());
  for (size_t i = 0; i < chunks.size(); ++i) CHECK((out[i] == chunks[i].second));
  CHECK(record.tiers[0].blocks > 0);
  CHECK(record.tiers[1].blocks > 0);
  store.reset();
  setenv("KVSTREAM_COPY_THREADS", "0", 1);  // as on 2 cores: copied inline
  auto inline_copies = OpenStoreOrSkip(c);
  CHECK(inline_copies->Stats().tiers[0].io_engine == (threads ? "threads" : "io_uring"));
  for (const ChunkResult& r : ReadAll(*inline_copies, chunks, &out)) REQUIRE(r.status.ok());
  for (size_t i = 0; i < chunks.size(); ++i) CHECK((out[i] == chunks[i].second));
  unsetenv("KVSTREAM_COPY_THREADS");
}

}  // namespace
}  // namespace kvstream::testing
