#include "io/thread_queue.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"

namespace kvstream {

absl::Status ThreadQueue::Init(const Options& options) {
  if (options.depth == 0) return absl::InvalidArgumentError("an I/O queue needs a depth of at least 1");
  depth_ = options.depth;
  event_fd_ = options.event_fd;
  try {
    StartThread();  // one at least, so a request never waits for a thread that cannot start
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot start an I/O thread: ", e.what()));
  }
  return absl::OkStatus();
}

ThreadQueue::~ThreadQueue() {
  Submit();
  {
    absl::MutexLock lock(&mu_);
    // Every request handed over has finished its call (its bytes are in place or never will be).
    mu_.Await(absl::Condition(
        +[](ThreadQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->pending_.empty() && q->running_ == 0; },
        this));
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool ThreadQueue::Queue(IoRequest* request) {
  if (in_flight_ == depth_) return false;
  ++in_flight_;
  unsubmitted_.push_back(request);
  return true;
}

void ThreadQueue::Cancel(IoRequest* request) { request->abandoned = true; }

void ThreadQueue::Submit() {
  if (unsubmitted_.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    pending_.insert(pending_.end(), unsubmitted_.begin(), unsubmitted_.end());
  }
  unsubmitted_.clear();
  // A thread per request in flight, started when first needed: a queue whose depth is a ceiling
  // (queue_depth auto) has only the threads its deepest moment used. Where no more can start (a
  // pids limit), the requests queue for the threads there are.
  while (threads_.size() < in_flight_ && !thread_limit_) {
    try {
      StartThread();
    } catch (const std::system_error& e) {
      thread_limit_ = true;
      spdlog::warn("I/O queue: no more than {} threads can start ({}): requests wait for them", threads_.size(),
                   e.what());
    }
  }
}

void ThreadQueue::StartThread() {
  threads_.emplace_back([this] {
    NameThisThread("kvs-io");
    Work();
  });
}

void ThreadQueue::Reap(std::vector<IoCompletion>* out) {
  std::vector<std::pair<IoRequest*, int>> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(done_);
  }
  for (auto [request, result] : done) {
    IoCompletion completion;
    if (AdvanceTransfer(request, result, &completion) == TransferStep::kResubmit) {
      resubmits_.fetch_add(1, std::memory_order_relaxed);
      unsubmitted_.push_back(request);
      continue;
    }
    --in_flight_;
    out->push_back(completion);
  }
  Submit();  // the continuations
}

int ThreadQueue::Transfer(const IoRequest& r) {
  auto* buf = static_cast<uint8_t*>(r.buffer) + r.transferred;
  const size_t remaining = r.length - r.transferred;
  const off_t offset = static_cast<off_t>(r.offset + r.transferred);
  ssize_t n = 0;
  switch (r.kind) {
    case IoKind::kRead: n = pread(r.file, buf, remaining, offset); break;
    case IoKind::kWrite: n = pwrite(r.file, buf, remaining, offset); break;
    case IoKind::kSync: n = fdatasync(r.file); break;
    case IoKind::kCommit: return -EINVAL;  // never queued: files commit with CommitTemp
  }
  return n < 0 ? -errno : static_cast<int>(n);
}

void ThreadQueue::Work() {
  for (;;) {
    IoRequest* request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stopping_ || !q->pending_.empty(); },
          this));
      if (pending_.empty()) return;  // stopping, nothing left
      request = pending_.front();
      pending_.pop_front();
      ++running_;
    }
    const int result = Transfer(*request);
    {
      absl::MutexLock lock(&mu_);
      done_.emplace_back(request, result);
      --running_;
    }
    if (event_fd_ >= 0) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = write(event_fd_, &one, sizeof(one));  // a full counter still wakes
    }
  }
}

}  // namespace kvstream
