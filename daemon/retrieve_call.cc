#include "retrieve_call.h"

#include <utility>
#include <vector>

#include "proto_convert.h"

namespace kvstream {

RetrieveCall* RetrieveCall::Start(Store* store, Admitted admitted) {
  auto* call = new RetrieveCall;
  std::vector<ChunkRead> step;
  step.reserve(admitted.chunks.size());
  for (const AdmittedChunk& c : admitted.chunks) {
    step.push_back({c.key, c.target.data, c.length, c.target.fd, c.target.fd_offset, c.target.bounce});
  }
  // gRPC's reference keeps `call` alive until this returns; the store's, until on_done.
  store->RetrieveAsync(
      std::move(step),
      [call](const ChunkResult& r) {
        v1::RetrieveEvent e;
        ToProto(r, e.mutable_chunk());
        call->Push(std::move(e));
      },
      [call, keep = std::move(admitted)](StepRecord rec) {
        v1::RetrieveEvent e;
        ToProto(rec, e.mutable_step());
        call->Push(std::move(e));
        call->Close();
        call->ProducerDone();  // may delete call; `keep` goes with this callback
      });
  return call;
}

void CoalesceChunkEvents(std::deque<v1::RetrieveEvent>* queue) {
  size_t n = 0;  // leading chunk events
  while (n < queue->size() && !(*queue)[n].has_step()) ++n;
  if (n < 2) return;
  v1::RetrieveEvent merged;
  v1::ChunkBatch* batch = merged.mutable_batch();
  for (size_t i = 0; i < n; ++i) {
    v1::RetrieveEvent& e = (*queue)[i];
    if (e.has_chunk()) {
      batch->add_chunks()->Swap(e.mutable_chunk());
    } else {
      for (v1::ChunkDone& c : *e.mutable_batch()->mutable_chunks()) batch->add_chunks()->Swap(&c);
    }
  }
  queue->erase(queue->begin(), queue->begin() + static_cast<std::ptrdiff_t>(n));
  queue->push_front(std::move(merged));
}

}  // namespace kvstream
