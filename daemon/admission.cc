#include "admission.h"

#include "absl/strings/str_cat.h"
#include "kvstream/key.h"

namespace kvstream {

absl::StatusOr<Admitted> CheckChunks(std::shared_ptr<Session> session,
                                     const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks,
                                     size_t max_chunks, const AccessPolicy* access) {
  if (chunks.empty()) return absl::InvalidArgumentError("no chunks in the request");
  if (static_cast<size_t>(chunks.size()) > max_chunks) {
    return absl::InvalidArgumentError(absl::StrCat(chunks.size(), " chunks in one request; the limit is ", max_chunks,
                                                   " (sessions.max_chunks_per_call)"));
  }
  Admitted admitted;
  admitted.chunks.reserve(chunks.size());
  for (int i = 0; i < chunks.size(); ++i) {
    const v1::ChunkRange& c = chunks[i];
    auto refuse = [i](absl::StatusCode code, absl::string_view why) {
      return absl::Status(code, "chunk " + std::to_string(i) + ": " + std::string(why));
    };
    absl::StatusOr<std::string> key = c.key();
    if (access != nullptr) {
      key = access->StoreKey(session->uid, c.key());
    } else if (absl::Status k = ValidateKey(c.key()); !k.ok()) {
      key = k;
    }
    if (!key.ok()) return refuse(absl::StatusCode::kInvalidArgument, key.status().message());
    AdmittedChunk chunk{*std::move(key), c.offset(), c.length(), ChunkTarget{}};
    ChunkTarget& target = chunk.target;
    if (c.region() == 0) {
      if (absl::Status r = session->arena->CheckRange(c.offset(), c.length()); !r.ok()) {
        return refuse(absl::StatusCode::kOutOfRange, r.message());
      }
      target.data = session->arena->data() + c.offset();
    } else {
      std::shared_ptr<SessionRegion> region;
      for (const auto& r : admitted.regions) {
        if (r->id == c.region()) region = r;
      }
      if (region == nullptr) region = session->Region(c.region());
      if (region == nullptr) {
        return refuse(absl::StatusCode::kNotFound, "the session has no client region " + std::to_string(c.region()));
      }
      const ClientRegion& m = *region->memory;
      if (absl::Status r = m.CheckRange(c.offset(), c.length()); !r.ok()) {
        return refuse(absl::StatusCode::kOutOfRange, r.message());
      }
      target.data = m.data() + c.offset();
      target.bounce = region->device_pinned;
      if (!m.direct()) {
        target.fd = m.fd();
        target.fd_offset = c.offset();
      }
      if (admitted.regions.empty() || admitted.regions.back() != region) admitted.regions.push_back(region);
    }
    admitted.chunks.push_back(std::move(chunk));
  }
  admitted.session = std::move(session);
  return admitted;
}

absl::StatusOr<Admitted> Admit(const SessionManager& sessions, uint64_t session_id, const std::string& token,
                               const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks, const Caller* caller,
                               size_t max_chunks) {
  if (absl::Status s = sessions.access().MayUse(caller); !s.ok()) return s;
  std::shared_ptr<Session> session = sessions.Authorize(session_id, token);
  if (!session) return absl::NotFoundError("no session " + std::to_string(session_id) + " with this token");
  if (absl::Status s = sessions.access().MayUseSession(caller, session->id, session->uid); !s.ok()) return s;
  return CheckChunks(std::move(session), chunks, max_chunks, &sessions.access());
}

grpc::Status ToGrpc(const absl::Status& s) {
  return s.ok() ? grpc::Status::OK
                : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace kvstream
