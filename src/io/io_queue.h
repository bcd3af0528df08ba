// IoQueue: where a device's requests go to the kernel: UringQueue (an io_uring ring) or
// ThreadQueue (threads doing pread/pwrite where io_uring is not allowed). One contract for both:
// Queue, Cancel, Submit and Reap on one thread; short transfers, -EAGAIN and -EINTR continued
// for the rest (AdvanceTransfer) and only whole results out of Reap; the event fd given at Init
// signalled on completions; the destructor waits for every request in flight.
#pragma once

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "io/tier_device.h"

namespace kvstream {

class IoQueue {
 public:
  virtual ~IoQueue() = default;

  // Queues the request's remaining bytes. False when `depth` requests are in flight.
  virtual bool Queue(IoRequest* request) = 0;
  // Marks the request abandoned and, where the engine can, cancels it; it completes either way.
  virtual void Cancel(IoRequest* request) = 0;
  // Hands everything queued to the kernel (or the threads).
  virtual void Submit() = 0;
  // Appends the requests that finished; continues those that need more.
  virtual void Reap(std::vector<IoCompletion>* out) = 0;

  // Registered buffers: a sparse table of `count` slots, then slot updates (an empty iovec
  // clears one). 0 or -errno; engines without them answer -EOPNOTSUPP.
  virtual int RegisterSparseBuffers(unsigned count) { return -EOPNOTSUPP; }
  virtual int UpdateBuffer(unsigned slot, const iovec& iov) { return -EOPNOTSUPP; }

  virtual uint32_t in_flight() const = 0;
  virtual uint64_t resubmits() const = 0;
};

}  // namespace kvstream
