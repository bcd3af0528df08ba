#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace kvstream {
namespace {

// Thrown inside the parser and turned into InvalidArgument at the edge.
struct ConfigError {
  std::string message;
};

std::string Where(const YAML::Node& node, const std::string& key) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? "'" + key + "'" : "'" + key + "' (line " + std::to_string(mark.line + 1) + ")";
}

// One scalar with ${NAME} and ${NAME:-default} replaced from the environment; $${ is a literal ${.
std::string Substitute(const std::string& text, const YAML::Node& node) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    const size_t close = text.find('}', i + 2);
    if (close == std::string::npos) throw ConfigError{Where(node, text) + ": '${' without its '}'"};
    const std::string inner = text.substr(i + 2, close - i - 2);
    const size_t dash = inner.find(":-");
    const std::string name = inner.substr(0, dash);
    const bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!valid) throw ConfigError{Where(node, text) + ": '${" + inner + "}' is not ${NAME} or ${NAME:-default}"};
    // As the shell: ${NAME:-default} for unset or empty, ${NAME} is an error only when unset.
    if (const char* value = std::getenv(name.c_str()); value != nullptr && (*value != '\0' || dash == std::string::npos)) {
      out += value;
    } else if (dash != std::string::npos) {
      out += inner.substr(dash + 2);
    } else {
      throw ConfigError{Where(node, text) + ": the environment variable " + name + " is not set (${" + name +
                        ":-default} gives a default)"};
    }
    i = close + 1;
  }
  return out;
}

// ${VAR} substitution in every scalar value of the document (not in keys or comments), so one
// config serves many nodes or pods: `node: ${NODE_NAME}` from Kubernetes' downward API.
// An anchor and its aliases are one node: substituted once (`done`).
void SubstituteEnvironment(YAML::Node node, std::vector<YAML::Node>* done) {
  if (std::any_of(done->begin(), done->end(), [&](const YAML::Node& d) { return d.is(node); })) return;
  done->push_back(node);
  if (node.IsScalar()) {
    if (node.Scalar().find('$') != std::string::npos) node = Substitute(node.Scalar(), node);
  } else if (node.IsSequence()) {
    for (YAML::Node child : node) SubstituteEnvironment(child, done);
  } else if (node.IsMap()) {
    for (auto kv : node) SubstituteEnvironment(kv.second, done);
  }
}

void RequireMap(const YAML::Node& node, const std::string& key, const std::set<std::string>& allowed) {
  if (!node.IsMap()) throw ConfigError{Where(node, key) + " must be a mapping"};
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string name = kv.first.as<std::string>();
    if (!seen.insert(name).second) {  // YAML would keep one of them silently
      throw ConfigError{Where(kv.first, key.empty() ? name : key + "." + name) + " appears twice"};
    }
    if (!allowed.count(name)) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw ConfigError{Where(kv.first, key.empty() ? name : key + "." + name) + " is not a known key (expected one of " + list + ")"};
    }
  }
}

bool IsAuto(const YAML::Node& node) { return node.IsScalar() && node.Scalar() == "auto"; }

std::string Str(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) throw ConfigError{Where(node, key) + " must be a string"};
  return node.as<std::string>();
}

uint64_t Bytes(const YAML::Node& node, const std::string& key) {
  auto v = ParseBytes(Str(node, key));
  if (!v.ok()) throw ConfigError{Where(node, key) + ": " + std::string(v.status().message())};
  return *v;
}

uint32_t Uint(const YAML::Node& node, const std::string& key) {
  uint32_t v;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.as<std::string>(), &v)) {
    throw ConfigError{Where(node, key) + " must be a non-negative integer"};
  }
  return v;
}

// "50ms", "2s", "1.5" (seconds), "500us".
double Seconds(const YAML::Node& node, const std::string& key) {
  const std::string text = Str(node, key);
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  double value;
  const std::string unit = text.substr(end);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : -1;
  if (end == 0 || scale < 0 || !absl::SimpleAtod(text.substr(0, end), &value)) {
    throw ConfigError{Where(node, key) + " must be a duration such as 50ms, 2s or 0.5"};
  }
  return value * scale;
}

double Number(const YAML::Node& node, const std::string& key) {
  double v;
  if (!node.IsScalar() || !absl::SimpleAtod(node.as<std::string>(), &v)) {
    throw ConfigError{Where(node, key) + " must be a number"};
  }
  return v;
}

