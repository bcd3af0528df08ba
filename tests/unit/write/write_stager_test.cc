// The write stager (M2): bounded staging, back-pressure, and when writes may run (deferred writes
// wait for the step, but no longer than staging.max_defer; immediate writes and staging pressure
// do not wait).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "sim_rig.h"
#include "write/write_stager.h"

namespace kvstream::testing {
namespace {

// Counts wake-ups; time moves only when a case sets it.
class CountingReactor final : public Reactor {
 public:
  int64_t NowNs() override { return now; }
  void Wait(int64_t) override {}
  void WaitUntil(int64_t) override {}
  void Wake() override { ++wakes; }
  std::atomic<int> wakes{0};
  std::atomic<int64_t> now{0};
};

constexpr int64_t kDefer = 250'000'000;  // staging.max_defer's default

// A chunk's image size for a payload of `size` bytes and a short key.
uint64_t ImageBytes(size_t size) { return DescribeChunk("k", Payload(size, 1).data(), size, kBlock, 0).file_size(); }

// When the devices' last read ended and their first write began (INT64_MAX: none), virtual time.
std::pair<int64_t, int64_t> LastReadFirstWrite(const SimRig& rig) {
  int64_t last_read = 0, first_write = INT64_MAX;
  for (SimDevice* d : rig.devices) {
    for (const SimOpRecord& op : d->ops()) {
      if (op.kind == IoKind::kRead) last_read = std::max(last_read, op.done_ns);
      if (op.kind == IoKind::kWrite) first_write = std::min(first_write, op.submit_ns);
    }
  }
  return {last_read, first_write};
}

TEST_CASE("bad chunks are refused without taking staging space") {
  CountingReactor reactor;
  WriteStager stager(4 * kBlock, 0.75, kBlock, kDefer, &reactor);
  auto data = Payload(5 * kBlock, 1);
  CHECK(absl::IsInvalidArgument(stager.Stage("", data.data(), 10, nullptr, true)));
  CHECK(absl::IsInvalidArgument(stager.Stage(std::string("a\0b", 3), data.data(), 10, nullptr, true)));
  CHECK(absl::IsInvalidArgument(stager.Stage("k", data.data(), 0, nullptr, true)));
  CHECK(absl::IsInvalidArgument(stager.Stage("k", data.data(), data.size(), nullptr, true)));  // over the limit
  CHECK(stager.staged_bytes() == 0);
  CHECK(stager.empty());
  CHECK(reactor.wakes == 0);
}

TEST_CASE("a copy of bytes already verified keeps their checksums, another segment size or key is hashed") {
  CountingReactor reactor;
  WriteStager stager(16 * kBlock, 0.75, kBlock, kDefer, &reactor);
  auto data = Payload(3 * kBlock + 100, 7);
  const ChunkMeta verified = DescribeChunk("k", data.data(), data.size(), kBlock, 12345);
  REQUIRE(stager.Stage("k", data.data(), data.size(), nullptr, false, &verified).ok());
  // The source changed after it was verified (its owner wrote into it): the copy is refused,
  // never staged under checksums its bytes no longer match (a staged chunk is served as it is).
  auto changed = data;
  changed[kBlock + 5] ^= 0x40;
  CHECK(absl::IsDataLoss(stager.Stage("k", changed.data(), changed.size(), nullptr, false, &verified)));
  const ChunkMeta other_size = DescribeChunk("o", data.data(), data.size(), kBlock / 2, 1);
  REQUIRE(stager.Stage("o", data.data(), data.size(), nullptr, false, &other_size).ok());
  REQUIRE(stager.Stage("w", data.data(), data.size(), nullptr, false, &verified).ok());  // not its key
  ChunkMeta ahead = verified;  // from a node whose clock runs ahead
  ahead.key = "f";
  ahead.created_unix_ns = INT64_MAX / 2;
  REQUIRE(stager.Stage("f", data.data(), data.size(), nullptr, false, &ahead).ok());
  std::vector<std::unique_ptr<StagedChunk>> staged;
  stager.TakeStaged(&staged);
  REQUIRE(staged.size() == 4);
  CHECK(staged[0]->meta->segment_checksums == verified.segment_checksums);
  CHECK(staged[0]->meta->payload_checksum == verified.payload_checksum);
  CHECK(staged[0]->meta->created_unix_ns == 12345);
  const ChunkMeta hashed = DescribeChunk("o", data.data(), data.size(), kBlock, 0);
  CHECK(staged[1]->meta->segment_size == kBlock);
  CHECK(staged[1]->meta->segment_checksums == hashed.segment_checksums);
  CHECK(staged[2]->meta->key == "w");
  CHECK(staged[2]->meta->segment_checksums == hashed.segment_checksums);
  // Never newer than a write made here after it: the copy takes this clock's time at the latest.
  CHECK(staged[3]->meta->segment_checksums == verified.segment_checksums);
  CHECK(staged[3]->meta->created_unix_ns < INT64_MAX / 2);
  for (auto& c : staged) stager.Finish(std::move(c), PersistResult{});
}

TEST_CASE("a full staging refuses or blocks producers until a chunk is finished") {
  CountingReactor reactor;
  const uint64_t image = ImageBytes(kBlock);
  WriteStager stager(2 * image, 0.75, kBlock, kDefer, &reactor);
  auto data = Payload(kBlock, 2);
  REQUIRE(stager.Stage("a", data.data(), data.size(), nullptr, false).ok());
  REQUIRE(stager.Stage("b", data.data(), data.size(), nullptr, false).ok());
  CHECK(stager.staged_bytes() == 2 * image);
  CHECK(absl::IsResourceExhausted(stager.Stage("c", data.data(), data.size(), nullptr, false)));

  std::atomic<bool> staged{false};
  absl::Status blocked;
  std::thread producer([&] {
    blocked = stager.Stage("c", data.data(), data.size(), nullptr, true);
    staged = true;
  });
  while (reactor.wakes < 3) std::this_thread::yield();  // a, b, and the waiting producer
  CHECK(stager.MayWrite(WritePolicy::kDeferred, /*reads_pending=*/true, reactor.now));  // a producer waits: pressure
  CHECK_FALSE(staged);
  std::vector<std::unique_ptr<StagedChunk>> taken;
  stager.TakeStaged(&taken);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0]->meta->key == "a");
  stager.Finish(std::move(taken[0]), {absl::OkStatus(), 1, 0, ""});
  producer.join();
  CHECK(blocked.ok());
  CHECK(stager.persists() == 1);
}

