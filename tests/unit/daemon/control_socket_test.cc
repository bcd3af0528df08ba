// The sockets kvstreamd accepts on itself (daemon/control_socket.h, unix_listener.h): control
// socket connections are handed to gRPC while their uid has room and closed at once past it, a
// slot is free again once its connection hangs up; out of descriptors, both the control and the
// data socket pause accepting instead of spinning on their level-triggered listeners, log once,
// and take the waiting connections once descriptors are free again.
#include "control_socket.h"

#include <catch2/catch.hpp>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data_socket.h"
#include "eventually.h"
#include "sessions.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "test_util.h"
#include "unix_connection.h"

namespace kvstream::testing {
namespace {

// A gRPC server with no listening port behind a ControlSocket, as kvstreamd runs them.
struct Rig {
  explicit Rig(UidSlots::Limits limits) : control(dir.sub("control.sock"), limits) {
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server);
    REQUIRE(control.Listen(0600).ok());
    REQUIRE(control.Serve(server.get()).ok());
  }
  ~Rig() {
    control.Stop();
    server->Shutdown(std::chrono::system_clock::now());
  }
  TempDir dir;
  grpc::CallbackGenericService service;
  std::unique_ptr<grpc::Server> server;
  ControlSocket control;
};

TEST_CASE("control socket connections past a uid's cap are closed at once, and a hung-up one frees its slot") {
  Rig rig({8, 2});  // every connection here is this process's uid
  auto channel = grpc::CreateChannel("unix:" + rig.control.path(), grpc::InsecureChannelCredentials());
  // gRPC serves what it is handed: the channel gets the server's HTTP/2 settings.
  REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  const int second = ConnectUnix(rig.control.path());
  REQUIRE(second >= 0);
  REQUIRE(Eventually([&] { return rig.control.connections().used() == 2; }));
  const int third = ConnectUnix(rig.control.path());
  REQUIRE(third >= 0);
  CHECK(ClosedByServer(third, 10'000));  // refused: the uid holds 2
  CHECK_FALSE(ClosedByServer(second, 0));
  close(third);
  close(second);  // the peer hangs up: its slot is free
  CHECK(Eventually([&] { return rig.control.connections().used() == 1; }));
  const int again = ConnectUnix(rig.control.path());
  REQUIRE(again >= 0);
  CHECK(Eventually([&] { return rig.control.connections().used() == 2; }));
  CHECK_FALSE(ClosedByServer(again, 200));
  close(again);
  // gRPC ending a connection frees its slot too.
  rig.server->Shutdown(std::chrono::system_clock::now());
  CHECK(Eventually([&] { return rig.control.connections().used() == 0; }));
}

// In a child with every descriptor taken: the exit code says which expectation failed (0: none).
int OutOfDescriptors() {
  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  spdlog::set_default_logger(logger);
  Rig rig({8, 8});
  TempDir dir;
  SessionManager sessions(dir.sub("data.sock"), 1 << 20, 8 << 20);
  if (!sessions.Start(0600).ok()) return 1;
  // Client sockets made first (connecting needs no descriptor), then every descriptor taken.
  const int control_client = NewUnixSocket();
  const int data_client = NewUnixSocket();
  rlimit few{};
  getrlimit(RLIMIT_NOFILE, &few);
  few.rlim_cur = std::min<rlim_t>(few.rlim_cur, 4096);
  setrlimit(RLIMIT_NOFILE, &few);
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  if (errno != EMFILE) return 2;
  if (ConnectUnix(rig.control.path(), control_client) < 0 || ConnectUnix(sessions.data_socket(), data_client) < 0) return 3;
  // Both listeners report their waiting connection again and again: a second of that costs a
  // spinning loop a second of CPU and a line per turn.
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  getrusage(RUSAGE_SELF, &after);
  const auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1'000'000ll + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
  };
  const long long spent_us = cpu_us(after) - cpu_us(before);
  size_t warnings = 0;
  for (size_t at = 0; (at = log.str().find("out of descriptors", at)) != std::string::npos; ++at) ++warnings;
  for (int fd : filler) close(fd);
  std::fprintf(stderr, "out of descriptors for 1 s: %lld ms of CPU, %zu warnings\n", spent_us / 1000, warnings);
  if (spent_us > 250'000) return 4;
  if (warnings != 2) return 5;  // one per listener
  // Descriptors are free again: the connections that waited are taken.
  if (!Eventually([&] { return rig.control.connections().used() == 1; })) return 6;
  const std::string token(kSessionTokenBytes, '\0');
  timeval timeout{5, 0};
  setsockopt(data_client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (!SendDataRequest(data_client, DataOp::kIdentify, token, 0).ok()) return 7;
  if (!ReceiveDataReplyWithMessage(data_client).ok()) return 8;
  return 0;
}

TEST_CASE("out of descriptors, the control and data sockets pause accepting, log once, and accept again later") {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) _exit(OutOfDescriptors());
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace kvstream::testing
