// The replicator (M3) and the write path under faults: a replica whose write or commit fails, a
// tier that is full, replication that ends partial or fails everywhere, short and retried writes,
// and two writes of one key completing out of order. Persist results say which tiers hold the
// chunk; no temporary is left behind.
#include "write/replicator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "format/chunk_format.h"
#include "sim_rig.h"

namespace kvstream::testing {
namespace {

struct Outcome {
  absl::Status status;
  uint32_t tier_mask = 0;
  uint32_t lost_mask = 0;
  std::string lost_reason;
  int calls = 0;
};

// Persists `data` under `key` and waits until its callback ran.
Outcome PersistAndWait(SimRig& rig, const std::string& key, const std::vector<uint8_t>& data) {
  Outcome out;
  REQUIRE(rig.engine
              ->Persist(key, data.data(), data.size(),
                        [&out](const std::string&, const PersistResult& r) {
                          out.status = r.status;
                          out.tier_mask = r.tier_mask;
                          out.lost_mask = r.lost_mask;
                          out.lost_reason = r.lost_reason;
                          ++out.calls;
                        })
              .ok());
  rig.engine->Flush();
  return out;
}

// Reads `key` back; OK when its bytes equal `expected`.
absl::Status ReadBack(SimRig& rig, const std::string& key, const std::vector<uint8_t>& expected) {
  std::vector<uint8_t> buffer(expected.size());
  std::vector<ChunkResult> results;
  rig.engine->Retrieve({{key, buffer.data(), buffer.size()}}, &results);
  if (!results[0].status.ok()) return results[0].status;
  return buffer == expected ? absl::OkStatus() : absl::DataLossError("wrong bytes");
}

SimFaultHook FailOn(SimOp op, int error) {
  return [op, error](const SimOpInfo& info) { return info.op == op ? SimFault::Error(error) : SimFault::None(); };
}

void RequireNoTemporaries(const SimRig& rig) {
  for (SimDevice* d : rig.devices) REQUIRE(d->temporaries() == 0);
}

StoreConfig Adaptive(uint64_t staging = 256ull << 20) {
  StoreConfig c = SimConfig(2);
  c.replication = ReplicationPolicy::kAdaptive;
  c.staging_limit_bytes = staging;
  return c;
}

// Waits (in real time; the virtual clock runs meanwhile) until `done`.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST_CASE("a replica whose write fails leaves the chunk written to the other tier and says so") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.devices[1]->SetFaultHook(FailOn(SimOp::kWrite, EIO));
  const auto data = Payload(3 * kBlock, 1);
  Outcome out = PersistAndWait(rig, "k", data);
  CHECK(out.calls == 1);
  CHECK(out.status.ok());
  CHECK(out.tier_mask == 1u);
  CHECK(out.lost_mask == 2u);  // and it says the replica on t1 was lost, and why
  CHECK(out.lost_reason.find("t1") != std::string::npos);
  CHECK(rig.engine->Lookup({"k"})[0].tier_mask == 1u);
  CHECK(rig.engine->Stats().tiers[1].write_errors > 0);
  CHECK(rig.devices[1]->files().empty());
  RequireNoTemporaries(rig);
  CHECK(ReadBack(rig, "k", data).ok());
}

TEST_CASE("a commit that fails loses only that replica") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.devices[0]->SetFaultHook(FailOn(SimOp::kCommit, EIO));
  const auto data = Payload(kBlock + 5, 2);
  Outcome out = PersistAndWait(rig, "k", data);
  CHECK(out.status.ok());
  CHECK(out.tier_mask == 2u);
  CHECK(rig.devices[0]->files().empty());
  CHECK(rig.engine->Stats().tiers[0].write_errors == 1);
  RequireNoTemporaries(rig);
  CHECK(ReadBack(rig, "k", data).ok());
}

