// Power cuts on simulated tiers (sim/sim_device.h, sim/sim_power.h). Under a load of persists (new
// keys and new versions of old ones) and reads, the power of both tiers fails just before a
// random device operation; the store restarts on what the media hold (names as last synced, or as
// at the cut with unsynced bytes zero; the last unsynced write torn or not) and every key is read.
// For each fsync policy, 200 cuts:
//  - never a wrong byte: every chunk served is a version persisted for its key, no older than the
//    one it must be;
//  - fsync: chunk: every version acknowledged durable before the cut is served (or a newer one);
//  - fsync: none: the loss is bounded by the sync points (SyncAll: the kernel's writeback, or
//    sync(2)): a key not persisted again since the last sync point is served with the version
//    acknowledged before it (or a newer one); a key persisted since may lose it all.
// Deterministic: one seed, virtual time, and the test thread stages work only while the clock is
// paused and the loop has handled everything before.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine.h"
#include "sim/sim_clock.h"
#include "sim/sim_device.h"
#include "sim/sim_power.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr int kKeys = 12;
constexpr uint32_t kBlockSize = 4096;
constexpr size_t kMaxPayload = 5 * kBlockSize + 100;
constexpr uint64_t kOpsBeforeCut = 300;  // the cut falls before one of the first this many operations

using Medium = std::map<std::string, std::vector<uint8_t>>;

std::string Key(int k) { return "key" + std::to_string(k); }

// Version `v` of key `k`: its size and bytes follow from (k, v).
size_t VersionSize(int k, int v) { return 1 + (static_cast<size_t>(k) * 7919 + static_cast<size_t>(v) * 104729) % kMaxPayload; }
std::vector<uint8_t> VersionBytes(int k, int v) { return Payload(VersionSize(k, v), static_cast<uint64_t>(k) << 32 | v); }

// What was persisted for a key and what the store must serve of it.
struct KeyLedger {
  int versions = 0;  // persisted: 0 .. versions - 1
  int acked = -1;    // the newest version acknowledged durable while the power was on
  int floor = -1;    // the oldest version a restart may serve (-1: the key may be absent)
};

struct Counts {
  uint64_t cuts = 0, persists = 0, acked = 0, reads = 0, wrong_bytes = 0, lost = 0, rolled_back = 0;
};

// Which version of key `k` `bytes` is, or -1 when it is none of the `versions` persisted.
int VersionOf(int k, int versions, const uint8_t* bytes, size_t size) {
  for (int v = versions - 1; v >= 0; --v) {
    if (VersionSize(k, v) != size) continue;
    const std::vector<uint8_t> expected = VersionBytes(k, v);
    if (std::memcmp(expected.data(), bytes, size) == 0) return v;
  }
  return -1;
}

// A store on two simulated tiers whose media start as `media` (everything on them durable).
struct PoweredStore {
  std::shared_ptr<SimClock> clock = std::make_shared<SimClock>();
  std::shared_ptr<SimPower> power = std::make_shared<SimPower>();
  std::vector<SimDevice*> devices;
  std::unique_ptr<Engine> engine;

  PoweredStore(FsyncPolicy fsync, const std::vector<Medium>& media) {
    StoreConfig c;
    for (int t = 0; t < 2; ++t) {
      TierConfig tier;
      tier.name = "t" + std::to_string(t);
      tier.path = "/sim/" + tier.name;
      tier.capacity_bytes = 1ull << 30;
      tier.queue_depth = 4;
      c.tiers.push_back(tier);
    }
    c.block_size = kBlockSize;
    c.verify_threads = 0;  // inline: deterministic on the virtual clock
    c.fsync = fsync;
    auto valid = ValidateConfig(c);
    REQUIRE(valid.ok());
    std::vector<std::unique_ptr<TierDevice>> devs;
    for (size_t t = 0; t < 2; ++t) {
      auto d = std::make_unique<SimDevice>(clock.get(), 200 * MBps, 50'000);
      d->SetPower(power);
      d->files() = media[t];
      d->SyncAll();
      devices.push_back(d.get());
      devs.push_back(std::move(d));
    }
    auto e = Engine::Create(*valid, std::move(devs), clock);
    REQUIRE(e.ok());
    engine = *std::move(e);
  }
  ~PoweredStore() {
    clock->Resume();
    engine.reset();
  }
};

// A step reading `keys`, each no older than its floor.
struct ReadStep {
  std::vector<int> keys, floors;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<ChunkResult> results;
  std::atomic<bool> done{false};

