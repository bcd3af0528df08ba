// The step reader in virtual time: per-chunk results and callbacks, bounce buffers, failover on
// read errors and checksum failures, and which replicas a failure drops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "shared_memory.h"
#include "sim_rig.h"

namespace kvstream::testing {
namespace {

enum class Fault { kEio, kCorrupt };

// A file as an older configuration would have written it: one segment of `segment` bytes.
std::vector<uint8_t> FileImage(const std::string& key, const std::vector<uint8_t>& payload, uint32_t segment) {
  ChunkMeta meta = DescribeChunk(key, payload.data(), payload.size(), segment, 1);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, payload.data(), image.data());
  return image;
}

TEST_CASE("misses and bad keys and small destinations are reported per chunk") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 2, 3 * kBlock + 100);  // unaligned tail: read via bounce
  auto batch = SimRig::MakeBatch("k", 2, 3 * kBlock + 100);
  std::vector<uint8_t> small(10);
  batch.reads.push_back({"absent", small.data(), small.size()});
  batch.reads.push_back({"", small.data(), small.size()});
  batch.reads.push_back({"k0", small.data(), small.size()});
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  CHECK(absl::IsNotFound(results[2].status));
  CHECK(absl::IsInvalidArgument(results[3].status));
  CHECK(absl::IsOutOfRange(results[4].status));
  CHECK(rec.hits == 2);
  CHECK(rec.misses == 1);
  CHECK(rec.failed == 2);
  CHECK(rig.engine->Stats().tiers[0].bounce_reads + rig.engine->Stats().tiers[1].bounce_reads >= 1);
}

TEST_CASE("per-chunk callbacks fire as chunks complete and before the step ends") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", 16, 4 * kBlock);
  auto batch = SimRig::MakeBatch("k", 16, 4 * kBlock);
  std::vector<int64_t> at;
  const int64_t start = rig.clock->NowNs();
  StepRecord rec = rig.engine->Retrieve(batch.reads, nullptr, [&](const ChunkResult& r) {
    at.push_back(rig.clock->NowNs());
  });
  REQUIRE(at.size() == 16);
  std::sort(at.begin(), at.end());
  // Chunks at both ends of the step complete early; the last one completes with the step.
  CHECK(at[1] - start < static_cast<int64_t>(rec.wall_seconds * 1e9 / 4));
  CHECK(at.back() - start == static_cast<int64_t>(std::llround(rec.wall_seconds * 1e9)));
}

TEST_CASE("a tier failing mid-step still yields a complete and correct step from the replica") {
  const Fault fault = GENERATE(Fault::kEio, Fault::kCorrupt);
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 16, 4 * kBlock);
  // Tier 1 fails every read from its 5th on.
  rig.devices[1]->SetFaultHook([&](const SimOpInfo& op) {
    if (op.op != SimOp::kRead || op.index < 4) return SimFault::None();
    return fault == Fault::kEio ? SimFault::Error(EIO) : SimFault::Corrupt();
  });
  auto batch = SimRig::MakeBatch("k", 16, 4 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  CHECK(rec.hits == 16);
  StoreStats stats = rig.engine->Stats();
  if (fault == Fault::kEio) {
    CHECK(stats.tiers[1].read_errors > 0);
  } else {
    CHECK(stats.tiers[1].checksum_failures > 0);
  }
  // The bad copies were dropped from the index and from the tier.
  auto lookup = rig.engine->Lookup({"k8", "k15"});
  CHECK(lookup[1].tier_mask == 1u);
  CHECK(rig.devices[1]->files().size() < 16);
}