TEST_CASE("a finished chunk's staging memory is kept for the next one, whose image is whole") {
  CountingReactor reactor;
  WriteStager stager(64 * kBlock, 0.75, kBlock, kDefer, &reactor);
  auto first = Payload(4 * kBlock + 1, 3);  // a longer key and one more segment: a larger header
  REQUIRE(stager.Stage("a-longer-key", first.data(), first.size(), nullptr, false).ok());
  std::vector<std::unique_ptr<StagedChunk>> taken;
  stager.TakeStaged(&taken);
  const uint8_t* memory = taken[0]->image.get();
  CHECK(stager.kept_bytes() == 0);
  stager.Finish(std::move(taken[0]), PersistResult{});
  CHECK(stager.kept_bytes() >= ImageBytes(4 * kBlock + 1));
  // Shorter, in the same memory: header, payload and zero padding are this chunk's alone.
  auto second = Payload(4 * kBlock - 1000, 4);
  REQUIRE(stager.Stage("b", second.data(), second.size(), nullptr, false).ok());
  taken.clear();
  stager.TakeStaged(&taken);
  const StagedChunk& c = *taken[0];
  CHECK(c.image.get() == memory);
  CHECK(stager.kept_bytes() == 0);
  const ChunkMeta expected = DescribeChunk("b", second.data(), second.size(), kBlock, c.meta->created_unix_ns);
  std::vector<uint8_t> image(expected.file_size());
  EncodeChunkFile(expected, second.data(), image.data());
  REQUIRE(c.image_size == image.size());
  CHECK(std::memcmp(c.image.get(), image.data(), image.size()) == 0);
  stager.Finish(std::move(taken[0]), PersistResult{});
}

