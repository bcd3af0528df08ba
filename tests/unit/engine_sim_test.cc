// Router (M4), step pool (M1) and write scheduler (M2, M3) against simulated tiers whose
// bandwidth, latency and faults the test controls. Everything runs on virtual time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

constexpr double MBps = 1e6;

StoreConfig WithRouting(std::string_view routing, uint32_t depth = 2) {
  StoreConfig c = SimConfig(2, depth);
  c.routing = *ParseRouting(routing);
  return c;
}

// The fluid bound for a step of `bytes` over tiers of the given bandwidths.
double Bound(double bytes, double b0, double b1) { return bytes / (b0 + b1); }

void RequireIntact(const SimRig::Batch& b, const std::vector<std::vector<uint8_t>>& data,
                   const std::vector<ChunkResult>& results) {
  for (size_t i = 0; i < data.size(); ++i) {
    INFO("chunk " << i << ": " << results[i].status.ToString());
    REQUIRE(results[i].status.ok());
    REQUIRE(std::memcmp(b.buffers[i].data(), data[i].data(), data[i].size()) == 0);
  }
}

TEST_CASE("two tiers at 3:1 finish a step together and each reads its share within one block") {
  SimRig rig({300 * MBps, 100 * MBps}, WithRouting("completion", /*depth=*/1));
  auto data = rig.Populate("k", 32, 8 * kBlock);  // 256 blocks
  auto batch = SimRig::MakeBatch("k", 32, 8 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  REQUIRE(rec.tiers.size() == 2);
  CHECK(std::abs(static_cast<double>(rec.tiers[0].blocks) - 192) <= 1);
  CHECK(std::abs(static_cast<double>(rec.tiers[1].blocks) - 64) <= 1);
  CHECK(rec.tiers[0].blocks + rec.tiers[1].blocks == 256);
  // Both tiers busy until the end: their busy times differ by at most one slow block.
  const double slow_block = kBlock / (100 * MBps);
  CHECK(std::abs(rec.tiers[0].busy_seconds - rec.tiers[1].busy_seconds) <= slow_block + 1e-9);
  const double bound = Bound(256.0 * kBlock, 300 * MBps, 100 * MBps);
  CHECK(rec.wall_seconds <= bound + slow_block + 1e-9);
  CHECK(rec.gap < 0.02);
  // Tier 0 reads from the front of the step, tier 1 from the back.
  auto ops0 = rig.devices[0]->ops();
  auto ops1 = rig.devices[1]->ops();
  REQUIRE(!ops0.empty());
  REQUIRE(!ops1.empty());
  CHECK(ops0.front().stem == FileStem("k0"));
  CHECK(ops1.front().stem == FileStem("k31"));
}

TEST_CASE("with depth 2 the shares stay within the blocks in flight") {
  SimRig rig({300 * MBps, 100 * MBps}, WithRouting("completion", 2));
  auto data = rig.Populate("k", 32, 8 * kBlock);
  auto batch = SimRig::MakeBatch("k", 32, 8 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  CHECK(std::abs(static_cast<double>(rec.tiers[0].blocks) - 192) <= 2);
  CHECK(rec.gap < 0.03);
}

TEST_CASE("a static 75:25 split meets the bound at 3:1 and loses 12.5% when tier 0 slows to 2") {
  const double bytes = 256.0 * kBlock;
  SECTION("3:1") {
    SimRig rig({300 * MBps, 100 * MBps}, WithRouting("static:0.75"));
    rig.Populate("k", 32, 8 * kBlock);
    auto batch = SimRig::MakeBatch("k", 32, 8 * kBlock);
    StepRecord rec = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
    CHECK(rec.tiers[0].blocks == 192);
    CHECK(rec.tiers[1].blocks == 64);
    CHECK(rec.wall_seconds / Bound(bytes, 300 * MBps, 100 * MBps) - 1 < 0.005);
  }
  SECTION("2:1, static against completion") {
    SimRig stat({200 * MBps, 100 * MBps}, WithRouting("static:0.75"));
    stat.Populate("k", 32, 8 * kBlock);
    auto batch = SimRig::MakeBatch("k", 32, 8 * kBlock);
    const double static_time = stat.engine->Retrieve(batch.reads, nullptr, nullptr).wall_seconds;
    const double bound = Bound(bytes, 200 * MBps, 100 * MBps);
    // Penalty max(g/phi, (1-g)/(1-phi)) - 1 with phi = 2/3: 0.75 / (2/3) - 1 = 12.5%.
    CHECK(static_time / bound - 1 == Approx(0.125).margin(0.005));

    SimRig comp({200 * MBps, 100 * MBps}, WithRouting("completion"));
    comp.Populate("k", 32, 8 * kBlock);
    StepRecord rec = comp.engine->Retrieve(batch.reads, nullptr, nullptr);
    CHECK(rec.wall_seconds / bound - 1 < 0.02);
    CHECK(rec.gap < 0.02);
    CHECK(static_time > rec.wall_seconds * 1.09);
  }
}

TEST_CASE("fastest reads one tier and serial reads chunk after chunk") {
  SECTION("fastest") {
    SimRig rig({300 * MBps, 100 * MBps}, WithRouting("fastest"));
    rig.Populate("k", 8, 4 * kBlock);
    auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
    StepRecord rec = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
    CHECK(rec.tiers[0].blocks == 32);
    CHECK(rec.tiers[1].blocks == 0);
    CHECK(rec.wall_seconds == Approx(32.0 * kBlock / (300 * MBps)).epsilon(0.01));
  }
  SECTION("serial never has two chunks in flight") {
    StoreConfig c = WithRouting("fastest", 4);
    c.batching = BatchingPolicy::kSerial;
    SimRig rig({300 * MBps, 100 * MBps}, c, /*latency_ns=*/1'000'000);
    rig.Populate("k", 8, 4 * kBlock);
    auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
    std::vector<ChunkResult> results;
    StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
    CHECK(rec.hits == 8);
    auto ops = rig.devices[0]->ops();
    REQUIRE(ops.size() == 32);
    // Each chunk's reads are submitted only after the previous chunk's last read completed.
    for (size_t i = 4; i < ops.size(); i += 4) {
      int64_t prev_done = 0;
      for (size_t k = i - 4; k < i; ++k) prev_done = std::max(prev_done, ops[k].done_ns);
      CHECK(ops[i].submit_ns >= prev_done);
      CHECK(ops[i].stem != ops[i - 1].stem);
    }
    // Step batching of the same work overlaps chunks and is faster by the latencies saved.
    StoreConfig s = WithRouting("fastest", 4);
    SimRig step({300 * MBps, 100 * MBps}, s, 1'000'000);
    step.Populate("k", 8, 4 * kBlock);
    StepRecord r2 = step.engine->Retrieve(batch.reads, nullptr, nullptr);
    CHECK(r2.wall_seconds < rec.wall_seconds - 7 * 1e-3 * 0.9);
  }
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

enum class Fault { kEio, kCorrupt };

TEST_CASE("a tier failing mid-step still yields a complete and correct step from the replica") {
  const Fault fault = GENERATE(Fault::kEio, Fault::kCorrupt);
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 16, 4 * kBlock);
  // Tier 1 fails every read from its 5th on.
  rig.devices[1]->SetFaultHook([&](const IoOp& op, const std::string&, uint64_t index) {
    if (op.kind != IoKind::kRead || index < 4) return SimFault::kNone;
    return fault == Fault::kEio ? SimFault::kError : SimFault::kCorrupt;
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

TEST_CASE("a chunk fails only when no replica remains") {
  SimRig rig({300 * MBps, 100 * MBps});
  auto data = rig.Populate("k", 4, 2 * kBlock);
  for (SimDevice* d : rig.devices) {
    d->SetFaultHook([](const IoOp& op, const std::string& stem, uint64_t) {
      return op.kind == IoKind::kRead && stem == FileStem("k2") ? SimFault::kCorrupt : SimFault::kNone;
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
  rig.devices[0]->SetFaultHook([](const IoOp& op, const std::string&, uint64_t) {
    return op.kind == IoKind::kRead ? SimFault::kError : SimFault::kNone;
  });
  auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
}

TEST_CASE("concurrent retrievals share one pool and keep both tiers busy") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("a", 8, 4 * kBlock);
  rig.Populate("b", 8, 4 * kBlock);
  auto a = SimRig::MakeBatch("a", 8, 4 * kBlock);
  auto b = SimRig::MakeBatch("b", 8, 4 * kBlock);
  rig.clock->Pause();
  std::atomic<int> done{0};
  StepRecord ra, rb;
  rig.engine->RetrieveAsync(a.reads, nullptr, [&](StepRecord r) { ra = r; ++done; });
  rig.engine->RetrieveAsync(b.reads, nullptr, [&](StepRecord r) { rb = r; ++done; });
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  while (done < 2) std::this_thread::yield();
  CHECK(ra.hits == 8);
  CHECK(rb.hits == 8);
  const double total = 64.0 * kBlock / (400 * MBps);
  // The later batch ends when all 64 blocks are read at the aggregate bandwidth, plus at most the
  // blocks in flight on the slow tier when the pool ran dry (depth 2).
  CHECK(std::max(ra.wall_seconds, rb.wall_seconds) <= total + 2 * kBlock / (100 * MBps));
  CHECK(std::min(ra.wall_seconds, rb.wall_seconds) < total * 0.75);  // FIFO: the first finishes early
}

TEST_CASE("deferred writes wait for the step but immediate writes and staging pressure do not") {
  const WritePolicy policy = GENERATE(WritePolicy::kDeferred, WritePolicy::kImmediate);
  StoreConfig c = WithRouting("completion");
  c.writes = policy;
  c.staging_limit_bytes = 64ull << 20;
  SimRig rig({300 * MBps, 100 * MBps}, c);
  rig.Populate("k", 16, 4 * kBlock);
  auto batch = SimRig::MakeBatch("k", 16, 4 * kBlock);

  rig.clock->Pause();
  std::atomic<bool> finished{false};
  StepRecord rec;
  rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord r) { rec = r; finished = true; });
  rig.clock->WaitUntilQuiescent();
  auto fresh = Payload(2 * kBlock, 99);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(rig.engine->Persist("new" + std::to_string(i), fresh.data(), fresh.size(), nullptr, true).ok());
  }
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  rig.engine->Flush();
  while (!finished) std::this_thread::yield();

  int64_t last_read = 0, first_write = INT64_MAX;
  for (SimDevice* d : rig.devices) {
    for (const SimOpRecord& op : d->ops()) {
      if (op.kind == IoKind::kRead) last_read = std::max(last_read, op.done_ns);
      if (op.kind == IoKind::kWrite) first_write = std::min(first_write, op.submit_ns);
    }
  }
  REQUIRE(first_write != INT64_MAX);
  if (policy == WritePolicy::kDeferred) {
    CHECK(first_write >= last_read);
    CHECK(rig.engine->Stats().writes_under_pressure == 0);
  } else {
    CHECK(first_write < last_read);
  }
  CHECK(rig.engine->Lookup({"new3"})[0].tier_mask == 3u);

  SECTION("above the high-water mark writes run during reads") {
    REQUIRE(rig.engine->Evict({"", "", 0, true}).ok());
    rig.Populate("k", 16, 4 * kBlock);
    rig.clock->Pause();
    finished = false;
    rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord r) { finished = true; });
    rig.clock->WaitUntilQuiescent();
    auto big = Payload(16 * kBlock, 7);
    for (int i = 0; i < 3; ++i) {  // 3 x 16 MiB of a 64 MiB limit: past the 75% mark
      REQUIRE(rig.engine->Persist("big" + std::to_string(i), big.data(), big.size(), nullptr, false).ok());
    }
    // Time is paused, so nothing staged can drain: a fourth chunk does not fit (backpressure).
    CHECK(absl::IsResourceExhausted(rig.engine->Persist("big3", big.data(), big.size(), nullptr, false)));
    rig.clock->WaitUntilQuiescent();
    rig.clock->Resume();
    rig.engine->Flush();
    while (!finished) std::this_thread::yield();
    CHECK(rig.engine->Stats().writes_under_pressure > 0);
  }
}

TEST_CASE("policies switched at run time apply to the next step and never to a pending one") {
  SimRig rig({300 * MBps, 100 * MBps});
  rig.Populate("k", 8, 4 * kBlock);
  auto batch = SimRig::MakeBatch("k", 8, 4 * kBlock);
  StepRecord first = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(first.routing == "completion");
  CHECK(first.tiers[1].blocks > 0);

  Policies fastest = rig.engine->policies();
  fastest.routing = *ParseRouting("fastest");
  fastest.writes = WritePolicy::kImmediate;
  rig.engine->SetPolicies(fastest);  // idle: applies at once
  CHECK(ToString(rig.engine->policies().routing) == "fastest");
  CHECK(rig.engine->Stats().policies.writes == WritePolicy::kImmediate);
  StepRecord second = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(second.routing == "fastest");
  CHECK(second.tiers[1].blocks == 0);

  // Switching back while a step is pending: that step finishes under the old policy.
  rig.clock->Pause();
  std::atomic<bool> done{false};
  StepRecord pending;
  rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord r) {
    pending = r;
    done = true;
  });
  rig.clock->WaitUntilQuiescent();  // placed and reading
  Policies completion = fastest;
  completion.routing = *ParseRouting("completion");
  rig.engine->SetPolicies(completion);
  CHECK(ToString(rig.engine->policies().routing) == "fastest");
  rig.clock->Resume();
  while (!done) std::this_thread::yield();
  CHECK(pending.routing == "fastest");
  CHECK(pending.tiers[1].blocks == 0);
  CHECK(ToString(rig.engine->policies().routing) == "completion");
  StepRecord last = rig.engine->Retrieve(batch.reads, nullptr, nullptr);
  CHECK(last.routing == "completion");
  CHECK(last.tiers[1].blocks > 0);
}

}  // namespace
}  // namespace kvstream::testing

