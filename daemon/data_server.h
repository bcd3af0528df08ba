// DataServer: serves the data socket (data_socket.h). One thread waits on every connection at
// once (epoll), so a silent or slow peer never holds up another: a connection that has not sent
// its whole request frame within kFrameTimeoutMs is closed, and the connections still sending
// theirs are bounded in total and per uid (DescriptorCaps::pending), so one uid holding all it may
// leaves the others room. A whole request is answered on one of two lanes, each a small pool
// (TaskPool) with its queue bounded in total and per uid (DescriptorCaps::queued): arena
// hand-overs, which only send a descriptor, on their own thread; region requests, which may wait
// for the store (registering a large region takes a while), on another two. So no region request
// ever holds up a hand-over; a request whose client closed its end before a worker took it up is
// dropped unanswered. Every descriptor that arrives is either handed to the handler or closed, on
// every path. Refusals are logged throttled (throttled_warning.h); out of descriptors,
// accepting pauses (unix_listener.h).
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
#include "descriptor_caps.h"
#include "epoll_thread.h"
#include "task_pool.h"
#include "throttled_warning.h"
#include "uid_slots.h"
#include "unix_listener.h"

namespace kvstream {

class DataServer {
 public:
  static constexpr int kFrameTimeoutMs = 2000;

  // Answers one request on `connection` (blocking, with a send timeout set); owns `fd` (the
  // descriptor that came with the frame, or -1). The server closes `connection` afterwards.
  using Handler = std::function<void(int connection, const DataRequest& request, int fd, const PeerCredentials& peer)>;

  // `caps`: its pending and queued limits bound connections and requests.
  DataServer(std::string path, CallerRegistry* callers, Handler handler, const DescriptorCaps& caps = {});
  ~DataServer();  // Stop()

  // Binds and listens on the path (mode `mode`) and starts serving.
  absl::Status Start(uint32_t mode);
  // Stops accepting, closes every connection (ending their callers), answers what was queued.
  void Stop();
  const std::string& path() const { return path_; }

 private:
  struct Connection {
    PeerCredentials peer;
    UidSlots::Slot pending;     // held until the whole frame arrived
    uint8_t frame[kDataFrameBytes] = {};
    size_t got = 0;
    int fd = -1;                // arrived with the frame
    int64_t deadline_ms = 0;    // 0: an identity connection, which has none
    uint64_t caller = 0;        // an identity connection's caller
  };
  // Requests answered on a pool of their own, with their queue bounded in total and per uid.
  struct Lane {
    // `thread_name`: the pool's threads'; `what`: its requests, in refusals.
    Lane(std::string thread_name, std::string what, size_t threads, UidSlots::Limits limits)
        : queued(std::move(what), limits), pool(std::move(thread_name), threads, limits.total) {}
    UidSlots queued;
    TaskPool pool;
  };
  void Serve();
  void Accept(int64_t now_ms);
  // Reads what `c` sent; false when the connection is done with (closed or handed on).
  bool Receive(int socket, Connection& c);
  void Identify(int socket, Connection& c);
  // Hands a whole request to its lane, or answers that the lane is full.
  void Dispatch(int socket, Connection& c);
  void Close(int socket);

  const std::string path_;
  CallerRegistry* const callers_;
  const Handler handler_;
  EpollThread epoll_;
  UnixListener listener_{"data socket"};
  UidSlots pending_;
  ThrottledWarning refusals_;
  std::map<int, Connection> connections_;  // by socket; touched by the serving thread only
  Lane hand_over_, regions_;
};

}  // namespace kvstream
