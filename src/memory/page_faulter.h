// PageFaulter: faults in the pages of memory registered with the store, on a thread of its own and
// one piece at a time, so that the loop, which registers each piece once its pages are in
// (memory/memory_regions.h), only pins pages already there. Registering a region of any size thus
// returns at once, and no piece holds the loop for longer than pinning it takes.
//
// A page is faulted in as for a write (MADV_POPULATE_WRITE), its bytes untouched; memory that
// cannot be (a file shorter than its mapping, no huge page left, an older kernel) is left to the
// registration, which then fails or faults it in itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class PageFaulter {
 public:
  // Called on the faulter's thread for each piece whose pages are in, in order: piece `piece` of
  // the region added as (`base`, `generation`).
  using PieceReady = std::function<void(const uint8_t* base, uint64_t generation, size_t piece)>;
  // `fault_in` faults in [p, p + size) (MADV_POPULATE_WRITE by default; tests pass their own).
  explicit PageFaulter(PieceReady ready, std::function<void(uint8_t* p, size_t size)> fault_in = nullptr);
  ~PageFaulter();  // Stop()
  PageFaulter(const PageFaulter&) = delete;
  PageFaulter& operator=(const PageFaulter&) = delete;

  // Queues [base, base + size) in pieces of `piece_bytes`, after the regions queued before it.
  void Add(uint8_t* base, size_t size, size_t piece_bytes, uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the pieces of the region at `base` not yet started and waits until none of them is
  // being faulted in: the memory may be freed on return. REQUIRES: not on the faulter's thread.
  void Forget(const uint8_t* base) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops everything queued and joins the thread once the piece in progress is done. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Region {
    uint8_t* base;
    size_t size;
    size_t piece_bytes;
    uint64_t generation;
    size_t next = 0;  // the next piece to fault in
  };
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const PieceReady ready_;
  const std::function<void(uint8_t*, size_t)> fault_in_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // a region queued, a piece done, or stopping
  std::deque<Region> queue_ ABSL_GUARDED_BY(mu_);
  const uint8_t* busy_ ABSL_GUARDED_BY(mu_) = nullptr;  // the region a piece is being faulted in of
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace kvstream
