#include "service.h"

#include "health.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include <algorithm>
#include "admission.h"
#include "event_stream.h"
#include "kvstream/key.h"
#include "persist_call.h"
#include "proto_convert.h"
#include "retrieve_call.h"
#include "session_call.h"
#include "spdlog/spdlog.h"

namespace kvstream {

absl::StatusOr<std::shared_ptr<const Caller>> Service::CallerOf(const grpc::CallbackServerContext* ctx) const {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kCallerMetadata);
  if (it == metadata.end()) return nullptr;
  const absl::string_view hex(it->second.data(), it->second.size());
  std::shared_ptr<const Caller> caller;
  if (hex.size() == 64 && std::all_of(hex.begin(), hex.end(), absl::ascii_isxdigit)) {
    caller = sessions_->callers().Find(absl::HexStringToBytes(hex));
  }
  if (caller == nullptr && sessions_->access().isolated()) {
    return absl::UnauthenticatedError("unknown caller token: the data socket connection that proved it is closed "
                                      "(or kvstreamd restarted); connect again");
  }
  return caller;
}

absl::StatusOr<std::vector<std::string>> Service::StoreKeys(
    const grpc::CallbackServerContext* ctx, const google::protobuf::RepeatedPtrField<std::string>& given) const {
  auto caller = CallerOf(ctx);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = sessions_->access().MayUse(caller->get()); !s.ok()) return s;
  if (static_cast<size_t>(given.size()) > max_lookup_keys_) {
    return absl::InvalidArgumentError(absl::StrCat(given.size(), " keys in one call; the limit is ", max_lookup_keys_,
                                                   " (sessions.max_lookup_keys)"));
  }
  const uid_t uid = *caller ? (*caller)->uid : kAnonymousUid;
  std::vector<std::string> keys;
  keys.reserve(given.size());
  for (int i = 0; i < given.size(); ++i) {
    absl::StatusOr<std::string> key = sessions_->access().StoreKey(uid, given[i]);
    if (!key.ok()) return absl::InvalidArgumentError("key " + std::to_string(i) + ": " + std::string(key.status().message()));
    keys.push_back(*std::move(key));
  }
  return keys;
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Service::Session(grpc::CallbackServerContext* ctx) {
  absl::StatusOr<uid_t> owner = kAnonymousUid;
  auto caller = CallerOf(ctx);
  if (!caller.ok()) {
    owner = caller.status();
  } else if (absl::Status s = sessions_->access().MayUse(caller->get()); !s.ok()) {
    owner = s;
  } else if (*caller) {
    owner = (*caller)->uid;
  }
  return new SessionCall(store_, sessions_, std::move(owner), max_chunks_per_call_);
}

template <typename Request>
absl::StatusOr<Admitted> Service::AdmitCall(const grpc::CallbackServerContext* ctx, const Request& req) const {
  auto caller = CallerOf(ctx);
  if (!caller.ok()) return caller.status();
  return Admit(*sessions_, req, caller->get(), max_chunks_per_call_);
}

grpc::ServerWriteReactor<v1::RetrieveEvent>* Service::Retrieve(grpc::CallbackServerContext* ctx,
                                                               const v1::RetrieveRequest* req) {
  auto admitted = AdmitCall(ctx, *req);
  if (!admitted.ok()) return EventStream<v1::RetrieveEvent>::Refused(ToGrpc(admitted.status()));
  return RetrieveCall::Start(store_, *std::move(admitted));
}

grpc::ServerWriteReactor<v1::PersistEvent>* Service::Persist(grpc::CallbackServerContext* ctx,
                                                             const v1::PersistRequest* req) {
  auto admitted = AdmitCall(ctx, *req);
  if (!admitted.ok()) return EventStream<v1::PersistEvent>::Refused(ToGrpc(admitted.status()));
  return PersistCall::Start(store_, *std::move(admitted), &staging_);
}

namespace {
constexpr double kMaxLockSeconds = 3600;
}  // namespace

grpc::ServerUnaryReactor* Service::Lookup(grpc::CallbackServerContext* ctx, const v1::LookupRequest* req,
                                          v1::LookupReply* reply) {
  auto* r = ctx->DefaultReactor();
  auto keys = StoreKeys(ctx, req->keys());
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
  const std::vector<double> load = req->estimate_load() ? store_->LoadSeconds(found) : std::vector<double>{};
  uint32_t prefix = 0;
  bool leading = true;
  for (size_t i = 0; i < found.size(); ++i) {
    const LookupEntry& l = found[i];
    auto* e = reply->add_entries();
    if (!load.empty()) e->set_load_seconds(load[i]);
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
  auto keys = StoreKeys(ctx, req->keys());
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
  auto caller = CallerOf(ctx);
  if (absl::Status s = caller.ok() ? sessions_->access().MayAdminister(caller->get()) : caller.status(); !s.ok()) {
    r->Finish(ToGrpc(s));
    return r;
  }
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
  auto caller = CallerOf(ctx);
  if (absl::Status s = caller.ok() ? sessions_->access().MayAdminister(caller->get()) : caller.status(); !s.ok()) {
    r->Finish(ToGrpc(s));
    return r;
  }
  EvictRequest request = FromProto(*req);
  if (!request.key.empty()) {  // a key in the caller's own namespace
    auto key = sessions_->access().StoreKey(*caller ? (*caller)->uid : kAnonymousUid, request.key);
    if (!key.ok()) {
      r->Finish(ToGrpc(key.status()));
      return r;
    }
    request.key = *std::move(key);
  }
  auto result = store_->Evict(request);
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
