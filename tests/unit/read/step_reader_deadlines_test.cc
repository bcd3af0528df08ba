// No step waits on one tier without bound: a read past its tier's deadline marks the tier
// stalled and its block is read from another holder; an idle fast tier takes over a slow tier's
// straggler at the end of a step; a hedged read lands where nobody sees it (memory taken back from
// it); a late read nobody else can take over fails its chunk after reads.give_up; reads straight
// into memory that cannot be taken back are waited for; writes do not wait on
// a stalled tier's reads. Simulated tiers on virtual time, with hangs injected.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

// Destination memory backed by a memfd, registered with the store so it can take pages back.
struct Arena {
  int fd = -1;
  uint8_t* base = nullptr;
  size_t size = 0;
  Arena(Engine& engine, size_t bytes) : size(bytes) {
    fd = memfd_create("kvstream-test-arena", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
    base = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(base != MAP_FAILED);
    REQUIRE(engine.RegisterMemory(base, size, fd, 0).ok());
    // Taking pages back from a late read needs the region's fixed buffers in place.
    while (!engine.MemoryRegistered(base)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Arena() {
    munmap(base, size);
    close(fd);
  }
  std::vector<ChunkRead> Reads(const std::string& prefix, int count, size_t chunk) const {
    std::vector<ChunkRead> reads;
    for (int i = 0; i < count; ++i) reads.push_back({prefix + std::to_string(i), base + i * chunk, chunk});
    return reads;
  }
  bool Holds(const std::vector<std::vector<uint8_t>>& data, size_t chunk) const {
    for (size_t i = 0; i < data.size(); ++i) {
      if (std::memcmp(base + i * chunk, data[i].data(), data[i].size()) != 0) return false;
    }
    return true;
  }
  // Clears the arena and reads chunks prefix0.. (as many as `data`) in one step: every one must
  // be a hit and land intact.
  StepRecord ReadStep(Engine& engine, const std::string& prefix, const std::vector<std::vector<uint8_t>>& data,
                      size_t chunk) {
    std::memset(base, 0, size);
    std::vector<ChunkResult> results;
    StepRecord rec = engine.Retrieve(Reads(prefix, static_cast<int>(data.size()), chunk), &results);
    REQUIRE(rec.hits == data.size());
    CHECK(Holds(data, chunk));
    return rec;
  }
};

// A step in flight: its chunks' results, its record once it ends, and whether it has.
struct PendingStep {
  std::atomic<bool> done{false};
  std::vector<ChunkResult> results;
  StepRecord rec;
  PendingStep(Engine& engine, const std::vector<ChunkRead>& reads) : results(reads.size()) {
    engine.RetrieveAsync(reads, [this](const ChunkResult& r) { results[r.index] = r; },
                         [this](StepRecord r) {
                           rec = r;
                           done = true;
                         });
  }
  // Polls for the end of the step for up to `ms` of real time; whether it ended.
  bool EndsWithin(int ms) {
    for (int i = 0; i < ms / 5 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done;
  }
  void Wait() {
    while (!done) std::this_thread::yield();
  }
};

SimFaultHook HangReadsFrom(uint64_t first_index) {
  return [first_index](const SimOpInfo& op) {
    return op.op == SimOp::kRead && op.index >= first_index ? SimFault::Hang() : SimFault::None();
  };
}

TEST_CASE("a tier that hangs mid-step is stalled, its blocks come from the other tier, the step completes") {
  SimRig rig({300 * MBps, 150 * MBps});
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 16, kChunk);
  Arena arena(*rig.engine, 16 * kChunk);
  rig.devices[1]->SetFaultHook(HangReadsFrom(2));  // t1 answers twice, then hangs
  std::atomic<bool> done{false};
  StepRecord rec;
  rig.engine->RetrieveAsync(arena.Reads("k", 16, kChunk), nullptr, [&](StepRecord r) {
    rec = r;
    done = true;
  });
  for (int i = 0; i < 2000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(done);  // without hedging the step would wait for t1 (released below, so the test ends)
  if (!done) {
    rig.devices[1]->ReleaseHung();
    while (!done) std::this_thread::yield();
  }
  CHECK(rec.hits == 16);
  CHECK(arena.Holds(data, kChunk));
  TierStats t1 = rig.engine->Stats().tiers[1];
  CHECK(t1.stalled);
  CHECK(t1.stalls == 1);
  CHECK(t1.late_reads >= 1);
  CHECK(t1.hedged_reads >= 1);
  CHECK(t1.hedged_bytes == t1.hedged_reads * uint64_t{kBlock});  // each a whole block of payload
  // The step took the deadline, not the hang: within a few cap lengths of virtual time.
  CHECK(rec.wall_seconds < 2.5);

  // The tier answers again: it is no longer stalled, and the late reads changed nothing.
  rig.devices[1]->SetFaultHook(nullptr);
  rig.devices[1]->ReleaseHung();
  for (int i = 0; i < 200 && rig.engine->Stats().tiers[1].stalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_FALSE(rig.engine->Stats().tiers[1].stalled);
  CHECK(arena.Holds(data, kChunk));
  // Both tiers serve the next step.
  std::memset(arena.base, 0, arena.size);
  std::vector<ChunkResult> results;
  rec = rig.engine->Retrieve(arena.Reads("k", 16, kChunk), &results);
  CHECK(rec.hits == 16);
  CHECK(arena.Holds(data, kChunk));
  CHECK(rec.tiers[1].blocks > 0);
}

TEST_CASE("a late read no other tier holds fails its chunk after reads.give_up, and lands unseen") {
  SimRig rig({300 * MBps});
  constexpr size_t kChunk = 2 * kBlock;
  auto data = rig.Populate("k", 4, kChunk);
  Arena arena(*rig.engine, 4 * kChunk);
  rig.devices[0]->SetFaultHook(HangReadsFrom(2));  // chunk 0 is read, then the tier hangs
  PendingStep step(*rig.engine, arena.Reads("k", 4, kChunk));
  CHECK(step.EndsWithin(10000));  // without give_up it would wait for the tier (released below, so the test ends)
  // While the tier still hangs, a new step's chunks on it fail at once instead of waiting again.
  PendingStep again(*rig.engine, arena.Reads("k", 1, kChunk));
  CHECK(again.EndsWithin(1000));
  rig.devices[0]->SetFaultHook(nullptr);
  rig.devices[0]->ReleaseHung();
  step.Wait();
  again.Wait();
  CHECK(absl::IsDataLoss(again.results[0].status));
  const std::vector<ChunkResult>& results = step.results;
  const StepRecord& rec = step.rec;
  // The hung reads' chunks fail, given up; so do the chunks queued behind them on the tier.
  int failed = 0;
  for (int i = 0; i < 4; ++i) {
    if (results[i].status.ok()) {
      CHECK(std::memcmp(arena.base + i * kChunk, data[i].data(), kChunk) == 0);
      continue;
    }
    ++failed;
    CHECK(absl::IsDataLoss(results[i].status));
    CHECK_THAT(std::string(results[i].status.message()), Catch::Contains("has not answered a read in 10 s"));
  }
  CHECK(failed >= 2);
  CHECK(rec.hits + rec.failed == 4);
  CHECK(rec.failed == static_cast<uint32_t>(failed));
  // Given up after 10 s of virtual time, not waited for.
  CHECK(rec.wall_seconds >= 10);
  CHECK(rec.wall_seconds < 13);
  CHECK(rig.engine->Stats().tiers[0].given_up_reads >= 1);
  // The abandoned reads land (released above) in pages nobody maps any more: the failed chunks'
  // memory never shows their bytes.
  for (int i = 0; i < 200 && rig.engine->Stats().tiers[0].stalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_FALSE(rig.engine->Stats().tiers[0].stalled);
  for (int i = 0; i < 4; ++i) {
    if (!results[i].status.ok()) CHECK(std::memcmp(arena.base + i * kChunk, data[i].data(), kChunk) != 0);
  }
  // The tier answers again: the next step reads all four.
  arena.ReadStep(*rig.engine, "k", data, kChunk);
}

TEST_CASE("a tier stalled past reads.give_up holds no chunk, even when its late reads were all taken over") {
  SimRig rig({300 * MBps, 150 * MBps});
  constexpr size_t kChunk = 2 * kBlock;
  auto data = rig.Populate("k", 4, kChunk);
  auto solo = rig.Populate("solo", 1, kChunk);
  REQUIRE(rig.engine->Evict({.key = "solo0", .tier = "t0"}).ok());  // on t1 alone
  Arena arena(*rig.engine, 4 * kChunk);
  rig.devices[1]->SetFaultHook(HangReadsFrom(0));
  // Every chunk is on t0 too: t1's reads hang, are taken over, and the step completes.
  arena.ReadStep(*rig.engine, "k", data, kChunk);
  REQUIRE(rig.engine->Stats().tiers[1].stalled);
  // t1 still hangs and has no late read of its own to give up; its chunk fails, not waits.
  PendingStep step(*rig.engine, arena.Reads("solo", 1, kChunk));
  CHECK(step.EndsWithin(10000));
  rig.devices[1]->SetFaultHook(nullptr);
  rig.devices[1]->ReleaseHung();
  step.Wait();
  CHECK(absl::IsDataLoss(step.results[0].status));
  CHECK_THAT(std::string(step.results[0].status.message()), Catch::Contains("has not answered a read in 10 s"));
}

TEST_CASE("a read straight into memory that cannot be taken back is waited for") {
  SimRig rig({300 * MBps, 150 * MBps});
  auto data = rig.Populate("k", 4, 2 * kBlock);
  auto batch = SimRig::MakeBatch("k", 4, 2 * kBlock);  // plain heap buffers, not registered
  rig.devices[1]->SetFaultHook(HangReadsFrom(0));
  std::atomic<bool> done{false};
  std::vector<ChunkResult> results(4);
  rig.engine->RetrieveAsync(batch.reads, [&](const ChunkResult& r) { results[r.index] = r; },
                            [&](StepRecord) { done = true; });
  for (int i = 0; i < 200 && !rig.engine->Stats().tiers[1].stalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(rig.engine->Stats().tiers[1].stalled);
  CHECK_FALSE(done);
  CHECK(rig.engine->Stats().tiers[1].hedged_reads == 0);
  rig.devices[1]->ReleaseHung();
  while (!done) std::this_thread::yield();
  RequireIntact(batch, data, results);
}

TEST_CASE("reads through bounce buffers into memory a device pinned are hedged, and late ones never land in it") {
  // Memory a device pinned (ChunkRead::bounce) is never taken back, yet a hung tier must not
  // stall the step: its blocks land in the store's bounce buffers and are copied in once verified,
  // so an abandoned read lands only in a bounce buffer.
  SimRig rig({300 * MBps, 150 * MBps});
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 8, kChunk);
  auto batch = SimRig::MakeBatch("k", 8, kChunk);  // plain heap buffers, not registered
  for (ChunkRead& r : batch.reads) r.bounce = true;
  rig.devices[1]->SetFaultHook(HangReadsFrom(1));  // t1 answers once, then hangs
  auto bounced = [&] {
    uint64_t n = 0;
    for (const TierStats& t : rig.engine->Stats().tiers) n += t.bounce_reads;
    return n;
  };
  const uint64_t bounced_before = bounced();
  std::atomic<bool> done{false};
  std::vector<ChunkResult> results(8);
  rig.engine->RetrieveAsync(batch.reads, [&](const ChunkResult& r) { results[r.index] = r; },
                            [&](StepRecord) { done = true; });
  for (int i = 0; i < 2000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(done);  // hedged: the step did not wait for t1
  if (!done) {
    rig.devices[1]->ReleaseHung();
    while (!done) std::this_thread::yield();
  }
  RequireIntact(batch, data, results);
  TierStats t1 = rig.engine->Stats().tiers[1];
  CHECK(t1.hedged_reads >= 1);
  CHECK(bounced() - bounced_before >= 8 * 4);  // every block of the step, re-reads included
  // Scribble over the destinations, let the hung reads land: they must not touch them.
  for (auto& buf : batch.buffers) std::memset(buf.data(), 0x5A, buf.size());
  rig.devices[1]->SetFaultHook(nullptr);
  rig.devices[1]->ReleaseHung();
  for (int i = 0; i < 200 && rig.engine->Stats().tiers[1].stalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& buf : batch.buffers) {
    CHECK(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0x5A; }));
  }
}

TEST_CASE("deferred writes do not wait for a stalled tier's reads") {
  SimRig rig({300 * MBps, 150 * MBps});
  rig.Populate("k", 4, 2 * kBlock);
  auto batch = SimRig::MakeBatch("k", 4, 2 * kBlock);  // not hedgeable: the step waits for t1
  rig.devices[1]->SetFaultHook(HangReadsFrom(0));
  std::atomic<bool> done{false};
  rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord) { done = true; });
  auto fresh = Payload(kBlock, 5);
  std::atomic<bool> durable{false};
  PersistResult result;
  REQUIRE(rig.engine->Persist("new", fresh.data(), fresh.size(), [&](const std::string&, const PersistResult& r) {
    result = r;
    durable = true;
  }).ok());
  for (int i = 0; i < 400 && !durable; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(durable);
  CHECK_FALSE(done);  // the step still waits for t1's reads
  CHECK(result.tier_mask == 3u);
  rig.devices[1]->ReleaseHung();
  while (!done) std::this_thread::yield();
}

TEST_CASE("at the end of a step an idle fast tier takes over a very slow tier's stragglers") {
  StoreConfig c = SimConfig(2);
  c.read_deadline_cap_seconds = 60;  // no read is late here: only the tail takeover acts
  SimRig rig({300 * MBps, 1 * MBps}, c);  // t1 slow but alive
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 8, kChunk);
  Arena arena(*rig.engine, 8 * kChunk);
  const double alone = 8.0 * kChunk / (300 * MBps);  // t0 reading the whole step
  for (int step = 0; step < 4; ++step) {
    const StepRecord rec = arena.ReadStep(*rig.engine, "k", data, kChunk);
    INFO("step " << step << ": " << rec.wall_seconds << " s, t0 alone " << alone << " s");
    if (step >= 1) CHECK(rec.wall_seconds <= 1.3 * alone);  // once t1's read time is known
    // In the second step t1's reads are in flight from the step's start to its end (then taken
    // over): it was busy all along, though none of its reads landed within the step.
    if (step == 1) CHECK(rec.tiers[1].busy_seconds == Approx(rec.wall_seconds).epsilon(0.05));
  }
  CHECK(rig.engine->Stats().tiers[1].hedged_reads >= 1);
  CHECK(rig.engine->Stats().tiers[1].stalls == 0);  // slow is not stalled
}

TEST_CASE("an idle fast tier takes over a slow tier's last blocks when they would land tens of ms later") {
  // A parallel file system shared with other nodes: its reads take tens of ms (here 35 ms per
  // block), far longer than the NVMe's 3.5 ms. The NVMe, idle at the end of a step, reads those
  // last blocks itself instead of waiting for them; under a single-tier policy it never does.
  StoreConfig c = SimConfig(2);
  c.read_deadline_cap_seconds = 60;  // no read is late here: only the tail takeover acts
  SimRig rig({300 * MBps, 30 * MBps}, c);
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 8, kChunk);
  Arena arena(*rig.engine, 8 * kChunk);
  const double bound = 8.0 * kChunk / (330 * MBps);
  double worst = 0;
  for (int step = 0; step < 6; ++step) {
    const StepRecord rec = arena.ReadStep(*rig.engine, "k", data, kChunk);
    if (step >= 2) worst = std::max(worst, rec.wall_seconds);  // once both tiers' read times are known
  }
  INFO("worst step " << worst << " s, bound " << bound << " s");
  CHECK(worst <= 1.12 * bound);
  // The slow tier leaves the last blocks to the NVMe, or the NVMe takes them over.
  const TierStats before = rig.engine->Stats().tiers[1];
  CHECK(before.hedged_reads + before.tail_blocks_left >= 1);
  // A static split is a reference: its slow tier's blocks are read there, never taken over.
  Policies fixed = rig.engine->policies();
  fixed.routing = *ParseRouting("static:0.5");
  rig.engine->SetPolicies(fixed);
  std::vector<ChunkResult> results;
  for (int step = 0; step < 2; ++step) rig.engine->Retrieve(arena.Reads("k", 8, kChunk), &results);
  const TierStats after = rig.engine->Stats().tiers[1];
  CHECK(after.hedged_reads == before.hedged_reads);
  CHECK(after.tail_blocks_left == before.tail_blocks_left);
}

TEST_CASE("a slower tier leaves a step's last blocks to a faster one that reads them all sooner") {
  // t1 needs 10 ms per block (20 ms with two in flight), t0 3.5 ms: near the end of the step t1
  // stops claiming, so the step ends when t0 is done, not when t1's last blocks land, and t1 reads
  // nothing that is then read again elsewhere (on a shared file system, bandwidth other nodes lose).
  StoreConfig c = SimConfig(2);
  c.read_deadline_cap_seconds = 60;  // no read is late here
  SimRig rig({300 * MBps, 100 * MBps}, c);
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 8, kChunk);
  Arena arena(*rig.engine, 8 * kChunk);
  const double bound = 8.0 * kChunk / (400 * MBps);
  double total = 0;
  for (int step = 0; step < 8; ++step) {
    const StepRecord rec = arena.ReadStep(*rig.engine, "k", data, kChunk);
    if (step >= 2) total += rec.wall_seconds;  // once both tiers' read times are known
  }
  const double mean = total / 6;
  const TierStats t1 = rig.engine->Stats().tiers[1];
  INFO("mean step " << mean << " s, bound " << bound << " s, t1 left " << t1.tail_blocks_left << " blocks, hedged "
                    << t1.hedged_reads);
  CHECK(t1.tail_blocks_left >= 6);  // about one per step or more
  CHECK(t1.hedged_reads <= 1);       // instead of reading them and being taken over (wasted reads)
  CHECK(mean <= 1.06 * bound);
  // Blocks only the slower tier holds are never left: a chunk on t1 alone still comes from t1.
  auto solo = rig.Populate("solo", 8, kChunk);
  for (int i = 0; i < 8; ++i) {
    REQUIRE(rig.engine->Evict({.key = "solo" + std::to_string(i), .tier = "t0"}).ok());
  }
  for (int step = 0; step < 2; ++step) {
    CHECK(arena.ReadStep(*rig.engine, "solo", solo, kChunk).tiers[1].blocks == 32);
  }
}

TEST_CASE("an idle tier takes over a slower tier's read once it is overdue, even when nothing else lands") {
  // The step's last reads are t1's, delayed 200 ms: t0 is idle from ~25 ms, before they are
  // overdue (twice t1's usual time), and no completion wakes the loop after that; it looks again
  // when they become overdue instead of sleeping until the read deadline or an idle timeout.
  StoreConfig c = SimConfig(2);
  c.read_deadline_cap_seconds = 60;  // the 0.5 s floor stays: no read is late within this test
  SimRig rig({300 * MBps, 100 * MBps}, c);
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 2, kChunk);
  Arena arena(*rig.engine, 2 * kChunk);
  std::vector<ChunkResult> results;
  for (int step = 0; step < 4; ++step) rig.engine->Retrieve(arena.Reads("k", 2, kChunk), &results);
  rig.devices[1]->SetFaultHook(
      [](const SimOpInfo& op) { return op.op == SimOp::kRead ? SimFault::Delay(200'000'000) : SimFault::None(); });
  const uint64_t hedged = rig.engine->Stats().tiers[1].hedged_reads;
  const StepRecord rec = arena.ReadStep(*rig.engine, "k", data, kChunk);
  INFO("step " << rec.wall_seconds << " s");
  CHECK(rig.engine->Stats().tiers[1].hedged_reads > hedged);
  CHECK(rec.wall_seconds < 0.08);  // not the 200 ms delay, nor the loop's 100 ms idle wait
  rig.devices[1]->SetFaultHook(nullptr);
}

