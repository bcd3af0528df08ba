// Who may do what on the socket, against a real kvstreamd: clients of two uids (forked children
// that drop root) under sessions.isolation uid never read, overwrite, look up or unlock each
// other's keys, not even with a leaked session token, which does not hand over the session's
// arena either; non-administrators' evict and policy calls are refused, and an administrator's
// evict of a key names its own; per-uid limits hold, and are on by default; a call's keys are
// capped; and under isolation none two uids share keys. Needs root (to switch uids).
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "arena.h"
#include "daemon_process.h"
#include "data_socket.h"
#include "kvstream.grpc.pb.h"
#include "kvstream/client.h"
#include "tenants.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

// Policies that differ from the defaults (completion routing): half the blocks on the first tier.
Policies StaticHalf() {
  Policies p;
  p.routing = {RoutingKind::kStatic, 0.5};
  return p;
}

std::unique_ptr<Client> AttachAs(const DaemonProcess& d, uint64_t arena = 8 << 20) {
  auto c = Client::Attach(d.socket(), {"m", 0, 1, arena});
  if (!c.ok()) {
    std::fprintf(stderr, "attach: %s\n", std::string(c.status().message()).c_str());
    return nullptr;
  }
  return *std::move(c);
}

// Persists `bytes` under `key` from `c`'s arena.
bool Put(Client& c, const std::string& key, const std::vector<uint8_t>& bytes) {
  std::memcpy(c.arena(), bytes.data(), bytes.size());
  std::vector<PersistResult> results;
  return c.Persist({{key, 0, bytes.size()}}, &results).ok() && results.size() == 1 && results[0].status.ok();
}

// Attaches a client of the calling uid and persists `bytes` under `key`: 0, or the expectation
// that failed.
int AttachAndPut(const DaemonProcess& d, const std::string& key, const std::vector<uint8_t>& bytes) {
  auto c = AttachAs(d);
  EXPECT_OR_RETURN(1, c != nullptr && Put(*c, key, bytes));
  return 0;
}

// Reads `key` into `c`'s arena; its bytes, or empty on a miss or failure.
std::vector<uint8_t> Get(Client& c, const std::string& key, size_t size) {
  std::vector<ChunkResult> results;
  if (!c.Retrieve({{key, 0, size}}, &results).ok() || results.size() != 1 || !results[0].status.ok()) return {};
  return std::vector<uint8_t>(c.arena(), c.arena() + results[0].size);
}

// A Retrieve (or, with `persist`, a Persist) of `key` into (or from) offset `offset` of session
// `session_id`'s arena with `token`, as any client of the socket can send it, with the caller
// token `caller` (none when empty); the call's final code.
grpc::StatusCode DataCall(const DaemonProcess& d, bool persist, uint64_t session_id, const std::string& token,
                          const std::string& caller, const std::string& key, uint64_t offset) {
  auto stub = v1::KVStream::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  if (!caller.empty()) ctx.AddMetadata("kvstream-caller", caller);
  v1::ChunkRange chunk;
  chunk.set_key(key);
  chunk.set_offset(offset);
  chunk.set_length(1 << 20);
  if (persist) {
    v1::PersistRequest req;
    req.set_session_id(session_id);
    req.set_token(token);
    *req.add_chunks() = chunk;
    auto reader = stub->Persist(&ctx, req);
    for (v1::PersistEvent e; reader->Read(&e);) {
    }
    return reader->Finish().error_code();
  }
  v1::RetrieveRequest req;
  req.set_session_id(session_id);
  req.set_token(token);
  *req.add_chunks() = chunk;
  auto reader = stub->Retrieve(&ctx, req);
  for (v1::RetrieveEvent e; reader->Read(&e);) {
  }
  return reader->Finish().error_code();
}

// Asks the data socket for the arena of the session with `token`: its descriptor, or why not.
absl::StatusOr<int> FetchArena(const DaemonProcess& d, const std::string& token) {
  absl::StatusOr<int> socket = ConnectDataSocket(d.socket() + ".data", 5);
  if (!socket.ok()) return socket.status();
  absl::Status sent = SendDataRequest(*socket, DataOp::kFetchArena, token, 0);
  absl::StatusOr<int> arena = sent.ok() ? ReceiveFd(*socket) : absl::StatusOr<int>(sent);
  close(*socket);
  return arena;
}

