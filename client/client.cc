#include "kvstream/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "arena.h"
#include "data_socket.h"
#include "kvstream.grpc.pb.h"
#include "proto_convert.h"

namespace kvstream {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

constexpr int kDataSocketTimeoutS = 5;  // the daemon answers at once or not at all

absl::StatusOr<int> FetchArena(const std::string& data_socket, const std::string& token) {
  absl::StatusOr<int> fd = ConnectDataSocket(data_socket, kDataSocketTimeoutS);
  if (!fd.ok()) return fd.status();
  absl::Status sent = SendDataRequest(*fd, DataOp::kFetchArena, token, 0);
  absl::StatusOr<int> arena_fd = sent.ok() ? ReceiveFd(*fd) : absl::StatusOr<int>(sent);
  close(*fd);
  return arena_fd;
}

// One region request on the data socket: its reply's value.
absl::StatusOr<uint32_t> AskDataSocket(const std::string& data_socket, DataOp op, const std::string& token,
                                       uint64_t argument, int fd = -1) {
  absl::StatusOr<int> socket = ConnectDataSocket(data_socket, kDataSocketTimeoutS);
  if (!socket.ok()) return socket.status();
  absl::Status sent = SendDataRequest(*socket, op, token, argument, fd);
  absl::StatusOr<uint32_t> value = sent.ok() ? ReceiveDataReply(*socket) : absl::StatusOr<uint32_t>(sent);
  close(*socket);
  return value;
}

// The session and chunk fields shared by RetrieveRequest and PersistRequest.
template <typename Request>
void FillRequest(uint64_t session_id, const std::string& token, const std::vector<ChunkRange>& chunks, Request* req) {
  req->set_session_id(session_id);
  req->set_token(token);
  for (const ChunkRange& c : chunks) {
    auto* r = req->add_chunks();
    r->set_key(c.key);
    r->set_offset(c.offset);
    r->set_length(c.length);
    r->set_region(c.region);
  }
}

}  // namespace

struct Client::Impl {
  ~Impl() {
    if (identity >= 0) close(identity);
  }
  // Proves who this process is on the daemon's data socket (`<socket>.data`), so calls carry a
  // caller token (DataOp::kIdentify). A daemon that cannot say leaves the calls anonymous, which
  // only a daemon with sessions.isolation uid refuses, saying so.
  void Identify(const std::string& socket_path) {
    absl::StatusOr<CallerIdentity> id = IdentifyCaller(socket_path + ".data", kDataSocketTimeoutS);
    if (!id.ok()) return;
    identity = id->connection;
    caller_token = std::move(id->token);
  }
  // Every call carries the caller token.
  void Prepare(grpc::ClientContext* ctx) const {
    if (!caller_token.empty()) ctx->AddMetadata(kCallerMetadata, caller_token);
  }
  int identity = -1;  // the data socket connection that keeps caller_token valid
  std::string caller_token;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KVStream::Stub> stub;
  grpc::ClientContext session_context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> session;
  uint64_t session_id = 0;
  std::string token;
  std::string data_socket;
  std::unique_ptr<Arena> arena;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (impl_->session) {
    impl_->session->WritesDone();  // detach
    impl_->session->Finish();
  }
}