TEST_CASE("a block that hashes wrong in its destination is read again and judged in the store's memory") {
  // A destination is the client's memory (a session's arena, a region sealed or not), which its
  // owner may change under a read (written into, truncated and grown back), so a block that hashes
  // wrong where it landed there says nothing of its tier: it is read again through a bounce
  // buffer, and only a mismatch there counts against the tier and drops its replica. One tier, so
  // no other holder can hide a wrong verdict.
  const bool tier_bad = GENERATE(false, true);
  const bool through_fd = GENERATE(false, true);  // an unsealed region (dst_fd), or mapped memory
  INFO((tier_bad ? "the tier returns bad bytes" : "the bytes were wrong only where they first landed"));
  INFO((through_fd ? "an unsealed region, reached through its descriptor" : "memory the store maps (an arena)"));
  StoreConfig config;
  config.tiers = SimConfig(1).tiers;
  SimRig rig({300 * MBps}, config);
  const size_t size = 3 * kBlock + 100;  // an unaligned tail: bounced, then copied in under the guard
  auto data = rig.Populate("k", 4, size);
  const size_t stride = 4 * kBlock;
  MappedSharedMemory memory(4 * stride);
  uint8_t* base = memory.data();
  std::vector<ChunkRead> reads;
  for (int i = 0; i < 4; ++i) {
    reads.push_back({"k" + std::to_string(i), base + i * stride, size, through_fd ? memory.fd() : -1,
                     through_fd ? i * stride : 0});
  }
  // Whole blocks land straight in client memory: the first one read of each chunk comes back bad
  // (or every one does).
  std::set<std::string> read_once;
  rig.devices[0]->SetFaultHook([&](const SimOpInfo& op) {
    if (op.op != SimOp::kRead || op.length != kBlock) return SimFault::None();
    const bool first = read_once.emplace(op.stem).second;
    return first || tier_bad ? SimFault::Corrupt() : SimFault::None();
  });
  const uint64_t bounced_before = rig.engine->Stats().tiers[0].bounce_reads;
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(reads, &results, nullptr);
  const TierStats tier = rig.engine->Stats().tiers[0];
  CHECK(tier.bounce_reads - bounced_before >= 4);  // each chunk's first bad block read again
  if (!tier_bad) {
    CHECK(rec.hits == 4);
    for (int i = 0; i < 4; ++i) {
      INFO("chunk " << i << ": " << results[i].status.ToString());
      REQUIRE(results[i].status.ok());
      REQUIRE(std::memcmp(base + i * stride, data[i].data(), size) == 0);
    }
    CHECK(tier.checksum_failures == 0);
    CHECK(tier.dropped_replicas == 0);
    for (const LookupEntry& l : rig.engine->Lookup({"k0", "k3"})) CHECK(l.tier_mask == 1u);
  } else {
    for (const ChunkResult& r : results) CHECK(absl::IsDataLoss(r.status));
    CHECK(tier.checksum_failures >= 4);
    CHECK(tier.dropped_replicas == 4);  // judged in the store's memory: the bad copies are gone
    CHECK(rig.engine->Lookup({"k0"})[0].present == false);
  }
}

TEST_CASE("a chunk fails only when no replica remains") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 4, 2 * kBlock);
  for (SimDevice* d : rig.devices) {
    d->SetFaultHook([](const SimOpInfo& op) {
      return op.op == SimOp::kRead && op.stem == FileStem("k2") ? SimFault::Corrupt() : SimFault::None();
    });
  }
  auto batch = SimRig::MakeBatch("k", 4, 2 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  CHECK(results[0].status.ok());
  CHECK(results[1].status.ok());
  CHECK(absl::IsDataLoss(results[2].status));
  CHECK(results[3].status.ok());
  CHECK(rec.failed == 1);
  CHECK(rig.engine->Lookup({"k2"})[0].present == false);
}

TEST_CASE("static and fastest fail over when their pinned tier fails") {
  const std::string routing = GENERATE(std::string("static:0.5"), std::string("fastest"));
  SimRig rig({300 * MBps, 100 * MBps}, WithRouting(routing));
  auto data = rig.Populate("k", 8, 4 * kBlock);
  rig.devices[0]->SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kRead ? SimFault::Error(EIO) : SimFault::None();
  });
  auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
}

