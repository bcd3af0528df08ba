// Admission of data-path requests (Retrieve, Persist): a request may use a session's arena only
// with the session's token, and only inside it. Nothing here touches the store; a refused request
// changes nothing. Statuses are absl inside the daemon, grpc::Status only at the gRPC edge.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream.pb.h"
#include "sessions.h"

namespace kvstream {

inline constexpr size_t kMaxChunksPerRequest = 65536;

// OK when there are 1..max_chunks chunks, each with a valid key (else InvalidArgument) and a
// range inside the session's arena (else OutOfRange). Messages name the chunk.
absl::Status CheckChunks(const Session& session, const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks,
                         size_t max_chunks = kMaxChunksPerRequest);

// The session the request may use: NotFound unless `token` is session `session_id`'s token,
// else as CheckChunks.
absl::StatusOr<std::shared_ptr<Session>> Admit(const SessionManager& sessions, uint64_t session_id,
                                               const std::string& token,
                                               const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks);

// For RetrieveRequest and PersistRequest, which share these fields.
template <typename Request>
absl::StatusOr<std::shared_ptr<Session>> Admit(const SessionManager& sessions, const Request& req) {
  return Admit(sessions, req.session_id(), req.token(), req.chunks());
}

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace kvstream
