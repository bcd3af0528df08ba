// kvstreamd end to end: a real daemon process on temporary tiers, driven by the C++ client.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "daemon_process.h"
#include "kvstream/client.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

void WaitForSessions(Client& c, uint32_t want) {
  for (int i = 0; i < 300; ++i) {
    uint32_t n = 0;
    REQUIRE(c.Stats(&n).ok());
    if (n == want) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("sessions did not reach " << want);
}

TEST_CASE("two sessions persist and retrieve across both tiers byte for byte") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto a = AttachOrFail(d, 0, 2);
  auto b = AttachOrFail(d, 1, 2);
  const size_t chunk = 1 << 20;
  std::vector<std::vector<uint8_t>> data;
  std::vector<ChunkRange> put_a, put_b;
  for (int i = 0; i < 8; ++i) {
    data.push_back(Payload(chunk, 100 + i));
    Client& c = i % 2 ? *b : *a;
    const uint64_t off = (i / 2) * chunk;
    std::memcpy(c.arena() + off, data[i].data(), chunk);
    (i % 2 ? put_b : put_a).push_back({"k" + std::to_string(i), off, chunk});
  }
  std::vector<PersistResult> pr;
  REQUIRE(a->Persist(put_a, &pr).ok());
  for (const auto& r : pr) CHECK(r.tier_mask == 3u);
  REQUIRE(b->Persist(put_b).ok());
  size_t prefix = 0;
  auto look = a->Lookup({"k0", "k1", "k2", "nope", "k3"}, &prefix);
  REQUIRE(look.ok());
  CHECK(prefix == 3);
  CHECK((*look)[0].size == chunk);
  // Each session reads all 8 chunks into its own arena, concurrently.
  auto read_all = [&](Client& c, StepRecord* rec, std::vector<ChunkResult>* results) {
    std::vector<ChunkRange> chunks;
    for (int i = 0; i < 8; ++i) chunks.push_back({"k" + std::to_string(i), 16 * chunk + i * chunk, chunk});
    std::memset(c.arena() + 16 * chunk, 0, 8 * chunk);
    auto r = c.Retrieve(chunks, results);
    REQUIRE(r.ok());
    *rec = *r;
  };
  StepRecord ra, rb;
  std::vector<ChunkResult> res_a, res_b;
  std::thread ta([&] { read_all(*a, &ra, &res_a); });
  read_all(*b, &rb, &res_b);
  ta.join();
  for (int i = 0; i < 8; ++i) {
    REQUIRE(res_a[i].status.ok());
    REQUIRE(res_b[i].status.ok());
    REQUIRE(std::memcmp(a->arena() + 16 * chunk + i * chunk, data[i].data(), chunk) == 0);
    REQUIRE(std::memcmp(b->arena() + 16 * chunk + i * chunk, data[i].data(), chunk) == 0);
  }
  CHECK(ra.hits == 8);
  CHECK(ra.tiers.size() == 2);
  CHECK(ra.tiers[0].bytes + ra.tiers[1].bytes == 8 * chunk);
  CHECK(ra.tiers[1].bytes + rb.tiers[1].bytes > 0);  // the second tier served reads
  auto steps = a->Steps(10);
  REQUIRE(steps.ok());
  CHECK(steps->size() == 2);
  // Session arenas are registered for fixed-buffer reads where the tiers support it, piece by
  // piece as the daemon faults them in after the attach: steps read once that is done use them.
  auto fixed_everywhere = [&] {
    auto stats = a->Stats();
    REQUIRE(stats.ok());
    return std::all_of(stats->tiers.begin(), stats->tiers.end(),
                       [](const TierStats& t) { return !(t.fixed_buffers && t.direct_io) || t.fixed_ops > 0; });
  };
  for (int i = 0; i < 200 && !fixed_everywhere(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    read_all(*a, &ra, &res_a);
  }
  CHECK(fixed_everywhere());
}

TEST_CASE("daemons of two nodes share a tier, one killed with -9 leaves the other serving and its next start cleans up") {
  TempDir a_dir, b_dir, shared_dir;
  const std::string shared = shared_dir.sub("pfs");
  auto shared_tier = [&] { return "  - {name: pfs, path: " + shared + ", capacity: 1GiB, shared: true, miss_ttl: 0s}\n"; };
  DaemonProcess a(a_dir, "node: node-a\n", shared_tier());
  DaemonProcess b(b_dir, "node: node-b\n", shared_tier());
  REQUIRE(a.Start());
  REQUIRE(b.Start());
  auto ca = AttachOrFail(a);
  auto cb = AttachOrFail(b);
  const size_t chunk = 1 << 20;
  std::vector<std::vector<uint8_t>> data;
  std::vector<ChunkRange> put;
  for (int i = 0; i < 12; ++i) {
    data.push_back(Payload(chunk, 300 + i));
    std::memcpy(ca->arena() + i * chunk, data[i].data(), chunk);
    put.push_back({"from-a-" + std::to_string(i), i * chunk, chunk});
  }
  std::vector<PersistResult> pr;
  REQUIRE(ca->Persist(put, &pr).ok());
  for (const auto& r : pr) CHECK(r.tier_mask == 7u);
  // Node b finds a's chunks on the shared tier and reads them byte for byte (chunks first..first+5).
  auto read_from_b = [&](int first, std::vector<ChunkResult>* results) {
    std::vector<ChunkRange> chunks;
    for (int i = 0; i < 6; ++i) chunks.push_back({"from-a-" + std::to_string(first + i), 16 * chunk + i * chunk, chunk});
    std::memset(cb->arena() + 16 * chunk, 0, 6 * chunk);
    auto rec = cb->Retrieve(chunks, results);
    REQUIRE(rec.ok());
    for (int i = 0; i < 6; ++i) {
      REQUIRE(results->at(i).status.ok());
      REQUIRE(std::memcmp(cb->arena() + 16 * chunk + i * chunk, data[first + i].data(), chunk) == 0);
    }
    return *rec;
  };
  std::vector<ChunkResult> results;
  StepRecord rec = read_from_b(0, &results);
  CHECK(rec.hits == 6);
  // a dies mid-write: a persist of many chunks is in flight when it is killed.
  std::vector<ChunkRange> more;
  for (int i = 0; i < 24; ++i) more.push_back({"late-" + std::to_string(i), (i % 8) * chunk, chunk});
  std::thread writer([&] { (void)ca->Persist(more); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  a.Kill();
  writer.join();
  ca.reset();
  // b keeps serving a's published chunks: those it copied, and from the shared tier those it
  // never read before (all of them from the shared tier: b has no copy of its own).
  rec = read_from_b(0, &results);
  CHECK(rec.hits == 6);
  rec = read_from_b(6, &results);
  CHECK(rec.hits == 6);
  CHECK(rec.tiers[2].bytes == 6 * chunk);
  // a's next start removes its temporaries (if the kill left any: a deterministic case is in
  // shared_tier_test) and serves again.
  auto temporaries = [&] {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(shared + "/.nodes/node-a")) {
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    }
    return n;
  };
  INFO("temporaries the kill left: " << temporaries());
  DaemonProcess again(a_dir, "node: node-a\n", shared_tier());
  REQUIRE(again.Start());
  CHECK(temporaries() == 0);
  auto ca2 = AttachOrFail(again);
  std::vector<ChunkResult> mine;
  std::vector<ChunkRange> chunks;
  for (int i = 0; i < 6; ++i) chunks.push_back({"from-a-" + std::to_string(i), i * chunk, chunk});
  auto rec2 = ca2->Retrieve(chunks, &mine);
  REQUIRE(rec2.ok());
  CHECK(rec2->hits == 6);
  for (int i = 0; i < 6; ++i) REQUIRE(std::memcmp(ca2->arena() + i * chunk, data[i].data(), chunk) == 0);
  auto stats = cb->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->shared_copies == 12);
  CHECK(stats->tiers[2].shared);
  CHECK(stats->tiers[2].foreign_chunks >= 12);
}

TEST_CASE("persisted chunks survive a daemon restart") {
  TempDir dir;
  const auto data = Payload(3 << 20, 5);
  {
    DaemonProcess d(dir);
    REQUIRE(d.Start());
    auto c = AttachOrFail(d);
    std::memcpy(c->arena(), data.data(), data.size());
    REQUIRE(c->Persist({{"persisted", 0, data.size()}}).ok());
    c.reset();
    CHECK(d.Stop() == 0);
  }
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  std::vector<ChunkResult> results;
  auto rec = c->Retrieve({{"persisted", 8 << 20, 4 << 20}}, &results);
  REQUIRE(rec.ok());
  REQUIRE(results[0].status.ok());
  CHECK(results[0].size == data.size());
  CHECK(std::memcmp(c->arena() + (8 << 20), data.data(), data.size()) == 0);
}

TEST_CASE("bad requests get clear errors and the daemon keeps serving") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d, 0, 1, 16 << 20);
  std::memset(c->arena(), 7, 4096);
  REQUIRE(c->Persist({{"ok", 0, 4096}}).ok());

  auto outside = c->Retrieve({{"ok", (16 << 20) - 100, 4096}});
  CHECK(absl::IsOutOfRange(outside.status()));
  CHECK(std::string(outside.status().message()).find("outside the session arena") != std::string::npos);
  CHECK(absl::IsOutOfRange(c->Persist({{"x", UINT64_MAX - 10, 100}})));
  CHECK(absl::IsInvalidArgument(c->Retrieve({{"", 0, 4096}}).status()));
  CHECK(absl::IsInvalidArgument(c->Retrieve({{std::string(2000, 'k'), 0, 4096}}).status()));
  CHECK(absl::IsInvalidArgument(c->Lookup({std::string("a\0b", 3)}).status()));
  // Malformed UTF-8 is refused as a bad key, by every call that takes keys (D6).
  const std::string not_text = "k\xff\xfe";
  for (const absl::Status& s : {c->Lookup({not_text}).status(), c->Retrieve({{not_text, 0, 4096}}).status(),
                                c->Persist({{not_text, 0, 4096}}), c->Evict({not_text, "", 0, false}).status()}) {
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find("UTF-8") != std::string::npos);
  }
  auto oversize = Client::Attach(d.socket(), {"m", 0, 1, 1ull << 40});
  CHECK(absl::IsInvalidArgument(oversize.status()));
  CHECK(absl::IsInvalidArgument(Client::Attach(d.socket(), {"m", 3, 2, 1 << 20}).status()));

  // Nothing changed; the daemon still serves.
  std::vector<ChunkResult> results;
  auto rec = c->Retrieve({{"ok", 8192, 4096}, {"missing", 16384, 4096}}, &results);
  REQUIRE(rec.ok());
  CHECK(results[0].status.ok());
  CHECK(absl::IsNotFound(results[1].status));
  CHECK(c->arena()[8192] == 7);
  auto stats = c->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->chunks == 1);
}