TEST_CASE("a failed oversized bounce read does not leak into the next read of its slot") {
  // One segment of about 4 MiB, larger than the 1 MiB bounce buffer; its padded read does not fit
  // the exact-size destination, so it goes through an oversized bounce buffer.
  const auto big = Payload(4 * kBlock - 100, 1);
  const auto small = Payload(100, 2);         // read through the regular bounce buffer
  StoreConfig c;
  c.tiers.push_back({"t0", "/sim/t0", 1ull << 30, /*queue_depth=*/1});
  SimRig rig({300 * MBps}, c, 0, [&](std::vector<SimDevice*>& d) {
    d[0]->files()[FileStem("big")] = FileImage("big", big, 4 * kBlock);
    d[0]->files()[FileStem("small")] = FileImage("small", small, kBlock);
  });
  rig.devices[0]->SetFaultHook([](const SimOpInfo& op) {
    return op.stem == FileStem("big") ? SimFault::Error(EIO) : SimFault::None();
  });
  std::vector<uint8_t> out_big(big.size() + 1), out_small(small.size());
  std::vector<ChunkResult> results;
  rig.engine->Retrieve({{"big", out_big.data(), big.size()}}, &results, nullptr);
  CHECK(absl::IsDataLoss(results[0].status));
  rig.engine->Retrieve({{"small", out_small.data(), out_small.size()}}, &results, nullptr);
  REQUIRE(results[0].status.ok());
  CHECK((out_small == small));
  CHECK(rig.engine->Lookup({"small"})[0].present);
}

TEST_CASE("a transient read error fails over without dropping the replica") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 8, 2 * kBlock);
  rig.devices[1]->SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kRead ? SimFault::Error(ECANCELED) : SimFault::None();
  });
  auto batch = SimRig::MakeBatch("k", 8, 2 * kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  CHECK(rig.engine->Stats().tiers[1].read_errors > 0);
  for (const LookupEntry& l : rig.engine->Lookup({"k0", "k7"})) CHECK(l.tier_mask == 3u);
}

TEST_CASE("short reads and EAGAIN are continued by the device and the bytes are intact") {
  const SimFault fault = GENERATE(SimFault::Short(), SimFault::Again());
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 6, 3 * kBlock + 100);
  for (SimDevice* d : rig.devices) {
    d->SetFaultHook([fault](const SimOpInfo& op) { return op.op == SimOp::kRead ? fault : SimFault::None(); });
  }
  auto batch = SimRig::MakeBatch("k", 6, 3 * kBlock + 100);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  const StoreStats stats = rig.engine->Stats();
  CHECK(stats.tiers[0].resubmits + stats.tiers[1].resubmits > 0);
  CHECK(stats.tiers[0].read_errors + stats.tiers[1].read_errors == 0);
}

TEST_CASE("completions that arrive out of order still assemble every chunk") {
  SimRig rig({300 * MBps, 100 * MBps}, WithRouting("completion", 4));
  auto data = rig.Populate("k", 8, 4 * kBlock);
  for (SimDevice* d : rig.devices) {  // every other read is late: later reads overtake it
    d->SetFaultHook([](const SimOpInfo& op) {
      return op.op == SimOp::kRead && op.index % 2 == 0 ? SimFault::Delay(20'000'000) : SimFault::None();
    });
  }
  auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rec.tiers[0].blocks + rec.tiers[1].blocks == 32);
}

TEST_CASE("a replica whose file vanished is dropped and the step is served from the other") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 4, 2 * kBlock);
  rig.devices[0]->files().erase(FileStem("k1"));
  auto batch = SimRig::MakeBatch("k", 4, 2 * kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rig.engine->Lookup({"k1"})[0].tier_mask == 2u);
}