bool Bool(const YAML::Node& node, const std::string& key) {
  const std::string s = Str(node, key);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  throw ConfigError{Where(node, key) + " must be true or false"};
}

template <typename T>
T Policy(const YAML::Node& node, const std::string& key, absl::StatusOr<T> (*parse)(std::string_view)) {
  auto v = parse(Str(node, key));
  if (!v.ok()) throw ConfigError{Where(node, key) + ": " + std::string(v.status().message())};
  return *v;
}

// Under isolation uid: every uid a tenant of every tier, and a shared tier only where the operator
// says uids are the same accounts on every node. The settings are errors, never ignored, under none.
void ApplyIsolation(const YAML::Node& sessions, DaemonConfig* c) {
  if (c->isolation != DaemonConfig::Isolation::kUid) {
    for (const char* key : {"tier_share_per_uid", "locked_bytes_per_uid", "uids_same_on_all_nodes"}) {
      if (sessions && sessions[key]) {
        const std::string name = std::string("sessions.") + key;
        throw ConfigError{Where(sessions[key], name) + " applies to sessions.isolation uid only"};
      }
    }
    return;
  }
  for (size_t i = 0; i < c->store.tiers.size(); ++i) {
    if (c->store.tiers[i].shared && !c->uids_same_on_all_nodes) {
      throw ConfigError{"sessions.isolation uid with the shared tier tiers[" + std::to_string(i) +
                        "]: a uid's keys there are that uid's on every node (uid N here reads and overwrites uid N's "
                        "keys of every other node); set sessions.uids_same_on_all_nodes: true if every node's uids are "
                        "the same accounts (one directory service), else keep isolation uid off shared tiers"};
    }
  }
  c->store.tenant_tier_share = c->tier_share_per_uid;
  if (c->locked_bytes_per_uid && c->tier_share_per_uid == 0) {
    throw ConfigError{Where(sessions["locked_bytes_per_uid"], "sessions.locked_bytes_per_uid") +
                      " needs tenants (sessions.tier_share_per_uid > 0)"};
  }
  if (c->tier_share_per_uid == 0) return;
  uint64_t smallest = UINT64_MAX;  // a drive's share of its tier is what one drive holds
  for (const TierConfig& t : c->store.tiers) {
    smallest = std::min<uint64_t>(smallest, t.capacity_bytes / std::max<size_t>(1, t.drives.size()));
  }
  c->store.tenant_locked_bytes = c->locked_bytes_per_uid.value_or(
      std::max<uint64_t>(1, static_cast<uint64_t>(c->tier_share_per_uid * static_cast<double>(smallest))));
}

