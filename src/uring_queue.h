// UringQueue: one io_uring ring serving caller-owned IoRequests. A request's address is its user
// data, so the ring keeps no state per request; short transfers, -EAGAIN and -EINTR are
// resubmitted for the rest (AdvanceTransfer) and only whole results come out of Reap.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tier_device.h"

namespace kvstream {

class UringQueue {
 public:
  UringQueue() = default;
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;
  // Waits for the requests still in flight (their buffers may be freed afterwards), then closes.
  ~UringQueue();

  // A ring for `depth` requests in flight, signalling `event_fd` (when >= 0) on completions.
  absl::Status Init(uint32_t depth, int event_fd);

  // Queues the request's remaining bytes. False when `depth` requests are in flight.
  bool Queue(IoRequest* request);
  // Asks the kernel to cancel a request in flight (best effort: one already in the block layer
  // cannot be); the request completes either way. Marks it abandoned.
  void Cancel(IoRequest* request);
  // Enters the kernel once for everything queued.
  void Submit();
  // Appends the requests that finished; resubmits those that need more.
  void Reap(std::vector<IoCompletion>* out);

  // Registered buffers: a sparse table of `count` slots, then slot updates (an empty iovec
  // clears one). Return 0 or -errno, as liburing does.
  int RegisterSparseBuffers(unsigned count);
  int UpdateBuffer(unsigned slot, const iovec& iov);

  uint32_t in_flight() const { return in_flight_; }
  uint64_t resubmits() const { return resubmits_.load(std::memory_order_relaxed); }

 private:
  void Prepare(IoRequest* request);

  io_uring ring_{};
  bool initialized_ = false;
  uint32_t depth_ = 0;
  uint32_t in_flight_ = 0;
  unsigned unsubmitted_ = 0;
  std::atomic<uint64_t> resubmits_{0};  // read by Stats from other threads
};

}  // namespace kvstream
