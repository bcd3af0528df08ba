// kvstreamd's HTTP endpoint (config `metrics.listen`, off by default): GET /metrics (Prometheus
// text, metrics.h) and GET /health (200 "OK", or 503 with one problem per line: health.h). Serves
// on its own thread; never touches the data path.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "kvstream/store.h"
#include "sessions.h"

namespace httplib {
class Server;
}

namespace kvstream {

class HttpEndpoint {
 public:
  HttpEndpoint(const Store* store, const SessionManager* sessions, std::string version);
  ~HttpEndpoint();

  // Binds `listen` ("HOST:PORT", e.g. 127.0.0.1:9464) and starts serving. A clear error when the
  // address is malformed or taken.
  absl::Status Start(const std::string& listen);
  void Stop();

 private:
  const Store* store_;
  const SessionManager* sessions_;
  const std::string version_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace kvstream
