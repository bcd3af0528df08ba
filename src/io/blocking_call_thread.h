// BlockingCallThread: a tier's file-system calls that can block (opens, stat, statvfs, rename,
// link, unlink, mkdir, fsync of a directory) run on a thread of their own, so that a file system
// that stops answering (a parallel file system whose servers are frozen) holds that thread, never
// the I/O loop that serves every other tier.
//
// One call at a time, in order. Run hands a call over and waits for it at most `wait`: a call that
// answers by then returns its result, as if made in place. One that does not goes on, on the
// thread, and the caller gets DeadlineExceeded (NotAnswering, io/tier_device.h); from then on the thread is hung,
// and every Run fails at once (no wait) until that call returns: the call is not tried, except
// one that must happen (RunAlways: a publish, a temporary's removal, which close descriptors the
// caller gave away), which is queued and runs once the file system answers. A late call's result
// is nobody's: its `undo` runs on the thread instead (closes what it opened, removes what it
// made). Calls capture only values and shared state, never the object that made them (it may be
// gone when they return).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class BlockingCallThread {
 public:
  // `name`: what the calls are on, for messages ("tier directory /mnt/pfs/kvstream").
  BlockingCallThread(std::string name, int64_t wait_ns);
  // Joins the thread when it has nothing to do; else leaves it to finish its calls on its own (it
  // owns what it uses), as they may never return.
  ~BlockingCallThread();
  BlockingCallThread(const BlockingCallThread&) = delete;
  BlockingCallThread& operator=(const BlockingCallThread&) = delete;

  // Runs `call` on the thread, as described above. `what` names it ("opening a chunk file");
  // `wait_ns` > 0 waits that long instead (a call whose failure costs more, such as a publish).
  template <typename T>
  absl::StatusOr<T> Run(const char* what, std::function<absl::StatusOr<T>()> call,
                        std::function<void(absl::StatusOr<T>&)> undo = nullptr, int64_t wait_ns = 0) {
    auto result = std::make_shared<std::optional<absl::StatusOr<T>>>();
    std::function<void()> late;
    if (undo) late = [result, undo = std::move(undo)] { undo(**result); };
    if (absl::Status s =
            RunErased(what, [result, call = std::move(call)] { result->emplace(call()); }, std::move(late), false, wait_ns);
        !s.ok()) {
      return s;
    }
    return std::move(**result);
  }
  absl::Status Run(const char* what, std::function<absl::Status()> call, int64_t wait_ns = 0);
  // Run, but a call the thread cannot start now (a hung call before it) is queued, not dropped.
  absl::Status RunAlways(const char* what, std::function<absl::Status()> call, int64_t wait_ns = 0);

  // How long the oldest call not done has waited, when that is past the wait (0: none has).
  int64_t HungNs() const;
  // What that call is ("" when none is hung).
  std::string HungCall() const;

 private:
  struct Job {
    const char* what = "";
    int64_t queued_ns = 0;  // when its caller handed it over: its wait counts from then
    std::function<void()> run, undo;
    bool done = false;
    bool abandoned = false;  // the caller stopped waiting: undo runs once it is done
  };
  struct State {
    mutable absl::Mutex mu;
    absl::CondVar cv;
    std::deque<std::shared_ptr<Job>> queue ABSL_GUARDED_BY(mu);
    std::shared_ptr<Job> running ABSL_GUARDED_BY(mu);  // null when none runs
    bool stop ABSL_GUARDED_BY(mu) = false;
    // The call not done for the longest: the one running, else the first queued (null: none).
    const Job* Oldest() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
    // The oldest call has waited `wait_ns` since it was handed over (running or not yet started,
    // as its caller counts: a thread slow to start it is as hung as a call that does not return).
    bool Hung(int64_t wait_ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };
  absl::Status RunErased(const char* what, std::function<void()> run, std::function<void()> undo, bool always,
                         int64_t wait_ns);
  static void Serve(const std::shared_ptr<State>& state);

  const std::string name_;
  const int64_t wait_ns_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace kvstream
