// BlockVerifier: hashes blocks read by the loop against their segment checksums (or, from a shared
// tier with a cluster key, their segment tags) on a small pool
// of worker threads, so the I/O loop only issues and reaps reads (at GB/s one thread cannot
// both drive the devices and hash every byte). The loop submits a job per landed block and
// collects finished ones with TakeDone; a finished job wakes the loop (Reactor::Wake). A job only
// reads memory: whatever it decides is applied on the loop, which owns the step and may have
// abandoned the block meanwhile. A job on client memory that may vanish is hashed under the
// SIGBUS guard (GuardedAccess). With 0 threads, jobs run inline in Submit (deterministic tests
// on a virtual clock; the behaviour of a store whose loop verifies).
#pragma once

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_mac.h"
#include "io/reactor.h"

namespace kvstream {

struct VerifyJob {
  const uint8_t* data = nullptr;
  bool guarded = false;   // `data` is client memory that may vanish (memory/client_memory.h: GuardedAccess)
  uint32_t length = 0;
  uint64_t expected = 0;  // the segment's checksum, when there is no key
  // With a key (a block from a shared tier): `data` must be segment `segment` of the version
  // `meta` describes, by its tag (ChunkMacKey::VerifySegment), instead of `expected`. The key and
  // the meta stay valid until TakeDone returns the job (the step holds both).
  const ChunkMacKey* key = nullptr;
  const ChunkMeta* meta = nullptr;
  uint32_t segment = 0;
  void* owner = nullptr;  // the loop's context for the result (opaque here)
  uint32_t index = 0;     // ditto
  uint32_t slot = 0;      // ditto
  int tier = 0;
  bool ok = false;        // set when done: the data hashes to `expected`
  bool gone = false;      // set when done: guarded memory that vanished (not ok either)
  // Set when done by a worker that took it with other jobs still queued (every worker busy): how
  // long it took there, wall time (0 otherwise, and when run inline).
  int64_t backlogged_ns = 0;
};

class BlockVerifier {
 public:
  // `threads` workers; 0 = run jobs inline.
  BlockVerifier(int threads, Reactor* reactor);
  ~BlockVerifier();  // finishes queued jobs, joins the workers
  BlockVerifier(const BlockVerifier&) = delete;
  BlockVerifier& operator=(const BlockVerifier&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  // Loop thread. The memory stays valid and unchanged until TakeDone returns the job.
  void Submit(const VerifyJob& job);
  // Loop thread: appends every finished job to `out`.
  void TakeDone(std::vector<VerifyJob>* out);
  // Jobs submitted and not yet taken back.
  uint32_t outstanding() const { return outstanding_; }

  // The verify pool size `auto` (-1) stands for: half the cores, 1 to 8.
  static int AutoThreads();

 private:
  void Work();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queued_.empty(); }

  Reactor* reactor_;
  uint32_t outstanding_ = 0;  // loop thread only
  absl::Mutex mu_;
  std::deque<VerifyJob> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<VerifyJob> done_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvstream
