// ControlSocket: the gRPC control socket, accepted by kvstreamd itself rather than by gRPC, so that
// each connection is counted against its peer's uid (SO_PEERCRED) and the node's total before gRPC
// ever sees it (docs/security.md, "Bounded resources per uid"). gRPC 1.51 (Debian 12) offers no
// limit on server connections; its own listener reads no peer credentials, closes the listener for
// good on an accept error such as EMFILE (it is never re-armed), and takes no refusal from a socket
// mutator without the same. So one thread owns the listening socket: it accepts, reads the peer's
// uid, refuses a connection over the caps (closing it at once), and hands every other to the
// server (grpc::AddInsecureChannelFromFd). It keeps a duplicate of each descriptor it handed over
// and watches it for hang-up (the peer closed, or gRPC shut the connection down): then the
// connection's slot is free again. Out of descriptors, accepting pauses (unix_listener.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "epoll_thread.h"
#include "throttled_warning.h"
#include "uid_slots.h"
#include "unix_listener.h"

namespace kvstream {

class ControlSocket {
 public:
  // `limits`: connections in total and per uid.
  ControlSocket(std::string path, UidSlots::Limits limits);
  ~ControlSocket();  // Stop()
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // Binds and listens on the path (UnixListener::Listen) with permission bits `mode`. Nothing is
  // accepted before Serve.
  absl::Status Listen(uint32_t mode);
  // Starts accepting connections for `server`, built and started without a listening port; it
  // must outlive Stop().
  absl::Status Serve(grpc::Server* server);
  // Stops accepting and removes the path. The connections handed over stay the server's (shut it
  // down to end them).
  void Stop();

  const std::string& path() const { return path_; }
  const UidSlots& connections() const { return slots_; }

 private:
  void Run();
  void Accept(int64_t now_ms);

  const std::string path_;
  UidSlots slots_;
  grpc::Server* server_ = nullptr;
  EpollThread epoll_;
  UnixListener listener_{"control socket"};
  ThrottledWarning refusals_;
  // The connections handed to gRPC: a duplicate of each one's descriptor, watched for hang-up, and
  // its slot. The serving thread's only.
  std::map<int, UidSlots::Slot> watched_;
};

}  // namespace kvstream