  // Hands the step to the store (its loop) and returns.
  void Start(Store& store) {
    buffers.assign(keys.size(), std::vector<uint8_t>(kMaxPayload));
    results.assign(keys.size(), ChunkResult{});
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < keys.size(); ++i) reads.push_back({Key(keys[i]), buffers[i].data(), kMaxPayload});
    store.RetrieveAsync(
        std::move(reads), [this](const ChunkResult& r) { results[r.index] = r; }, [this](StepRecord) { done = true; });
  }
  void Wait() const {
    while (!done) std::this_thread::yield();
  }
};

// Checks each chunk the step served against the ledger (no older than its floor) and returns the
// versions served (-1: absent or failed).
std::vector<int> Check(const ReadStep& step, const std::vector<KeyLedger>& ledger, Counts* counts) {
  const std::vector<int>& keys = step.keys;
  const std::vector<int>& floors = step.floors;
  const std::vector<ChunkResult>& results = step.results;
  const std::vector<std::vector<uint8_t>>& buffers = step.buffers;
  std::vector<int> served(keys.size(), -1);
  for (size_t i = 0; i < keys.size(); ++i) {
    ++counts->reads;
    const int k = keys[i];
    if (!results[i].status.ok()) {
      if (floors[i] >= 0) {
        ++counts->lost;
        UNSCOPED_INFO(Key(k) << ": version " << floors[i] << " not served: " << results[i].status.ToString());
      }
      continue;
    }
    served[i] = VersionOf(k, ledger[k].versions, buffers[i].data(), results[i].size);
    if (served[i] < 0) {
      ++counts->wrong_bytes;
      UNSCOPED_INFO(Key(k) << ": " << results[i].size << " bytes served that are no version of it");
    } else if (served[i] < floors[i]) {
      ++counts->lost;
      UNSCOPED_INFO(Key(k) << ": version " << served[i] << " served, " << floors[i] << " promised");
    }
  }
  return served;
}

// Every key read after a restart, each held to its floor.
std::vector<int> ReadAfterRestart(Store& store, const std::vector<KeyLedger>& ledger, Counts* counts) {
  ReadStep step;
  for (int k = 0; k < kKeys; ++k) step.keys.push_back(k), step.floors.push_back(ledger[k].floor);
  step.Start(store);
  step.Wait();
  return Check(step, ledger, counts);
}

// `cuts` power cuts under load with `fsync`, each store started on what the last one left.
Counts RunPowerCuts(FsyncPolicy fsync, int cuts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<KeyLedger> ledger(kKeys);
  std::vector<Medium> media(2);
  Counts counts;
  for (int cut = 0; cut < cuts; ++cut) {
    PoweredStore store(fsync, media);
    // After the restart: every key as the ledger promised; what is served is on the media now.
    const std::vector<int> served = ReadAfterRestart(*store.engine, ledger, &counts);
    for (int k = 0; k < kKeys; ++k) {
      if (served[k] < ledger[k].acked && served[k] >= ledger[k].floor) ++counts.rolled_back;  // within the bound
      ledger[k].acked = ledger[k].floor = served[k];
    }
    store.power->CutAtOp(store.power->ops() + rng() % kOpsBeforeCut);
    // Rounds of load until the power fails: persists and reads staged while the clock is paused,
    // then run; between rounds, now and then a sync point.
    while (!store.power->off()) {
      store.clock->Pause();
      const int persists = 1 + static_cast<int>(rng() % 4);
      for (int p = 0; p < persists; ++p) {
        const int k = static_cast<int>(rng() % kKeys);
        const int v = ledger[k].versions++;
        const std::vector<uint8_t> bytes = VersionBytes(k, v);
        ++counts.persists;
        if (fsync == FsyncPolicy::kNone) ledger[k].floor = -1;  // its file may be renamed over, unsynced
        REQUIRE(store.engine
                    ->Persist(Key(k), bytes.data(), bytes.size(),
                              [&, k, v](const std::string&, const PersistResult& r) {
                                if (store.power->off() || !r.status.ok() || r.tier_mask == 0) return;
                                ledger[k].acked = std::max(ledger[k].acked, v);
                                if (fsync == FsyncPolicy::kChunk) ledger[k].floor = ledger[k].acked;
                                ++counts.acked;
                              })
                    .ok());
        store.clock->WaitUntilQuiescent();
      }
      ReadStep step;
      for (int k = 0; k < kKeys; ++k) {
        if (ledger[k].acked >= 0 && rng() % 3 == 0) step.keys.push_back(k), step.floors.push_back(ledger[k].acked);
      }
      if (!step.keys.empty()) {
        step.Start(*store.engine);
        store.clock->WaitUntilQuiescent();  // placed before the clock runs
      }
      store.clock->Resume();
      store.engine->Flush();
      if (!step.keys.empty()) {
        step.Wait();
        Check(step, ledger, &counts);
      }
      if (!store.power->off() && rng() % 4 == 0) {
        for (SimDevice* d : store.devices) d->SyncAll();
        for (KeyLedger& l : ledger) l.floor = std::max(l.floor, l.acked);  // all answered by Flush
      }
    }
    ++counts.cuts;
    const SimPowerCut how{rng() % 3 == 0, rng() % 2 == 0, rng()};
    for (size_t t = 0; t < 2; ++t) media[t] = store.devices[t]->Medium(how);
  }
  // The last cut's restart.
  PoweredStore store(fsync, media);
  const std::vector<int> served = ReadAfterRestart(*store.engine, ledger, &counts);
  for (int k = 0; k < kKeys; ++k) counts.rolled_back += served[k] < ledger[k].acked && served[k] >= ledger[k].floor;
  return counts;
}