DaemonConfig Parse(const YAML::Node& root) {
  DaemonConfig c;
  c.store.staging_limit_bytes = DefaultStagingLimit();
  RequireMap(root, "", {"socket", "sessions", "block_size", "staging", "verify_checksums", "reads", "policies", "logging",
                        "metrics", "tiers", "node", "foreign_chunks_limit", "shared_key_file", "io_engine"});
  if (const auto s = root["socket"]) {
    RequireMap(s, "socket", {"path", "mode", "group"});
    if (s["path"]) c.socket_path = Str(s["path"], "socket.path");
    if (s["mode"]) {
      const std::string mode = Str(s["mode"], "socket.mode");
      char* end = nullptr;
      const unsigned long m = std::strtoul(mode.c_str(), &end, 8);
      if (mode.empty() || *end != '\0' || m > 0777) throw ConfigError{Where(s["mode"], "socket.mode") + " must be octal permission bits such as \"0660\""};
      c.socket_mode = static_cast<uint32_t>(m);
    }
    if (s["group"]) c.socket_group = Str(s["group"], "socket.group");
  }
  if (const auto s = root["sessions"]) {
    RequireMap(s, "sessions", {"max_arena", "arena_budget", "max_sessions", "isolation", "admin_group",
                               "max_sessions_per_uid", "arena_budget_per_uid", "max_lookup_keys", "tier_share_per_uid",
                               "locked_bytes_per_uid", "uids_same_on_all_nodes", "max_chunks_per_call"});
    if (s["isolation"]) {
      const std::string isolation = Str(s["isolation"], "sessions.isolation");
      if (isolation == "none") {
        c.isolation = DaemonConfig::Isolation::kNone;
      } else if (isolation == "uid") {
        c.isolation = DaemonConfig::Isolation::kUid;
      } else {
        throw ConfigError{Where(s["isolation"], "sessions.isolation") + " must be none or uid"};
      }
    }
    if (s["admin_group"]) c.admin_group = Str(s["admin_group"], "sessions.admin_group");
    if (s["max_lookup_keys"]) {
      c.max_lookup_keys = Uint(s["max_lookup_keys"], "sessions.max_lookup_keys");
      if (c.max_lookup_keys == 0 || c.max_lookup_keys > (1u << 20)) {
        throw ConfigError{Where(s["max_lookup_keys"], "sessions.max_lookup_keys") + " must be 1 to 1048576"};
      }
    }
    if (const YAML::Node share = s["tier_share_per_uid"]) {
      c.tier_share_per_uid = Number(share, "sessions.tier_share_per_uid");
      if (!(c.tier_share_per_uid >= 0 && c.tier_share_per_uid <= 1)) {
        throw ConfigError{Where(share, "sessions.tier_share_per_uid") + " must be 0 (no tenants) to 1"};
      }
    }
    if (const YAML::Node locked = s["locked_bytes_per_uid"]) {
      c.locked_bytes_per_uid = Bytes(locked, "sessions.locked_bytes_per_uid");
      if (*c.locked_bytes_per_uid < 4096) {
        throw ConfigError{Where(locked, "sessions.locked_bytes_per_uid") + " must be at least 4KiB"};
      }
    }
    if (const YAML::Node same = s["uids_same_on_all_nodes"]) {
      c.uids_same_on_all_nodes = Bool(same, "sessions.uids_same_on_all_nodes");
    }
    if (s["max_chunks_per_call"]) {
      c.max_chunks_per_call = Uint(s["max_chunks_per_call"], "sessions.max_chunks_per_call");
      if (c.max_chunks_per_call == 0 || c.max_chunks_per_call > kMaxChunksPerCallLimit) {
        throw ConfigError{Where(s["max_chunks_per_call"], "sessions.max_chunks_per_call") + " must be 1 to " +
                          std::to_string(kMaxChunksPerCallLimit)};
      }
    }
    if (s["max_sessions"]) c.max_sessions = Uint(s["max_sessions"], "sessions.max_sessions");
    if (c.max_sessions == 0) throw ConfigError{Where(s["max_sessions"], "sessions.max_sessions") + " must be at least 1"};
    if (s["max_arena"]) c.max_arena_bytes = Bytes(s["max_arena"], "sessions.max_arena");
    if (c.max_arena_bytes < 4096) throw ConfigError{Where(s["max_arena"], "sessions.max_arena") + " must be at least 4KiB"};
    if (s["arena_budget"] && !IsAuto(s["arena_budget"])) {
      c.arena_budget_bytes = Bytes(s["arena_budget"], "sessions.arena_budget");
    }
    if (c.arena_budget_bytes < 4096) {
      throw ConfigError{Where(s["arena_budget"], "sessions.arena_budget") + " must be at least 4KiB"};
    }
    // Per uid: after the node's limits, which `auto` halves.
    const bool isolated = c.isolation == DaemonConfig::Isolation::kUid;
    if (const auto v = s["max_sessions_per_uid"]; v && !IsAuto(v)) {
      c.max_sessions_per_uid = Uint(v, "sessions.max_sessions_per_uid");
    } else if (isolated) {
      c.max_sessions_per_uid = std::max<uint32_t>(c.max_sessions / 2, 1);
    }
    if (const auto v = s["arena_budget_per_uid"]; v && !IsAuto(v)) {
      c.arena_budget_per_uid = Bytes(v, "sessions.arena_budget_per_uid");
    } else if (isolated) {
      c.arena_budget_per_uid = c.arena_budget_bytes / 2;
    }
  }
  if (root["block_size"]) c.store.block_size = static_cast<uint32_t>(std::min<uint64_t>(Bytes(root["block_size"], "block_size"), UINT32_MAX));
  if (const auto s = root["staging"]) {
    RequireMap(s, "staging", {"limit", "high_water", "max_defer"});
    if (s["limit"] && !(s["limit"].IsScalar() && s["limit"].as<std::string>() == "auto")) {
      c.store.staging_limit_bytes = Bytes(s["limit"], "staging.limit");
    }
    if (s["high_water"]) c.store.staging_high_water = Number(s["high_water"], "staging.high_water");
    if (s["max_defer"]) c.store.staging_max_defer_seconds = Seconds(s["max_defer"], "staging.max_defer");
  }
  if (root["verify_checksums"]) c.store.verify_checksums = Bool(root["verify_checksums"], "verify_checksums");
  if (const auto r = root["reads"]) {
    RequireMap(r, "reads", {"deadline_floor", "deadline_cap", "give_up", "verify_threads"});
    if (const auto v = r["verify_threads"]) {
      if (v.IsScalar() && v.Scalar() == "auto") {
        c.store.verify_threads = -1;
      } else {
        const uint32_t n = Uint(v, "reads.verify_threads");
        if (n > 64) throw ConfigError{Where(v, "reads.verify_threads") + " must be auto or 0 to 64"};
        c.store.verify_threads = static_cast<int>(n);
      }
    }
    if (r["deadline_floor"]) c.store.read_deadline_floor_seconds = Seconds(r["deadline_floor"], "reads.deadline_floor");
    if (r["deadline_cap"]) c.store.read_deadline_cap_seconds = Seconds(r["deadline_cap"], "reads.deadline_cap");
    if (r["give_up"]) c.store.read_give_up_seconds = Seconds(r["give_up"], "reads.give_up");
  }
  if (const auto p = root["policies"]) {
    RequireMap(p, "policies", {"routing", "batching", "writes", "replication", "fsync"});
    if (p["routing"]) c.store.routing = Policy<RoutingPolicy>(p["routing"], "policies.routing", ParseRouting);
    if (p["batching"]) c.store.batching = Policy<BatchingPolicy>(p["batching"], "policies.batching", ParseBatching);
    if (p["writes"]) c.store.writes = Policy<WritePolicy>(p["writes"], "policies.writes", ParseWrites);
    if (p["replication"]) c.store.replication = Policy<ReplicationPolicy>(p["replication"], "policies.replication", ParseReplication);
    if (p["fsync"]) c.store.fsync = Policy<FsyncPolicy>(p["fsync"], "policies.fsync", ParseFsync);
  }
  if (const auto l = root["logging"]) {
    RequireMap(l, "logging", {"level"});
    if (l["level"]) {
      c.log_level = Str(l["level"], "logging.level");
      static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error"};
      if (!levels.count(c.log_level)) throw ConfigError{Where(l["level"], "logging.level") + " must be trace, debug, info, warn or error"};
    }
  }
  if (const auto m = root["metrics"]) {
    RequireMap(m, "metrics", {"listen"});
    if (m["listen"]) c.metrics_listen = Str(m["listen"], "metrics.listen");
  }
  if (root["node"]) c.store.node = Str(root["node"], "node");
  if (root["io_engine"]) c.store.io_engine = Policy<IoEngine>(root["io_engine"], "io_engine", ParseIoEngine);
  if (root["shared_key_file"]) {
    c.store.shared_key_file = Str(root["shared_key_file"], "shared_key_file");
    if (c.store.shared_key_file.empty() || c.store.shared_key_file[0] != '/') {
      throw ConfigError{Where(root["shared_key_file"], "shared_key_file") + " must be an absolute path"};
    }
  }
  if (root["foreign_chunks_limit"]) {
    c.store.foreign_chunks_limit = Uint(root["foreign_chunks_limit"], "foreign_chunks_limit");
    if (c.store.foreign_chunks_limit == 0) {
      throw ConfigError{Where(root["foreign_chunks_limit"], "foreign_chunks_limit") + " must be at least 1"};
    }
  }
  const auto tiers = root["tiers"];
  if (!tiers || !tiers.IsSequence() || tiers.size() == 0) throw ConfigError{"'tiers' must list at least one tier"};
  for (size_t i = 0; i < tiers.size(); ++i) {
    const std::string key = "tiers[" + std::to_string(i) + "]";
    const YAML::Node t = tiers[i];
    RequireMap(t, key, {"name", "path", "drives", "capacity", "queue_depth", "queue_depth_max", "write_queue_depth", "allow_buffered", "shared",
                       "miss_ttl", "owner_uid", "owner_gid"});
    for (const char* required : {"name", "capacity"}) {
      if (!t[required]) throw ConfigError{Where(t, key) + " needs '" + required + "'"};
    }
    if (!t["path"] == !t["drives"]) {
      throw ConfigError{Where(t, key) + " needs either 'path' (one directory) or 'drives' (one directory per drive)"};
    }
    TierConfig tc;
    tc.name = Str(t["name"], key + ".name");
    if (t["path"]) tc.path = Str(t["path"], key + ".path");
    if (const YAML::Node drives = t["drives"]) {
      if (!drives.IsSequence() || drives.size() == 0) {
        throw ConfigError{Where(drives, key + ".drives") + " must list at least one directory"};
      }
      for (size_t d = 0; d < drives.size(); ++d) {
        tc.drives.push_back(Str(drives[d], key + ".drives[" + std::to_string(d) + "]"));
      }
    }
    tc.capacity_bytes = Bytes(t["capacity"], key + ".capacity");
    if (const YAML::Node depth = t["queue_depth"]; depth && !(depth.IsScalar() && depth.Scalar() == "auto")) {
      tc.queue_depth = Uint(depth, key + ".queue_depth");  // 0: auto too
    }
    if (const YAML::Node most = t["queue_depth_max"]) {
      if (tc.queue_depth != 0) {
        throw ConfigError{Where(most, key + ".queue_depth_max") + " applies to queue_depth auto only"};
      }
      tc.queue_depth_max = Uint(most, key + ".queue_depth_max");
      if (tc.queue_depth_max == 0) throw ConfigError{Where(most, key + ".queue_depth_max") + " must be at least 1"};
    }
    if (t["write_queue_depth"]) tc.write_queue_depth = Uint(t["write_queue_depth"], key + ".write_queue_depth");
    if (t["allow_buffered"]) tc.allow_buffered_fallback = Bool(t["allow_buffered"], key + ".allow_buffered");
    if (t["shared"]) tc.shared = Bool(t["shared"], key + ".shared");
    if (t["miss_ttl"]) {
      if (!tc.shared) throw ConfigError{Where(t["miss_ttl"], key + ".miss_ttl") + " applies to shared tiers only"};
      tc.miss_ttl_seconds = Seconds(t["miss_ttl"], key + ".miss_ttl");
    }
    if (t["owner_uid"]) tc.owner_uid = Uint(t["owner_uid"], key + ".owner_uid");
    if (t["owner_gid"]) tc.owner_gid = Uint(t["owner_gid"], key + ".owner_gid");
    c.store.tiers.push_back(tc);
  }
  ApplyIsolation(root["sessions"], &c);
  return c;
}

}  // namespace

