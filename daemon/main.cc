// kvstreamd: the per-node KVStream daemon. See deploy/kvstreamd.yaml and README.
#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config.h"
#include "config_keys.h"
#include "control_socket.h"
#include "descriptor_caps.h"
#include "http_endpoint.h"
#include "kvstream/store.h"
#include "service.h"
#include "sessions.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"

namespace kvstream {
namespace {

// A group by name, or a numeric gid; nullopt when it is neither.
std::optional<gid_t> GroupId(const std::string& name_or_gid) {
  if (const group* g = getgrnam(name_or_gid.c_str())) return g->gr_gid;
  char* end = nullptr;
  const unsigned long numeric = std::strtoul(name_or_gid.c_str(), &end, 10);
  if (end == name_or_gid.c_str() || *end != '\0' || numeric >= static_cast<gid_t>(-1)) return std::nullopt;
  return static_cast<gid_t>(numeric);
}

// systemd's notification protocol (Type=notify): one datagram to $NOTIFY_SOCKET.
void Notify(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
         static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

// Under systemd with WatchdogSec, pings WATCHDOG=1 every half period, but only while the I/O loop
// goes round: a daemon whose loop hangs stops pinging and systemd restarts it.
class Watchdog {
 public:
  explicit Watchdog(const Store* store) {
    const char* usec = std::getenv("WATCHDOG_USEC");
    const long long period_us = usec ? std::atoll(usec) : 0;
    if (period_us <= 0) return;
    const auto half = std::chrono::microseconds(period_us / 2);
    thread_ = std::thread([this, store, half] {
      NameThisThread("kvs-watchdog");
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        if (store->Stats().loop_lag_seconds < std::chrono::duration<double>(half).count()) Notify("WATCHDOG=1");
        stopped_.WaitWithTimeout(&mu_, absl::FromChrono(half));
      }
    });
  }
  ~Watchdog() { Stop(); }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      stopped_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Mutex mu_;
  absl::CondVar stopped_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// True when something accepts connections on `path` (a live daemon).
bool SocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::strcpy(addr.sun_path, path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) close(fd);
  return live;
}

// The caps on what clients hold descriptors for (descriptor_caps.h), from what `limit` leaves once
// the daemon's own are counted: those open now (`store` is open), those the store may still open,
// one per session's arena, the HTTP endpoint's connections, and a margin for the rest (logs,
// checkpoints, configuration reads).
DescriptorCaps SizeCaps(uint64_t limit, const Store& store, const DaemonConfig& config) {
  constexpr uint64_t kMargin = 256;
  const uint64_t own = OpenDescriptors() + Store::DescriptorsToGrow(store.config()) + config.max_sessions +
                       HttpLimits{}.max_connections + kMargin;
  const uint64_t left = limit > own ? limit - own : 0;
  const DescriptorCaps caps = SizeDescriptorCaps(left);
  // Each client process holds a control connection and an identity: one uid should be able to
  // identify as many as it may attach sessions.
  const uint32_t sessions_per_uid = config.max_sessions_per_uid > 0 ? config.max_sessions_per_uid : config.max_sessions;
  if (own + DescriptorsAtCaps(caps) > limit || caps.identities.per_uid < sessions_per_uid) {
    spdlog::warn("the descriptor limit ({}) is too low for the tiers and sessions configured: one uid may connect {} "
                 "clients, for {} sessions; raise it (LimitNOFILE=, ulimit -n)",
                 limit, caps.identities.per_uid, sessions_per_uid);
  }
  spdlog::info("descriptors: limit {}, {} for the daemon's own; for clients (in all/per uid): control connections "
               "{}/{}, identities {}/{}, data socket requests pending {}/{} and queued on each lane {}/{}, client "
               "regions {}/{}",
               limit, own, caps.connections.total, caps.connections.per_uid, caps.identities.total,
               caps.identities.per_uid, caps.pending.total, caps.pending.per_uid, caps.queued.total,
               caps.queued.per_uid, caps.regions.total, caps.regions.per_uid);
  return caps;
}

int Main(int argc, char** argv) {
  CLI::App app{"kvstreamd: per-node KV-cache storage daemon (tiers, batched retrieval, deferred replicated writes)"};
  std::string config_path;
  app.add_option("--config", config_path, "YAML configuration (documented in deploy/kvstreamd.yaml)")->required();
  app.set_version_flag("--version", KVSTREAM_VERSION);
  app.add_flag_callback(
      "--config-keys",
      [] {
        std::cout << FormatConfigKeys();
        throw CLI::Success();
      },
      "Print every configuration key (type, default, when it applies, what it does) and exit");
  CLI11_PARSE(app, argc, argv);

  auto config = LoadDaemonConfig(config_path);
  if (!config.ok()) {
    std::cerr << "kvstreamd: " << config.status().message() << "\n";
    return 2;
  }
  gid_t socket_gid = static_cast<gid_t>(-1);
  if (!config->socket_group.empty()) {
    // A name, or a numeric gid (a container's fixed gid, which the host need not name).
    const std::optional<gid_t> gid = GroupId(config->socket_group);
    if (!gid) {
      std::cerr << "kvstreamd: " << config_path << ": socket.group '" << config->socket_group
                << "' is neither a group nor a numeric gid (create it, or leave socket.group empty for the "
                   "daemon's group)\n";
      return 2;
    }
    socket_gid = *gid;
  }
  AccessOptions access;
  access.isolate_uids = config->isolation == DaemonConfig::Isolation::kUid;
  if (!config->admin_group.empty()) {
    access.admin_gid = GroupId(config->admin_group);
    if (!access.admin_gid) {
      std::cerr << "kvstreamd: " << config_path << ": sessions.admin_group '" << config->admin_group
                << "' is neither a group nor a numeric gid\n";
      return 2;
    }
  }
  spdlog::set_default_logger(spdlog::stderr_logger_mt("kvstreamd"));  // stderr: journald under systemd
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  spdlog::set_pattern("%^%l%$ %v");  // journald adds the time and the unit

  // Signals are taken by sigwait below, so every thread started from here on blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Every descriptor the hard limit allows: clients' connections are capped from what is left.
  const uint64_t descriptor_limit = RaiseDescriptorLimit();

  const std::string& socket_path = config->socket_path;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path(), ec);
  if (SocketIsLive(socket_path)) {
    std::cerr << "kvstreamd: another kvstreamd is serving on " << socket_path << "\n";
    return 1;
  }
  unlink(socket_path.c_str());  // stale socket of a daemon that is gone