TEST_CASE("a temporary that cannot be created fails that replica only") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.devices[1]->SetFaultHook(FailOn(SimOp::kCreateTemp, EACCES));
  Outcome out = PersistAndWait(rig, "k", Payload(100, 3));
  CHECK(out.status.ok());
  CHECK(out.tier_mask == 1u);
}

TEST_CASE("a full tier: ENOSPC on write or no room to evict fails its replica, the other holds") {
  SECTION("the device reports ENOSPC") {
    SimRig rig({300 * MBps, 100 * MBps});
    rig.devices[0]->SetFaultHook(FailOn(SimOp::kWrite, ENOSPC));
    Outcome out = PersistAndWait(rig, "k", Payload(kBlock, 4));
    CHECK(out.status.ok());
    CHECK(out.tier_mask == 2u);
  }
  SECTION("the chunk is larger than the tier's capacity") {
    StoreConfig c = SimConfig(2);
    c.tiers[1].capacity_bytes = 64 << 10;
    SimRig rig({300 * MBps, 100 * MBps}, c);
    Outcome out = PersistAndWait(rig, "k", Payload(kBlock, 5));
    CHECK(out.status.ok());
    CHECK(out.tier_mask == 1u);
    RequireNoTemporaries(rig);
  }
}

TEST_CASE("a locked chunk is kept when room is made, until unlocked or its lease ends") {
  StoreConfig c = SimConfig(2);
  for (TierConfig& t : c.tiers) t.capacity_bytes = 2 * kBlock + kBlock / 2;  // two chunks of a block
  SimRig rig({300 * MBps, 100 * MBps}, c);
  const auto a = Payload(kBlock, 61), b = Payload(kBlock, 62);
  REQUIRE(PersistAndWait(rig, "a", a).tier_mask == 3u);
  REQUIRE(PersistAndWait(rig, "b", b).tier_mask == 3u);  // "a" is the least recently used
  const auto locked = rig.engine->LookupAndLock({"a", "missing"}, 30);
  CHECK(locked[0].present);
  CHECK(locked[0].locked);
  CHECK_FALSE(locked[1].locked);
  REQUIRE(PersistAndWait(rig, "c", Payload(kBlock, 63)).tier_mask == 3u);
  CHECK(rig.engine->Lookup({"a"})[0].tier_mask == 3u);  // kept: "b" made room instead
  CHECK_FALSE(rig.engine->Lookup({"b"})[0].present);
  CHECK(ReadBack(rig, "a", a).ok());  // reading it does not end the lock
  SECTION("unlocked") {
    CHECK(rig.engine->Unlock({"a", "c"}) == 1u);
  }
  SECTION("the lease ends: a client that never unlocks does not pin it forever") {
    // 31 virtual seconds pass: one write that the device delays that long.
    rig.devices[1]->SetFaultHook([](const SimOpInfo& op) {
      return op.op == SimOp::kWrite ? SimFault::Delay(31'000'000'000) : SimFault::None();
    });
    REQUIRE(PersistAndWait(rig, "late", Payload(kBlock / 2, 64)).status.ok());
    rig.devices[1]->SetFaultHook(nullptr);
  }
  // No longer locked: a chunk that needs the whole tier makes room by evicting it too.
  REQUIRE(PersistAndWait(rig, "d", Payload(2 * kBlock, 65)).tier_mask == 3u);
  CHECK_FALSE(rig.engine->Lookup({"a"})[0].present);
  RequireNoTemporaries(rig);
}

TEST_CASE("replication that fails on every tier reports the error and indexes nothing") {
  SimRig rig({300 * MBps, 100 * MBps});
  for (SimDevice* d : rig.devices) d->SetFaultHook(FailOn(SimOp::kWrite, ENOSPC));
  Outcome out = PersistAndWait(rig, "k", Payload(kBlock, 6));
  CHECK(absl::IsResourceExhausted(out.status));
  CHECK(out.tier_mask == 0u);
  CHECK(out.lost_mask == 3u);
  CHECK_FALSE(rig.engine->Lookup({"k"})[0].present);
  CHECK(rig.engine->Stats().persist_failures == 1);
  RequireNoTemporaries(rig);
}

TEST_CASE("short and retried writes are continued and the replicas are intact") {
  const SimFault fault = GENERATE(SimFault::Short(), SimFault::Again());
  SimRig rig({300 * MBps, 100 * MBps});
  for (SimDevice* d : rig.devices) {
    d->SetFaultHook([fault](const SimOpInfo& op) { return op.op == SimOp::kWrite ? fault : SimFault::None(); });
  }
  const auto data = Payload(3 * kBlock + 100, 7);
  Outcome out = PersistAndWait(rig, "k", data);
  CHECK(out.tier_mask == 3u);
  CHECK(rig.engine->Stats().tiers[0].resubmits > 0);
  for (SimDevice* d : rig.devices) d->SetFaultHook(nullptr);
  for (int tier = 0; tier < 2; ++tier) {  // each replica alone
    REQUIRE(rig.engine->Evict({"k", tier == 0 ? "t1" : "t0", 0, false}).ok());
    CHECK(ReadBack(rig, "k", data).ok());
    PersistAndWait(rig, "k", data);  // both replicas again
  }
}

TEST_CASE("two writes of one key completing out of order leave the newer version") {
  const bool adaptive = GENERATE(false, true);
  INFO("replication " << (adaptive ? "adaptive" : "all"));
  SimRig rig({300 * MBps, 100 * MBps}, adaptive ? Adaptive() : SimConfig(2));
  // The first write each device sees (the older version's) completes a second late.
  for (SimDevice* d : rig.devices) {
    auto first = std::make_shared<bool>(true);
    d->SetFaultHook([first](const SimOpInfo& op) {
      if (op.op != SimOp::kWrite || !*first) return SimFault::None();
      *first = false;
      return SimFault::Delay(1'000'000'000);
    });
  }
  const auto older = Payload(1000, 8), newer = Payload(2000, 9);
  Outcome a, b;
  auto record = [](Outcome* o) {
    return [o](const std::string&, const PersistResult& r) {
      o->status = r.status;
      o->tier_mask = r.tier_mask;
      ++o->calls;
    };
  };
  // Both are staged before virtual time may move: else, on a loaded machine, the older version's
  // delayed write could land (time jumps while the loop waits) before the newer one is staged.
  rig.clock->Pause();
  REQUIRE(rig.engine->Persist("k", older.data(), older.size(), record(&a)).ok());
  REQUIRE(rig.engine->Persist("k", newer.data(), newer.size(), record(&b)).ok());
  rig.clock->Resume();
  rig.engine->Flush();
  CHECK(b.status.ok());
  CHECK(b.tier_mask == (adaptive ? 1u : 3u));  // adaptive: answered once its primary is written
  CHECK(a.status.ok());
  CHECK(a.tier_mask == 0u);  // superseded: never renamed over the newer file
  REQUIRE(Eventually([&] { return rig.engine->Stats().staged_bytes == 0; }));
  CHECK(rig.engine->Lookup({"k"})[0].tier_mask == 3u);
  CHECK(rig.engine->Lookup({"k"})[0].size == newer.size());
  CHECK(ReadBack(rig, "k", newer).ok());
  RequireNoTemporaries(rig);
}

TEST_CASE("a replica already present with the same bytes is not written again") {
  SimRig rig({300 * MBps, 100 * MBps});
  const auto data = Payload(kBlock, 10);
  PersistAndWait(rig, "k", data);
  for (SimDevice* d : rig.devices) d->ClearOps();
  Outcome out = PersistAndWait(rig, "k", data);
  CHECK(out.tier_mask == 3u);
  CHECK(out.lost_mask == 0u);
  for (SimDevice* d : rig.devices) CHECK(d->ops().empty());
}

TEST_CASE("replication primary writes the first tier only") {
  StoreConfig c = SimConfig(2);
  c.replication = ReplicationPolicy::kPrimary;
  SimRig rig({300 * MBps, 100 * MBps}, c);
  Outcome out = PersistAndWait(rig, "k", Payload(kBlock, 11));
  CHECK(out.tier_mask == 1u);
  CHECK(rig.devices[1]->files().empty());
}

TEST_CASE("replication adaptive answers once the primary is written, the secondary follows when idle") {
  SimRig rig({0, 10 * MBps}, Adaptive());  // the first tier takes no time
  const auto data = Payload(3 * kBlock, 21);
  rig.clock->Pause();  // time stands still: the primary is written, the secondary is not
  Outcome out = PersistAndWait(rig, "k", data);
  CHECK(out.calls == 1);
  REQUIRE(out.status.ok());
  CHECK(out.tier_mask == 1u);  // answered before the slow tier's copy: the primary is enough
  CHECK(out.lost_mask == 0u);
  CHECK(rig.engine->Stats().staged_bytes > 0);  // the image stays for the secondary
  rig.clock->Resume();
  REQUIRE(Eventually([&] { return rig.engine->Lookup({"k"})[0].tier_mask == 3u; }));
  CHECK(Eventually([&] { return rig.engine->Stats().staged_bytes == 0; }));
  CHECK(rig.engine->Stats().tiers[1].secondaries_dropped == 0);
  CHECK(ReadBack(rig, "k", data).ok());
  RequireNoTemporaries(rig);
}

TEST_CASE("replication adaptive drops secondaries under staging pressure, every chunk stays on its primary") {
  // Staging for 4 chunks, a second tier that writes 100x slower: under `all` every producer would
  // wait for it; here its copies give their room back instead.
  SimRig rig({300 * MBps, 3 * MBps}, Adaptive(4 * (kBlock + 8192)));
  std::vector<std::vector<uint8_t>> data;
  std::vector<Outcome> outs(24);
  for (int i = 0; i < 24; ++i) data.push_back(Payload(kBlock, 100 + i));
  auto persist = [&](int i, bool wait) {
    auto done = [&outs, i](const std::string&, const PersistResult& r) {
      outs[i].status = r.status;
      outs[i].tier_mask = r.tier_mask;
      ++outs[i].calls;
    };
    const std::string key = "p" + std::to_string(i);
    return wait ? rig.engine->Persist(key, data[i].data(), data[i].size(), done)
                : rig.engine->TryPersist(key, data[i].data(), data[i].size(), done);
  };
  // Time stands still while staging fills and a producer starts waiting for room.
  rig.clock->Pause();
  int staged = 0;
  while (staged < 24 && persist(staged, false).ok()) ++staged;
  REQUIRE(staged == 4);
  std::thread producer([&] {
    for (int i = staged; i < 24; ++i) REQUIRE(persist(i, true).ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  rig.clock->Resume();
  producer.join();
  rig.engine->Flush();
  int only_primary = 0;
  for (int i = 0; i < 24; ++i) {
    INFO("chunk " << i);
    REQUIRE(outs[i].calls == 1);
    REQUIRE(outs[i].status.ok());
    CHECK((outs[i].tier_mask & 1u) == 1u);
  }
  REQUIRE(Eventually([&] { return rig.engine->Stats().staged_bytes == 0; }));
  for (int i = 0; i < 24; ++i) {
    const uint32_t mask = rig.engine->Lookup({"p" + std::to_string(i)})[0].tier_mask;
    CHECK((mask & 1u) == 1u);
    only_primary += mask == 1u;
  }
  CHECK(only_primary > 0);
  CHECK(rig.engine->Stats().tiers[1].secondaries_dropped == static_cast<uint64_t>(only_primary));
  // A chunk whose secondary was dropped reads from its primary; with the primary failing, it
  // fails (it is on no other tier) and says so, while a replicated one still reads.
  for (int i = 0; i < 24; ++i) CHECK(ReadBack(rig, "p" + std::to_string(i), data[i]).ok());
  rig.devices[0]->SetFaultHook(FailOn(SimOp::kRead, EIO));
  int replicated_read = 0, lost_read = 0;
  for (int i = 0; i < 24; ++i) {
    const bool both = rig.engine->Lookup({"p" + std::to_string(i)})[0].tier_mask == 3u;
    const absl::Status read = ReadBack(rig, "p" + std::to_string(i), data[i]);
    (both ? replicated_read : lost_read) += both ? read.ok() : !read.ok();
  }
  CHECK(lost_read == only_primary);
  CHECK(replicated_read == 24 - only_primary);
  RequireNoTemporaries(rig);
}

// Writes of `stem` submitted to `device` strictly between `from` and `to` (virtual ns).
int WritesSubmittedBetween(const SimDevice& device, const std::string& stem, int64_t from, int64_t to) {
  int n = 0;
  for (const SimOpRecord& op : device.ops()) {
    n += op.kind == IoKind::kWrite && op.stem.find(stem) != std::string::npos && op.submit_ns > from &&
         op.submit_ns < to;
  }
  return n;
}

// True once `device` was sent a write of `stem`.
bool WriteStarted(const SimDevice& device, const std::string& stem) {
  return WritesSubmittedBetween(device, stem, -1, INT64_MAX) > 0;
}

// From the first submitted to the last done of the `kind` operations on `stem` on `devices`.
std::pair<int64_t, int64_t> Span(const std::vector<SimDevice*>& devices, IoKind kind, const std::string& stem) {
  int64_t first = INT64_MAX, last = 0;
  for (SimDevice* d : devices) {
    for (const SimOpRecord& op : d->ops()) {
      if (op.kind != kind || op.stem.find(stem) == std::string::npos) continue;
      first = std::min(first, op.submit_ns);
      last = std::max(last, op.done_ns);
    }
  }
  return {first, last};
}

TEST_CASE("replication adaptive: a started secondary pauses while a step reads or a primary waits, then finishes") {
  StoreConfig c = Adaptive();
  c.writes = WritePolicy::kImmediate;  // writes may run during reads: the secondary must still yield
  // The first tier takes no time unless the hook below delays it; one piece takes 100 ms on the
  // second.
  SimRig rig({0, 10 * MBps}, c);
  const std::string held_stem = FileStem("held"), fresh_stem = FileStem("fresh"), next_stem = FileStem("next");
  rig.devices[0]->SetFaultHook([&](const SimOpInfo& op) {
    const bool slow = op.op == SimOp::kRead || (op.op == SimOp::kWrite && op.stem.find(next_stem) != std::string::npos);
    return slow ? SimFault::Delay(100'000'000) : SimFault::None();
  });
  const auto held = Payload(8 * kBlock, 41), fresh = Payload(16 * kBlock, 42), next = Payload(4 * kBlock, 43);
  REQUIRE(PersistAndWait(rig, "held", held).status.ok());
  REQUIRE(Eventually([&] { return rig.engine->Lookup({"held"})[0].tier_mask == 3u; }));
  // Time stands still: the primary is written at once, the secondary's first pieces are in flight.
  rig.clock->Pause();
  REQUIRE(PersistAndWait(rig, "fresh", fresh).tier_mask == 1u);
  rig.clock->WaitUntilQuiescent();
  REQUIRE(WriteStarted(*rig.devices[1], fresh_stem));
  std::pair<int64_t, int64_t> span;
  SECTION("a step reads") {
    std::thread reader([&] { CHECK(ReadBack(rig, "held", held).ok()); });
    rig.clock->WaitUntilQuiescent();  // the step's reads are submitted
    rig.clock->Resume();
    reader.join();
    span = Span(rig.devices, IoKind::kRead, held_stem);
  }
  SECTION("a new chunk waits for its primary") {
    REQUIRE(rig.engine->Persist("next", next.data(), next.size()).ok());
    rig.clock->WaitUntilQuiescent();  // its primary's writes are submitted
    rig.clock->Resume();
    rig.engine->Flush();
    span = Span({rig.devices[0]}, IoKind::kWrite, next_stem);  // its primary
    CHECK(rig.engine->Lookup({"next"})[0].tier_mask != 0u);
  }
  REQUIRE(span.second - span.first >= 150'000'000);  // longer than the secondary's first piece
  CHECK(WritesSubmittedBetween(*rig.devices[1], fresh_stem, span.first, span.second) == 0);
  REQUIRE(Eventually([&] { return rig.engine->Lookup({"fresh"})[0].tier_mask == 3u; }));
  REQUIRE(Eventually([&] { return rig.engine->Stats().staged_bytes == 0; }));
  CHECK(rig.engine->Stats().tiers[1].secondaries_dropped == 0);
  CHECK(ReadBack(rig, "fresh", fresh).ok());
  RequireNoTemporaries(rig);
}

TEST_CASE("replication adaptive: a started secondary is dropped under staging pressure and gives its room back") {
  // Staging for 24 blocks; a primary tier slow enough that staging stays full while the
  // secondary's pieces in flight finish.
  StoreConfig c = Adaptive(24 * (kBlock + 8192));
  c.tiers[1].capacity_bytes = 12 * (kBlock + 8192);  // a room still reserved would refuse the last copy
  SimRig rig({20 * MBps, 10 * MBps}, c);
  const auto big = Payload(8 * kBlock, 51);
  REQUIRE(PersistAndWait(rig, "big", big).tier_mask == 1u);
  const std::string stem = FileStem("big");
  REQUIRE(Eventually([&] { return WriteStarted(*rig.devices[1], stem); }));
  rig.clock->Pause();  // staging fills with new chunks before any of them is written
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 16; ++i) {
    data.push_back(Payload(kBlock, 60 + i));
    if (!rig.engine->TryPersist("n" + std::to_string(i), data.back().data(), kBlock).ok()) {
      data.pop_back();
      break;
    }
  }
  REQUIRE(data.size() >= 8);
  rig.clock->Resume();
  rig.engine->Flush();
  REQUIRE(Eventually([&] { return rig.engine->Stats().staged_bytes == 0; }));
  CHECK(rig.engine->Lookup({"big"})[0].tier_mask == 1u);  // its copy on the second tier was given up
  CHECK(rig.engine->Stats().tiers[1].secondaries_dropped >= 1);
  CHECK(ReadBack(rig, "big", big).ok());
  for (size_t i = 0; i < data.size(); ++i) CHECK((rig.engine->Lookup({"n" + std::to_string(i)})[0].tier_mask & 1u) == 1u);
  RequireNoTemporaries(rig);
  // The dropped copy's room went back: another chunk as large is replicated to the second tier.
  const auto after = Payload(8 * kBlock, 52);
  REQUIRE(PersistAndWait(rig, "after", after).status.ok());
  CHECK(Eventually([&] { return rig.engine->Lookup({"after"})[0].tier_mask == 3u; }));
}

TEST_CASE("replication adaptive: a primary that fails leaves the chunk written to a secondary") {
  SimRig rig({300 * MBps, 100 * MBps}, Adaptive());
  rig.devices[0]->SetFaultHook(FailOn(SimOp::kWrite, EIO));
  const auto data = Payload(2 * kBlock, 31);
  Outcome out = PersistAndWait(rig, "k", data);
  REQUIRE(out.calls == 1);
  CHECK(out.status.ok());
  CHECK(out.tier_mask == 2u);
  CHECK(out.lost_mask == 1u);
  CHECK(rig.engine->Lookup({"k"})[0].tier_mask == 2u);
  rig.devices[0]->SetFaultHook(nullptr);
  CHECK(ReadBack(rig, "k", data).ok());
  RequireNoTemporaries(rig);
}

}  // namespace
}  // namespace kvstream::testing
