// kvstreamd's Service in-process: the real Service and SessionManager behind an in-process gRPC
// server, over a FakeStore that records every call and lets each test decide how persists end.
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "eventually.h"
#include "kvstream.grpc.pb.h"
#include "kvstream/store.h"
#include "retrieve_call.h"
#include "service.h"
#include "sessions.h"
#include "staging_worker.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr uint64_t kStoredBytes = 3000;    // every chunk the fake retrieves has this size
constexpr uint32_t kWrittenMask = 3;       // tiers the fake reports written
constexpr uint32_t kSyncedMask = 1;        // ... and synced
constexpr uint64_t kStagingLimit = 12345;  // the fake's Stats
constexpr uint64_t kArenaBudget = 64 << 20;
constexpr uint8_t Fill(size_t i) { return static_cast<uint8_t>(0x40 + i); }  // retrieved chunk i's bytes

// A Store that records calls. RetrieveAsync writes Fill(i) into chunk i and calls back at once.
// TryPersist answers as `staging` says; Persist (the blocking form) waits until the gate opens,
// then reports the write before it returns. SetPolicies applies at once unless told to defer.
class FakeStore final : public Store {
 public:
  enum class Staging { kWrittenInside, kHoldWritten, kFull };

  void set_staging(Staging s) { absl::MutexLock l(&mu_); staging_ = s; }
  void set_defer_policies(bool defer) { absl::MutexLock l(&mu_); defer_policies_ = defer; }
  // staging.when_full: drop (the default) or wait. Before the first call.
  void set_drop_when_full(bool drop) { config_.staging_drop_when_full = drop; }
  void OpenGate() { absl::MutexLock l(&mu_); gate_open_ = true; }
  // Reports every write held so far (Staging::kHoldWritten), from the calling thread.
  void CompleteHeld(const PersistResult& result) {
    std::vector<std::pair<std::string, PersistCallback>> held;
    { absl::MutexLock l(&mu_); held.swap(held_); }
    for (auto& [key, callback] : held) callback(key, result);
  }
  int data_calls() const { absl::MutexLock l(&mu_); return data_calls_; }
  int tries() const { absl::MutexLock l(&mu_); return try_calls_; }
  std::vector<std::string> waited() const { absl::MutexLock l(&mu_); return waited_; }
  std::string staged(const std::string& key) const {
    absl::MutexLock l(&mu_);
    return staged_.count(key) ? staged_.at(key) : "";
  }
  // Every Persist (blocking) ran on one thread, and never one that ran TryPersist (gRPC's).
  bool waited_on_one_thread_apart() const {
    absl::MutexLock l(&mu_);
    for (auto id : wait_threads_) if (try_threads_.count(id)) return false;
    return wait_threads_.size() <= 1;
  }
  int set_policies_calls() const { absl::MutexLock l(&mu_); return set_policies_calls_; }

