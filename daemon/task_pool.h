// TaskPool: a fixed number of threads running queued tasks in order, with a bounded queue, so
// work that one client can ask for (a region to fault in, a data socket request) never starts an
// unbounded number of threads. Stop runs what is queued, then joins.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class TaskPool {
 public:
  // `threads` >= 1 named `name` (at most 15 characters); at most `max_queued` tasks wait.
  TaskPool(std::string name, size_t threads, size_t max_queued);
  ~TaskPool();  // Stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task`; false (and the task is not run) when the queue is full or the pool stopped.
  bool Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs every queued task, then joins the threads. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); }

  const std::string name_;
  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // started by the constructor, joined by Stop
};

}  // namespace kvstream
