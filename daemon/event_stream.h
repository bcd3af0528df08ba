// EventStream<Event>: a gRPC server stream whose events come from threads other than gRPC's (the
// store's I/O thread, the staging worker). Events are written one at a time, in the order pushed
// (a subclass may merge the events waiting at the head of the queue into one: Coalesce);
// Close finishes the stream OK once every event pushed before it is written. When the client goes
// away (a write fails, or the call is cancelled) the stream finishes CANCELLED at once and later
// events are dropped, so the producer may keep pushing until it is done.
//
// Lifetime: two references, gRPC's (dropped in OnDone) and the producer's (dropped by
// ProducerDone); the stream deletes itself when both are gone. Lock order: a subclass may push
// while holding its own lock, never the reverse.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

template <typename Event>
class EventStream : public grpc::ServerWriteReactor<Event> {
 public:
  // A stream refused before any event: it finishes with `status` and has no producer.
  static EventStream* Refused(const grpc::Status& status) {
    auto* stream = new EventStream;
    stream->ProducerDone();
    absl::MutexLock lock(&stream->mu_);
    stream->FinishLocked(status);
    return stream;
  }

  void Push(Event event) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (client_gone_ || finished_) return;
    queue_.push_back(std::move(event));
    MaybeWriteLocked();
  }
  // No more events: finish OK once everything queued is written.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    last_queued_ = true;
    MaybeWriteLocked();
  }
  // The producer will not push or close any more. May delete the stream.
  void ProducerDone() { Release(); }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ok) {
      queue_.pop_front();
    } else {
      client_gone_ = true;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    MaybeWriteLocked();
  }
  void OnDone() override { Release(); }

 protected:
  EventStream() = default;
  virtual ~EventStream() = default;
  // Called before each write with the events waiting, the head of which is written next: may
  // merge leading events into one (events that pile up while a write is out travel together).
  virtual void Coalesce(std::deque<Event>* /*queue*/) {}

 private:
  // Writes the next event, or finishes the stream when it is over; never while a write is out.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (client_gone_) {
      queue_.clear();
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    } else if (!queue_.empty()) {
      Coalesce(&queue_);
      writing_ = true;
      this->StartWrite(&queue_.front());
    } else if (last_queued_) {
      FinishLocked(grpc::Status::OK);
    }
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }
  void Release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  absl::Mutex mu_;
  std::deque<Event> queue_ ABSL_GUARDED_BY(mu_);  // the front is being written while writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> refs_{2};  // gRPC and the producer
};

}  // namespace kvstream