  void RetrieveAsync(std::vector<ChunkRead> step, ChunkCallback on_chunk,
                     std::function<void(StepRecord)> on_done) override {
    { absl::MutexLock l(&mu_); ++data_calls_; }
    StepRecord record;
    record.id = 4242;
    record.routing = "fake";
    record.chunks = static_cast<uint32_t>(step.size());
    for (size_t i = 0; i < step.size(); ++i) {
      const uint64_t size = std::min<uint64_t>(step[i].dst_capacity, kStoredBytes);
      if (step[i].dst_fd >= 0) {  // client memory that may shrink: never stored to directly
        const std::string bytes(size, static_cast<char>(Fill(i)));
        REQUIRE(pwrite(step[i].dst_fd, bytes.data(), size, static_cast<off_t>(step[i].dst_fd_offset)) ==
                static_cast<ssize_t>(size));
      } else {
        std::memset(step[i].dst, Fill(i), size);
      }
      record.hits++;
      record.bytes += size;
      if (on_chunk) on_chunk({i, absl::OkStatus(), size, 1});
    }
    on_done(record);
  }
  absl::Status TryPersist(std::string_view key, const void* data, size_t size, PersistCallback on_written) override {
    Staging staging;
    {
      absl::MutexLock l(&mu_);
      ++data_calls_;
      ++try_calls_;
      try_threads_.insert(std::this_thread::get_id());
      staging = staging_;
      if (staging == Staging::kFull) return absl::ResourceExhaustedError("staging is full");
      staged_[std::string(key)].assign(static_cast<const char*>(data), size);
      if (staging == Staging::kHoldWritten) held_.emplace_back(std::string(key), std::move(on_written));
    }
    if (staging == Staging::kWrittenInside) on_written(std::string(key), {absl::OkStatus(), kWrittenMask, 0, "", kSyncedMask});
    return absl::OkStatus();
  }
  absl::Status Persist(std::string_view key, const void* data, size_t size, PersistCallback on_written) override {
    {
      absl::MutexLock l(&mu_);
      ++data_calls_;
      wait_threads_.insert(std::this_thread::get_id());
      waited_.emplace_back(key);
      mu_.Await(absl::Condition(&gate_open_));
      staged_[std::string(key)].assign(static_cast<const char*>(data), size);
    }
    on_written(std::string(key), {absl::OkStatus(), kWrittenMask, 0, "", kSyncedMask});
    return absl::OkStatus();
  }
  absl::Status PersistFromFile(std::string_view key, const FileRange& source, PersistCallback on_written,
                               bool wait) override {
    std::string bytes(source.size, '\0');
    if (pread(source.fd, bytes.data(), source.size, static_cast<off_t>(source.offset)) !=
        static_cast<ssize_t>(source.size)) {
      return absl::FailedPreconditionError("short read");
    }
    {
      absl::MutexLock l(&mu_);
      ++from_file_calls_;
    }
    return wait ? Persist(key, bytes.data(), bytes.size(), std::move(on_written))
                : TryPersist(key, bytes.data(), bytes.size(), std::move(on_written));
  }
  int from_file_calls() const { absl::MutexLock l(&mu_); return from_file_calls_; }
  bool SetPolicies(const Policies& policies) override {
    absl::MutexLock l(&mu_);
    ++set_policies_calls_;
    if (defer_policies_) return false;
    policies_ = policies;
    return true;
  }
  Policies policies() const override { absl::MutexLock l(&mu_); return policies_; }
  StoreStats Stats() const override {
    StoreStats s;
    s.staging_limit_bytes = kStagingLimit;
    return s;
  }
  void Flush() override {}
  std::vector<LookupEntry> Lookup(const std::vector<std::string>& keys) const override { return {}; }
  size_t PrefixHits(const std::vector<std::string>& keys) const override { return 0; }
  std::vector<double> LoadSeconds(const std::vector<LookupEntry>& entries) const override {
    return std::vector<double>(entries.size(), 0.0);
  }
  std::vector<LookupEntry> LookupAndLock(const std::vector<std::string>& keys, double) override {
    return std::vector<LookupEntry>(keys.size());
  }
  size_t Unlock(const std::vector<std::string>&) override { return 0; }
  absl::StatusOr<EvictResult> Evict(const EvictRequest&) override { return absl::UnimplementedError("fake"); }
  absl::Status RegisterMemory(void*, size_t, int, uint64_t) override { return absl::UnimplementedError("fake"); }
  void UnregisterMemory(void*) override {}
  std::vector<StepRecord> RecentSteps(size_t) const override { return {}; }
  const StoreConfig& config() const override { return config_; }

 private:
  mutable absl::Mutex mu_;
  Staging staging_ ABSL_GUARDED_BY(mu_) = Staging::kWrittenInside;
  bool gate_open_ ABSL_GUARDED_BY(mu_) = false;
  bool defer_policies_ ABSL_GUARDED_BY(mu_) = false;
  Policies policies_ ABSL_GUARDED_BY(mu_);
  int data_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int try_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int set_policies_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int from_file_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> staged_ ABSL_GUARDED_BY(mu_);  // key -> the bytes staged
  std::vector<std::string> waited_ ABSL_GUARDED_BY(mu_);             // keys given to Persist, in order
  std::set<std::thread::id> try_threads_ ABSL_GUARDED_BY(mu_), wait_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, PersistCallback>> held_ ABSL_GUARDED_BY(mu_);
  StoreConfig config_;
};

