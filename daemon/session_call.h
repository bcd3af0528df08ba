// SessionCall: one Session stream, which is one session's life (see kvstream.proto). The first
// request attaches: the session and its arena are created and registered with the store, and
// Attached is sent (at once, whatever the arena's size: the store faults it in and registers it
// afterwards). The client closing the stream, or going away at any point (its attach deadline
// passed, it cancelled, it died), detaches: the arena is unregistered and the session removed,
// its budget given back, before the stream ends, so an attach right after close() finds it free
// (the arena itself lives on while calls still use it). Any second request is refused
// FAILED_PRECONDITION. Deletes itself in OnDone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "kvstream.grpc.pb.h"
#include "kvstream/store.h"
#include "sessions.h"

namespace kvstream {

class SessionCall final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent> {
 public:
  // `owner`: the uid the session is for (the caller's, kAnonymousUid without one), or why the
  // caller may not attach (the attach is then refused with it).
  // `max_chunks_per_call` is told to the client with Attached.
  SessionCall(Store* store, SessionManager* sessions, absl::StatusOr<uid_t> owner, uint32_t max_chunks_per_call);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // Creates the session the attach asks for and sends Attached, or finishes with the reason.
  void Attach(const v1::SessionRequest::Attach& attach);
  // Unregisters the arena and removes the session (its budget back), once.
  void Detach();

  Store* const store_;
  SessionManager* const sessions_;
  const absl::StatusOr<uid_t> owner_;
  const uint32_t max_chunks_per_call_;
  bool registered_ = false;  // the arena is registered with the store
  bool detached_ = false;
  v1::SessionRequest request_;
  v1::SessionEvent event_;
  std::shared_ptr<Session> session_;
};

}  // namespace kvstream
