#include "memory/staging_memory.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <utility>

#include "format/chunk_format.h"

namespace kvstream {
namespace {

// Size classes in steps of a 64th of the size's power of two (at least kFileAlignment, what an
// image is aligned to anyway): a buffer is at most a 64th larger than the image it holds.
size_t SizeClass(size_t bytes) {
  const size_t step = std::max<size_t>(kFileAlignment, std::bit_floor(bytes) / 64);
  return AlignUp(bytes, step);
}

}  // namespace

StagingMemory::Buffer& StagingMemory::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::move(other.owner_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void StagingMemory::Buffer::Reset() {
  if (data_ != nullptr) owner_->GiveBack(data_, capacity_);
  owner_.reset();
  data_ = nullptr;
  capacity_ = 0;
}

std::shared_ptr<StagingMemory> StagingMemory::Create(uint64_t keep_limit) {
  return std::shared_ptr<StagingMemory>(new StagingMemory(keep_limit));
}

StagingMemory::~StagingMemory() {
  for (auto& [capacity, buffers] : kept_) {
    for (uint8_t* p : buffers) std::free(p);
  }
}

StagingMemory::Buffer StagingMemory::Take(size_t bytes) {
  Buffer buffer;
  const size_t capacity = SizeClass(std::max<size_t>(bytes, 1));
  {
    absl::MutexLock lock(&mu_);
    auto it = kept_.find(capacity);
    if (it != kept_.end() && !it->second.empty()) {
      buffer.data_ = it->second.back();
      it->second.pop_back();
      kept_bytes_ -= capacity;
      ++reused_;
    } else {
      MakeRoom(capacity);
      ++allocated_;
    }
    taken_bytes_ += capacity;
  }
  if (buffer.data_ == nullptr) {
    buffer.data_ = static_cast<uint8_t*>(std::aligned_alloc(kFileAlignment, capacity));
    if (buffer.data_ == nullptr) {
      absl::MutexLock lock(&mu_);
      taken_bytes_ -= capacity;
      return buffer;
    }
  }
  buffer.owner_ = shared_from_this();
  buffer.capacity_ = capacity;
  return buffer;
}

void StagingMemory::GiveBack(uint8_t* data, size_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    taken_bytes_ -= capacity;
    if (kept_bytes_ + taken_bytes_ + capacity <= keep_limit_) {
      kept_[capacity].push_back(data);
      kept_bytes_ += capacity;
      return;
    }
  }
  std::free(data);
}

void StagingMemory::MakeRoom(size_t capacity) {
  for (auto it = kept_.begin(); it != kept_.end() && kept_bytes_ + taken_bytes_ + capacity > keep_limit_;) {
    while (!it->second.empty() && kept_bytes_ + taken_bytes_ + capacity > keep_limit_) {
      std::free(it->second.back());  // under the lock: rare (a miss with kept memory of other sizes)
      it->second.pop_back();
      kept_bytes_ -= it->first;
    }
    it = it->second.empty() ? kept_.erase(it) : std::next(it);
  }
}

uint64_t StagingMemory::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

uint64_t StagingMemory::taken_bytes() const {
  absl::MutexLock lock(&mu_);
  return taken_bytes_;
}

uint64_t StagingMemory::reused() const {
  absl::MutexLock lock(&mu_);
  return reused_;
}

uint64_t StagingMemory::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace kvstream