// The Service and a SessionManager (on a temporary data socket) behind an in-process server.
struct InProcessDaemon {
  explicit InProcessDaemon(uint64_t arena_budget = kArenaBudget)
      : sessions(dir.sub("data.sock"), 1 << 20, arena_budget), service(std::make_unique<Service>(&store, &sessions)) {
    REQUIRE(sessions.Start(0600).ok());
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    REQUIRE(server);
    stub = v1::KVStream::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  }
  ~InProcessDaemon() {
    StopServer(std::chrono::seconds(2));
    service.reset();
  }
  // As kvstreamd stops: calls still open get `grace`, then are cancelled.
  void StopServer(std::chrono::seconds grace) {
    if (!server) return;
    server->Shutdown(std::chrono::system_clock::now() + grace);
    server.reset();
  }

  TempDir dir;
  FakeStore store;
  SessionManager sessions;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::KVStream::Stub> stub;
};

// A session attached over the Session stream, as a client does; detached when destroyed.
struct AttachedSession {
  explicit AttachedSession(InProcessDaemon& d) : stream(d.stub->Session(&ctx)) {
    v1::SessionRequest req;
    req.mutable_attach()->set_world_size(1);
    req.mutable_attach()->set_arena_bytes(1 << 20);
    v1::SessionEvent event;
    REQUIRE(stream->Write(req));
    REQUIRE(stream->Read(&event));
    id = event.attached().session_id();
    token = event.attached().token();
    arena = d.sessions.Find(id)->arena->data();  // a client maps it from the data socket instead
  }
  ~AttachedSession() { Detach(); }
  void Detach() {
    if (!stream) return;
    stream->WritesDone();
    stream->Finish();
    stream.reset();
  }

  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream;
  uint64_t id = 0;
  std::string token;
  uint8_t* arena = nullptr;
};

template <typename Request>
Request MakeRequest(uint64_t id, const std::string& token, const std::vector<ChunkRange>& chunks) {
  Request req;
  req.set_session_id(id);
  req.set_token(token);
  for (const ChunkRange& c : chunks) {
    auto* r = req.add_chunks();
    r->set_key(c.key);
    r->set_offset(c.offset);
    r->set_length(c.length);
    r->set_region(c.region);
  }
  return req;
}

template <typename Event>
struct Streamed {
  std::vector<Event> events;
  grpc::Status status;
};

template <typename Event>
Streamed<Event> ReadToEnd(grpc::ClientReader<Event>& reader) {
  Streamed<Event> out;
  for (Event e; reader.Read(&e);) out.events.push_back(e);
  out.status = reader.Finish();
  return out;
}

Streamed<v1::RetrieveEvent> Retrieve(InProcessDaemon& d, const v1::RetrieveRequest& req) {
  grpc::ClientContext ctx;
  return ReadToEnd(*d.stub->Retrieve(&ctx, req));
}

Streamed<v1::PersistEvent> Persist(InProcessDaemon& d, const v1::PersistRequest& req) {
  grpc::ClientContext ctx;
  return ReadToEnd(*d.stub->Persist(&ctx, req));
}

// Every chunk has exactly one STAGED, then exactly one WRITTEN with `code`, `tier_mask` and `synced_mask`.
void CheckStagedThenWritten(const std::vector<v1::PersistEvent>& events, size_t chunks, int code, uint32_t tier_mask,
                            uint32_t synced_mask) {
  REQUIRE(events.size() == 2 * chunks);
  for (uint32_t i = 0; i < chunks; ++i) {
    std::vector<v1::PersistEvent> mine;
    for (const auto& e : events) if (e.index() == i) mine.push_back(e);
    REQUIRE(mine.size() == 2);
    CHECK(mine[0].stage() == v1::PersistEvent::STAGED);
    CHECK(mine[1].stage() == v1::PersistEvent::WRITTEN);
    CHECK(mine[1].code() == code);
    CHECK(mine[1].tier_mask() == tier_mask);
    CHECK(mine[1].synced_mask() == synced_mask);
  }
}