// One step reading "k0" (4 blocks, populated) into `out` while the key is rewritten as `newer`
// at the same virtual time (immediate writes: the rewrite lands while the reads are in flight).
struct ReadDuringRewrite {
  int64_t start_ns = 0;  // virtual time the step started
  ChunkResult result;
  StepRecord record;
};
ReadDuringRewrite ReadWhileRewriting(SimRig& rig, std::vector<uint8_t>& out, const std::vector<uint8_t>& newer) {
  ReadDuringRewrite r;
  std::atomic<bool> done{false};
  rig.clock->Pause();  // the step and the rewrite start at the same virtual time
  r.start_ns = rig.clock->NowNs();
  rig.engine->RetrieveAsync({{"k0", out.data(), out.size()}}, [&](const ChunkResult& c) { r.result = c; },
                            [&](StepRecord rec) {
                              r.record = rec;
                              done = true;
                            });
  // Placed against the old version, its reads issued, before the rewrite is staged (a step placed
  // after it would read the new version from staging).
  rig.clock->WaitUntilQuiescent();
  REQUIRE(rig.engine->Persist("k0", newer.data(), newer.size()).ok());
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  rig.engine->Flush();
  while (!done) std::this_thread::yield();
  return r;
}

StoreConfig RewriteConfig() {
  StoreConfig c = WithRouting("completion");
  c.writes = WritePolicy::kImmediate;
  return c;
}

SimFaultHook DelayReads(int64_t ns) {
  return [ns](const SimOpInfo& op) { return op.op == SimOp::kRead ? SimFault::Delay(ns) : SimFault::None(); };
}

TEST_CASE("a key rewritten while a step reads it is read again as the new version and no tier is blamed") {
  SimRig rig({300 * MBps, 100 * MBps}, RewriteConfig());
  rig.Populate("k", 1, 4 * kBlock);
  for (SimDevice* d : rig.devices) d->SetFaultHook(DelayReads(50'000'000));  // reads land after the rewrite's commit
  std::vector<uint8_t> out(8 * kBlock);
  const auto newer = Payload(6 * kBlock + 10, 77);
  const ReadDuringRewrite r = ReadWhileRewriting(rig, out, newer);
  REQUIRE(r.result.status.ok());
  CHECK(r.result.size == newer.size());
  CHECK(std::memcmp(out.data(), newer.data(), newer.size()) == 0);
  const StoreStats stats = rig.engine->Stats();
  for (const TierStats& t : stats.tiers) {
    CHECK(t.checksum_failures == 0);
    CHECK(t.read_errors == 0);
  }
  CHECK(rig.engine->Lookup({"k0"})[0].tier_mask == 3u);
}

TEST_CASE("a rewritten key's old reads straight into memory not taken back land before its new version and the step's end") {
  // Plain heap memory cannot be taken back: the old version's reads still in flight when the key
  // is placed again must land before the new version is read into the same bytes, and before
  // on_done (after which the caller may reuse the memory). (The simulated device fails a read
  // whose file was replaced instead of landing old bytes, so what is checked is the order.)
  SimRig rig({300 * MBps, 100 * MBps}, RewriteConfig());
  rig.Populate("k", 1, 4 * kBlock);
  rig.devices[0]->SetFaultHook(DelayReads(50'000'000));
  rig.devices[1]->SetFaultHook(DelayReads(400'000'000));
  std::vector<uint8_t> out(8 * kBlock);
  const auto newer = Payload(4 * kBlock, 78);
  const ReadDuringRewrite r = ReadWhileRewriting(rig, out, newer);
  const int64_t start_ns = r.start_ns;
  REQUIRE(r.result.status.ok());
  CHECK(std::memcmp(out.data(), newer.data(), newer.size()) == 0);
  int64_t last_read_ns = 0;  // when the last read of either tier landed
  for (SimDevice* d : rig.devices) {
    for (const SimOpRecord& op : d->ops()) {
      if (op.kind == IoKind::kRead) last_read_ns = std::max(last_read_ns, op.done_ns);
    }
  }
  CHECK(last_read_ns > start_ns + 400'000'000);  // the slow tier's old reads were in flight
  CHECK(start_ns + static_cast<int64_t>(r.record.wall_seconds * 1e9) >= last_read_ns);  // the step ended after them
}

}  // namespace
}  // namespace kvstream::testing