TEST_CASE("a client killed mid-retrieve leaves no session or descriptor behind") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  const size_t chunk = 4 << 20;
  for (int i = 0; i < 8; ++i) {
    std::memset(c->arena() + i * chunk, i, chunk);
  }
  std::vector<ChunkRange> chunks;
  for (int i = 0; i < 8; ++i) chunks.push_back({"big" + std::to_string(i), i * static_cast<uint64_t>(chunk), chunk});
  REQUIRE(c->Persist(chunks).ok());
  const size_t fds_before = d.OpenFds();
  const pid_t child = fork();
  if (child == 0) {
    std::vector<const char*> argv = {"victim_client", d.socket().c_str()};
    for (const ChunkRange& ch : chunks) argv.push_back(ch.key.c_str());
    argv.push_back(nullptr);
    execv(VICTIM_CLIENT_PATH, const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  WaitForSessions(*c, 1);
  size_t fds_after = 0;
  for (int i = 0; i < 300; ++i) {
    fds_after = d.OpenFds();
    if (fds_after <= fds_before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(fds_after <= fds_before);
  // No arena of the dead session is open in the daemon.
  size_t arenas = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd")) {
    std::error_code ec;
    arenas += std::filesystem::read_symlink(e.path(), ec).string().find("kvstream-session-") != std::string::npos;
  }
  CHECK(arenas == 1);  // the surviving session's
  // And the daemon still serves the surviving session.
  std::vector<ChunkResult> results;
  REQUIRE(c->Retrieve({chunks[0]}, &results).ok());
  CHECK(results[0].status.ok());
}

TEST_CASE("a second daemon on the same socket and a bad config are refused clearly") {
  TempDir dir;
  DaemonProcess first(dir);
  REQUIRE(first.Start());
  TempDir other;
  DaemonProcess second(other);
  // Point the second daemon's config at the first one's socket.
  {
    std::ifstream in(second.config());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string from = other.sub("kvstreamd.sock");
    text.replace(text.find(from), from.size(), first.socket());
    std::ofstream(second.config()) << text;
  }
  REQUIRE_FALSE(second.Start());
  CHECK(WEXITSTATUS(second.exit_status()) == 1);
  TempDir bad;
  DaemonProcess typo(bad, "tierz: []\n");
  REQUIRE_FALSE(typo.Start());
  CHECK(WEXITSTATUS(typo.exit_status()) == 2);
  CHECK(first.Connectable());
}

}  // namespace
}  // namespace kvstream::testing