TEST_CASE("retrieve and persist refuse bad requests with clear codes and never reach the store") {
  InProcessDaemon d;
  AttachedSession s(d);
  std::string wrong_token = s.token;
  wrong_token[0] ^= 1;
  struct Refusal {
    const char* what;
    uint64_t id;
    std::string token;
    std::vector<ChunkRange> chunks;
    grpc::StatusCode code;
  };
  const std::vector<Refusal> refusals = {
      {"unknown session", s.id + 1, s.token, {{"k", 0, 4096}}, grpc::StatusCode::NOT_FOUND},
      {"wrong token", s.id, wrong_token, {{"k", 0, 4096}}, grpc::StatusCode::NOT_FOUND},
      {"outside the arena", s.id, s.token, {{"k", 0, 4096}, {"k2", (1 << 20) - 100, 4096}},
       grpc::StatusCode::OUT_OF_RANGE},
      {"empty key", s.id, s.token, {{"", 0, 4096}}, grpc::StatusCode::INVALID_ARGUMENT},
      {"key with NUL", s.id, s.token, {{std::string("a\0b", 3), 0, 4096}}, grpc::StatusCode::INVALID_ARGUMENT},
      {"no chunks", s.id, s.token, {}, grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const Refusal& r : refusals) {
    INFO(r.what);
    auto got = Retrieve(d, MakeRequest<v1::RetrieveRequest>(r.id, r.token, r.chunks));
    CHECK(got.status.error_code() == r.code);
    CHECK(got.events.empty());
    auto put = Persist(d, MakeRequest<v1::PersistRequest>(r.id, r.token, r.chunks));
    CHECK(put.status.error_code() == r.code);
    CHECK(put.events.empty());
  }
  CHECK(d.store.data_calls() == 0);
}

TEST_CASE("a retrieve streams each chunk's ChunkDone once, alone or in a batch, then the store's StepRecord") {
  InProcessDaemon d;
  AttachedSession s(d);
  const std::vector<ChunkRange> chunks = {{"a", 0, 4096}, {"b", 8192, 1000}, {"c", 65536, 8192}};
  auto got = Retrieve(d, MakeRequest<v1::RetrieveRequest>(s.id, s.token, chunks));
  REQUIRE(got.status.ok());
  REQUIRE(got.events.size() >= 2);
  REQUIRE(got.events.front().has_chunk());  // the first chunk is never held back
  std::multiset<uint32_t> seen;
  for (size_t i = 0; i + 1 < got.events.size(); ++i) {
    REQUIRE((got.events[i].has_chunk() || got.events[i].has_batch()));
    std::vector<v1::ChunkDone> done;
    if (got.events[i].has_chunk()) done.push_back(got.events[i].chunk());
    for (const auto& c : got.events[i].batch().chunks()) done.push_back(c);
    for (const v1::ChunkDone& c : done) {
      CHECK(c.code() == 0);
      CHECK(c.size() == std::min<uint64_t>(chunks[c.index()].length, kStoredBytes));
      seen.insert(c.index());
    }
  }
  CHECK(seen == std::multiset<uint32_t>{0, 1, 2});
  REQUIRE(got.events.back().has_step());
  CHECK(got.events.back().step().id() == 4242);
  CHECK(got.events.back().step().routing() == "fake");
  CHECK(got.events.back().step().hits() == 3);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint64_t size = std::min<uint64_t>(chunks[i].length, kStoredBytes);
    CHECK(std::vector<uint8_t>(s.arena + chunks[i].offset, s.arena + chunks[i].offset + size) ==
          std::vector<uint8_t>(size, Fill(i)));
  }
}