void Report(const char* policy, const Counts& c) {
  std::printf("fsync %s: %llu power cuts, %llu persists (%llu acknowledged), %llu chunks read: %llu wrong bytes, "
              "%llu promised chunks lost, %llu acknowledged chunks rolled back within the bound\n",
              policy, static_cast<unsigned long long>(c.cuts), static_cast<unsigned long long>(c.persists),
              static_cast<unsigned long long>(c.acked), static_cast<unsigned long long>(c.reads),
              static_cast<unsigned long long>(c.wrong_bytes), static_cast<unsigned long long>(c.lost),
              static_cast<unsigned long long>(c.rolled_back));
}

TEST_CASE("a power cut drops what was not synced and a sync point keeps everything") {
  SimClock clock;
  auto power = std::make_shared<SimPower>();
  SimDevice d(&clock, 0, 0);
  d.SetPower(power);
  d.files()["aa01"] = std::vector<uint8_t>(4096, 1);
  d.SyncAll();
  REQUIRE(d.RemoveChunk("aa01").ok());
  auto temp = d.CreateTemp("aa02");
  REQUIRE(temp.ok());
  REQUIRE(d.CommitTemp(*temp, "aa02", /*sync_directory=*/false).ok());
  Medium m = d.Medium({});
  CHECK(m.size() == 1);  // the removal and the commit never reached the medium
  CHECK(m["aa01"] == std::vector<uint8_t>(4096, 1));
  m = d.Medium({.names_ahead_of_data = true});
  CHECK(m.size() == 1);  // the names as at the cut: aa02, its bytes never synced
  CHECK(m.contains("aa02"));
}

TEST_CASE("a committed replica survives a power cut only once its data and its directory are synced") {
  SimClock clock;
  auto power = std::make_shared<SimPower>();
  SimDevice d(&clock, 0, 0);
  d.SetPower(power);
  std::vector<uint8_t> bytes(8192, 7);
  auto temp = d.CreateTemp("bb01");
  REQUIRE(temp.ok());
  IoRequest write, sync;
  write.Set(IoKind::kWrite, *temp, 0, 8192, bytes.data());
  sync.Set(IoKind::kSync, *temp, 0, 0, nullptr);
  std::vector<IoCompletion> done;
  d.Queue(&write);
  d.Submit();
  d.Reap(&done);
  d.Queue(&sync);
  d.Submit();
  d.Reap(&done);
  REQUIRE(done.size() == 2);
  REQUIRE(d.CommitTemp(*temp, "bb01", /*sync_directory=*/true).ok());
  auto unsynced = d.CreateTemp("bb02");  // written, not synced, its directory synced
  REQUIRE(unsynced.ok());
  write.Set(IoKind::kWrite, *unsynced, 0, 8192, bytes.data());
  d.Queue(&write);
  d.Submit();
  d.Reap(&done);
  REQUIRE(d.CommitTemp(*unsynced, "bb02", /*sync_directory=*/true).ok());
  Medium m = d.Medium({});
  CHECK(m["bb01"] == bytes);
  CHECK(m["bb02"].empty());  // its name reached the medium, its bytes did not
}

TEST_CASE("200 power cuts under fsync chunk serve no wrong byte and lose no chunk acknowledged durable") {
  const Counts c = RunPowerCuts(FsyncPolicy::kChunk, 200, 43);
  Report("chunk", c);
  CHECK(c.cuts == 200);
  CHECK(c.acked > 0);
  CHECK(c.wrong_bytes == 0);
  CHECK(c.lost == 0);
  CHECK(c.rolled_back == 0);
}

TEST_CASE("200 power cuts under fsync none serve no wrong byte and lose only what was acknowledged since the last sync point") {
  const Counts c = RunPowerCuts(FsyncPolicy::kNone, 200, 43);
  Report("none", c);
  CHECK(c.cuts == 200);
  CHECK(c.acked > 0);
  CHECK(c.wrong_bytes == 0);
  CHECK(c.lost == 0);
  CHECK(c.rolled_back > 0);  // the window is real: without fsync a cut takes acknowledged chunks back
}

}  // namespace
}  // namespace kvstream::testing
