#include "staging_worker.h"
#include "thread_name.h"

#include <utility>

namespace kvstream {

StagingWorker::StagingWorker()
    : thread_([this] {
        NameThisThread("kvs-staging");
        Run();
      }) {}

StagingWorker::~StagingWorker() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  thread_.join();
}

void StagingWorker::Add(Job job) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      jobs_.push_back(std::move(job));
      changed_.Signal();
      return;
    }
  }
  job(*this);  // the worker may be gone; a job run while stopping does not wait
}

bool StagingWorker::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void StagingWorker::Run() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      while (jobs_.empty() && !stopping_) changed_.Wait(&mu_);
      if (jobs_.empty()) return;  // stopping, and every job has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job(*this);
  }
}

}  // namespace kvstream