#include <cstdio>
#include <fstream>

namespace kvstream::testing {
namespace {

// Runs kvstreamctl with `args`; returns its exit code and fills `out` with its stdout.
int Ctl(const DaemonProcess& d, const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(KVSTREAMCTL_PATH) + " --socket " + d.socket() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  const int status = pclose(p);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("kvstreamctl put, get, lookup, stats, steps, evict and policy round trip") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  const auto data = Payload(1234567, 9);
  std::ofstream(dir.sub("in.bin"), std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size());
  std::string out;
  REQUIRE(Ctl(d, "put doc/1 " + dir.sub("in.bin"), &out) == 0);
  CHECK(out.find("written to tier mask 0x3, not synced") != std::string::npos);  // fsync: none
  REQUIRE(Ctl(d, "get doc/1 " + dir.sub("out.bin"), &out) == 0);
  std::ifstream in(dir.sub("out.bin"), std::ios::binary);
  std::vector<uint8_t> back((std::istreambuf_iterator<char>(in)), {});
  CHECK((back == data));
  REQUIRE(Ctl(d, "--json lookup doc/1 doc/2", &out) == 0);
  CHECK(out.find("\"prefix_hits\": 1") != std::string::npos);
  REQUIRE(Ctl(d, "--json stats", &out) == 0);
  CHECK(out.find("\"chunks\": 1") != std::string::npos);
  REQUIRE(Ctl(d, "tiers", &out) == 0);
  CHECK(out.find("fast") != std::string::npos);
  CHECK(out.find("slow") != std::string::npos);
  REQUIRE(Ctl(d, "steps", &out) == 0);
  CHECK(out.find("gap") != std::string::npos);
  REQUIRE(Ctl(d, "evict --key doc/1 --tier slow", &out) == 0);
  CHECK(out.find("evicted 1 replicas") != std::string::npos);
  REQUIRE(Ctl(d, "evict --all", &out) == 0);
  CHECK(Ctl(d, "get doc/1 " + dir.sub("gone.bin"), &out) == 1);
  CHECK(out.find("not stored") != std::string::npos);
  CHECK(Ctl(d, "evict --tier nosuch --all", &out) == 1);
  CHECK(out.find("no tier named") != std::string::npos);
  REQUIRE(Ctl(d, "policy", &out) == 0);
  CHECK(out.find("routing completion, batching step, writes deferred") != std::string::npos);
  REQUIRE(Ctl(d, "policy --routing static:0.25 --writes immediate", &out) == 0);
  CHECK(out.find("routing static:0.25, batching step, writes immediate") != std::string::npos);
  REQUIRE(Ctl(d, "--json stats", &out) == 0);
  CHECK(out.find("\"routing\": \"static:0.25\"") != std::string::npos);
  CHECK(Ctl(d, "policy --routing sideways", &out) == 1);  // refused, nothing changed
  CHECK(out.find("not one of") != std::string::npos);
  REQUIRE(Ctl(d, "policy", &out) == 0);
  CHECK(out.find("routing static:0.25") != std::string::npos);
  d.Stop();
  CHECK(Ctl(d, "stats", &out) == 1);
  CHECK(out.find("no kvstreamd answers") != std::string::npos);
}

TEST_CASE("a persist under fsync none is reported written not synced and under fsync chunk durable") {
  const bool chunk = GENERATE(false, true);
  const std::string fsync = chunk ? "chunk" : "none";
  CAPTURE(fsync);
  TempDir dir;
  DaemonProcess d(dir, "policies: {fsync: " + fsync + "}\n");
  REQUIRE(d.Start());
  {
    auto c = AttachOrFail(d);
    const auto data = Payload(300000, 17);
    std::memcpy(c->arena(), data.data(), data.size());
    std::vector<PersistResult> results;
    REQUIRE(c->Persist({{"synced?", 0, data.size()}}, &results).ok());
    REQUIRE(results.size() == 1);
    CHECK(results[0].tier_mask == 3u);
    CHECK(results[0].synced_mask == (chunk ? 3u : 0u));
    CHECK(results[0].durable() == chunk);
    auto stats = c->Stats();
    REQUIRE(stats.ok());
    CHECK(stats->fsync == (chunk ? FsyncPolicy::kChunk : FsyncPolicy::kNone));
  }
  std::ofstream(dir.sub("in.bin"), std::ios::binary) << "a chunk put by kvstreamctl";
  std::string out;
  REQUIRE(Ctl(d, "put doc/1 " + dir.sub("in.bin"), &out) == 0);
  CHECK(out.find(chunk ? "durable (synced) on tier mask 0x3" : "written to tier mask 0x3, not synced: a power cut may lose it") !=
        std::string::npos);
  CHECK(out.find(chunk ? "not synced" : "durable") == std::string::npos);
  REQUIRE(Ctl(d, "--json put doc/2 " + dir.sub("in.bin"), &out) == 0);
  CHECK(out.find(chunk ? "\"durable\":true" : "\"durable\":false") != std::string::npos);
  CHECK(out.find(chunk ? "\"synced_mask\":3" : "\"synced_mask\":0") != std::string::npos);
  REQUIRE(Ctl(d, "stats", &out) == 0);
  CHECK(out.find(chunk ? "fsync chunk (persists are synced: durable)"
                       : "fsync none (persists are written, not synced: a power cut may lose them)") != std::string::npos);
}

}  // namespace
}  // namespace kvstream::testing

