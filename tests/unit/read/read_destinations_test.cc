// Where reads land: unaligned destinations and tails go through bounce buffers, memory registered
// with the store is read into with fixed buffers, and both deliver the same bytes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

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
