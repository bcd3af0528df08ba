// BlockVerifier (read/block_verifier.h): blocks hashed against their segment checksums, inline or
// on worker threads. A good block is ok, a block with one flipped byte is not, guarded client
// memory that vanished is `gone`; every job comes back once to the loop, which a finished job
// wakes, with its time on the worker when others were queued behind it; destroying the verifier
// finishes the jobs still queued.
#include "read/block_verifier.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "format/chunk_format.h"
#include "shared_memory.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

// The loop's wait: Wake is sticky (like the eventfd) until a Wait consumes it. `on_wake` runs on
// the waking thread first.
class WakeReactor : public Reactor {
 public:
  int64_t NowNs() override { return 0; }
  void WaitUntil(int64_t) override { Wait(0); }
  void Wait(int64_t) override { WaitForWake(std::chrono::seconds(10)); }
  bool WaitForWake(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    const bool woken = cv_.wait_for(lock, timeout, [&] { return woken_; });
    woken_ = false;
    return woken;
  }
  void Wake() override {
    if (on_wake) on_wake();
    std::lock_guard lock(mu_);
    woken_ = true;
    ++wakes;
    cv_.notify_all();
  }
  std::function<void()> on_wake;
  std::atomic<int> wakes{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
};

// A job for `block` (number `i`), its expected checksum taken before `corrupt` flips a byte.
VerifyJob JobOf(std::vector<uint8_t>& block, uint32_t i, bool corrupt) {
  VerifyJob job;
  job.data = block.data();
  job.length = static_cast<uint32_t>(block.size());
  job.expected = Checksum(block.data(), block.size());
  job.index = i;
  job.slot = i * 2;
  job.tier = static_cast<int>(i % 3);
  if (corrupt) block[block.size() / 2] ^= 0x01;
  return job;
}

TEST_CASE("inline: a good block is ok, one flipped byte is not, and the job comes back as submitted") {
  WakeReactor reactor;
  BlockVerifier verifier(0, &reactor);
  CHECK(verifier.threads() == 0);
  std::vector<std::vector<uint8_t>> blocks = {Payload(65536, 1), Payload(65536, 2)};
  int owner = 0;
  VerifyJob good = JobOf(blocks[0], 0, false), bad = JobOf(blocks[1], 1, true);
  good.owner = bad.owner = &owner;
  verifier.Submit(good);
  verifier.Submit(bad);
  CHECK(verifier.outstanding() == 2);
  std::vector<VerifyJob> done;
  verifier.TakeDone(&done);  // inline: finished within Submit
  REQUIRE(done.size() == 2);
  CHECK(verifier.outstanding() == 0);
  CHECK(done[0].ok);
  CHECK_FALSE(done[0].gone);
  CHECK_FALSE(done[1].ok);
  CHECK_FALSE(done[1].gone);
  CHECK(done[1].owner == &owner);
  CHECK(done[1].index == 1);
  CHECK(done[1].slot == 2);
  CHECK(done[1].tier == 1);
  CHECK(done[1].data == blocks[1].data());
  done.clear();
  verifier.TakeDone(&done);
  CHECK(done.empty());  // taken once
}

TEST_CASE("guarded client memory that vanished is gone and not ok, while what is still there verifies") {
  WakeReactor reactor;
  BlockVerifier verifier(0, &reactor);
  MappedSharedMemory memory(2 * 65536);
  const auto payload = Payload(memory.size(), 3);
  std::memcpy(memory.data(), payload.data(), payload.size());
  VerifyJob job;
  job.guarded = true;
  job.length = 65536;
  job.data = memory.data() + 65536;
  job.expected = Checksum(payload.data() + 65536, 65536);
  verifier.Submit(job);
  REQUIRE(ftruncate(memory.fd(), 65536) == 0);  // the client took the second half away
  verifier.Submit(job);
  std::vector<VerifyJob> done;
  verifier.TakeDone(&done);
  REQUIRE(done.size() == 2);
  CHECK(done[0].ok);
  CHECK_FALSE(done[0].gone);
  CHECK_FALSE(done[1].ok);
  CHECK(done[1].gone);
}

TEST_CASE("workers verify many jobs at once, each comes back once with its verdict, and they wake the loop") {
  constexpr uint32_t kJobs = 400;
  WakeReactor reactor;
  BlockVerifier verifier(4, &reactor);
  CHECK(verifier.threads() == 4);
  std::vector<std::vector<uint8_t>> blocks;
  for (uint32_t i = 0; i < kJobs; ++i) blocks.push_back(Payload(16384 + 4096 * (i % 8), i));
  for (uint32_t i = 0; i < kJobs; ++i) verifier.Submit(JobOf(blocks[i], i, i % 5 == 0));
  // The loop: takes what is done, and waits for a wake when nothing is (a lost wake hangs here).
  std::vector<int> seen(kJobs, 0);
  while (verifier.outstanding() > 0) {
    std::vector<VerifyJob> done;
    verifier.TakeDone(&done);
    if (done.empty()) REQUIRE(reactor.WaitForWake(std::chrono::seconds(10)));
    for (const VerifyJob& j : done) {
      REQUIRE(j.index < kJobs);
      ++seen[j.index];
      CHECK(j.ok == (j.index % 5 != 0));
      CHECK(j.data == blocks[j.index].data());
    }
  }
  for (uint32_t i = 0; i < kJobs; ++i) REQUIRE(seen[i] == 1);
  CHECK(reactor.wakes > 0);
}

TEST_CASE("a job a worker took with others queued behind it carries its time there, one taken alone none") {
  constexpr uint32_t kJobs = 8;
  WakeReactor reactor;
  BlockVerifier verifier(1, &reactor);
  std::vector<std::vector<uint8_t>> blocks;
  for (uint32_t i = 0; i < kJobs; ++i) blocks.push_back(Payload(1 << 20, 200 + i));
  // The worker's first wake (job 0 done) holds it until every other job is queued.
  std::mutex gate;
  gate.lock();
  std::atomic<bool> holding{false};
  reactor.on_wake = [&] {
    holding = true;
    std::lock_guard wait_for_gate(gate);
  };
  verifier.Submit(JobOf(blocks[0], 0, false));  // nothing queued behind it
  while (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (uint32_t i = 1; i < kJobs; ++i) verifier.Submit(JobOf(blocks[i], i, false));
  gate.unlock();
  std::vector<int64_t> backlogged(kJobs, -1);
  while (verifier.outstanding() > 0) {
    std::vector<VerifyJob> done;
    verifier.TakeDone(&done);
    if (done.empty()) REQUIRE(reactor.WaitForWake(std::chrono::seconds(10)));
    for (const VerifyJob& j : done) backlogged[j.index] = j.backlogged_ns;
  }
  CHECK(backlogged[0] == 0);
  for (uint32_t i = 1; i + 1 < kJobs; ++i) CHECK(backlogged[i] > 0);  // the next ones waited behind it
  CHECK(backlogged[kJobs - 1] == 0);  // the last: none behind it
}

TEST_CASE("destroying the verifier with jobs queued finishes them before its workers are joined") {
  constexpr uint32_t kJobs = 50;
  WakeReactor reactor;
  auto verifier = std::make_unique<BlockVerifier>(1, &reactor);
  BlockVerifier* const v = verifier.get();
  std::vector<std::vector<uint8_t>> blocks;
  for (uint32_t i = 0; i < kJobs; ++i) blocks.push_back(Payload(65536, 100 + i));
  // The first finished job's wake holds the only worker until the destructor has begun, so the
  // others are still queued then. Once the gate opens, each wake takes what is done, as the loop
  // would (the destructor is joining the worker: the members are alive until it returns).
  std::mutex gate;
  gate.lock();
  std::mutex taken_mu;
  std::vector<VerifyJob> taken;
  reactor.on_wake = [&] {
    std::lock_guard wait_for_gate(gate);
    std::lock_guard lock(taken_mu);
    v->TakeDone(&taken);
  };
  for (uint32_t i = 0; i < kJobs; ++i) v->Submit(JobOf(blocks[i], i, i == 7));
  std::atomic<bool> destroyed{false};
  std::thread destroy([&] {
    verifier.reset();
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(destroyed);  // joining the worker, which holds a finished job
  gate.unlock();
  destroy.join();
  std::lock_guard lock(taken_mu);
  REQUIRE(taken.size() == kJobs);  // none left behind
  for (const VerifyJob& j : taken) CHECK(j.ok == (j.index != 7));
}

TEST_CASE("the automatic pool size is half the cores, 1 to 8") {
  const int threads = BlockVerifier::AutoThreads();
  CHECK(threads >= 1);
  CHECK(threads <= 8);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores >= 2 && cores <= 16) CHECK(threads == cores / 2);
}

}  // namespace
}  // namespace kvstream::testing
