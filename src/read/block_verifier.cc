#include "read/block_verifier.h"

#include <algorithm>

#include "format/chunk_format.h"
#include "memory/client_memory.h"
#include "thread_name.h"

namespace kvstream {
namespace {

bool Matches(const VerifyJob& job) {
  if (job.key != nullptr) return job.key->VerifySegment(*job.meta, job.segment, job.data, job.length);
  return Checksum(job.data, job.length) == job.expected;
}

void Run(VerifyJob* job) {
  if (!job->guarded) {
    job->ok = Matches(*job);
    return;
  }
  bool matches = false;
  const absl::Status touched = GuardedAccess([&] { matches = Matches(*job); });
  job->gone = !touched.ok();
  job->ok = touched.ok() && matches;
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
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BlockVerifier::HasWork));
      if (queued_.empty()) return;  // stopping, nothing left
      job = queued_.front();
      queued_.pop_front();
    }
    Run(&job);
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
