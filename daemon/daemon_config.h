// kvstreamd's settings as its configuration gives them (config_keys.h: the key of each field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "call_limits.h"
#include "kvstream/config.h"
#include "memory_limit.h"

namespace kvstream {

struct DaemonConfig {
  std::string socket_path = "/run/kvstream/kvstreamd.sock";
  uint32_t socket_mode = 0660;      // permission bits of the control socket
  std::string socket_group;         // group owning the socket; empty = the daemon's group
  uint64_t max_arena_bytes = 8ull << 30;  // largest shared-memory arena one session may attach
  uint64_t arena_budget_bytes = DefaultArenaBudget();  // all sessions' arenas together
  uint32_t max_sessions = 256;                         // sessions attached at once
  // Who may do what on the socket (docs/security.md). kUid: keys live in a namespace per client
  // uid (tenants never read, overwrite or probe each other's KV; prefixes are then not shared
  // across uids).
  enum class Isolation { kNone, kUid };
  Isolation isolation = Isolation::kNone;
  // Members of this group (a name or a numeric gid) may administer (evict, policies, others'
  // locks) besides root and the daemon's own uid; empty = none.
  std::string admin_group;
  // Sessions one uid may attach at once, and the arena and client region bytes of one uid; 0: only
  // the node's limits. `auto` (the default): under isolation uid, half of max_sessions and of
  // arena_budget, so that one uid never holds what another needs to attach; under none, 0.
  uint32_t max_sessions_per_uid = 0;
  uint64_t arena_budget_per_uid = 0;
  uint32_t max_lookup_keys = kDefaultMaxLookupKeys;  // keys in one Lookup or Unlock
  // Under isolation uid, each uid's keys are one tenant of every tier (StoreConfig::
  // tenant_tier_share, tenant_locked_bytes): guaranteed this share of each tier, and at most
  // this many chunk bytes locked (unset: the share of the smallest tier, so locks never keep
  // another uid from its share). 0: no tenants.
  double tier_share_per_uid = 0.25;
  std::optional<uint64_t> locked_bytes_per_uid;
  // Under isolation uid with a shared tier: uid N is the same principal on every node sharing it
  // (accounts from one directory service). Without it such a config is refused (docs/security.md).
  bool uids_same_on_all_nodes = false;
  uint32_t max_chunks_per_call = kDefaultMaxChunksPerCall;  // chunks in one Retrieve or Persist
  std::string log_level = "info";   // trace | debug | info | warn | error
  std::string metrics_listen;       // HOST:PORT of HTTP /metrics and /health; empty = off
  StoreConfig store;                // tiers, block size, staging, policies (validated)
};

}  // namespace kvstream
