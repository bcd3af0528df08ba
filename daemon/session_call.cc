#include "session_call.h"

#include "admission.h"
#include "spdlog/spdlog.h"

namespace kvstream {

// At most one read or write is outstanding at a time, so reactions never overlap and the members
// need no lock.
SessionCall::SessionCall(Store* store, SessionManager* sessions, absl::StatusOr<uid_t> owner,
                         uint32_t max_chunks_per_call)
    : store_(store), sessions_(sessions), owner_(std::move(owner)), max_chunks_per_call_(max_chunks_per_call) {
  StartRead(&request_);
}

void SessionCall::OnReadDone(bool ok) {
  if (!ok) {  // the client closed its side or went away: detach, then end the stream
    Detach();
    Finish(grpc::Status::OK);
    return;
  }
  if (session_ != nullptr || !request_.has_attach()) {
    Detach();
    Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a session stream carries exactly one attach"));
    return;
  }
  Attach(request_.attach());
}

void SessionCall::Attach(const v1::SessionRequest::Attach& a) {
  if (!owner_.ok()) {
    Finish(ToGrpc(owner_.status()));
    return;
  }
  auto created = sessions_->Create(a.model(), a.rank(), a.world_size(), a.arena_bytes(), *owner_);
  if (!created.ok()) {
    Finish(ToGrpc(created.status()));
    return;
  }
  session_ = *created;
  // Fixed-buffer reads into the arena where the tiers allow it (else plain reads); with its memfd,
  // so the store can take pages back from a stalled read and serve the step from another tier.
  registered_ = store_->RegisterMemory(session_->arena->data(), session_->arena->size(), session_->arena->fd(), 0).ok();
  spdlog::debug("session {} attached: model '{}' rank {}/{} arena {} bytes{}", session_->id, a.model(), a.rank(),
               a.world_size(), session_->arena->size(),
               session_->uid == kAnonymousUid ? std::string(" (anonymous)") : " for uid " + std::to_string(session_->uid));
  auto* attached = event_.mutable_attached();
  attached->set_session_id(session_->id);
  attached->set_arena_bytes(session_->arena->size());
  attached->set_data_socket(sessions_->data_socket());
  attached->set_token(session_->token);
  attached->set_max_chunks_per_call(max_chunks_per_call_);
  StartWrite(&event_);
}

void SessionCall::OnWriteDone(bool ok) {
  if (!ok) {  // the client went away (gave up) before it heard back: detach
    Detach();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    return;
  }
  StartRead(&request_);  // nothing more is expected; this read ends when the client detaches
}

void SessionCall::OnDone() {
  Detach();  // a stream that ended without a failed read or write (the server shutting down)
  delete this;
}

void SessionCall::Detach() {
  if (!session_ || detached_) return;
  detached_ = true;
  // Reads still in flight keep the kernel's reference to the buffer; later ones use plain I/O.
  if (registered_) store_->UnregisterMemory(session_->arena->data());
  sessions_->Remove(session_->id);
  spdlog::debug("session {} detached", session_->id);
}

}  // namespace kvstream
