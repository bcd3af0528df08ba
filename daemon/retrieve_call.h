// RetrieveCall: one admitted Retrieve. Reads the request's chunks into the session's arena as one
// step of the store, streaming one ChunkDone per chunk as it lands and then the StepRecord, which
// closes the stream. The session (so its arena) stays alive until the store's last callback, even
// if the client or the session goes away first.
#pragma once

#include <memory>

#include "event_stream.h"
#include "kvstream.pb.h"
#include "kvstream/store.h"
#include "sessions.h"

namespace kvstream {

class RetrieveCall final : public EventStream<v1::RetrieveEvent> {
 public:
  // `session` is the one the request was admitted to (see admission.h). The store may call back
  // before this returns; the reactor returned is gRPC's.
  static RetrieveCall* Start(Store* store, std::shared_ptr<Session> session, const v1::RetrieveRequest& req);

 private:
  RetrieveCall() = default;
};

}  // namespace kvstream
