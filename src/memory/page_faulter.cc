#include "memory/page_faulter.h"

#include <sys/mman.h>

#include <algorithm>

#include "thread_name.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace kvstream {
namespace {

void PopulateWrite(uint8_t* p, size_t size) {
  madvise(p, size, MADV_POPULATE_WRITE);  // failing: the registration faults them in, or fails
}

}  // namespace

PageFaulter::PageFaulter(PieceReady ready, std::function<void(uint8_t*, size_t)> fault_in)
    : ready_(std::move(ready)),
      fault_in_(fault_in ? std::move(fault_in) : PopulateWrite),
      thread_([this] {
        NameThisThread("kvs-fault-in");
        Run();
      }) {}

PageFaulter::~PageFaulter() { Stop(); }

void PageFaulter::Add(uint8_t* base, size_t size, size_t piece_bytes, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || size == 0 || piece_bytes == 0) return;
  queue_.push_back({base, size, piece_bytes, generation});
  changed_.SignalAll();
}

void PageFaulter::Forget(const uint8_t* base) {
  absl::MutexLock lock(&mu_);
  std::erase_if(queue_, [base](const Region& r) { return r.base == base; });
  while (busy_ == base) changed_.Wait(&mu_);
}

void PageFaulter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void PageFaulter::Run() {
  while (true) {
    Region r{};
    size_t piece = 0;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) changed_.Wait(&mu_);
      if (stopping_) return;
      Region& front = queue_.front();
      piece = front.next++;
      r = front;
      if (front.next * front.piece_bytes >= front.size) queue_.pop_front();
      busy_ = r.base;
    }
    const size_t offset = piece * r.piece_bytes;
    fault_in_(r.base + offset, std::min(r.piece_bytes, r.size - offset));
    {
      absl::MutexLock lock(&mu_);
      busy_ = nullptr;
      changed_.SignalAll();
    }
    // After `busy_` is cleared: the region may be gone by now, which the generation tells.
    ready_(r.base, r.generation, piece);
  }
}

}  // namespace kvstream
