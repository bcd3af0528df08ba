// StagingMemory: the memory staged chunk images live in, kept for reuse. Memory fresh from the
// kernel costs a page fault and a zeroed page per 4 KiB when it is first written; with a new
// allocation per chunk that was about a third of the daemon's CPU under a stream of persists
// (perf, kvbench write-heavy). A buffer given back is kept, as long as the memory kept and the
// memory taken stay within `keep_limit` bytes together, and handed out again for an image of the
// same size class (steps of a 64th of the size: a buffer is at most a 64th larger than its image).
// A miss frees kept buffers of other classes first when the new one would not fit beside them.
// Thread-safe; buffers may outlive the StagingMemory that made them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class StagingMemory : public std::enable_shared_from_this<StagingMemory> {
 public:
  // Memory for one image, aligned for O_DIRECT; given back when destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept { *this = std::move(other); }
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { Reset(); }

    uint8_t* get() const { return data_; }
    size_t capacity() const { return capacity_; }
    explicit operator bool() const { return data_ != nullptr; }
    void Reset();  // gives the memory back now

   private:
    friend class StagingMemory;
    std::shared_ptr<StagingMemory> owner_;
    uint8_t* data_ = nullptr;
    size_t capacity_ = 0;
  };

  static std::shared_ptr<StagingMemory> Create(uint64_t keep_limit);
  ~StagingMemory();  // frees the kept buffers
  StagingMemory(const StagingMemory&) = delete;
  StagingMemory& operator=(const StagingMemory&) = delete;

  // At least `bytes`, aligned to kFileAlignment; an empty buffer when the allocation fails. The
  // contents are whatever an earlier image left: the caller writes every byte it uses.
  Buffer Take(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t kept_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t taken_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reused() const ABSL_LOCKS_EXCLUDED(mu_);     // Takes served from kept memory
  uint64_t allocated() const ABSL_LOCKS_EXCLUDED(mu_);  // Takes that allocated

 private:
  explicit StagingMemory(uint64_t keep_limit) : keep_limit_(keep_limit) {}
  void GiveBack(uint8_t* data, size_t capacity) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees kept buffers until `capacity` more fits beside the kept and taken memory, or none is kept.
  void MakeRoom(size_t capacity) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t keep_limit_;
  mutable absl::Mutex mu_;
  std::map<size_t, std::vector<uint8_t*>> kept_ ABSL_GUARDED_BY(mu_);  // by capacity
  uint64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t taken_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstream
