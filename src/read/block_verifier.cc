#include "read/block_verifier.h"

#include <algorithm>
#include <chrono>

#include "format/chunk_format.h"
#include "memory/client_memory.h"
#include "thread_name.h"

namespace kvstream {
namespace {

void Run(VerifyJob* job) {
  // Client memory that may vanish is read only under the SIGBUS guard, and only the reading is:
  // the tag's setup allocates, which must not be cut short.
  auto touch = [job](absl::FunctionRef<void()> step) {
    if (!job->guarded) return ChunkMacKey::RunDirectly(step);
    job->gone = !GuardedAccess(step).ok();
    return !job->gone;
  };
  if (job->key != nullptr) {
    job->ok = job->key->VerifySegment(*job->meta, job->segment, job->data, job->length, touch);
    return;
  }
  uint64_t sum = 0;
  job->ok = touch([&] { sum = Checksum(job->data, job->length); }) && sum == job->expected;
}

}  // namespace

BlockVerifier::BlockVerifier(int threads, Reactor* reactor) : reactor_(reactor) {
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this] {
      NameThisThread("kvs-verify");
      Work();
    });
  }
}

BlockVerifier::~BlockVerifier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& w : workers_) w.join();
}

int BlockVerifier::AutoThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8);
}

void BlockVerifier::Submit(const VerifyJob& job) {
  ++outstanding_;
  if (workers_.empty()) {
    VerifyJob done = job;
    Run(&done);
    absl::MutexLock lock(&mu_);
    done_.push_back(done);
    return;
  }
  absl::MutexLock lock(&mu_);
  queued_.push_back(job);
}

void BlockVerifier::TakeDone(std::vector<VerifyJob>* out) {
  absl::MutexLock lock(&mu_);
  outstanding_ -= static_cast<uint32_t>(done_.size());
  out->insert(out->end(), done_.begin(), done_.end());
  done_.clear();
}

void BlockVerifier::Work() {
  while (true) {
    VerifyJob job;
    bool backlog;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BlockVerifier::HasWork));
      if (queued_.empty()) return;  // stopping, nothing left
      job = queued_.front();
      queued_.pop_front();
      backlog = !queued_.empty();
    }
    const auto start = std::chrono::steady_clock::now();
    Run(&job);
    if (backlog) {
      job.backlogged_ns = std::max<int64_t>(
          1, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    }
    bool wake;
    {
      absl::MutexLock lock(&mu_);
      wake = done_.empty();  // the loop has been woken for the earlier ones already
      done_.push_back(job);
    }
    if (wake) reactor_->Wake();
  }
}

}  // namespace kvstream