TEST_CASE("chunk events waiting behind a write travel as one batch, in order, never past the step record") {
  auto chunk = [](uint32_t index) {
    v1::RetrieveEvent e;
    e.mutable_chunk()->set_index(index);
    return e;
  };
  std::deque<v1::RetrieveEvent> queue;
  queue.push_back(chunk(7));
  CoalesceChunkEvents(&queue);  // one alone stays as it is
  REQUIRE(queue.size() == 1);
  CHECK(queue.front().has_chunk());
  queue.push_back(chunk(3));
  queue.push_back(chunk(5));
  queue.push_back(v1::RetrieveEvent());
  queue.back().mutable_step()->set_id(1);
  queue.push_back(chunk(9));  // cannot happen (the record is last), but must not move
  CoalesceChunkEvents(&queue);
  REQUIRE(queue.size() == 3);
  REQUIRE(queue[0].has_batch());
  std::vector<uint32_t> order;
  for (const auto& c : queue[0].batch().chunks()) order.push_back(c.index());
  CHECK(order == std::vector<uint32_t>{7, 3, 5});
  CHECK(queue[1].has_step());
  CHECK(queue[2].has_chunk());
  // A batch at the head absorbs the chunks behind it.
  queue.erase(queue.begin() + 1, queue.end());
  queue.push_back(chunk(11));
  CoalesceChunkEvents(&queue);
  REQUIRE(queue.size() == 1);
  CHECK(queue[0].batch().chunks_size() == 4);
  CHECK(queue[0].batch().chunks(3).index() == 11);
}

TEST_CASE("a persist sends each chunk's STAGED before its WRITTEN with the synced tiers whenever the store reports it") {
  InProcessDaemon d;
  AttachedSession s(d);
  const std::vector<ChunkRange> chunks = {{"p0", 0, 4096}, {"p1", 4096, 100}, {"p2", 65536, 5000}};
  for (size_t i = 0; i < chunks.size(); ++i) std::memset(s.arena + chunks[i].offset, 'a' + i, chunks[i].length);
  const auto req = MakeRequest<v1::PersistRequest>(s.id, s.token, chunks);

  SECTION("written before staging returns") {
    auto put = Persist(d, req);  // the fake reports the write from inside TryPersist
    REQUIRE(put.status.ok());
    CheckStagedThenWritten(put.events, chunks.size(), 0, kWrittenMask, kSyncedMask);
    for (size_t i = 0; i < chunks.size(); ++i) {
      CHECK(d.store.staged(chunks[i].key) == std::string(chunks[i].length, 'a' + i));
    }
  }
  SECTION("written (here failed) after STAGED was sent") {
    d.store.set_staging(FakeStore::Staging::kHoldWritten);
    grpc::ClientContext ctx;
    auto reader = d.stub->Persist(&ctx, req);
    std::vector<v1::PersistEvent> events(chunks.size());
    for (auto& e : events) REQUIRE(reader->Read(&e));  // the three STAGED: nothing written yet
    d.store.CompleteHeld({absl::DataLossError("every replica failed"), 0, kWrittenMask, "every replica failed", 0});
    for (v1::PersistEvent e; reader->Read(&e);) events.push_back(e);
    REQUIRE(reader->Finish().ok());
    CheckStagedThenWritten(events, chunks.size(), grpc::StatusCode::DATA_LOSS, 0, 0);
  }
}

