#include "http_endpoint.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "health.h"
#include "metrics.h"
#include "thread_name.h"

namespace kvstream {

HttpEndpoint::HttpEndpoint(const Store* store, const SessionManager* sessions, std::string version)
    : store_(store), sessions_(sessions), version_(std::move(version)) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

absl::Status HttpEndpoint::Start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.listen '", listen, "' is not HOST:PORT"));
  }
  const std::string host = listen.substr(0, colon);
  server_ = std::make_unique<httplib::Server>();
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const HealthReport health = ComputeHealth(*store_, version_);
    const DaemonGauges gauges{static_cast<uint32_t>(sessions_->count()), sessions_->arena_bytes(),
                              sessions_->arena_budget()};
    res.set_content(RenderMetrics(store_->Stats(), gauges, HealthOk(health), version_),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const HealthReport health = ComputeHealth(*store_, version_);
    const bool ok = HealthOk(health);
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "OK\n" : absl::StrCat("NOT OK\n", absl::StrJoin(health.problems, "\n"), "\n"), "text/plain");
  });
  if (!server_->bind_to_port(host.c_str(), port)) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, " (metrics.listen): taken or not local"));
  }
  thread_ = std::thread([this] {
    NameThisThread("kvs-http");
    server_->listen_after_bind();
  });
  return absl::OkStatus();
}

void HttpEndpoint::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace kvstream
