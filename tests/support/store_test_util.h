// The fixture of the tests that run the whole Store on real files: two tiers in a TempDir, chunks
// persisted and read back, the path of a chunk's file on a tier (to damage it behind the store).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine.h"
#include "format/chunk_format.h"
#include "kvstream/store.h"
#include "store_open.h"
#include "test_util.h"

namespace kvstream::testing {

// Named chunks with their payloads, in the order they were made.
using NamedChunks = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

// Two tiers, "fast" in dir/t0 and "slow" in dir/t1, of `capacity` bytes each, 256 KiB blocks.
inline StoreConfig TwoTiers(const TempDir& dir, uint64_t capacity = 1ull << 30) {
  StoreConfig c;
  c.block_size = 256 << 10;
  c.tiers.push_back({"fast", dir.sub("t0"), capacity});
  c.tiers.push_back({"slow", dir.sub("t1"), capacity});
  return c;
}

// Waits until every piece of the memory registered at `base` is registered (RegisterMemory
// returns before its pages are faulted in): for the cases that count fixed-buffer reads into it.
inline void WaitUntilRegistered(Store& store, const void* base) {
  auto& engine = dynamic_cast<Engine&>(store);  // what Store::Open makes
  while (!engine.MemoryRegistered(base)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Persists every chunk and waits until they are written.
inline void PutAll(Store& store, const NamedChunks& chunks) {
  for (const auto& [key, data] : chunks) REQUIRE(store.Persist(key, data.data(), data.size()).ok());
  store.Flush();
}

// `n` chunks named chunk-0.., of `size` bytes and 4097 more for each next one.
inline NamedChunks Chunks(int n, size_t size, uint64_t seed = 1) {
  NamedChunks out;
  for (int i = 0; i < n; ++i) out.emplace_back("chunk-" + std::to_string(i), Payload(size + i * 4097, seed + i));
  return out;
}

// Reads every chunk back into fresh buffers; returns the results.
inline std::vector<ChunkResult> ReadAll(Store& store, const NamedChunks& chunks,
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

// The path of chunk `key`'s file below the tier directory `tier_dir`.
inline std::string ChunkFile(const std::string& tier_dir, const std::string& key) {
  return tier_dir + "/" + RelativeChunkPath(FileStem(key));
}

}  // namespace kvstream::testing