// A session of kAlice's whose id and token leaked (shared memory stands in for the leak): Alice
// attaches on a Session stream of her own, leaves its arena unfetched and holds the session until
// Stop, when she fetches the arena herself; Stop returns 0 only if she got it.
class LeakedSession {
 public:
  explicit LeakedSession(const DaemonProcess& d)
      : leak_(static_cast<Leak*>(
            mmap(nullptr, sizeof(Leak), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0))),
        alice_(kAlice, [this, &d](Tenant::Control& control) { return Hold(d, control); }) {}
  ~LeakedSession() {
    alice_.Stop();
    munmap(leak_, sizeof(Leak));
  }
  bool WaitReady() { return alice_.WaitReady(); }
  int Stop() { return alice_.Stop(); }
  uint64_t session_id() const { return leak_->session_id; }
  std::string token() const { return std::string(leak_->token, kSessionTokenBytes); }

 private:
  struct Leak {
    uint64_t session_id;
    char token[kSessionTokenBytes];
  };
  int Hold(const DaemonProcess& d, Tenant::Control& control) {
    EXPECT_OR_RETURN(1, leak_ != MAP_FAILED);
    absl::StatusOr<CallerIdentity> id = IdentifyCaller(d.socket() + ".data", 5);
    EXPECT_OR_RETURN(2, id.ok());
    auto stub = v1::KVStream::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("kvstream-caller", id->token);
    auto session = stub->Session(&ctx);
    v1::SessionRequest attach;
    attach.mutable_attach()->set_model("m");
    attach.mutable_attach()->set_world_size(1);
    attach.mutable_attach()->set_arena_bytes(8 << 20);
    v1::SessionEvent attached;
    EXPECT_OR_RETURN(3, session->Write(attach) && session->Read(&attached) && attached.has_attached());
    EXPECT_OR_RETURN(4, attached.attached().token().size() == kSessionTokenBytes);
    leak_->session_id = attached.attached().session_id();
    std::memcpy(leak_->token, attached.attached().token().data(), kSessionTokenBytes);
    control.Ready();
    while (!control.Stopping(1000)) {
    }
    absl::StatusOr<int> arena = FetchArena(d, attached.attached().token());
    EXPECT_OR_RETURN(5, arena.ok());  // still hers to take
    close(*arena);
    session->WritesDone();
    session->Finish();
    return 0;
  }

  Leak* const leak_;
  Tenant alice_;
};

std::string Isolated(const std::string& extra = "") {
  return "{max_arena: 64MiB, isolation: uid, admin_group: \"" + std::to_string(kAdmins) + "\"" + extra + "}";
}

