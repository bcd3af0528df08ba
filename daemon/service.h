// The gRPC control plane of kvstreamd (proto/kvstream.proto) over the core Store. Every request is
// validated (session, arena ranges, keys) before it touches the store; a bad request gets a clear
// gRPC error and changes nothing. Streaming calls are reactors of their own (session_call.h,
// retrieve_call.h, persist_call.h); the unary calls are answered here, at once.
//
// Lifetime: the store and the session manager outlive the Service, and the Service outlives the
// gRPC server (shut it down first).
//
// Access (callers.h): calls that touch keys or sessions carry the caller's token; under
// sessions.isolation uid their keys live in the caller's namespace, Retrieve and Persist are for
// the session's uid only (its token is not enough), and Evict and SetPolicies are for
// administrators. Stats, Steps and Health are open to every member of the socket group. Destroying the Service stops its staging worker (see
// staging_worker.h): the chunks of persists still queued for staging space are answered
// UNAVAILABLE, unstaged. Chunks already staged stay the store's, and the store's last written
// callbacks delete their calls.
#pragma once

#include <grpcpp/grpcpp.h>

#include "admission.h"
#include "kvstream.grpc.pb.h"
#include "kvstream/store.h"
#include "sessions.h"
#include "staging_worker.h"

namespace kvstream {

class Service final : public v1::KVStream::CallbackService {
 public:
  // `max_lookup_keys`: keys one Lookup or Unlock may name (sessions.max_lookup_keys);
  // `max_chunks_per_call`: chunks one Retrieve or Persist may name (sessions.max_chunks_per_call).
  Service(Store* store, SessionManager* sessions, uint32_t max_lookup_keys = kDefaultMaxLookupKeys,
          uint32_t max_chunks_per_call = kDefaultMaxChunksPerCall)
      : store_(store), sessions_(sessions), max_lookup_keys_(max_lookup_keys), max_chunks_per_call_(max_chunks_per_call) {}

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx, const v1::LookupRequest* req,
                                   v1::LookupReply* reply) override;
  grpc::ServerUnaryReactor* Unlock(grpc::CallbackServerContext* ctx, const v1::UnlockRequest* req,
                                   v1::UnlockReply* reply) override;
  grpc::ServerWriteReactor<v1::RetrieveEvent>* Retrieve(grpc::CallbackServerContext* ctx,
                                                        const v1::RetrieveRequest* req) override;
  grpc::ServerWriteReactor<v1::PersistEvent>* Persist(grpc::CallbackServerContext* ctx,
                                                      const v1::PersistRequest* req) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const v1::StatsRequest* req,
                                  v1::StatsReply* reply) override;
  grpc::ServerUnaryReactor* Steps(grpc::CallbackServerContext* ctx, const v1::StepsRequest* req,
                                  v1::StepsReply* reply) override;
  grpc::ServerUnaryReactor* SetPolicies(grpc::CallbackServerContext* ctx, const v1::Policies* req,
                                        v1::Policies* reply) override;
  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* ctx, const v1::EvictRequest* req,
                                  v1::EvictReply* reply) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest* req,
                                   v1::HealthReply* reply) override;

 private:
  // Who is calling (callers.h): null for a call without a caller token (or, without isolation,
  // with one the daemon no longer knows); Unauthenticated under isolation for an unknown token.
  absl::StatusOr<std::shared_ptr<const Caller>> CallerOf(const grpc::CallbackServerContext* ctx) const;
  // A Retrieve or Persist admitted for its caller (admission.h), or why it is refused.
  template <typename Request>
  absl::StatusOr<Admitted> AdmitCall(const grpc::CallbackServerContext* ctx, const Request& req) const;
  // The keys of a Lookup or Unlock as the store knows them (the caller's namespace under
  // isolation), or why the call is refused: anonymous under isolation, too many keys, a bad key.
  absl::StatusOr<std::vector<std::string>> StoreKeys(const grpc::CallbackServerContext* ctx,
                                                     const google::protobuf::RepeatedPtrField<std::string>& keys) const;

  Store* const store_;
  SessionManager* const sessions_;
  const uint32_t max_lookup_keys_;
  const uint32_t max_chunks_per_call_;
  StagingWorker staging_;  // persists that found staging full wait for space here
};

}  // namespace kvstream
