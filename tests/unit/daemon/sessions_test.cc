// Sessions and the node-wide arena budget (D3): attaches and client regions beyond it are refused
// with a clear error, and the bytes come back when a session's arena or region is freed (not
// before: reads into it may still be in flight). Regions travel over the real data socket.
#include "sessions.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "arena.h"
#include "data_socket.h"
#include "shared_memory.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

TEST_CASE("attaches beyond the arena budget are refused and a removed session gives its bytes back") {
  TempDir dir;
  constexpr uint64_t kArena = 16 << 20;
  SessionManager sessions(dir.sub("data.sock"), 1ull << 30, 4 * kArena);  // room for 4 of 10
  std::vector<std::shared_ptr<Session>> attached;
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    auto s = sessions.Create("m", 0, 1, kArena);
    if (s.ok()) {
      attached.push_back(*s);
      continue;
    }
    ++refused;
    CHECK(absl::IsResourceExhausted(s.status()));
    CHECK(s.status().message().find("arena budget") != std::string::npos);
    CHECK(s.status().message().find("4 sessions") != std::string::npos);
  }
  CHECK(attached.size() == 4);
  CHECK(refused == 6);
  CHECK(sessions.arena_bytes() == 4 * kArena);

  // Ended, but still referenced (a retrieve into it is finishing): its bytes are free at once.
  std::shared_ptr<Session> finishing = attached.back();
  attached.pop_back();
  sessions.Remove(finishing->id);
  CHECK(sessions.arena_bytes() == 3 * kArena);
  auto again = sessions.Create("m", 0, 1, kArena);
  CHECK(again.ok());
  finishing.reset();  // and given back once only
  CHECK(sessions.arena_bytes() == 4 * kArena);
}

TEST_CASE("attaches beyond sessions.max_sessions are refused until one detaches") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 1 << 30, 3);
  std::vector<std::shared_ptr<Session>> attached;
  for (int i = 0; i < 3; ++i) {
    auto s = sessions.Create("m", i, 4, 1 << 20);
    REQUIRE(s.ok());
    attached.push_back(*s);
  }
  auto refused = sessions.Create("m", 3, 4, 1 << 20);
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::IsResourceExhausted(refused.status()));
  CHECK(refused.status().message().find("sessions.max_sessions") != std::string::npos);
  CHECK(sessions.count() == 3);
  CHECK(sessions.arena_bytes() == 3 << 20);  // the refused attach took nothing
  sessions.Remove(attached.front()->id);
  CHECK(sessions.Create("m", 3, 4, 1 << 20).ok());
}

TEST_CASE("one arena larger than the whole budget is refused") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1ull << 30, 8 << 20);
  auto s = sessions.Create("m", 0, 1, 16 << 20);
  REQUIRE_FALSE(s.ok());
  CHECK(absl::IsResourceExhausted(s.status()));
  CHECK(sessions.arena_bytes() == 0);
}

// A region request on the data socket, as a client sends it.
absl::StatusOr<uint32_t> Ask(const SessionManager& sessions, DataOp op, const std::string& token, uint64_t argument,
                             int fd = -1) {
  absl::StatusOr<int> socket = ConnectDataSocket(sessions.data_socket(), 5);
  if (!socket.ok()) return socket.status();
  absl::Status sent = SendDataRequest(*socket, op, token, argument, fd);
  absl::StatusOr<uint32_t> value = sent.ok() ? ReceiveDataReply(*socket) : absl::StatusOr<uint32_t>(sent);
  close(*socket);
  return value;
}

// A connection to the data socket that sends `bytes` of a frame (and `fd`, when >= 0) and then
// goes silent.
int Silent(const SessionManager& sessions, size_t bytes = 0, int fd = -1) {
  absl::StatusOr<int> socket = ConnectDataSocket(sessions.data_socket(), 5);
  REQUIRE(socket.ok());
  if (bytes > 0) {
    const std::string partial(bytes, 'R');
    REQUIRE(SendWithDescriptor(*socket, partial.data(), partial.size(), fd));
  }
  return *socket;
}

// The server has not closed `socket` (no hang-up, nothing to read).
bool StillOpen(int socket) {
  pollfd p{socket, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) == 0;
}

TEST_CASE("silent data socket connections never hold up another client's request") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 8 << 20);
  REQUIRE(sessions.Start(0600).ok());
  auto s = sessions.Create("m", 0, 1, 1 << 20);
  REQUIRE(s.ok());
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(Silent(sessions, i % 2 ? 0 : 5));
  MappedSharedMemory memory(1 << 20);
  // Answered while every silent connection is still waiting for its frame: the server waited on
  // none of them (one after another they would hold it 8 x 2 s).
  auto added = Ask(sessions, DataOp::kAddRegion, (*s)->token, 1 << 20, memory.fd());
  REQUIRE(added.ok());
  for (int c : silent) CHECK(StillOpen(c));
  // Each is closed once its frame is overdue.
  for (int c : silent) {
    pollfd p{c, POLLIN | POLLRDHUP, 0};
    CHECK(poll(&p, 1, 10'000) == 1);
    close(c);
  }
}

TEST_CASE("a descriptor that came with a frame never finished is closed, not leaked") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 8 << 20);
  REQUIRE(sessions.Start(0600).ok());
  const int probe = memfd_create("kvs-leak-probe", MFD_CLOEXEC);
  REQUIRE(probe >= 0);
  const int c = Silent(sessions, 3, probe);  // 3 of the frame's bytes, with the descriptor
  close(probe);                              // only the daemon's copy is left
  for (int i = 0; i < 1000 && OpenMemfds("kvs-leak-probe") > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(OpenMemfds("kvs-leak-probe") == 0);
  close(c);
}

