#include "service.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstream/key.h"
#include "proto_convert.h"
#include "spdlog/spdlog.h"

namespace kvstream {

grpc::Status ToGrpc(const absl::Status& s) {
  return s.ok() ? grpc::Status::OK
                : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {

// A session lives as long as its stream (see kvstream.proto).
class SessionReactor final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent> {
 public:
  SessionReactor(Store* store, SessionManager* sessions) : store_(store), sessions_(sessions) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side or went away: detach
      Finish(grpc::Status::OK);
      return;
    }
    if (session_ != nullptr || !request_.has_attach()) {
      Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a session stream carries exactly one attach"));
      return;
    }
    const auto& a = request_.attach();
    auto created = sessions_->Create(a.model(), a.rank(), a.world_size(), a.arena_bytes());
    if (!created.ok()) {
      Finish(ToGrpc(created.status()));
      return;
    }
    session_ = *created;
    // Fixed-buffer reads into the arena where the tiers allow it (else plain reads).
    registered_ = store_->RegisterMemory(session_->arena->data(), session_->arena->size()).ok();
    spdlog::info("session {} attached: model '{}' rank {}/{} arena {} bytes", session_->id, a.model(), a.rank(),
                 a.world_size(), session_->arena->size());
    auto* attached = event_.mutable_attached();
    attached->set_session_id(session_->id);
    attached->set_arena_bytes(session_->arena->size());
    attached->set_data_socket(sessions_->data_socket());
    attached->set_token(session_->token);
    StartWrite(&event_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {  // the client went away before it heard back: detach (OnDone follows Finish)
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    StartRead(&request_);  // nothing more is expected; this read ends when the client detaches
  }
  void OnDone() override {
    if (session_) {
      // Reads still in flight keep the kernel's reference to the buffer; later ones use plain I/O.
      if (registered_) store_->UnregisterMemory(session_->arena->data());
      sessions_->Remove(session_->id);
      spdlog::info("session {} detached", session_->id);
    }
    delete this;
  }

 private:
  Store* store_;
  SessionManager* sessions_;
  bool registered_ = false;
  v1::SessionRequest request_;
  v1::SessionEvent event_;
  std::shared_ptr<kvstream::Session> session_;
};

// A server stream whose events come from the store's I/O thread: they are queued and written one
// at a time. The reactor lives until both gRPC is done with it and the store has delivered its
// last event (the store's callbacks reference it).
template <typename Event>
class EventStream : public grpc::ServerWriteReactor<Event> {
 public:
  // Queues an event.
  void Push(Event event) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(event));
    MaybeWriteLocked();
  }
  // No more events: finish the stream once everything queued is written.
  void Close() {
    std::lock_guard lock(mu_);
    last_queued_ = true;
    MaybeWriteLocked();
  }
  // The store will not call back any more.
  void StoreDone() { Release(); }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) {
      broken_ = true;  // client gone: keep consuming the store's events, write nothing
      queue_.clear();
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    queue_.pop_front();
    MaybeWriteLocked();
  }
  void OnDone() override { Release(); }

 protected:
  void FailNow(const grpc::Status& status) {
    std::lock_guard lock(mu_);
    FinishLocked(status);
  }

 private:
  void MaybeWriteLocked() {
    if (writing_ || broken_ || finished_) return;
    if (!queue_.empty()) {
      writing_ = true;
      this->StartWrite(&queue_.front());
    } else if (last_queued_) {
      FinishLocked(grpc::Status::OK);
    }
  }
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }
  void Release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  std::mutex mu_;
  std::deque<Event> queue_;
  bool writing_ = false, last_queued_ = false, broken_ = false, finished_ = false;
  std::atomic<int> refs_{2};  // gRPC and the store
};

// Validates a request's chunks against the session's arena.
absl::Status CheckChunks(const kvstream::Session& s, const google::protobuf::RepeatedPtrField<v1::ChunkRange>& chunks,
                         size_t max_chunks) {
  if (chunks.empty()) return absl::InvalidArgumentError("no chunks in the request");
  if (static_cast<size_t>(chunks.size()) > max_chunks) {
    return absl::InvalidArgumentError("more than " + std::to_string(max_chunks) + " chunks in one request");
  }
  for (int i = 0; i < chunks.size(); ++i) {
    if (absl::Status k = ValidateKey(chunks[i].key()); !k.ok()) {
      return absl::InvalidArgumentError("chunk " + std::to_string(i) + ": " + std::string(k.message()));
    }
    if (absl::Status r = s.arena->CheckRange(chunks[i].offset(), chunks[i].length()); !r.ok()) {
      return absl::OutOfRangeError("chunk " + std::to_string(i) + ": " + std::string(r.message()));
    }
  }
  return absl::OkStatus();
}

