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
#include "io/io_queue.h"
#include "io/tier_device.h"

namespace kvstream {

class UringQueue final : public IoQueue {
 public:
  UringQueue() = default;
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;
  // Waits for the requests still in flight (their buffers may be freed afterwards), then closes.
  ~UringQueue() override;

  struct Options {
    uint32_t depth = 1;  // requests in flight
    int event_fd = -1;   // signalled on completions when >= 0
    // Every request is handed to the kernel's io-wq workers, never done inside io_uring_enter:
    // a file system may ignore "do not block" there (a FUSE write that extends its file waits for
    // the whole write), which would stall the submitting thread and everything it serves.
    bool never_inline = false;
    // Bounded io-wq workers the submitting thread may run at once (0: the kernel's default, which
    // io_uring_register(2) says the SQ ring's size limits: 6.1 takes min(entries of the thread's
    // first ring, 4 x CPUs), as few as 2 here). Give every ring a thread submits to the sum of
    // their depths, so requests that block on one never keep another's from starting.
    uint32_t io_workers = 0;
  };
  absl::Status Init(const Options& options);

  // Queues the request's remaining bytes. False when `depth` requests are in flight.
  bool Queue(IoRequest* request) override;
  // Asks the kernel to cancel a request in flight (best effort: one already in the block layer
  // cannot be); the request completes either way. Marks it abandoned.
  void Cancel(IoRequest* request) override;
  // Enters the kernel once for everything queued.
  void Submit() override;
  // Appends the requests that finished; resubmits those that need more.
  void Reap(std::vector<IoCompletion>* out) override;

  // Registered buffers: a sparse table of `count` slots, then slot updates (an empty iovec
  // clears one). Return 0 or -errno, as liburing does.
  int RegisterSparseBuffers(unsigned count) override;
  int UpdateBuffer(unsigned slot, const iovec& iov) override;

  uint32_t in_flight() const override { return in_flight_; }
  uint64_t resubmits() const override { return resubmits_.load(std::memory_order_relaxed); }

 private:
  void Prepare(IoRequest* request);

  io_uring ring_{};
  bool initialized_ = false;
  bool never_inline_ = false;
  uint32_t depth_ = 0;
  uint32_t in_flight_ = 0;
  unsigned unsubmitted_ = 0;
  std::atomic<uint64_t> resubmits_{0};  // read by Stats from other threads
};

}  // namespace kvstream