absl::StatusOr<std::unique_ptr<Client>> Client::Attach(const std::string& socket_path, const AttachOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  impl->stub = v1::KVStream::NewStub(impl->channel);
  impl->Identify(socket_path);
  impl->Prepare(&impl->session_context);
  impl->session_context.set_wait_for_ready(false);
  impl->session = impl->stub->Session(&impl->session_context);
  v1::SessionRequest req;
  auto* a = req.mutable_attach();
  a->set_model(options.model);
  a->set_rank(options.rank);
  a->set_world_size(options.world_size);
  a->set_arena_bytes(options.arena_bytes);
  v1::SessionEvent event;
  if (!impl->session->Write(req) || !impl->session->Read(&event) || !event.has_attached()) {
    impl->session->WritesDone();
    absl::Status s = FromGrpc(impl->session->Finish());
    impl->session.reset();
    return s.ok() ? absl::UnavailableError("kvstreamd closed the session stream") : s;
  }
  impl->session_id = event.attached().session_id();
  impl->token = event.attached().token();
  // Next to the control socket as this process reaches it: the daemon's own path for it
  // (attached.data_socket) may lie in another mount namespace (a daemon in a container). Where
  // there is none (the socket reached through a link to it alone), the daemon's path.
  impl->data_socket = std::filesystem::absolute(socket_path + ".data").string();
  if (access(impl->data_socket.c_str(), F_OK) != 0) impl->data_socket = event.attached().data_socket();
  auto fd = FetchArena(impl->data_socket, event.attached().token());
  if (!fd.ok()) return fd.status();
  auto arena = Arena::Map(*fd);
  if (!arena.ok()) return arena.status();
  impl->arena = *std::move(arena);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path) {
  auto impl = std::make_unique<Impl>();
  impl->channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  if (!impl->channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(2))) {
    return absl::UnavailableError("no kvstreamd answers on " + socket_path);
  }
  impl->stub = v1::KVStream::NewStub(impl->channel);
  impl->Identify(socket_path);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

uint64_t Client::session_id() const { return impl_->session_id; }
uint8_t* Client::arena() const { return impl_->arena ? impl_->arena->data() : nullptr; }
uint64_t Client::arena_size() const { return impl_->arena ? impl_->arena->size() : 0; }

absl::StatusOr<uint32_t> Client::AddRegion(int fd, uint64_t size, bool device_pinned) {
  if (!impl_->session) return absl::FailedPreconditionError("a connection without a session has no regions");
  return AskDataSocket(impl_->data_socket, device_pinned ? DataOp::kAddPinnedRegion : DataOp::kAddRegion,
                       impl_->token, size, fd);
}

absl::Status Client::RemoveRegion(uint32_t region) {
  if (!impl_->session) return absl::FailedPreconditionError("a connection without a session has no regions");
  return AskDataSocket(impl_->data_socket, DataOp::kRemoveRegion, impl_->token, region).status();
}

absl::StatusOr<std::vector<LookupEntry>> Client::Lookup(const std::vector<std::string>& keys, size_t* prefix_hits,
                                                         double lock_seconds, std::vector<double>* load_seconds) {
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_lock_seconds(lock_seconds);
  req.set_estimate_load(load_seconds != nullptr);
  v1::LookupReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Lookup(&ctx, req, &reply)); !s.ok()) return s;
  std::vector<LookupEntry> out;
  for (const auto& e : reply.entries()) out.push_back({e.present(), e.size(), e.tier_mask(), e.locked()});
  if (load_seconds) {
    load_seconds->clear();
    for (const auto& e : reply.entries()) load_seconds->push_back(e.load_seconds());
  }
  if (prefix_hits) *prefix_hits = reply.prefix_hits();
  return out;
}

absl::StatusOr<size_t> Client::Unlock(const std::vector<std::string>& keys) {
  v1::UnlockRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  v1::UnlockReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Unlock(&ctx, req, &reply)); !s.ok()) return s;
  return static_cast<size_t>(reply.unlocked());
}

