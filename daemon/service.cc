#include "service.h"

#include "health.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "admission.h"
#include "event_stream.h"
#include "kvstream/key.h"
#include "persist_call.h"
#include "proto_convert.h"
#include "retrieve_call.h"
#include "session_call.h"
#include "spdlog/spdlog.h"

namespace kvstream {

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Service::Session(grpc::CallbackServerContext*) {
  return new SessionCall(store_, sessions_);
}

grpc::ServerWriteReactor<v1::RetrieveEvent>* Service::Retrieve(grpc::CallbackServerContext*,
                                                               const v1::RetrieveRequest* req) {
  auto admitted = Admit(*sessions_, *req);
  if (!admitted.ok()) return EventStream<v1::RetrieveEvent>::Refused(ToGrpc(admitted.status()));
  return RetrieveCall::Start(store_, *std::move(admitted), *req);
}

grpc::ServerWriteReactor<v1::PersistEvent>* Service::Persist(grpc::CallbackServerContext*,
                                                             const v1::PersistRequest* req) {
  auto admitted = Admit(*sessions_, *req);
  if (!admitted.ok()) return EventStream<v1::PersistEvent>::Refused(ToGrpc(admitted.status()));
  return PersistCall::Start(store_, *std::move(admitted), *req, &staging_);
}

namespace {
// The keys of a Lookup or Unlock, each valid, or InvalidArgument naming the first that is not.
absl::StatusOr<std::vector<std::string>> ValidKeys(const google::protobuf::RepeatedPtrField<std::string>& given) {
  std::vector<std::string> keys(given.begin(), given.end());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = ValidateKey(keys[i]); !s.ok()) {
      return absl::InvalidArgumentError("key " + std::to_string(i) + ": " + std::string(s.message()));
    }
  }
  return keys;
}

constexpr double kMaxLockSeconds = 3600;
}  // namespace

grpc::ServerUnaryReactor* Service::Lookup(grpc::CallbackServerContext* ctx, const v1::LookupRequest* req,
                                          v1::LookupReply* reply) {
  auto* r = ctx->DefaultReactor();
  auto keys = ValidKeys(req->keys());
  if (!keys.ok()) {
    r->Finish(ToGrpc(keys.status()));
    return r;
  }
  const double lock = req->lock_seconds();
  if (!(lock >= 0 && lock <= kMaxLockSeconds)) {  // also refuses NaN
    r->Finish(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("lock_seconds must be between 0 and ", kMaxLockSeconds, ", got ", lock))));
    return r;
  }
  const auto found = lock > 0 ? store_->LookupAndLock(*keys, lock) : store_->Lookup(*keys);
  uint32_t prefix = 0;
  bool leading = true;
  for (const LookupResult& l : found) {
    auto* e = reply->add_entries();
    e->set_present(l.present);
    e->set_size(l.size);
    e->set_tier_mask(l.tier_mask);
    e->set_locked(l.locked);
    leading &= l.present;
    prefix += leading;
  }
  reply->set_prefix_hits(prefix);
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::Unlock(grpc::CallbackServerContext* ctx, const v1::UnlockRequest* req,
                                          v1::UnlockReply* reply) {
  auto* r = ctx->DefaultReactor();
  auto keys = ValidKeys(req->keys());
  if (!keys.ok()) {
    r->Finish(ToGrpc(keys.status()));
    return r;
  }
  reply->set_unlocked(static_cast<uint32_t>(store_->Unlock(*keys)));
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::Stats(grpc::CallbackServerContext* ctx, const v1::StatsRequest*,
                                         v1::StatsReply* reply) {
  ToProto(store_->Stats(), reply);
  reply->set_sessions(static_cast<uint32_t>(sessions_->count()));
  reply->set_arena_bytes(sessions_->arena_bytes());
  reply->set_arena_budget_bytes(sessions_->arena_budget());
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::Steps(grpc::CallbackServerContext* ctx, const v1::StepsRequest* req,
                                         v1::StepsReply* reply) {
  for (const StepRecord& s : store_->RecentSteps(req->max() ? req->max() : 32)) ToProto(s, reply->add_steps());
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::SetPolicies(grpc::CallbackServerContext* ctx, const v1::Policies* req,
                                               v1::Policies* reply) {
  auto* r = ctx->DefaultReactor();
  auto policies = FromProto(*req, store_->policies());
  if (!policies.ok()) {
    r->Finish(ToGrpc(policies.status()));
    return r;
  }
  spdlog::info("policies: routing {} batching {} writes {} replication {}", ToString(policies->routing),
               std::string(ToString(policies->batching)), std::string(ToString(policies->writes)),
               std::string(ToString(policies->replication)));
  const bool applied = store_->SetPolicies(*policies);
  ToProto(store_->policies(), reply);
  reply->set_pending(!applied);
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::Evict(grpc::CallbackServerContext* ctx, const v1::EvictRequest* req,
                                         v1::EvictReply* reply) {
  auto* r = ctx->DefaultReactor();
  auto result = store_->Evict(FromProto(*req));
  if (result.ok()) {
    reply->set_replicas(result->replicas);
    reply->set_bytes(result->bytes);
  }
  r->Finish(ToGrpc(result.status()));
  return r;
}

grpc::ServerUnaryReactor* Service::Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest*,
                                          v1::HealthReply* reply) {
  const HealthReport h = ComputeHealth(*store_, KVSTREAM_VERSION);
  reply->set_serving(h.serving);
  reply->set_version(h.version);
  for (const std::string& t : h.degraded_tiers) reply->add_degraded_tiers(t);
  for (const std::string& t : h.stalled_tiers) reply->add_stalled_tiers(t);
  for (const std::string& t : h.unusable_tiers) reply->add_unusable_tiers(t);
  for (const std::string& p : h.problems) reply->add_problems(p);
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

}  // namespace kvstream
