#include "admission.h"

#include "kvstream/key.h"

namespace kvstream {

absl::Status CheckChunks(const Session& session, const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks,
                         size_t max_chunks) {
  if (chunks.empty()) return absl::InvalidArgumentError("no chunks in the request");
  if (static_cast<size_t>(chunks.size()) > max_chunks) {
    return absl::InvalidArgumentError("more than " + std::to_string(max_chunks) + " chunks in one request");
  }
  for (int i = 0; i < chunks.size(); ++i) {
    if (absl::Status k = ValidateKey(chunks[i].key()); !k.ok()) {
      return absl::InvalidArgumentError("chunk " + std::to_string(i) + ": " + std::string(k.message()));
    }
    if (absl::Status r = session.arena->CheckRange(chunks[i].offset(), chunks[i].length()); !r.ok()) {
      return absl::OutOfRangeError("chunk " + std::to_string(i) + ": " + std::string(r.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session>> Admit(const SessionManager& sessions, uint64_t session_id,
                                               const std::string& token,
                                               const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks) {
  std::shared_ptr<Session> session = sessions.Authorize(session_id, token);
  if (!session) return absl::NotFoundError("no session " + std::to_string(session_id) + " with this token");
  if (absl::Status c = CheckChunks(*session, chunks); !c.ok()) return c;
  return session;
}

grpc::Status ToGrpc(const absl::Status& s) {
  return s.ok() ? grpc::Status::OK
                : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace kvstream
