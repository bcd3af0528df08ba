// Sessions and the node-wide arena budget (D3): attaches beyond it are refused with a clear
// error, and the bytes come back when a session's arena is freed (not before: reads into it may
// still be in flight).
#include "sessions.h"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "test_util.h"

namespace kvstream::testing {
namespace {

TEST_CASE("attaches beyond the arena budget are refused and a freed arena gives its bytes back") {
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

  // Ended, but still referenced (a retrieve into it is finishing): its bytes stay taken.
  std::shared_ptr<Session> finishing = attached.back();
  attached.pop_back();
  sessions.Remove(finishing->id);
  CHECK_FALSE(sessions.Create("m", 0, 1, kArena).ok());
  finishing.reset();
  CHECK(sessions.arena_bytes() == 3 * kArena);
  auto again = sessions.Create("m", 0, 1, kArena);
  CHECK(again.ok());
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

}  // namespace
}  // namespace kvstream::testing