namespace kvstream::testing {
namespace {

TEST_CASE("calls after shutdown fail cleanly instead of hanging") {
  SimRig rig({300 * MBps});
  rig.Populate("k", 1, kBlock);
  rig.engine->Shutdown();
  auto batch = SimRig::MakeBatch("k", 1, kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results, nullptr);
  CHECK(absl::IsUnavailable(results[0].status));
  CHECK(rec.failed == 1);
  CHECK(absl::IsUnavailable(rig.engine->Persist("x", batch.buffers[0].data(), 10, nullptr, true)));
  auto ev = rig.engine->Evict({"k0", "", 0, false});
  REQUIRE(ev.ok());
  CHECK(ev->replicas == 1);
}

}  // namespace
}  // namespace kvstream::testing

namespace kvstream::testing {
namespace {

// A file as an older configuration would have written it: one segment of `segment` bytes.
std::vector<uint8_t> FileImage(const std::string& key, const std::vector<uint8_t>& payload, uint32_t segment) {
  ChunkMeta meta = DescribeChunk(key, payload.data(), payload.size(), segment, 1);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, payload.data(), image.data());
  return image;
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
  rig.devices[0]->SetFaultHook([](const IoOp&, const std::string& stem, uint64_t) {
    return stem == FileStem("big") ? SimFault::kError : SimFault::kNone;
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
  rig.devices[1]->SetFaultHook([](const IoOp& op, const std::string&, uint64_t) {
    return op.kind == IoKind::kRead ? SimFault::kTransient : SimFault::kNone;
  });
  auto batch = SimRig::MakeBatch("k", 8, 2 * kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results, nullptr);
  RequireIntact(batch, data, results);
  CHECK(rig.engine->Stats().tiers[1].read_errors > 0);
  for (const LookupResult& l : rig.engine->Lookup({"k0", "k7"})) CHECK(l.tier_mask == 3u);
}

}  // namespace
}  // namespace kvstream::testing