  auto store = Store::Open(config->store);
  if (!store.ok()) {
    std::cerr << "kvstreamd: " << store.status().message() << "\n";
    return 1;
  }
  const DescriptorCaps caps = SizeCaps(descriptor_limit, **store, *config);
  SessionManager sessions(socket_path + ".data", config->max_arena_bytes, config->arena_budget_bytes,
                          config->max_sessions, store->get(), access,
                          UidLimits{config->max_sessions_per_uid, config->arena_budget_per_uid}, caps);
  if (absl::Status s = sessions.Start(config->socket_mode); !s.ok()) {
    std::cerr << "kvstreamd: " << s.message() << "\n";
    return 1;
  }
  auto service = std::make_unique<Service>(store->get(), &sessions, config->max_lookup_keys, config->max_chunks_per_call);
  // No listening port: the control socket accepts and hands each connection to the server.
  grpc::ServerBuilder builder;
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ControlSocket control(socket_path, caps.connections);
  if (absl::Status s = server ? control.Listen(config->socket_mode) : absl::InternalError("gRPC did not start");
      !s.ok()) {
    std::cerr << "kvstreamd: cannot listen on " << socket_path << ": " << s.message() << "\n";
    return 1;
  }
  if (socket_gid != static_cast<gid_t>(-1)) {
    for (const std::string& path : {socket_path, sessions.data_socket()}) {
      if (chown(path.c_str(), static_cast<uid_t>(-1), socket_gid) != 0) {
        std::cerr << "kvstreamd: cannot give " << path << " to group '" << config->socket_group << "': "
                  << std::strerror(errno) << "\n";
        return 1;
      }
    }
  }
  if (absl::Status s = control.Serve(server.get()); !s.ok()) {
    std::cerr << "kvstreamd: " << s.message() << "\n";
    return 1;
  }
  spdlog::info("kvstreamd {} serving on {} with {} tiers; isolation {}{}", KVSTREAM_VERSION, socket_path,
               config->store.tiers.size(), access.isolate_uids ? "uid" : "none",
               access.admin_gid ? ", admin group " + std::to_string(*access.admin_gid) : std::string());
  spdlog::info("memory limit {} MiB; arena budget {} MiB, staging limit {} MiB", MemoryLimit() >> 20,
               config->arena_budget_bytes >> 20, config->store.staging_limit_bytes >> 20);
  HttpEndpoint http(store->get(), &sessions, KVSTREAM_VERSION);
  if (!config->metrics_listen.empty()) {
    if (absl::Status s = http.Start(config->metrics_listen); !s.ok()) {
      std::cerr << "kvstreamd: " << s.message() << "\n";
      return 1;
    }
    spdlog::info("metrics and health on http://{}/metrics and /health", config->metrics_listen);
  }
  Watchdog watchdog(store->get());
  Notify("READY=1\nSTATUS=serving");

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: stopping; draining staged writes", sig);
  Notify("STOPPING=1");
  watchdog.Stop();
  http.Stop();
  control.Stop();
  // In-flight calls get a short grace period; then the rest (open session streams, idle client
  // connections) are cancelled. Staged writes are drained after that, however long it takes.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server.reset();
  service.reset();  // before the store: its staging worker may be waiting inside the store
  sessions.Stop();
  store->reset();  // writes every staged chunk, then closes the tiers
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace kvstream

int main(int argc, char** argv) { return kvstream::Main(argc, argv); }