uint64_t MemoryLimitUnder(const std::string& root, uint64_t physical) {
  uint64_t limit = physical;
  const auto lower_to = [&limit](const std::string& file) {
    std::ifstream in(file);
    std::string word;
    uint64_t bytes = 0;
    // "max" (v2) or a page-rounded huge number (v1) when there is no limit.
    if (in >> word && absl::SimpleAtoi(word, &bytes) && bytes > 0) limit = std::min(limit, bytes);
  };
  std::ifstream cgroups(root + "/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // "ID:CONTROLLERS:PATH": v2 is "0::PATH"; v1 lists its controllers ("4:memory:PATH").
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    std::string dir, file;
    if (parts[0] == "0" && parts[1].empty()) {
      dir = root + "/sys/fs/cgroup", file = "memory.max";
    } else if (absl::StrContains(parts[1], "memory")) {
      dir = root + "/sys/fs/cgroup/memory", file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    // The cgroup's limit and every ancestor's (a pod's limit above its container's).
    for (std::string path = parts[2];; path = path.substr(0, path.rfind('/'))) {
      lower_to(dir + (path == "/" ? "" : path) + "/" + file);
      if (path.empty() || path == "/") break;
    }
  }
  return limit;
}

uint64_t MemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t physical = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return MemoryLimitUnder("", physical > 0 ? physical : 16ull << 30);
}

uint64_t DefaultStagingLimit() { return std::clamp<uint64_t>(MemoryLimit() / 32, 256ull << 20, 16ull << 30); }

uint64_t DefaultArenaBudget() { return MemoryLimit() / 4; }

absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& origin) {
  DaemonConfig config;
  try {
    YAML::Node root = YAML::Load(yaml);
    std::vector<YAML::Node> done;
    SubstituteEnvironment(root, &done);
    config = Parse(root);
  } catch (const ConfigError& e) {
    return absl::InvalidArgumentError(origin + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(origin + ": " + e.what());
  }
  auto store = ValidateConfig(std::move(config.store));
  if (!store.ok()) return absl::InvalidArgumentError(origin + ": " + std::string(store.status().message()));
  config.store = *std::move(store);
  return config;
}

absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read config file " + path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseDaemonConfig(text.str(), path);
}

}  // namespace kvstream
