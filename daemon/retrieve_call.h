// RetrieveCall: one admitted Retrieve. Reads the request's chunks into the session's arena as one
// step of the store, streaming each chunk's ChunkDone as it lands and then the StepRecord, which
// closes the stream. Chunks that land while an earlier event is being written go out together in
// one ChunkBatch: the first chunk is never delayed, and a fast step costs a few messages, not one
// per chunk. The session and the client regions the request names (so the memory reads land in)
// stay alive until the store's last callback, even if the client or the session goes away first.
#pragma once

#include <deque>
#include <memory>

#include "event_stream.h"
#include "kvstream.pb.h"
#include "kvstream/store.h"
#include "admission.h"

namespace kvstream {

// Merges the chunk events at the head of `queue` (up to the StepRecord) into one ChunkBatch event,
// in order, when there are two or more.
void CoalesceChunkEvents(std::deque<v1::RetrieveEvent>* queue);

class RetrieveCall final : public EventStream<v1::RetrieveEvent> {
 public:
  // `admitted` is what admission made of the request (see admission.h). The store may call back
  // before this returns; the reactor returned is gRPC's.
  static RetrieveCall* Start(Store* store, Admitted admitted);

 private:
  RetrieveCall() = default;
  void Coalesce(std::deque<v1::RetrieveEvent>* queue) override { CoalesceChunkEvents(queue); }
};

}  // namespace kvstream