TEST_CASE("a caller's identity lives while its data socket connection is open") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 8 << 20);
  REQUIRE(sessions.Start(0600).ok());
  auto id = IdentifyCaller(sessions.data_socket(), 5);
  REQUIRE(id.ok());
  REQUIRE(id->token.size() == 64);
  auto caller = sessions.callers().Find(absl::HexStringToBytes(id->token));
  REQUIRE(caller != nullptr);
  CHECK(caller->uid == geteuid());
  CHECK(caller->admin);  // the daemon's own uid administers
  close(id->connection);
  for (int i = 0; i < 500 && sessions.callers().count() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(sessions.callers().Find(absl::HexStringToBytes(id->token)) == nullptr);
}

TEST_CASE("client regions count against the arena budget and a session's limit, over the data socket") {
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 8 << 20);
  REQUIRE(sessions.Start(0600).ok());
  auto s = sessions.Create("m", 0, 1, 1 << 20);
  REQUIRE(s.ok());
  const std::string token = (*s)->token;
  MappedSharedMemory memory(4 << 20);
  const int fd = memory.fd();
  auto first = Ask(sessions, DataOp::kAddRegion, token, 4 << 20, fd);
  REQUIRE(first.ok());
  CHECK(*first == 1);
  CHECK(sessions.arena_bytes() == 5 << 20);
  // Beyond the budget: refused, and it took nothing.
  auto too_big = Ask(sessions, DataOp::kAddRegion, token, 4 << 20, fd);
  REQUIRE_FALSE(too_big.ok());
  CHECK(absl::IsResourceExhausted(too_big.status()));
  CHECK(too_big.status().message().find("arena budget") != std::string::npos);
  CHECK(sessions.arena_bytes() == 5 << 20);
  // Without the token, or without a descriptor, nothing happens.
  std::string wrong = token;
  wrong[0] ^= 1;
  CHECK(absl::IsNotFound(Ask(sessions, DataOp::kAddRegion, wrong, 4096, fd).status()));
  CHECK(absl::IsInvalidArgument(Ask(sessions, DataOp::kAddRegion, token, 4096).status()));
  CHECK(absl::IsNotFound(Ask(sessions, DataOp::kRemoveRegion, token, 7).status()));
  // A session holds at most Session::kMaxRegions.
  for (uint32_t i = 1; i < Session::kMaxRegions; ++i) REQUIRE(Ask(sessions, DataOp::kAddRegion, token, 4096, fd).ok());
  auto one_more = Ask(sessions, DataOp::kAddRegion, token, 4096, fd);
  REQUIRE_FALSE(one_more.ok());
  CHECK(absl::IsResourceExhausted(one_more.status()));
  // Removed, the bytes come back once nothing holds the region.
  std::shared_ptr<SessionRegion> held = (*s)->Region(1);
  REQUIRE(held != nullptr);
  REQUIRE(Ask(sessions, DataOp::kRemoveRegion, token, 1).ok());
  CHECK((*s)->Region(1) == nullptr);
  const uint64_t before = sessions.arena_bytes();
  held.reset();
  CHECK(sessions.arena_bytes() == before - (4 << 20));
  // Detaching frees every region (and the arena, once the data socket's thread, which may still be
  // finishing its answer to the last request, lets go of the session too).
  sessions.Remove((*s)->id);
  s->reset();
  for (int i = 0; i < 500 && sessions.arena_bytes() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(sessions.arena_bytes() == 0);
}

TEST_CASE("a region whose adding ends after its session detached is undone, not kept") {
  // Region requests run on workers of their own, so one may finish after Remove took the
  // session's regions: that region must not stay in a detached session, registered and counted.
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 16 << 20);
  auto s = sessions.Create("m", 0, 1, 1 << 20);
  REQUIRE(s.ok());
  std::shared_ptr<Session> session = *s;
  sessions.Remove(session->id);
  MappedSharedMemory memory(4 << 20);
  auto late = sessions.AddRegion(*session, dup(memory.fd()), 4 << 20);
  CHECK(absl::IsNotFound(late.status()));
  CHECK(session->Region(1) == nullptr);
  session.reset();
  s->reset();
  CHECK(sessions.arena_bytes() == 0);  // nothing held for it
}

TEST_CASE("a memfd sealed against shrinking is touched directly, a write-sealed one is refused") {
  const int fd = memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(ftruncate(fd, 1 << 20) == 0);
  auto plain = ClientRegion::Adopt(dup(fd), 1 << 20);
  REQUIRE(plain.ok());
  CHECK_FALSE((*plain)->direct());
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  auto sealed = ClientRegion::Adopt(dup(fd), 1 << 20);
  REQUIRE(sealed.ok());
  CHECK((*sealed)->direct());
  CHECK(absl::IsOutOfRange((*sealed)->CheckRange((1 << 20) - 10, 11)));
  CHECK((*sealed)->CheckRange((1 << 20) - 10, 10).ok());
  plain->reset();
  sealed->reset();  // F_SEAL_WRITE needs no shared writable mapping left
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0);
  auto refused = ClientRegion::Adopt(dup(fd), 1 << 20);
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::IsFailedPrecondition(refused.status()));
  close(fd);
}

}  // namespace
}  // namespace kvstream::testing
