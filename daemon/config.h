// kvstreamd's configuration file (YAML; deploy/kvstreamd.yaml documents every key).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kvstream/config.h"

namespace kvstream {

// A quarter of the node's memory: arenas are pinned for O_DIRECT and registered buffers, so they
// must never crowd out the engines and the page cache.
uint64_t DefaultArenaBudget();

struct DaemonConfig {
  std::string socket_path = "/run/kvstream/kvstreamd.sock";
  uint32_t socket_mode = 0660;      // permission bits of the control socket
  std::string socket_group;         // group owning the socket; empty = the daemon's group
  uint64_t max_arena_bytes = 8ull << 30;  // largest shared-memory arena one session may attach
  uint64_t arena_budget_bytes = DefaultArenaBudget();  // all sessions' arenas together
  uint32_t max_sessions = 256;                         // sessions attached at once
  std::string log_level = "info";   // trace | debug | info | warn | error
  std::string metrics_listen;       // HOST:PORT of HTTP /metrics and /health; empty = off
  StoreConfig store;                // tiers, block size, staging, policies (validated)
};

// Parses YAML text. Errors name the key (and line) at fault; unknown keys are errors, so a typo is
// never silently ignored. `origin` names the text in messages (usually the file path).
absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& origin);
absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path);

}  // namespace kvstream
