#include "io/blocking_call_thread.h"

#include <time.h>

#include "absl/strings/str_cat.h"
#include "thread_name.h"

namespace kvstream {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

const BlockingCallThread::Job* BlockingCallThread::State::Oldest() const {
  return running != nullptr ? running.get() : queue.empty() ? nullptr : queue.front().get();
}

bool BlockingCallThread::State::Hung(int64_t wait_ns) const {
  const Job* oldest = Oldest();
  return oldest != nullptr && MonotonicNs() - oldest->queued_ns >= wait_ns;
}

BlockingCallThread::BlockingCallThread(std::string name, int64_t wait_ns)
    : name_(std::move(name)), wait_ns_(wait_ns), state_(std::make_shared<State>()) {
  thread_ = std::thread([state = state_] {
    NameThisThread("kvs-fs-calls");
    Serve(state);
  });
}

BlockingCallThread::~BlockingCallThread() {
  bool busy;
  {
    absl::MutexLock lock(&state_->mu);
    state_->stop = true;
    // A call running or queued may never return (not only one past the wait: one its caller
    // stopped waiting for sooner, or one the thread has not started yet).
    busy = state_->running != nullptr || !state_->queue.empty();
    state_->cv.SignalAll();
  }
  if (busy) {
    thread_.detach();  // it owns its state and its calls'; it ends once they have returned
  } else {
    thread_.join();  // idle: it ends at once
  }
}

// Runs every call queued, also after stop (the calls that must happen), then ends.
void BlockingCallThread::Serve(const std::shared_ptr<State>& state) {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&state->mu);
      while (!state->stop && state->queue.empty()) state->cv.Wait(&state->mu);
      if (state->queue.empty()) return;
      job = std::move(state->queue.front());
      state->queue.pop_front();
      state->running = job;
    }
    job->run();
    bool abandoned;
    {
      absl::MutexLock lock(&state->mu);
      job->done = true;
      abandoned = job->abandoned;
      state->running = nullptr;
      state->cv.SignalAll();
    }
    if (abandoned && job->undo) job->undo();
  }
}

absl::Status BlockingCallThread::RunErased(const char* what, std::function<void()> run, std::function<void()> undo,
                                           bool always, int64_t wait_ns) {
  State& s = *state_;
  if (wait_ns <= 0) wait_ns = wait_ns_;
  auto job = std::make_shared<Job>();
  job->queued_ns = MonotonicNs();
  const int64_t until = job->queued_ns + wait_ns;
  job->what = what;
  job->run = std::move(run);
  job->undo = std::move(undo);
  absl::MutexLock lock(&s.mu);
  if (s.Hung(wait_ns_)) {  // no wait at all
    const std::string why = absl::StrCat("the file system of ", name_, " does not answer (", s.Oldest()->what,
                                         " has waited ", (MonotonicNs() - s.Oldest()->queued_ns) / 1'000'000, " ms): ", what,
                                         always ? " waits behind it" : " is not tried");
    if (always) {
      job->abandoned = true;
      s.queue.push_back(std::move(job));
    }
    return absl::DeadlineExceededError(why);
  }
  s.queue.push_back(job);
  s.cv.SignalAll();
  while (!job->done) {
    if (MonotonicNs() >= until) {
      job->abandoned = true;
      return absl::DeadlineExceededError(absl::StrCat("the file system of ", name_, " does not answer: ", what,
                                                      " has waited ", wait_ns / 1'000'000,
                                                      " ms (it goes on, off the loop)"));
    }
    s.cv.WaitWithTimeout(&s.mu, absl::Nanoseconds(until - MonotonicNs()));
  }
  return absl::OkStatus();
}

absl::Status BlockingCallThread::Run(const char* what, std::function<absl::Status()> call, int64_t wait_ns) {
  return Run<bool>(
             what,
             [call = std::move(call)]() -> absl::StatusOr<bool> {
               if (absl::Status s = call(); !s.ok()) return s;
               return true;
             },
             nullptr, wait_ns)
      .status();
}

absl::Status BlockingCallThread::RunAlways(const char* what, std::function<absl::Status()> call, int64_t wait_ns) {
  auto result = std::make_shared<absl::Status>();
  if (absl::Status s = RunErased(what, [result, call = std::move(call)] { *result = call(); }, nullptr, true, wait_ns);
      !s.ok()) {
    return s;
  }
  return *result;
}

int64_t BlockingCallThread::HungNs() const {
  absl::MutexLock lock(&state_->mu);
  return state_->Hung(wait_ns_) ? MonotonicNs() - state_->Oldest()->queued_ns : 0;
}

std::string BlockingCallThread::HungCall() const {
  absl::MutexLock lock(&state_->mu);
  return state_->Hung(wait_ns_) ? state_->Oldest()->what : "";
}

}  // namespace kvstream
