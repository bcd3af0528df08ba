// DataServer's lanes (daemon/data_server.h), with a handler the test holds: an arena hand-over is
// answered while region requests hold every region worker, and a request whose client gave up
// before a worker took it is dropped, its descriptor closed, never handled.
#include "data_server.h"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "data_socket.h"
#include "eventually.h"
#include "shared_memory.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

// A handler that answers each request with its argument, once the test opens the gate for
// requests whose argument is kHeld.
struct GatedHandler {
  static constexpr uint64_t kHeld = 1;

  void operator()(int connection, const DataRequest& request, int fd, const PeerCredentials&) {
    {
      absl::MutexLock lock(&mu);
      handled.push_back(request.argument);
      if (request.argument == kHeld) mu.Await(absl::Condition(&open));
    }
    if (fd >= 0) close(fd);
    SendDataReply(connection, absl::OkStatus(), static_cast<uint32_t>(request.argument)).IgnoreError();
  }
  void Open() {
    absl::MutexLock lock(&mu);
    open = true;
  }
  size_t Handled() {
    absl::MutexLock lock(&mu);
    return handled.size();
  }

  absl::Mutex mu;
  bool open ABSL_GUARDED_BY(mu) = false;
  std::vector<uint64_t> handled ABSL_GUARDED_BY(mu);
};

struct Rig {
  Rig() : server(dir.sub("data.sock"), &callers, [this](int c, const DataRequest& r, int fd, const PeerCredentials& p) {
            handler(c, r, fd, p);
          }) {
    REQUIRE(server.Start(0600).ok());
  }
  ~Rig() {
    handler.Open();
    server.Stop();
  }
  // Sends a request on a new connection; returns the connection.
  int Send(DataOp op, uint64_t argument, int fd = -1) {
    absl::StatusOr<int> c = ConnectDataSocket(server.path(), 5);
    REQUIRE(c.ok());
    REQUIRE(SendDataRequest(*c, op, std::string(kSessionTokenBytes, 't'), argument, fd).ok());
    return *c;
  }

  TempDir dir;
  AccessPolicy policy;
  CallerRegistry callers{&policy};
  GatedHandler handler;
  DataServer server;
};

TEST_CASE("an arena hand-over is answered while region requests hold every region worker") {
  Rig rig;
  const int first = rig.Send(DataOp::kAddRegion, GatedHandler::kHeld);
  const int second = rig.Send(DataOp::kRemoveRegion, GatedHandler::kHeld);
  REQUIRE(Eventually([&] { return rig.handler.Handled() == 2; }));  // both region workers held
  const int queued = rig.Send(DataOp::kAddRegion, 7);                // waits for a region worker
  const int hand_over = rig.Send(DataOp::kFetchArena, 9);
  auto answer = ReceiveDataReply(hand_over);  // the hand-over lane is free
  REQUIRE(answer.ok());
  CHECK(*answer == 9);
  CHECK(rig.handler.Handled() == 3);
  rig.handler.Open();
  for (int c : {first, second}) CHECK(ReceiveDataReply(c).ok());
  auto late = ReceiveDataReply(queued);
  REQUIRE(late.ok());
  CHECK(*late == 7);
  for (int c : {first, second, queued, hand_over}) close(c);
}

TEST_CASE("a request whose client gave up before a worker took it is dropped and its descriptor closed") {
  Rig rig;
  const int first = rig.Send(DataOp::kAddRegion, GatedHandler::kHeld);
  const int second = rig.Send(DataOp::kAddRegion, GatedHandler::kHeld);
  REQUIRE(Eventually([&] { return rig.handler.Handled() == 2; }));
  const int probe = memfd_create("kvs-gave-up-probe", MFD_CLOEXEC);
  REQUIRE(probe >= 0);
  const int gave_up = rig.Send(DataOp::kAddRegion, 7, probe);
  close(probe);  // only the server's copy is left
  // Abandoned once queued behind the held ones (or, on a slow machine, before the server read its
  // frame: dropped all the same, when a worker takes it up).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  close(gave_up);
  rig.handler.Open();
  for (int c : {first, second}) CHECK(ReceiveDataReply(c).ok());
  CHECK(Eventually([&] { return OpenMemfds("kvs-gave-up-probe") == 0; }));
  CHECK(rig.handler.Handled() == 2);  // never handled
  for (int c : {first, second}) close(c);
}

}  // namespace
}  // namespace kvstream::testing