absl::StatusOr<StepRecord> Client::Retrieve(const std::vector<ChunkRange>& chunks, std::vector<ChunkResult>* results,
                                            const std::function<void(const ChunkResult&)>& on_chunk) {
  if (!impl_->arena) return absl::FailedPreconditionError("retrieve needs an attached session");
  v1::RetrieveRequest req;
  FillRequest(impl_->session_id, impl_->token, chunks, &req);
  if (results) results->assign(chunks.size(), ChunkResult{});
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  auto reader = impl_->stub->Retrieve(&ctx, req);
  v1::RetrieveEvent event;
  StepRecord record;
  bool have_record = false;
  while (reader->Read(&event)) {
    auto deliver = [&](const v1::ChunkDone& done) {
      ChunkResult r = FromProto(done);
      if (results && r.index < results->size()) (*results)[r.index] = r;
      if (on_chunk) on_chunk(r);
    };
    if (event.has_chunk()) {
      deliver(event.chunk());
    } else if (event.has_batch()) {
      for (const v1::ChunkDone& done : event.batch().chunks()) deliver(done);
    } else if (event.has_step()) {
      record = FromProto(event.step());
      have_record = true;
    }
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  if (!have_record) return absl::DataLossError("kvstreamd ended the retrieve without a step record");
  return record;
}

absl::Status Client::Persist(const std::vector<ChunkRange>& chunks, std::vector<PersistResult>* results) {
  if (!impl_->arena) return absl::FailedPreconditionError("persist needs an attached session");
  v1::PersistRequest req;
  FillRequest(impl_->session_id, impl_->token, chunks, &req);
  if (results) results->assign(chunks.size(), PersistResult{});
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  auto reader = impl_->stub->Persist(&ctx, req);
  v1::PersistEvent event;
  absl::Status first_error;
  while (reader->Read(&event)) {
    if (event.stage() != v1::PersistEvent::WRITTEN) continue;
    const auto code = static_cast<absl::StatusCode>(event.code());
    PersistResult r;
    r.status = absl::Status(code, event.message());
    r.tier_mask = event.tier_mask();
    r.lost_mask = event.lost_mask();
    r.lost_reason = code == absl::StatusCode::kOk ? event.message() : std::string();
    r.synced_mask = event.synced_mask();
    if (!r.status.ok() && first_error.ok()) first_error = r.status;
    if (results && event.index() < results->size()) (*results)[event.index()] = r;
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  return first_error;
}

absl::StatusOr<StoreStats> Client::Stats(uint32_t* sessions) {
  v1::StatsReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Stats(&ctx, v1::StatsRequest(), &reply)); !s.ok()) return s;
  if (sessions) *sessions = reply.sessions();
  return FromProto(reply);
}

absl::StatusOr<HealthReport> Client::Health() {
  v1::HealthReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Health(&ctx, v1::HealthRequest(), &reply)); !s.ok()) return s;
  return HealthReport{reply.serving(), reply.version(), {reply.degraded_tiers().begin(), reply.degraded_tiers().end()},
                      {reply.stalled_tiers().begin(), reply.stalled_tiers().end()},
                      {reply.unusable_tiers().begin(), reply.unusable_tiers().end()},
                      {reply.problems().begin(), reply.problems().end()}};
}

absl::StatusOr<std::vector<StepRecord>> Client::Steps(uint32_t max) {
  v1::StepsRequest req;
  req.set_max(max);
  v1::StepsReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Steps(&ctx, req, &reply)); !s.ok()) return s;
  std::vector<StepRecord> out;
  for (const auto& r : reply.steps()) out.push_back(FromProto(r));
  return out;
}

absl::StatusOr<Client::PoliciesInForce> Client::SetPolicies(const Policies& policies) {
  v1::Policies req, reply;
  ToProto(policies, &req);
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->SetPolicies(&ctx, req, &reply)); !s.ok()) return s;
  auto in_force = FromProto(reply, Policies{});
  if (!in_force.ok()) return in_force.status();
  return PoliciesInForce{*in_force, reply.pending()};
}

absl::StatusOr<EvictResult> Client::Evict(const EvictRequest& request) {
  v1::EvictRequest req;
  ToProto(request, &req);
  v1::EvictReply reply;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx);
  if (absl::Status s = FromGrpc(impl_->stub->Evict(&ctx, req, &reply)); !s.ok()) return s;
  return EvictResult{reply.replicas(), reply.bytes()};
}

}  // namespace kvstream