#include <grpcpp/grpcpp.h>

#include "kvstream.grpc.pb.h"

namespace kvstream::testing {
namespace {

TEST_CASE("sessions abandoned before their reply are freed and shutdown stays prompt") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto channel = grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials());
  auto stub = v1::KVStream::NewStub(channel);
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext ctx;
    auto stream = stub->Session(&ctx);
    v1::SessionRequest req;
    req.mutable_attach()->set_world_size(1);
    req.mutable_attach()->set_arena_bytes(1 << 20);
    stream->Write(req);
    ctx.TryCancel();  // gone before the daemon's reply
    stream->Finish();
  }
  auto c = Client::Connect(d.socket());
  REQUIRE(c.ok());
  WaitForSessions(**c, 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(d.Stop() == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
}

TEST_CASE("a 4 GiB arena attaches with the default settings, and again as soon as the first one closed") {
  TempDir dir;
  DaemonProcess d(dir, "", "", "{max_arena: 4GiB, arena_budget: 4GiB}");  // room for one
  REQUIRE(d.Start());
  for (int i = 0; i < 2; ++i) {
    auto c = Client::Attach(d.socket(), {"big", 0, 1, 4ull << 30});
    REQUIRE(c.ok());
    REQUIRE((*c)->arena_size() == 4ull << 30);
    // Usable at once, while the daemon is still faulting it in: a chunk at its far end.
    uint8_t* last = (*c)->arena() + (4ull << 30) - (1 << 20);
    std::memset(last, 'a' + i, 1 << 20);
    const std::string key = "far" + std::to_string(i);
    REQUIRE((*c)->Persist({{key, (4ull << 30) - (1 << 20), 1 << 20}}).ok());
    std::memset(last, 0, 1 << 20);
    std::vector<ChunkResult> results;
    REQUIRE((*c)->Retrieve({{key, (4ull << 30) - (1 << 20), 1 << 20}}, &results).ok());
    CHECK(results[0].status.ok());
    CHECK(last[0] == 'a' + i);
    CHECK(last[(1 << 20) - 1] == 'a' + i);
  }  // the client closes: its session is gone (and its budget free) before the destructor returns
}

TEST_CASE("a session's arena is usable only with its token") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto owner = AttachOrFail(d);
  std::memset(owner->arena(), 1, 4096);
  REQUIRE(owner->Persist({{"mine", 0, 4096}}).ok());
  auto channel = grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials());
  auto stub = v1::KVStream::NewStub(channel);
  v1::RetrieveRequest req;
  req.set_session_id(owner->session_id());  // someone else's id, without its token
  auto* c = req.add_chunks();
  c->set_key("mine");
  c->set_offset(0);
  c->set_length(4096);
  grpc::ClientContext ctx;
  auto reader = stub->Retrieve(&ctx, req);
  v1::RetrieveEvent e;
  CHECK_FALSE(reader->Read(&e));
  CHECK(reader->Finish().error_code() == grpc::StatusCode::NOT_FOUND);
}