constexpr size_t kMaxChunksPerRequest = 65536;

// The session a Retrieve or Persist request may use (its id and token match, every chunk lies in
// its arena), or null with the reason in `refused`.
template <typename Request>
std::shared_ptr<kvstream::Session> Admit(SessionManager* sessions, const Request& req, grpc::Status* refused) {
  std::shared_ptr<kvstream::Session> s = sessions->Authorize(req.session_id(), req.token());
  if (!s) {
    *refused = grpc::Status(grpc::StatusCode::NOT_FOUND,
                            "no session " + std::to_string(req.session_id()) + " with this token");
    return nullptr;
  }
  if (absl::Status c = CheckChunks(*s, req.chunks(), kMaxChunksPerRequest); !c.ok()) {
    *refused = ToGrpc(c);
    return nullptr;
  }
  return s;
}

class RetrieveReactor final : public EventStream<v1::RetrieveEvent> {
 public:
  RetrieveReactor(Store* store, SessionManager* sessions, const v1::RetrieveRequest* req) {
    grpc::Status refused;
    session_ = Admit(sessions, *req, &refused);
    if (!session_) {
      StoreDone();
      FailNow(refused);
      return;
    }
    std::vector<ChunkRead> batch;
    for (const v1::ChunkRange& c : req->chunks()) {
      batch.push_back({c.key(), session_->arena->data() + c.offset(), c.length()});
    }
    // The lambdas keep the session (and so the arena) alive until the store is done with it.
    store->RetrieveAsync(
        std::move(batch),
        [this](const ChunkResult& r) {
          v1::RetrieveEvent e;
          ToProto(r, e.mutable_chunk());
          Push(std::move(e));
        },
        [this, keep = session_](StepRecord rec) {
          v1::RetrieveEvent e;
          ToProto(rec, e.mutable_step());
          Push(std::move(e));
          Close();
          StoreDone();
        });
  }

 private:
  std::shared_ptr<kvstream::Session> session_;
};

class PersistReactor final : public EventStream<v1::PersistEvent> {
 public:
  PersistReactor(Store* store, SessionManager* sessions, const v1::PersistRequest* req) : store_(store) {
    grpc::Status refused;
    session_ = Admit(sessions, *req, &refused);
    if (!session_) {
      StoreDone();
      FailNow(refused);
      return;
    }
    for (const v1::ChunkRange& c : req->chunks()) chunks_.push_back({c.key(), c.offset(), c.length()});
    chunk_state_.resize(chunks_.size());
    // Every chunk's DURABLE event, and the end of staging, must come before the close.
    pending_ = static_cast<int>(chunks_.size()) + 1;
    // Stage without blocking gRPC's thread; if staging is full, a worker stages the rest (and
    // waits for space) so the daemon keeps answering other calls.
    size_t i = 0;
    for (; i < chunks_.size(); ++i) {
      if (!Stage(i, /*block=*/false)) break;
    }
    if (i == chunks_.size()) {
      Settle();
      return;
    }
    std::thread([this, i] {
      for (size_t k = i; k < chunks_.size(); ++k) Stage(k, /*block=*/true);
      Settle();
    }).detach();
  }

 private:
  struct ChunkState {
    bool staged = false;
    bool durable_waiting = false;  // the store reported durability before STAGED was sent
    absl::Status durable_status;
    uint32_t durable_mask = 0;
  };