TEST_CASE("under isolation uid one uid cannot read, overwrite, look up or unlock another's keys") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  const auto alice_bytes = Payload(1 << 20, 1), bob_bytes = Payload(1 << 20, 2);

  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          EXPECT_OR_RETURN(2, Put(*c, "prefix-0", alice_bytes));
          auto look = c->Lookup({"prefix-0"}, nullptr, 60);  // locked for a minute
          EXPECT_OR_RETURN(3, look.ok() && (*look)[0].present && (*look)[0].locked);
          return 0;
        }) == 0);
  CHECK(RunAs(kBob, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          size_t prefix = 9;
          auto look = c->Lookup({"prefix-0"}, &prefix);
          EXPECT_OR_RETURN(2, look.ok() && !(*look)[0].present && prefix == 0);  // cannot probe
          EXPECT_OR_RETURN(3, Get(*c, "prefix-0", 1 << 20).empty());             // cannot read
          auto unlocked = c->Unlock({"prefix-0"});
          EXPECT_OR_RETURN(4, unlocked.ok() && *unlocked == 0);                  // cannot unlock
          EXPECT_OR_RETURN(5, Put(*c, "prefix-0", bob_bytes));                   // its own key
          EXPECT_OR_RETURN(6, Get(*c, "prefix-0", 1 << 20) == bob_bytes);
          return 0;
        }) == 0);
  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          EXPECT_OR_RETURN(2, Get(*c, "prefix-0", 1 << 20) == alice_bytes);  // not overwritten
          auto unlocked = c->Unlock({"prefix-0"});
          EXPECT_OR_RETURN(3, unlocked.ok() && *unlocked == 1);  // its own lock was still held
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid evict and policies are for administrators only") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  CHECK(RunAs(kBob, [&] {
          auto c = Client::Connect(d.socket());
          EXPECT_OR_RETURN(1, c.ok());
          EvictRequest all;
          all.all = true;
          EXPECT_OR_RETURN(2, absl::IsPermissionDenied((*c)->Evict(all).status()));
          EXPECT_OR_RETURN(3, absl::IsPermissionDenied((*c)->SetPolicies(StaticHalf()).status()));
          EXPECT_OR_RETURN(4, (*c)->Stats().ok());   // read-only calls stay open
          EXPECT_OR_RETURN(5, (*c)->Health().ok());
          EXPECT_OR_RETURN(6, (*c)->Steps(8).ok());
          return 0;
        }) == 0);
  // A member of the admin group, and root.
  CHECK(RunAs(kCarol, [&] {
          auto c = Client::Connect(d.socket());
          EXPECT_OR_RETURN(1, c.ok());
          EXPECT_OR_RETURN(2, (*c)->SetPolicies(StaticHalf()).ok());
          EvictRequest all;
          all.all = true;
          EXPECT_OR_RETURN(3, (*c)->Evict(all).ok());
          return 0;
        }, {kAdmins}) == 0);
  CHECK(RunAs(0, [&] {
          auto c = Client::Connect(d.socket());
          EXPECT_OR_RETURN(1, c.ok() && (*c)->SetPolicies(Policies{}).ok());
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid an administrator's evict of a key evicts its own, not another uid's") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  const auto alice_bytes = Payload(1 << 20, 1);
  CHECK(RunAs(kAlice, [&] { return AttachAndPut(d, "prefix-0", alice_bytes); }) == 0);
  CHECK(RunAs(kCarol, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr && Put(*c, "prefix-0", Payload(1 << 20, 2)));
          EvictRequest key;
          key.key = "prefix-0";
          auto evicted = c->Evict(key);
          EXPECT_OR_RETURN(2, evicted.ok() && evicted->replicas > 0);
          auto look = c->Lookup({"prefix-0"});
          EXPECT_OR_RETURN(3, look.ok() && !(*look)[0].present);  // its own key is gone
          return 0;
        }, {kAdmins}) == 0);
  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr && Get(*c, "prefix-0", 1 << 20) == alice_bytes);
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid a call without a caller token touches no key") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  CHECK(RunAs(kBob, [&] {
          auto channel = grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials());
          auto stub = v1::KVStream::NewStub(channel);
          v1::LookupRequest req;
          req.add_keys("prefix-0");
          v1::LookupReply reply;
          grpc::ClientContext anonymous;
          EXPECT_OR_RETURN(1, stub->Lookup(&anonymous, req, &reply).error_code() == grpc::StatusCode::UNAUTHENTICATED);
          grpc::ClientContext forged;  // a token nobody was given
          forged.AddMetadata("kvstream-caller", std::string(64, 'a'));
          EXPECT_OR_RETURN(2, stub->Lookup(&forged, req, &reply).error_code() == grpc::StatusCode::UNAUTHENTICATED);
          v1::UnlockRequest unlock;
          unlock.add_keys("prefix-0");
          v1::UnlockReply unlocked;
          grpc::ClientContext anonymous_unlock;
          EXPECT_OR_RETURN(3, stub->Unlock(&anonymous_unlock, unlock, &unlocked).error_code() ==
                                  grpc::StatusCode::UNAUTHENTICATED);
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("per-uid limits on sessions and arena bytes hold, and a lookup's keys are capped") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "",
                  Isolated(", max_sessions_per_uid: 2, arena_budget_per_uid: 24MiB, max_lookup_keys: 100"), "0666");
  REQUIRE(d.Start());
  CHECK(RunAs(kAlice, [&] {
          auto a = AttachAs(d);
          EXPECT_OR_RETURN(1, a != nullptr);
          auto big = Client::Attach(d.socket(), {"m", 0, 1, 20 << 20});  // 8 + 20 > 24 MiB
          EXPECT_OR_RETURN(2, absl::IsResourceExhausted(big.status()));
          EXPECT_OR_RETURN(3, big.status().message().find("arena_budget_per_uid") != std::string::npos);
          auto b = AttachAs(d);
          EXPECT_OR_RETURN(4, b != nullptr);
          auto third = Client::Attach(d.socket(), {"m", 0, 1, 4 << 20});
          EXPECT_OR_RETURN(5, absl::IsResourceExhausted(third.status()));
          EXPECT_OR_RETURN(6, third.status().message().find("max_sessions_per_uid") != std::string::npos);
          std::vector<std::string> keys(101, "k");
          EXPECT_OR_RETURN(7, absl::IsInvalidArgument(a->Lookup(keys).status()));
          keys.pop_back();
          EXPECT_OR_RETURN(8, a->Lookup(keys).ok());
          return 0;
        }) == 0);
  CHECK(RunAs(kBob, [&] {  // another uid's limits are its own
          auto a = AttachAs(d, 16 << 20);
          auto b = AttachAs(d);
          EXPECT_OR_RETURN(1, a != nullptr && b != nullptr);
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid a leaked session token is refused to another uid, with or without its caller token") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  const auto alice_bytes = Payload(1 << 20, 1);
  CHECK(RunAs(kAlice, [&] { return AttachAndPut(d, "prefix-0", alice_bytes); }) == 0);
  LeakedSession leaked(d);
  REQUIRE(leaked.WaitReady());
  CHECK(RunAs(kBob, [&] {
          const std::string token = leaked.token();
          absl::StatusOr<CallerIdentity> bob = IdentifyCaller(d.socket() + ".data", 5);
          EXPECT_OR_RETURN(1, bob.ok());
          // Read Alice's key, overwrite it from the arena's second MiB (zeros): each refused.
          for (const bool persist : {false, true}) {
            EXPECT_OR_RETURN(2, DataCall(d, persist, leaked.session_id(), token, bob->token, "prefix-0", persist ? 1 << 20 : 0) ==
                                    grpc::StatusCode::PERMISSION_DENIED);
            EXPECT_OR_RETURN(3, DataCall(d, persist, leaked.session_id(), token, "", "prefix-0", persist ? 1 << 20 : 0) ==
                                    grpc::StatusCode::UNAUTHENTICATED);
          }
          return 0;
        }) == 0);
  CHECK(leaked.Stop() == 0);
  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr && Get(*c, "prefix-0", 1 << 20) == alice_bytes);  // never overwritten
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid a leaked session token does not hand the session's arena to another uid") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");
  REQUIRE(d.Start());
  LeakedSession leaked(d);
  REQUIRE(leaked.WaitReady());
  CHECK(RunAs(kBob, [&] {
          absl::StatusOr<int> arena = FetchArena(d, leaked.token());
          EXPECT_OR_RETURN(1, !arena.ok());
          return 0;
        }) == 0);
  CHECK(leaked.Stop() == 0);  // Alice fetches her arena: it was never handed out
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid one uid holds at most half of the sessions and of the arena budget by default") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(", max_sessions: 4, arena_budget: 64MiB"), "0666");
  REQUIRE(d.Start());
  Tenant bob(kBob, [&](Tenant::Control& control) {
    auto big = Client::Attach(d.socket(), {"m", 0, 1, 40 << 20});  // more than half the budget
    EXPECT_OR_RETURN(1, absl::IsResourceExhausted(big.status()));
    EXPECT_OR_RETURN(2, big.status().message().find("arena_budget_per_uid") != std::string::npos);
    std::vector<std::unique_ptr<Client>> held;
    for (int i = 0; i < 4; ++i) {  // as many as it can get
      auto c = Client::Attach(d.socket(), {"m", 0, 1, 8 << 20});
      if (!c.ok()) {
        EXPECT_OR_RETURN(3, absl::IsResourceExhausted(c.status()));
        EXPECT_OR_RETURN(4, c.status().message().find("max_sessions_per_uid") != std::string::npos);
        break;
      }
      held.push_back(*std::move(c));
    }
    EXPECT_OR_RETURN(5, held.size() == 2);  // half of max_sessions
    control.Ready();
    while (!control.Stopping(1000)) {
    }
    return 0;
  });
  REQUIRE(bob.WaitReady());
  CHECK(RunAs(kAlice, [&] {  // the other half is there for another uid
          auto a = AttachAs(d, 16 << 20);
          auto b = AttachAs(d, 16 << 20);
          EXPECT_OR_RETURN(1, a != nullptr && b != nullptr);
          return 0;
        }) == 0);
  CHECK(bob.Stop() == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("a retrieve or persist naming more chunks than sessions.max_chunks_per_call is refused, changing nothing") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666");  // the default: 16384
  REQUIRE(d.Start());
  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          std::vector<ChunkRange> chunks;
          for (int i = 0; i <= 16384; ++i) chunks.push_back({"k" + std::to_string(i), 0, 4096});
          std::vector<ChunkResult> results;
          const auto too_many = c->Retrieve(chunks, &results);
          EXPECT_OR_RETURN(2, absl::IsInvalidArgument(too_many.status()));
          EXPECT_OR_RETURN(3, too_many.status().message().find("max_chunks_per_call") != std::string::npos);
          EXPECT_OR_RETURN(4, absl::IsInvalidArgument(c->Persist(chunks)));
          auto found = c->Lookup({"k0", "k16384"});
          EXPECT_OR_RETURN(5, found.ok() && !(*found)[0].present && !(*found)[1].present);  // nothing was stored
          chunks.pop_back();
          EXPECT_OR_RETURN(6, c->Retrieve(chunks, &results).ok());  // 16384: every one a miss
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("with isolation none two uids share keys and may administer") {
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", "{max_arena: 64MiB}", "0666");
  REQUIRE(d.Start());
  const auto bytes = Payload(1 << 20, 3);
  CHECK(RunAs(kAlice, [&] { return AttachAndPut(d, "prefix-0", bytes); }) == 0);
  CHECK(RunAs(kBob, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          EXPECT_OR_RETURN(2, Get(*c, "prefix-0", 1 << 20) == bytes);
          EXPECT_OR_RETURN(3, c->SetPolicies(StaticHalf()).ok());
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

TEST_CASE("under isolation uid one uid filling a tier and locking it for an hour leaves another uid its share") {
  // Tiers of 16 chunks (512 KiB files); each uid is guaranteed a quarter of a tier (4 chunks) and
  // may hold as much locked (the defaults under isolation uid).
  if (SkipWithoutRoot()) return;
  SharedDir shared;
  DaemonProcess d(shared.dir, "", "", Isolated(), "0666", "8MiB");
  REQUIRE(d.Start());
  constexpr size_t kPayload = (512 << 10) - 4096;  // a 4 KiB header page and this: 512 KiB
  const auto keys = [](const char* who, int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(std::string(who) + std::to_string(i));
    return out;
  };
  // Persists `names` from one arena, one chunk after the other; true if each call succeeded.
  const auto put_all = [](Client& c, const std::vector<std::string>& names) {
    for (const std::string& k : names) {
      if (!Put(c, k, Payload(kPayload, k.size() + k.back()))) return false;
    }
    return true;
  };
  CHECK(RunAs(kAlice, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          const std::vector<std::string> mine = keys("alice-", 15);  // 7.5 MiB of the 8
          EXPECT_OR_RETURN(2, put_all(*c, mine));
          auto look = c->Lookup(mine, nullptr, 3600);  // locked for an hour
          EXPECT_OR_RETURN(3, look.ok());
          size_t present = 0, locked = 0;
          for (const LookupEntry& e : *look) present += e.present, locked += e.locked;
          EXPECT_OR_RETURN(4, present == 15);
          std::fprintf(stderr, "alice: %zu of 15 chunks locked\n", locked);
          EXPECT_OR_RETURN(5, locked == 4);  // a quarter of the tier; the reply says which were not
          return 0;
        }) == 0);
  CHECK(RunAs(kBob, [&] {
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          const std::vector<std::string> mine = keys("bob-", 16);
          put_all(*c, mine);  // chunks that find no room fail alone
          auto look = c->Lookup(mine);
          EXPECT_OR_RETURN(2, look.ok());
          size_t kept = 0;
          for (const LookupEntry& e : *look) kept += e.present && e.tier_mask == 3u;
          std::fprintf(stderr, "bob: %zu of 16 chunks kept on both tiers\n", kept);
          EXPECT_OR_RETURN(3, kept >= 4);  // at least its share
          return 0;
        }) == 0);
  CHECK(RunAs(kAlice, [&] {  // alice's locked chunks stayed
          auto c = AttachAs(d);
          EXPECT_OR_RETURN(1, c != nullptr);
          auto look = c->Lookup(keys("alice-", 4));
          EXPECT_OR_RETURN(2, look.ok());
          for (const LookupEntry& e : *look) EXPECT_OR_RETURN(3, e.present);
          return 0;
        }) == 0);
  CHECK(d.Stop() == 0);
}

}  // namespace
}  // namespace kvstream::testing
