// DataServer: serves the data socket (data_socket.h). One thread waits on every connection at
// once (epoll), so a silent or slow peer never holds up another: a connection that has not sent
// its whole request frame within kFrameTimeoutMs is closed, and at most kMaxPending wait for
// theirs. A whole request is answered on a small pool (TaskPool), so a request that takes long
// (a large region to register) does not hold up the others either. Every descriptor that
// arrives is either handed to the handler or closed, on every path.
//
// DataOp::kIdentify is answered here: the peer's credentials become a caller (callers.h) whose
// token is the reply's message, in hex; the connection then stays open, and the caller with it,
// until the peer closes it (any further byte ends it too).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "callers.h"
#include "data_socket.h"
#include "task_pool.h"

namespace kvstream {

class DataServer {
 public:
  static constexpr int kFrameTimeoutMs = 2000;
  static constexpr size_t kMaxPending = 256;  // connections still sending their frame

  // Answers one request on `connection` (blocking, with a send timeout set); owns `fd` (the
  // descriptor that came with the frame, or -1). The server closes `connection` afterwards.
  using Handler = std::function<void(int connection, const DataRequest& request, int fd, const PeerCredentials& peer)>;

  DataServer(std::string path, CallerRegistry* callers, Handler handler);
  ~DataServer();  // Stop()

  // Binds and listens on the path (mode `mode`) and starts serving.
  absl::Status Start(uint32_t mode);
  // Stops accepting, closes every connection (ending their callers), answers what was queued.
  void Stop();
  const std::string& path() const { return path_; }

 private:
  struct Connection {
    PeerCredentials peer;
    uint8_t frame[kDataFrameBytes] = {};
    size_t got = 0;
    int fd = -1;                // arrived with the frame
    int64_t deadline_ms = 0;    // 0: an identity connection, which has none
    uint64_t caller = 0;        // an identity connection's caller
  };
  void Serve();
  void Accept();
  // Reads what `c` sent; false when the connection is done with (closed or handed on).
  bool Receive(int socket, Connection& c);
  void Identify(int socket, Connection& c);
  void Close(int socket);

  const std::string path_;
  CallerRegistry* const callers_;
  const Handler handler_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int epoll_fd_ = -1;
  std::map<int, Connection> connections_;  // by socket; touched by the serving thread only
  TaskPool workers_;
  std::thread thread_;
};

}  // namespace kvstream