  // Stages chunk i; returns false (nothing done) when !block and staging is full.
  bool Stage(size_t i, bool block) {
    const ArenaChunk& c = chunks_[i];
    const uint8_t* data = session_->arena->data() + c.offset;
    auto on_durable = [this, i](const std::string&, const PersistResult& r) { Durable(i, r.status, r.tier_mask); };
    absl::Status staged = block ? store_->Persist(c.key, data, c.length, on_durable)
                                : store_->TryPersist(c.key, data, c.length, on_durable);
    if (!block && absl::IsResourceExhausted(staged)) return false;
    bool settle = false;
    {
      std::lock_guard lock(state_mu_);
      v1::PersistEvent e;
      e.set_index(static_cast<uint32_t>(i));
      e.set_stage(v1::PersistEvent::STAGED);
      e.set_code(static_cast<int32_t>(staged.code()));
      e.set_message(std::string(staged.message()));
      Push(std::move(e));
      ChunkState& st = chunk_state_[i];
      st.staged = true;
      if (!staged.ok()) {  // never staged: its final answer is now
        PushDurable(i, staged, 0);
        settle = true;
      } else if (st.durable_waiting) {
        PushDurable(i, st.durable_status, st.durable_mask);
        settle = true;
      }
    }
    if (settle) Settle();
    return true;
  }

  // From the store's I/O thread.
  void Durable(size_t i, const absl::Status& status, uint32_t mask) {
    {
      std::lock_guard lock(state_mu_);
      ChunkState& st = chunk_state_[i];
      if (!st.staged) {  // STAGED goes first; Stage sends this one
        st.durable_waiting = true;
        st.durable_status = status;
        st.durable_mask = mask;
        return;
      }
      PushDurable(i, status, mask);
    }
    Settle();
  }

  void PushDurable(size_t i, const absl::Status& status, uint32_t mask) {
    v1::PersistEvent e;
    e.set_index(static_cast<uint32_t>(i));
    e.set_stage(v1::PersistEvent::DURABLE);
    e.set_code(static_cast<int32_t>(status.code()));
    e.set_message(std::string(status.message()));
    e.set_tier_mask(mask);
    Push(std::move(e));
  }

  void Settle() {
    if (pending_.fetch_sub(1) != 1) return;
    Close();
    StoreDone();  // may delete this
  }

  Store* store_;
  std::shared_ptr<kvstream::Session> session_;
  std::vector<ArenaChunk> chunks_;
  std::mutex state_mu_;
  std::vector<ChunkState> chunk_state_;
  std::atomic<int> pending_{0};
};

}  // namespace

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Service::Session(grpc::CallbackServerContext*) {
  return new SessionReactor(store_, sessions_);
}

grpc::ServerWriteReactor<v1::RetrieveEvent>* Service::Retrieve(grpc::CallbackServerContext*,
                                                               const v1::RetrieveRequest* req) {
  return new RetrieveReactor(store_, sessions_, req);
}

grpc::ServerWriteReactor<v1::PersistEvent>* Service::Persist(grpc::CallbackServerContext*,
                                                             const v1::PersistRequest* req) {
  return new PersistReactor(store_, sessions_, req);
}

grpc::ServerUnaryReactor* Service::Lookup(grpc::CallbackServerContext* ctx, const v1::LookupRequest* req,
                                          v1::LookupReply* reply) {
  auto* r = ctx->DefaultReactor();
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = ValidateKey(keys[i]); !s.ok()) {
      r->Finish(ToGrpc(absl::InvalidArgumentError("key " + std::to_string(i) + ": " + std::string(s.message()))));
      return r;
    }
  }
  const auto found = store_->Lookup(keys);
  uint32_t prefix = 0;
  bool leading = true;
  for (const LookupResult& l : found) {
    auto* e = reply->add_entries();
    e->set_present(l.present);
    e->set_size(l.size);
    e->set_tier_mask(l.tier_mask);
    leading &= l.present;
    prefix += leading;
  }
  reply->set_prefix_hits(prefix);
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* Service::Stats(grpc::CallbackServerContext* ctx, const v1::StatsRequest*,
                                         v1::StatsReply* reply) {
  ToProto(store_->Stats(), reply);
  reply->set_sessions(static_cast<uint32_t>(sessions_->count()));
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
  spdlog::info("policies: routing {} batching {} writes {}", ToString(policies->routing),
               std::string(ToString(policies->batching)), std::string(ToString(policies->writes)));
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
  reply->set_serving(true);
  reply->set_version(KVSTREAM_VERSION);
  for (const TierStats& t : store_->Stats().tiers) {
    if (t.read_errors + t.write_errors + t.checksum_failures > 0) reply->add_degraded_tiers(t.name);
  }
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

}  // namespace kvstream
