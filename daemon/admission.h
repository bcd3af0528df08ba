// Admission of data-path requests (Retrieve, Persist): a request may use a session's arena and
// client regions only with the session's token, and only inside them. Nothing here touches the
// store; a refused request changes nothing. Statuses are absl inside the daemon, grpc::Status
// only at the gRPC edge.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "call_limits.h"
#include "absl/status/statusor.h"
#include "kvstream.pb.h"
#include "sessions.h"

namespace kvstream {


// Where one chunk of an admitted request lives: daemon-mapped memory at `data`, which may shrink
// under the daemon when `fd` >= 0 (an unsealed client region: `data` maps `fd` at `fd_offset`,
// see ChunkRead::dst_fd).
struct ChunkTarget {
  uint8_t* data = nullptr;
  int fd = -1;
  uint64_t fd_offset = 0;
  bool bounce = false;  // a device-pinned region: reads land through bounce buffers (ChunkRead)
};

// One chunk of an admitted request: its key as the store knows it (AccessPolicy::StoreKey), its
// range in the region the request names (checked to lie inside it), and where that range lives.
struct AdmittedChunk {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;
  ChunkTarget target;
};

// An admitted request: its session, its chunks in request order, and the client regions they use
// (the call keeps them alive until it ends; a ChunkTarget points into them).
struct Admitted {
  std::shared_ptr<Session> session;
  std::vector<AdmittedChunk> chunks;
  std::vector<std::shared_ptr<SessionRegion>> regions;
};

// OK when there are 1..max_chunks chunks, each with a valid key (else InvalidArgument), naming the
// arena (region 0) or one of the session's client regions (else NotFound), with a range inside it
// (else OutOfRange). Messages name the chunk. Keys are mapped into the session uid's namespace
// by `access` (none: as given).
absl::StatusOr<Admitted> CheckChunks(std::shared_ptr<Session> session,
                                     const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks,
                                     size_t max_chunks = kDefaultMaxChunksPerCall, const AccessPolicy* access = nullptr);

// The session the request may use, for `caller` (null: a call without a caller token): under
// isolation, Unauthenticated without a caller; NotFound unless `token` is session `session_id`'s
// token; under isolation, PermissionDenied unless the caller is of the session's uid (a leaked
// token is not enough); else as CheckChunks with `max_chunks`.
absl::StatusOr<Admitted> Admit(const SessionManager& sessions, uint64_t session_id, const std::string& token,
                               const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks, const Caller* caller,
                               size_t max_chunks);

// For RetrieveRequest and PersistRequest, which share these fields.
template <typename Request>
absl::StatusOr<Admitted> Admit(const SessionManager& sessions, const Request& req, const Caller* caller = nullptr,
                               size_t max_chunks = kDefaultMaxChunksPerCall) {
  return Admit(sessions, req.session_id(), req.token(), req.chunks(), caller, max_chunks);
}

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace kvstream
