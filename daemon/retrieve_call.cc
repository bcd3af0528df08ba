#include "retrieve_call.h"

#include <utility>
#include <vector>

#include "proto_convert.h"

namespace kvstream {

RetrieveCall* RetrieveCall::Start(Store* store, std::shared_ptr<Session> session, const v1::RetrieveRequest& req) {
  auto* call = new RetrieveCall;
  std::vector<ChunkRead> step;
  for (const v1::ChunkRange& c : req.chunks()) {
    step.push_back({c.key(), session->arena->data() + c.offset(), c.length()});
  }
  // gRPC's reference keeps `call` alive until this returns; the store's, until on_done.
  store->RetrieveAsync(
      std::move(step),
      [call](const ChunkResult& r) {
        v1::RetrieveEvent e;
        ToProto(r, e.mutable_chunk());
        call->Push(std::move(e));
      },
      [call, keep = std::move(session)](StepRecord rec) {
        v1::RetrieveEvent e;
        ToProto(rec, e.mutable_step());
        call->Push(std::move(e));
        call->Close();
        call->ProducerDone();  // may delete call; `keep` goes with this callback
      });
  return call;
}

}  // namespace kvstream