TEST_CASE("persists that find staging full are dropped at once under when_full: drop, each chunk tried in order") {
  InProcessDaemon d;
  AttachedSession s(d);
  d.store.set_staging(FakeStore::Staging::kFull);
  const std::vector<ChunkRange> chunks = {{"a0", 0, 4096}, {"a1", 4096, 4096}};
  auto put = Persist(d, MakeRequest<v1::PersistRequest>(s.id, s.token, chunks));
  REQUIRE(put.status.ok());
  CHECK(d.store.waited().empty());  // nothing waited for room
  CHECK(d.store.tries() == 2);      // every chunk was offered, in order
  REQUIRE(put.events.size() == 4);  // STAGED and WRITTEN for each: refused
  for (const v1::PersistEvent& e : put.events) CHECK(e.code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_CASE("persists that find staging full are staged by the worker, in arrival order, while others are answered") {
  InProcessDaemon d;
  d.store.set_drop_when_full(false);
  AttachedSession s(d);
  d.store.set_staging(FakeStore::Staging::kFull);
  const std::vector<ChunkRange> first = {{"a0", 0, 4096}, {"a1", 4096, 4096}, {"a2", 8192, 4096}};
  const std::vector<ChunkRange> second = {{"b0", 16384, 4096}, {"b1", 20480, 4096}};
  Streamed<v1::PersistEvent> a, b;
  std::thread ta([&] { a = Persist(d, MakeRequest<v1::PersistRequest>(s.id, s.token, first)); });
  REQUIRE(Eventually([&] { return d.store.waited().size() == 1; }));  // a0 waits for space
  std::thread tb([&] { b = Persist(d, MakeRequest<v1::PersistRequest>(s.id, s.token, second)); });
  REQUIRE(Eventually([&] { return d.store.tries() == 2; }));  // b0 found staging full too

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatsReply stats;
  REQUIRE(d.stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());  // answered while a0 waits
  CHECK(stats.sessions() == 1);
  CHECK(stats.staging_limit_bytes() == kStagingLimit);

  d.store.OpenGate();  // space frees up
  ta.join();
  tb.join();
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  CheckStagedThenWritten(a.events, first.size(), 0, kWrittenMask, kSyncedMask);
  CheckStagedThenWritten(b.events, second.size(), 0, kWrittenMask, kSyncedMask);
  CHECK(d.store.waited() == std::vector<std::string>{"a0", "a1", "a2", "b0", "b1"});
  CHECK(d.store.waited_on_one_thread_apart());  // one worker, never a gRPC thread
}

TEST_CASE("a client gone mid-persist leaves nothing behind once the store's callbacks are done") {
  InProcessDaemon d;
  d.store.set_staging(FakeStore::Staging::kHoldWritten);
  AttachedSession s(d);
  std::weak_ptr<Session> session = d.sessions.Find(s.id);
  {
    grpc::ClientContext ctx;
    const auto req = MakeRequest<v1::PersistRequest>(s.id, s.token, {{"x", 0, 10}, {"y", 10, 10}});
    auto reader = d.stub->Persist(&ctx, req);
    v1::PersistEvent e;
    REQUIRE(reader->Read(&e));
    REQUIRE(reader->Read(&e));  // both STAGED; the writes are held by the store
    ctx.TryCancel();
    while (reader->Read(&e)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  s.Detach();
  REQUIRE(Eventually([&] { return d.sessions.count() == 0; }));
  CHECK_FALSE(session.expired());  // the call lives on (with the session) while the store holds it
  d.store.CompleteHeld({absl::OkStatus(), kWrittenMask, 0, "", kSyncedMask});
  CHECK(Eventually([&] { return session.expired(); }));  // then it is freed, and the arena with it
  d.store.set_staging(FakeStore::Staging::kWrittenInside);
  AttachedSession again(d);  // and the daemon serves on
  CHECK(Persist(d, MakeRequest<v1::PersistRequest>(again.id, again.token, {{"z", 0, 10}})).events.size() == 2);
}

TEST_CASE("shutdown stays prompt while a persist waits for staging space, and every call is freed") {
  InProcessDaemon d;
  d.store.set_drop_when_full(false);
  d.store.set_staging(FakeStore::Staging::kFull);
  AttachedSession s(d);  // its stream stays open through the shutdown
  std::weak_ptr<Session> session = d.sessions.Find(s.id);
  const auto first = MakeRequest<v1::PersistRequest>(s.id, s.token, {{"a0", 0, 10}, {"a1", 10, 10}});
  const auto second = MakeRequest<v1::PersistRequest>(s.id, s.token, {{"b0", 20, 10}});
  Streamed<v1::PersistEvent> a, b;
  std::thread ta([&] { a = Persist(d, first); });
  REQUIRE(Eventually([&] { return d.store.waited().size() == 1; }));  // a0 waits for space
  std::thread tb([&] { b = Persist(d, second); });
  REQUIRE(Eventually([&] { return d.store.tries() == 2; }));  // b waits behind it
  absl::Notification server_stopped;
  std::thread space_frees([&] {  // late, so that a shutdown waiting for the worker shows as slow, not hung
    server_stopped.WaitForNotificationWithTimeout(absl::Seconds(60));
    d.store.OpenGate();
  });
  const auto t0 = std::chrono::steady_clock::now();
  d.StopServer(std::chrono::seconds(1));  // open calls are cancelled (within 1 s), even a0's in the worker
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  server_stopped.Notify();
  ta.join();
  tb.join();
  CHECK_FALSE(a.status.ok());
  CHECK_FALSE(b.status.ok());
  space_frees.join();
  d.service.reset();  // joins the worker: every call it held is settled
  CHECK(Eventually([&] { return session.expired(); }));
}

TEST_CASE("SetPolicies replies with the policies in force, pending while the store defers the new ones") {
  InProcessDaemon d;
  auto set = [&](const std::string& routing, v1::Policies* reply) {
    grpc::ClientContext ctx;
    v1::Policies req;
    req.set_routing(routing);
    return d.stub->SetPolicies(&ctx, req, reply);
  };
  v1::Policies reply;
  d.store.set_defer_policies(true);
  REQUIRE(set("fastest", &reply).ok());
  CHECK(reply.routing() == "completion");  // still in force
  CHECK(reply.writes() == "deferred");
  CHECK(reply.pending());
  d.store.set_defer_policies(false);
  REQUIRE(set("static:0.25", &reply).ok());
  CHECK(reply.routing() == "static:0.25");
  CHECK_FALSE(reply.pending());
  CHECK(set("sideways", &reply).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(d.store.set_policies_calls() == 2);  // the refused request never reached the store
}

TEST_CASE("the staging worker runs jobs in order off the caller's thread, and at stop without waiting") {
  auto worker = std::make_unique<StagingWorker>();
  absl::Notification first_running;
  std::vector<std::string> ran;  // written by the worker only, read after it is joined
  std::thread::id worker_thread;
  worker->Add([&](const StagingWorker& w) {
    worker_thread = std::this_thread::get_id();
    first_running.Notify();
    while (!w.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a long wait for space
    ran.push_back("first");
  });
  worker->Add([&](const StagingWorker& w) { ran.push_back(w.stopping() ? "second, stopping" : "second"); });
  first_running.WaitForNotification();
  worker.reset();  // stops and joins: the first job sees stopping() and ends; the second runs stopping
  CHECK(ran == std::vector<std::string>{"first", "second, stopping"});
  CHECK(worker_thread != std::this_thread::get_id());
}

TEST_CASE("a session's budget is free once it detaches or its client gives up, though calls still hold it") {
  InProcessDaemon d(1 << 20);  // room for one session's arena
  d.store.set_staging(FakeStore::Staging::kHoldWritten);
  auto s = std::make_unique<AttachedSession>(d);
  grpc::ClientContext ctx;
  auto reader = d.stub->Persist(&ctx, MakeRequest<v1::PersistRequest>(s->id, s->token, {{"x", 0, 10}}));
  v1::PersistEvent e;
  REQUIRE(reader->Read(&e));  // STAGED: the call holds the session until the store says written
  SECTION("detached: free when the stream has ended") {
    s->Detach();
  }
  SECTION("the client gave up: free once the daemon sees it") {
    s->ctx.TryCancel();
    REQUIRE(Eventually([&] { return d.sessions.count() == 0; }));
  }
  CHECK(d.sessions.arena_bytes() == 0);
  AttachedSession next(d);  // the whole budget, at once
  d.store.CompleteHeld({absl::OkStatus(), kWrittenMask, 0, "", kSyncedMask});
  while (reader->Read(&e)) {
  }
  CHECK(reader->Finish().ok());
}

}  // namespace
}  // namespace kvstream::testing