TEST_CASE("flush returns only after the callbacks of the chunks staged before it ran") {
  CountingReactor reactor;
  WriteStager stager(16 * kBlock, 0.75, kBlock, kDefer, &reactor);
  auto data = Payload(1000, 3);
  std::atomic<int> called{0};
  REQUIRE(stager.Stage("a", data.data(), data.size(), [&](const std::string&, const PersistResult&) { ++called; }, true).ok());
  std::atomic<bool> flushed{false};
  std::thread flusher([&] {
    stager.Flush();
    flushed = true;
  });
  std::vector<std::unique_ptr<StagedChunk>> taken;
  stager.TakeStaged(&taken);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(flushed);
  stager.Finish(std::move(taken[0]), {absl::InternalError("disk"), 0, 1, "disk"});
  flusher.join();
  CHECK(called == 1);
  CHECK(stager.persist_failures() == 1);
  CHECK(stager.empty());
}

TEST_CASE("before max_defer, deferred writes run during reads only under pressure, stop refuses and drains") {
  CountingReactor reactor;
  const uint64_t image = ImageBytes(kBlock);
  WriteStager stager(4 * image, 0.5, kBlock, kDefer, &reactor);
  auto data = Payload(kBlock, 4);
  CHECK(stager.MayWrite(WritePolicy::kDeferred, false, reactor.now));
  CHECK(stager.MayWrite(WritePolicy::kImmediate, true, reactor.now));
  REQUIRE(stager.Stage("a", data.data(), data.size(), nullptr, true).ok());
  REQUIRE(stager.Stage("b", data.data(), data.size(), nullptr, true).ok());
  CHECK_FALSE(stager.MayWrite(WritePolicy::kDeferred, true, reactor.now));  // at the high-water mark, not above
  REQUIRE(stager.Stage("c", data.data(), data.size(), nullptr, true).ok());
  CHECK(stager.MayWrite(WritePolicy::kDeferred, true, reactor.now));  // above it
  REQUIRE(stager.Stage("d", data.data(), data.size(), nullptr, true).ok());

  std::atomic<bool> refused{false};
  std::thread producer([&] {
    refused = absl::IsUnavailable(stager.Stage("e", data.data(), data.size(), nullptr, true));
  });
  while (reactor.wakes < 5) std::this_thread::yield();
  stager.Stop();
  producer.join();
  CHECK(refused);
  CHECK(absl::IsUnavailable(stager.Stage("f", data.data(), 10, nullptr, false)));
  CHECK(stager.MayWrite(WritePolicy::kDeferred, true, reactor.now));  // draining: everything staged is written
  CHECK_FALSE(stager.empty());
}

