// ThreadQueue: the I/O engine for where io_uring is not there (a seccomp filter that denies
// io_uring_setup, as Docker's and containerd's default profiles do; kernel.io_uring_disabled; old
// kernels). Up to `depth` threads (one per request in flight, started as first needed) do
// pread/pwrite/fdatasync on caller-owned IoRequests with UringQueue's contract: Queue, Submit and
// Reap on one thread, short transfers, -EAGAIN and -EINTR continued for the rest
// (AdvanceTransfer) and only whole results out of Reap, the event fd signalled on completions,
// and a destructor that waits for every request in flight. What it cannot do: cancel a system
// call already running (Cancel marks the request abandoned, so it is not continued, and it
// completes when its call returns), and registered buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "io/io_queue.h"
#include "io/tier_device.h"

namespace kvstream {

class ThreadQueue final : public IoQueue {
 public:
  ThreadQueue() = default;
  ThreadQueue(const ThreadQueue&) = delete;
  ThreadQueue& operator=(const ThreadQueue&) = delete;
  // Waits for the requests still in flight (their buffers may be freed afterwards), then stops
  // the threads.
  ~ThreadQueue() override;

  struct Options {
    uint32_t depth = 1;  // requests in flight at most, one thread each
    int event_fd = -1;   // signalled on completions when >= 0
  };
  absl::Status Init(const Options& options);

  // Queues the request's remaining bytes. False when `depth` requests are in flight.
  bool Queue(IoRequest* request) override;
  // Marks the request abandoned: it is not continued after its current call, which finishes.
  void Cancel(IoRequest* request) override;
  // Hands everything queued to the threads (starting threads up to the requests in flight).
  void Submit() override;
  // Appends the requests that finished; continues those that need more.
  void Reap(std::vector<IoCompletion>* out) override;

  uint32_t in_flight() const override { return in_flight_; }
  uint64_t resubmits() const override { return resubmits_.load(std::memory_order_relaxed); }

 private:
  void Work();
  // Starts one more thread (owner thread); throws std::system_error where none can start.
  void StartThread();
  // One system call for the request's remaining bytes: bytes done, or -errno.
  static int Transfer(const IoRequest& request);

  int event_fd_ = -1;
  uint32_t depth_ = 0;
  uint32_t in_flight_ = 0;              // owner thread
  std::vector<IoRequest*> unsubmitted_;  // owner thread
  std::atomic<uint64_t> resubmits_{0};  // read by Stats from other threads
  absl::Mutex mu_;
  std::deque<IoRequest*> pending_ ABSL_GUARDED_BY(mu_);                 // submitted, not started
  std::vector<std::pair<IoRequest*, int>> done_ ABSL_GUARDED_BY(mu_);   // (request, result)
  uint32_t running_ ABSL_GUARDED_BY(mu_) = 0;                           // calls in progress
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;     // owner thread
  bool thread_limit_ = false;            // owner thread: a thread failed to start
};

}  // namespace kvstream