TEST_CASE("a fast tier only briefly late keeps its block: it is not read again from a much slower tier") {
  SimRig rig({300 * MBps, 1 * MBps});  // t1 needs a second per block
  constexpr size_t kChunk = 4 * kBlock;
  auto data = rig.Populate("k", 4, kChunk);
  Arena arena(*rig.engine, 4 * kChunk);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(arena.Reads("k", 4, kChunk), &results);  // both tiers' block times known
  // One read of t0 takes 0.7 s: past t0's 0.5 s deadline, yet sooner than t1 would read the block.
  std::atomic<int> slow_once{1};
  rig.devices[0]->SetFaultHook([&](const SimOpInfo& op) {
    return op.op == SimOp::kRead && slow_once.fetch_sub(1) == 1 ? SimFault::Delay(700'000'000) : SimFault::None();
  });
  const uint64_t hedged_before = rig.engine->Stats().tiers[0].hedged_reads;
  const StepRecord rec = arena.ReadStep(*rig.engine, "k", data, kChunk);
  const TierStats t0 = rig.engine->Stats().tiers[0];
  CHECK(t0.stalls == 1);                          // it was late, so stalled while late...
  CHECK(t0.hedged_reads == hedged_before);        // ...but its block was not given to t1
  CHECK(rec.wall_seconds < 0.95);                 // t1 would have needed 1 s for that block
}

}  // namespace
}  // namespace kvstream::testing
