// StagingWorker: one long-lived thread, owned by the Service, that runs in arrival order the
// staging that has to wait for space (the rest of each persist that found staging full), so that
// gRPC's callback threads never block.
//
// Every job added runs exactly once, on the worker, after the jobs added before it. Stopping
// (the destructor) lets the running job finish its current wait for space (the store frees space
// as it writes), then runs every queued job with stopping() already true: such a job must answer
// what it has not staged without waiting. The worker never touches a job after it returns.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class StagingWorker {
 public:
  using Job = std::function<void(const StagingWorker& worker)>;

  StagingWorker();
  ~StagingWorker();  // stops as above and joins the thread
  StagingWorker(const StagingWorker&) = delete;
  StagingWorker& operator=(const StagingWorker&) = delete;

  // Queues `job`; never blocks on staging. Once stopping, runs it here, at once.
  void Add(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // True once the owner is shutting down: a job stages nothing more.
  bool stopping() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a job added, or stopping
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace kvstream
