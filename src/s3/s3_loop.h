// S3Loop: the S3 client's one thread and what runs on it. Tasks are handed in from any thread
// under a mutex and the loop woken with curl_multi_wakeup; otherwise it waits only in
// curl_multi_poll. Each S3Exchange (one HTTP request to S3) is signed afresh for every attempt,
// runs as an easy handle on the loop's multi handle (connections and DNS cached there, the easy
// handles kept for reuse), at most max_in_flight at once (the rest wait in order), and is tried
// again after a backoff with full jitter when its answer says so (a timer list inside the loop:
// no thread sleeps). Its `done` is called once, on the loop, when it is over.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "s3/s3_client.h"
#include "s3/s3_exchange.h"
#include "s3/sigv4.h"

namespace kvstream {

class S3Loop {
 public:
  // Checks the endpoint and starts the thread.
  static absl::StatusOr<std::unique_ptr<S3Loop>> Create(const S3ClientOptions& options);
  // Cancels every operation and exchange (internal ones get up to `drain` to finish), runs the
  // tasks that come of it, and joins.
  ~S3Loop();
  S3Loop(const S3Loop&) = delete;
  S3Loop& operator=(const S3Loop&) = delete;

  // Any thread: runs `task` on the loop, after the tasks posted before it.
  void Post(absl::AnyInvocable<void()> task);
  bool OnLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // The rest: on the loop only.
  // Queues an exchange; its done is called exactly once (at once, cancelled, if the loop stops).
  void Start(std::unique_ptr<S3Exchange> exchange);
  // Ends an exchange not yet done: its done is called now with kCancelled.
  void Cancel(uint64_t seq);
  // An operation that Cancel(id) or the loop's stop ends through `cancel` (called at most once).
  void AddOperation(uint64_t id, absl::AnyInvocable<void()> cancel);
  void RemoveOperation(uint64_t id);
  void CancelOperation(uint64_t id);
  // The seq the next Start gets.
  uint64_t next_seq() const { return next_seq_; }

  const S3ClientOptions& options() const { return options_; }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }
  uint64_t connects() const { return connects_.load(std::memory_order_relaxed); }
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t answers() const { return answers_.load(std::memory_order_relaxed); }

 private:
  S3Loop(S3ClientOptions options, std::string scheme, std::string host);

  void Run();
  bool RunPosted();  // true once the stop was asked for
  void BeginStop();
  void StartReady();
  void StartAttempt(S3Exchange& ex);
  void Reap();
  void FinishAttempt(S3Exchange& ex, CURLcode code);
  void Complete(uint64_t seq);
  void Release(S3Exchange& ex);
  int64_t BackoffNs(uint32_t attempts);

  static size_t OnRead(char* data, size_t size, size_t count, void* exchange);
  static int OnSeek(void* exchange, curl_off_t offset, int origin);

  const S3ClientOptions options_;
  const std::string scheme_;  // http or https
  const std::string host_;    // the Host header, signed (bucket.host when virtual-hosted)
  const SigV4Key key_;

  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool stop_asked_ ABSL_GUARDED_BY(mu_) = false;

  // The loop thread's own.
  CURLM* multi_ = nullptr;
  absl::flat_hash_map<uint64_t, std::unique_ptr<S3Exchange>> exchanges_;
  std::deque<uint64_t> ready_;  // in order; entries of exchanges gone since are skipped
  std::priority_queue<std::pair<int64_t, uint64_t>, std::vector<std::pair<int64_t, uint64_t>>, std::greater<>>
      backoff_;  // (when, seq)
  absl::flat_hash_map<uint64_t, absl::AnyInvocable<void()>> operations_;
  std::vector<CURL*> idle_easies_;
  uint32_t running_ = 0;
  uint64_t next_seq_ = 1;
  bool stopping_ = false;
  int64_t stop_deadline_ns_ = 0;
  std::mt19937_64 rng_;

  std::atomic<uint64_t> requests_{0}, retries_{0}, connects_{0}, in_flight_{0};
  std::atomic<uint64_t> answers_{0};  // attempts that got an HTTP answer, of any status
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace kvstream