// `count` chunks p0, p1, ... of `size` bytes at the start of the arena, chunk i filled with i + 1.
std::vector<ChunkRange> FillChunks(Client& c, int count, size_t size) {
  std::vector<ChunkRange> chunks;
  for (int i = 0; i < count; ++i) {
    std::memset(c.arena() + i * size, i + 1, size);
    chunks.push_back({"p" + std::to_string(i), i * static_cast<uint64_t>(size), size});
  }
  return chunks;
}

TEST_CASE("persists larger than staging wait for space under when_full: wait, without blocking the daemon") {
  TempDir dir;
  DaemonProcess d(dir, "staging: {limit: 3MiB, when_full: wait}\n");
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  const size_t chunk = 1 << 20;
  const std::vector<ChunkRange> chunks = FillChunks(*c, 24, chunk);
  std::vector<PersistResult> results;
  std::thread health([&] {  // other calls are answered meanwhile
    auto other = Client::Connect(d.socket());
    REQUIRE(other.ok());
    for (int i = 0; i < 20; ++i) REQUIRE((*other)->Stats().ok());
  });
  REQUIRE(c->Persist(chunks, &results).ok());
  health.join();
  for (const PersistResult& r : results) CHECK(r.tier_mask == 3u);
  std::vector<ChunkResult> got;
  REQUIRE(c->Retrieve({{"p23", 30 * chunk, chunk}}, &got).ok());
  REQUIRE(got[0].status.ok());
  CHECK(c->arena()[30 * chunk] == 24);
}

