// Rewriting keys while they are read (issue D2): writers persist new versions of their own key in
// a loop, with alternating sizes, while readers retrieve every key. A read must return some
// acknowledged version, byte for byte; a rewrite must never make a good replica look corrupt
// (no checksum failure is counted, no replica dropped), and a key that was always present is never
// a miss or a data loss. At the end every key reads back as its last acknowledged version.
// KVSTREAM_TORTURE_SECONDS sets the duration (default 3 s; the campaign ran 60 s).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "kvstream/store.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr size_t kSizes[] = {4096, 1 << 20, 3 << 20};
constexpr size_t kMaxSize = 3 << 20;

double Seconds() {
  const char* env = std::getenv("KVSTREAM_TORTURE_SECONDS");
  return env ? std::atof(env) : 3.0;
}

// Version v of key k: its first 8 bytes are v, the rest depends on (k, v).
std::vector<uint8_t> Version(int key, uint64_t v) {
  std::vector<uint8_t> data = Payload(kSizes[v % 3], key * 1000003ull + v);
  std::memcpy(data.data(), &v, sizeof(v));
  return data;
}

TEST_CASE("rewriting keys while they are read never fails a read nor drops a good replica") {
  TempDir dir;
  StoreConfig c;
  c.block_size = 1 << 20;
  c.writes = WritePolicy::kImmediate;  // deferred writes would wait for the readers to pause
  c.tiers.push_back({"t0", dir.sub("t0"), 8ull << 30});
  c.tiers.push_back({"t1", dir.sub("t1"), 8ull << 30});
  auto opened = Store::Open(c);
  if (absl::IsUnavailable(opened.status())) std::exit(kSkipExitCode);
  REQUIRE(opened.ok());
  Store& store = **opened;
  constexpr int kKeys = 4, kReaders = 4;
  std::vector<std::atomic<uint64_t>> acked(kKeys);
  for (int k = 0; k < kKeys; ++k) {
    auto v0 = Version(k, 0);
    REQUIRE(store.Persist("K" + std::to_string(k), v0.data(), v0.size()).ok());
    acked[k] = 0;
  }
  store.Flush();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, writes{0}, not_found{0}, data_loss{0}, other{0}, wrong{0};
  std::mutex errors_mu;
  std::string first_error;
  auto note = [&](const std::string& what) {
    std::lock_guard lock(errors_mu);
    if (first_error.empty()) first_error = what;
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < kKeys; ++k) {
    threads.emplace_back([&, k] {
      for (uint64_t v = 1; !stop; ++v) {
        auto data = Version(k, v);
        std::atomic<bool> durable{false};
        absl::Status status;
        if (!store.Persist("K" + std::to_string(k), data.data(), data.size(), [&](const std::string&, const PersistResult& r) {
              status = r.status;
              durable = true;
            }).ok()) {
          note("persist refused");
          return;
        }
        while (!durable) std::this_thread::sleep_for(std::chrono::microseconds(200));
        if (!status.ok()) note("persist failed: " + status.ToString());
        if (status.ok()) acked[k] = v;
        ++writes;
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      std::vector<std::vector<uint8_t>> buffers(kKeys, std::vector<uint8_t>(kMaxSize + 4096));
      while (!stop) {
        std::vector<ChunkRead> step;
        for (int k = 0; k < kKeys; ++k) step.push_back({"K" + std::to_string(k), buffers[k].data(), buffers[k].size()});
        std::vector<uint64_t> floor(kKeys);
        for (int k = 0; k < kKeys; ++k) floor[k] = acked[k];
        std::vector<ChunkResult> results;
        store.Retrieve(step, &results);
        for (int k = 0; k < kKeys; ++k) {
          ++reads;
          const ChunkResult& res = results[k];
          if (absl::IsNotFound(res.status)) {
            ++not_found;
            note("miss: " + res.status.ToString());
          } else if (absl::IsDataLoss(res.status)) {
            ++data_loss;
            note("data loss: " + res.status.ToString());
          } else if (!res.status.ok()) {
            ++other;
            note(res.status.ToString());
          } else {
            uint64_t v;
            std::memcpy(&v, buffers[k].data(), sizeof(v));
            const auto expected = Version(k, v);
            if (v < floor[k] || res.size != expected.size() ||
                std::memcmp(buffers[k].data(), expected.data(), expected.size()) != 0) {
              ++wrong;
              note("wrong bytes for K" + std::to_string(k));
            }
          }
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(Seconds()));
  stop = true;
  for (auto& t : threads) t.join();
  store.Flush();
  uint64_t checksum_failures = 0, read_errors = 0;
  for (const TierStats& t : store.Stats().tiers) {
    checksum_failures += t.checksum_failures;
    read_errors += t.read_errors;
  }
  std::cerr << "rewrite race: " << writes << " versions written, " << reads << " chunk reads; misses " << not_found
            << ", data loss " << data_loss << ", other errors " << other << ", wrong bytes " << wrong
            << ", checksum failures " << checksum_failures << ", read errors " << read_errors
            << (first_error.empty() ? "" : "; first: " + first_error) << "\n";
  CHECK(writes > 10);
  CHECK(reads > 10);
  CHECK(not_found == 0);
  CHECK(data_loss == 0);
  CHECK(other == 0);
  CHECK(wrong == 0);
  CHECK(checksum_failures == 0);
  // Every key reads back as its last acknowledged version, from every tier.
  for (int k = 0; k < kKeys; ++k) {
    const auto expected = Version(k, acked[k]);
    CHECK(store.Lookup({"K" + std::to_string(k)})[0].tier_mask == 3u);
    std::vector<uint8_t> buffer(kMaxSize + 4096);
    std::vector<ChunkResult> results;
    store.Retrieve({{"K" + std::to_string(k), buffer.data(), buffer.size()}}, &results);
    REQUIRE(results[0].status.ok());
    CHECK(std::memcmp(buffer.data(), expected.data(), expected.size()) == 0);
  }
}

}  // namespace
}  // namespace kvstream::testing