TEST_CASE("a deferred write waits for reads at most max_defer, from the oldest chunk not yet written") {
  CountingReactor reactor;
  WriteStager stager(16 * kBlock, 0.75, kBlock, kDefer, &reactor);
  const auto data = Payload(kBlock, 5);
  CHECK(stager.WritesDueNs() == INT64_MAX);  // nothing waits
  reactor.now = 1000;
  REQUIRE(stager.Stage("a", data.data(), data.size(), nullptr, true).ok());
  reactor.now = 1000 + kDefer / 2;
  REQUIRE(stager.Stage("b", data.data(), data.size(), nullptr, true).ok());
  CHECK(stager.WritesDueNs() == 1000 + kDefer);
  CHECK_FALSE(stager.MayWrite(WritePolicy::kDeferred, true, 1000 + kDefer - 1));
  CHECK(stager.MayWrite(WritePolicy::kDeferred, true, 1000 + kDefer));  // "a" waited long enough

  std::vector<std::unique_ptr<StagedChunk>> staged;
  stager.TakeStaged(&staged);
  REQUIRE(staged.size() == 2);
  stager.Finish(std::move(staged[0]), PersistResult{});  // "a" is written: "b" is the oldest now
  CHECK(stager.WritesDueNs() == 1000 + kDefer / 2 + kDefer);
  CHECK_FALSE(stager.MayWrite(WritePolicy::kDeferred, true, 1000 + kDefer));
  stager.Finish(std::move(staged[1]), PersistResult{});
  CHECK(stager.WritesDueNs() == INT64_MAX);
  CHECK_FALSE(stager.MayWrite(WritePolicy::kDeferred, true, INT64_MAX - 1));
}

TEST_CASE("under reads that never pause, a deferred write starts max_defer after its persist and is written") {
  StoreConfig c = WithRouting("completion");
  c.staging_max_defer_seconds = 0.25;
  SimRig rig({300 * MBps, 100 * MBps}, c);
  rig.Populate("k", 200, 4 * kBlock);  // 800 MiB: 2 s of reads at 400 MB/s
  auto batch = SimRig::MakeBatch("k", 200, 4 * kBlock);

  rig.clock->Pause();
  std::atomic<bool> finished{false};
  rig.engine->RetrieveAsync(batch.reads, nullptr, [&](StepRecord) { finished = true; });
  rig.clock->WaitUntilQuiescent();
  const int64_t persisted = rig.clock->NowNs();
  auto fresh = Payload(2 * kBlock, 98);
  std::atomic<int64_t> written_ns{0};
  REQUIRE(rig.engine->Persist("new", fresh.data(), fresh.size(), [&](const std::string&, const PersistResult& r) {
    if (r.status.ok() && r.tier_mask == 3) written_ns = rig.clock->NowNs();
  }).ok());
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  rig.engine->Flush();
  while (!finished) std::this_thread::yield();

  const auto [last_read, first_write] = LastReadFirstWrite(rig);
  const int64_t defer = 250'000'000;
  CHECK(first_write >= persisted + defer);        // deferred that long ...
  CHECK(first_write < persisted + defer + defer);  // ... and no longer (a block's read is ~3-10 ms)
  CHECK(written_ns > 0);
  CHECK(written_ns < last_read);  // written while the reads went on
  CHECK(rig.engine->Stats().writes_under_pressure > 0);
}

TEST_CASE("deferred writes wait for the step but immediate writes and staging pressure do not") {
  const WritePolicy policy = GENERATE(WritePolicy::kDeferred, WritePolicy::kImmediate);
  StoreConfig c = WithRouting("completion");
  c.writes = policy;
  c.staging_limit_bytes = 64ull << 20;
  c.staging_max_defer_seconds = 10;  // longer than the step
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
    REQUIRE(rig.engine->Persist("new" + std::to_string(i), fresh.data(), fresh.size()).ok());
  }
  rig.clock->WaitUntilQuiescent();
  rig.clock->Resume();
  rig.engine->Flush();
  while (!finished) std::this_thread::yield();

  const auto [last_read, first_write] = LastReadFirstWrite(rig);
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
      REQUIRE(rig.engine->TryPersist("big" + std::to_string(i), big.data(), big.size()).ok());
    }
    // Time is paused, so nothing staged can drain: a fourth chunk does not fit (backpressure).
    CHECK(absl::IsResourceExhausted(rig.engine->TryPersist("big3", big.data(), big.size())));
    rig.clock->WaitUntilQuiescent();
    rig.clock->Resume();
    rig.engine->Flush();
    while (!finished) std::this_thread::yield();
    CHECK(rig.engine->Stats().writes_under_pressure > 0);
  }
}

}  // namespace
}  // namespace kvstream::testing