TEST_CASE("persists that find staging full are dropped and counted by default, and the rest is stored") {
  // Staging holds one 3 MiB chunk: the next ones of the call arrive while it is being written.
  // Whether a given one finds room depends on the write's speed; the answers must agree.
  TempDir dir;
  DaemonProcess d(dir, "staging: {limit: 4MiB}\n");
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  const size_t chunk = 3 << 20;
  const std::vector<ChunkRange> chunks = FillChunks(*c, 8, chunk);
  std::vector<PersistResult> results;
  const absl::Status first = c->Persist(chunks, &results);  // nothing waits for room
  REQUIRE(results.size() == chunks.size());
  uint64_t dropped = 0;
  std::vector<ChunkRange> kept;
  for (size_t i = 0; i < results.size(); ++i) {
    INFO(chunks[i].key << ": " << results[i].status);
    if (results[i].status.ok()) {
      CHECK(results[i].tier_mask == 3u);
      kept.push_back(chunks[i]);
    } else {
      CHECK(absl::IsResourceExhausted(results[i].status));
      CHECK(absl::StrContains(results[i].status.message(), "staging is full: dropped"));
      ++dropped;
    }
  }
  CHECK(first.ok() == (dropped == 0));
  REQUIRE_FALSE(kept.empty());
  CHECK(kept.front().key == "p0");  // staging was empty: the call's first chunk is never dropped
  auto stats = c->Stats();
  REQUIRE(stats.ok());
  CHECK(stats->persists_dropped == dropped);
  CHECK(stats->persist_dropped_bytes == dropped * chunk);
  for (size_t i = 0; i < kept.size(); ++i) kept[i].offset = (8 + i) * static_cast<uint64_t>(chunk);
  std::vector<ChunkResult> got;
  REQUIRE(c->Retrieve(kept, &got).ok());
  for (size_t i = 0; i < kept.size(); ++i) {
    REQUIRE(got[i].status.ok());
    CHECK(c->arena()[kept[i].offset] == std::stoi(kept[i].key.substr(1)) + 1);
  }
}

}  // namespace
}  // namespace kvstream::testing
