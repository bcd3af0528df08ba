#include "config.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace kvstream {
namespace {

constexpr char kMinimal[] = R"(
tiers:
  - {name: a, path: /x, capacity: 1GiB}
)";

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseDaemonConfig(yaml, "test.yaml");
  REQUIRE_FALSE(c.ok());
  CHECK(absl::IsInvalidArgument(c.status()));
  return std::string(c.status().message());
}

TEST_CASE("the documented default config parses into the documented values") {
  auto c = LoadDaemonConfig(KVSTREAM_SOURCE_DIR "/deploy/kvstreamd.yaml");
  REQUIRE(c.ok());
  CHECK(c->socket_path == "/run/kvstream/kvstreamd.sock");
  CHECK(c->socket_mode == 0660);
  CHECK(c->socket_group == "kvstream");
  CHECK(c->max_arena_bytes == 8ull << 30);
  CHECK(c->store.block_size == 1u << 20);
  CHECK(c->store.staging_limit_bytes == DefaultStagingLimit());  // auto
  CHECK(DefaultStagingLimit() >= 256ull << 20);
  CHECK(DefaultStagingLimit() <= 16ull << 30);
  CHECK(c->store.staging_max_defer_seconds == Approx(0.25));
  CHECK(c->store.routing.kind == RoutingKind::kCompletion);
  CHECK(c->store.fsync == FsyncPolicy::kNone);
  CHECK(c->store.io_engine == IoEngine::kAuto);
  REQUIRE(c->store.tiers.size() == 2);
  CHECK(c->store.tiers[0].name == "nvme");
  CHECK(c->store.tiers[0].path == "/var/lib/kvstream/nvme");  // the package's state directory: works after install
  CHECK(c->store.tiers[0].capacity_bytes == 32ull << 30);
  CHECK(c->store.tiers[0].queue_depth == DefaultQueueDepth(1 << 20));  // auto
  CHECK(c->store.tiers[0].queue_depth_max == AutoMaxQueueDepth(1 << 20));
  CHECK(c->store.tiers[1].path == "/var/lib/kvstream/pfs");
  CHECK(c->store.tiers[1].capacity_bytes == 64ull << 30);
  CHECK(c->store.read_deadline_floor_seconds == Approx(0.5));
  CHECK(c->store.read_deadline_cap_seconds == Approx(2.0));
  CHECK(c->store.read_give_up_seconds == Approx(10.0));
  CHECK(c->store.verify_threads == -1);  // auto
  CHECK(c->max_sessions == 256);
  CHECK(c->max_sessions_per_uid == 0);  // auto, under isolation none
  CHECK(c->arena_budget_per_uid == 0);
  CHECK(c->max_lookup_keys == 16384);
  CHECK(c->max_chunks_per_call == 16384);
}

// The commented example between "# --- Example: a GPU node" and "# --- end of example" in the
// default config, uncommented, in place of its tiers.
TEST_CASE("the GPU node example of the default config parses: four drives, a PFS, an object store") {
  std::ifstream in(KVSTREAM_SOURCE_DIR "/deploy/kvstreamd.yaml");
  std::string line, yaml;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("# --- Example: a GPU node", 0) == 0) inside = true;
    if (line.rfind("# --- end of example", 0) == 0) inside = false;
    if (inside && line.rfind("# ", 0) == 0 && line.size() > 2 && line[2] != '-') yaml += line.substr(2) + "\n";
  }
  // The explanation above `tiers:` is prose; YAML starts at `tiers:`.
  yaml = "node: gpu-node-07\n" + yaml.substr(yaml.find("\ntiers:") + 1);
  auto c = ParseDaemonConfig(yaml, "gpu-node example");
  INFO(yaml << c.status().ToString());
  REQUIRE(c.ok());
  REQUIRE(c->store.tiers.size() == 6);
  uint64_t nvme = 0;
  for (int d = 0; d < 4; ++d) {
    CHECK(c->store.tiers[d].name == "nvme." + std::to_string(d));
    CHECK(c->store.tiers[d].path == "/mnt/nvme" + std::to_string(d) + "/kvstream");
    CHECK(c->store.tiers[d].queue_depth_max == AutoMaxQueueDepth(1 << 20));  // auto, each drive its own
    nvme += c->store.tiers[d].capacity_bytes;
  }
  CHECK(nvme == 12ull << 40);
  CHECK(c->store.tiers[4].name == "pfs");
  CHECK(c->store.tiers[4].shared);
  CHECK(c->store.tiers[4].queue_depth_max == 64);
  const TierConfig& objects = c->store.tiers[5];
  CHECK(objects.name == "objects");
  CHECK(objects.type == TierType::kS3);
  CHECK(objects.s3.endpoint == "https://s3.us-east-1.amazonaws.com");
  CHECK(objects.s3.bucket == "kvcache-prod");
  CHECK(objects.path == "s3://kvcache-prod/kvstream/");
  CHECK(objects.s3.request_timeout_seconds == 30);
  CHECK(objects.queue_depth == kS3DefaultQueueDepth);
  CHECK(objects.queue_depth_max == kS3AutoMaxQueueDepth);
}

TEST_CASE("an s3 tier needs an endpoint and a bucket, and refuses a path or a bad prefix") {
  const auto refused = [](const std::string& tier) {
    auto c = ParseDaemonConfig("tiers:\n  - {name: a, path: /a, capacity: 1GiB}\n  - {name: o, type: s3, capacity: 1GiB, " +
                                   tier + "}\n",
                               "test.yaml");
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  CHECK(refused("endpoint: http://127.0.0.1:9000, bucket: kvs").empty());
  CHECK(refused("endpoint: http://127.0.0.1:9000, bucket: kvs, prefix: a/b/").empty());
  CHECK(refused("bucket: kvs").find("needs an endpoint") != std::string::npos);
  CHECK(refused("endpoint: ftp://host, bucket: kvs").find("needs an endpoint") != std::string::npos);
  CHECK(refused("endpoint: http://host/path, bucket: kvs").find("needs an endpoint") != std::string::npos);
  CHECK(refused("endpoint: http://host").find("bucket name") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: Upper_Case").find("bucket name") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, prefix: a").find("prefix") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, prefix: ../x/").find("prefix") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, prefix: /x/").find("prefix") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, path: /x").find("not a path") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, credentials_file: rel").find("absolute") != std::string::npos);
  CHECK(refused("endpoint: http://host, bucket: kvs, owner_uid: 5").find("owner") != std::string::npos);
  const auto tape = ParseDaemonConfig("tiers:\n  - {name: t, type: tape, path: /t, capacity: 1GiB}\n", "test.yaml");
  REQUIRE_FALSE(tape.ok());
  CHECK(tape.status().message().find("directory or s3") != std::string::npos);
}

TEST_CASE("queue_depth: a number, or auto with an optional ceiling") {
  auto c = ParseDaemonConfig("tiers:\n  - {name: a, path: /a, capacity: 1GiB, queue_depth: 6}\n"
                             "  - {name: b, path: /b, capacity: 1GiB, queue_depth: auto, queue_depth_max: 12}\n"
                             "  - {name: c, path: /c, capacity: 1GiB, queue_depth: 0}\n",
                             "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->store.tiers[0].queue_depth == 6);
  CHECK(c->store.tiers[0].queue_depth_max == 6);
  CHECK(c->store.tiers[1].queue_depth == DefaultQueueDepth(1 << 20));
  CHECK(c->store.tiers[1].queue_depth_max == 12);
  CHECK(c->store.tiers[2].queue_depth_max == AutoMaxQueueDepth(1 << 20));
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /a, capacity: 1GiB, queue_depth: 4, queue_depth_max: 8}\n")
            .find("auto only") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /a, capacity: 1GiB, queue_depth: many}\n").find("queue_depth") !=
        std::string::npos);
}

TEST_CASE("a tier takes a path or drives, not both nor neither") {
  CHECK(ErrorOf("tiers:\n  - {name: a, capacity: 1GiB}\n").find("either 'path'") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x, drives: [/y, /z], capacity: 1GiB}\n").find("either 'path'") !=
        std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, drives: [], capacity: 1GiB}\n").find("tiers[0].drives") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, drives: [/y, /y], capacity: 1GiB}\n").find("used twice") != std::string::npos);
  // A one-drive tier whose drive is another tier's path: the key written is drives, not path.
  const std::string one_drive =
      ErrorOf("tiers:\n  - {name: a, path: /y, capacity: 1GiB}\n  - {name: b, drives: [/y], capacity: 1GiB}\n");
  CHECK(one_drive.find("'tiers[1].drives' (line") != std::string::npos);
  CHECK(one_drive.find("used twice") != std::string::npos);
  auto two = ParseDaemonConfig("tiers:\n  - {name: a, drives: [/y, /z], capacity: 1GiB}\n", "test.yaml");
  REQUIRE(two.ok());
  CHECK(two->store.tiers.size() == 2);
  CHECK(two->store.tiers[1].name == "a.1");
  CHECK(ParseDaemonConfig(std::string(kMinimal) + "staging: {limit: auto}\n", "t")->store.staging_limit_bytes ==
        DefaultStagingLimit());
  CHECK(ParseDaemonConfig(std::string(kMinimal) + "staging: {limit: 1GiB}\n", "t")->store.staging_limit_bytes ==
        1ull << 30);
}

TEST_CASE("a minimal config takes the defaults") {
  auto c = ParseDaemonConfig(kMinimal, "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->store.tiers.size() == 1);
  CHECK(c->store.writes == WritePolicy::kDeferred);
  CHECK(c->log_level == "info");
}

TEST_CASE("bad configs are refused with the key and line at fault") {
  CHECK(ErrorOf("tierz: []\n").find("'tierz' (line 1) is not a known key") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "policies: {routing: random}\n").find("policies.routing") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "staging: {limit: lots}\n").find("staging.limit") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "socket: {mode: \"0999\"}\n").find("socket.mode") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x}\n").find("needs 'capacity'") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x, capacity: 1G, depth: 3}\n").find("tiers[0].depth") != std::string::npos);
  CHECK(ErrorOf("tiers: []\n").find("at least one tier") != std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x, capacity: 1G}\n  - {name: a, path: /y, capacity: 1G}\n")
            .find("duplicate tier name") != std::string::npos);
  CHECK(ErrorOf("tiers: [\n").find("test.yaml") != std::string::npos);  // YAML syntax error
  CHECK(ErrorOf(std::string(kMinimal) + "logging: {level: loud}\n").find("logging.level") != std::string::npos);
  CHECK(absl::IsNotFound(LoadDaemonConfig("/nonexistent/kvstreamd.yaml").status()));
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {deadline_cap: soon}\n").find("reads.deadline_cap") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {deadline_floor: 5s, deadline_cap: 1s}\n").find("floor <= cap") !=
        std::string::npos);
  // The store's refusal names the key that broke the rule, never another row of the table.
  const std::string cap_below_floor = ErrorOf(std::string(kMinimal) + "reads: {deadline_floor: 5s, deadline_cap: 1s}\n");
  CHECK(cap_below_floor.find("'reads.deadline_cap' (line") != std::string::npos);
  CHECK(cap_below_floor.find("socket.path") == std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {deadline_floor: 0s}\n").find("'reads.deadline_floor' (line") !=
        std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {give_up: 7200s}\n").find("reads.give_up") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {verify_threads: many}\n").find("reads.verify_threads") !=
        std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "reads: {verify_threads: 65}\n").find("auto or 0 to 64") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "sessions: {max_sessions: 0}\n").find("sessions.max_sessions") !=
        std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "io_engine: aio\n").find("io_engine") != std::string::npos);
}

TEST_CASE("io_engine picks how tiers reach the kernel") {
  const auto threads = ParseDaemonConfig(std::string(kMinimal) + "io_engine: threads\n", "test.yaml");
  REQUIRE(threads.ok());
  CHECK(threads->store.io_engine == IoEngine::kThreads);
  const auto uring = ParseDaemonConfig(std::string(kMinimal) + "io_engine: io_uring\n", "test.yaml");
  REQUIRE(uring.ok());
  CHECK(uring->store.io_engine == IoEngine::kUring);
}

TEST_CASE("socket access settings parse, default to no isolation, and bad ones are refused") {
  auto plain = ParseDaemonConfig(kMinimal, "test.yaml");
  REQUIRE(plain.ok());
  CHECK(plain->isolation == DaemonConfig::Isolation::kNone);
  CHECK(plain->max_lookup_keys == 16384);
  auto c = ParseDaemonConfig(std::string(kMinimal) +
                                 "sessions: {isolation: uid, admin_group: ops, max_sessions_per_uid: 4, "
                                 "arena_budget_per_uid: 2GiB, max_lookup_keys: 512}\n",
                             "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->isolation == DaemonConfig::Isolation::kUid);
  CHECK(c->admin_group == "ops");
  CHECK(c->max_sessions_per_uid == 4);
  CHECK(c->arena_budget_per_uid == 2ull << 30);
  CHECK(c->max_lookup_keys == 512);
  CHECK(ErrorOf(std::string(kMinimal) + "sessions: {isolation: tenant}\n").find("sessions.isolation") != std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "sessions: {max_lookup_keys: 0}\n").find("sessions.max_lookup_keys") !=
        std::string::npos);
}

TEST_CASE("under isolation uid each uid is a tenant of every tier by default, under none the settings are refused") {
  const std::string tiers =
      "tiers:\n  - {name: a, path: /x, capacity: 8GiB}\n  - {name: b, drives: [/d0, /d1], capacity: 2GiB}\n";
  auto none = ParseDaemonConfig(tiers, "test.yaml");
  REQUIRE(none.ok());
  CHECK(none->store.tenant_tier_share == 0);  // one tenant: every key in one LRU
  CHECK(none->store.tenant_locked_bytes == 0);
  auto uid = ParseDaemonConfig("sessions: {isolation: uid}\n" + tiers, "test.yaml");
  REQUIRE(uid.ok());
  CHECK(uid->store.tenant_tier_share == Approx(0.25));
  CHECK(uid->store.tenant_locked_bytes == 256ull << 20);  // a quarter of the smallest: one 1 GiB drive
  auto set = ParseDaemonConfig(
      "sessions: {isolation: uid, tier_share_per_uid: 0.5, locked_bytes_per_uid: 64MiB}\n" + tiers, "test.yaml");
  REQUIRE(set.ok());
  CHECK(set->store.tenant_tier_share == Approx(0.5));
  CHECK(set->store.tenant_locked_bytes == 64ull << 20);
  auto off = ParseDaemonConfig("sessions: {isolation: uid, tier_share_per_uid: 0}\n" + tiers, "test.yaml");
  REQUIRE(off.ok());
  CHECK(off->store.tenant_locked_bytes == 0);
  CHECK(ErrorOf("sessions: {tier_share_per_uid: 0.5}\n" + tiers).find("applies to sessions.isolation uid only") !=
        std::string::npos);
  CHECK(ErrorOf("sessions: {isolation: uid, tier_share_per_uid: 1.5}\n" + tiers).find("sessions.tier_share_per_uid") !=
        std::string::npos);
  CHECK(ErrorOf("sessions: {isolation: uid, tier_share_per_uid: 0, locked_bytes_per_uid: 1MiB}\n" + tiers)
            .find("needs tenants") != std::string::npos);
}

TEST_CASE("isolation uid with a shared tier is refused unless uids are said to be the same on every node") {
  const std::string tiers = "tiers:\n  - {name: pfs, path: /mnt/pfs, capacity: 1TiB, shared: true}\n";
  CHECK(ErrorOf("node: n1\nsessions: {isolation: uid}\n" + tiers).find("sessions.uids_same_on_all_nodes") !=
        std::string::npos);
  auto said =
      ParseDaemonConfig("node: n1\nsessions: {isolation: uid, uids_same_on_all_nodes: true}\n" + tiers, "test.yaml");
  CHECK(said.ok());
  CHECK(ParseDaemonConfig("node: n1\n" + tiers, "test.yaml").ok());  // isolation none: one tenant anyway
  CHECK(ErrorOf("node: n1\nsessions: {uids_same_on_all_nodes: true}\n" + tiers).find("isolation uid only") !=
        std::string::npos);
}

TEST_CASE("per-uid limits are half the node's by default under isolation uid, off under none, and may be set") {
  auto none = ParseDaemonConfig(std::string(kMinimal) + "sessions: {max_sessions: 10, arena_budget: 8GiB}\n", "test.yaml");
  REQUIRE(none.ok());
  CHECK(none->max_sessions_per_uid == 0);
  CHECK(none->arena_budget_per_uid == 0);
  // Whatever order the keys come in.
  auto uid = ParseDaemonConfig(
      std::string(kMinimal) + "sessions: {isolation: uid, arena_budget_per_uid: auto, max_sessions: 10, arena_budget: 8GiB}\n",
      "test.yaml");
  REQUIRE(uid.ok());
  CHECK(uid->max_sessions_per_uid == 5);
  CHECK(uid->arena_budget_per_uid == 4ull << 30);
  auto one = ParseDaemonConfig(std::string(kMinimal) + "sessions: {isolation: uid, max_sessions: 1}\n", "test.yaml");
  REQUIRE(one.ok());
  CHECK(one->max_sessions_per_uid == 1);  // never 0, which would mean no limit
  CHECK(one->arena_budget_per_uid == DefaultArenaBudget() / 2);
  auto off = ParseDaemonConfig(
      std::string(kMinimal) + "sessions: {isolation: uid, max_sessions_per_uid: 0, arena_budget_per_uid: 0}\n", "test.yaml");
  REQUIRE(off.ok());
  CHECK(off->max_sessions_per_uid == 0);  // explicitly off
  CHECK(off->arena_budget_per_uid == 0);
}

TEST_CASE("the chunks of one retrieve or persist are capped, 16384 by default") {
  auto plain = ParseDaemonConfig(kMinimal, "test.yaml");
  REQUIRE(plain.ok());
  CHECK(plain->max_chunks_per_call == 16384);
  auto set = ParseDaemonConfig(std::string(kMinimal) + "sessions: {max_chunks_per_call: 65536}\n", "test.yaml");
  REQUIRE(set.ok());
  CHECK(set->max_chunks_per_call == 65536);
  for (const char* bad : {"0", "65537", "many"}) {
    CHECK(ErrorOf(std::string(kMinimal) + "sessions: {max_chunks_per_call: " + bad + "}\n").find("sessions.max_chunks_per_call") !=
          std::string::npos);
  }
}

TEST_CASE("a key given twice and an arena limit of zero are refused") {
  CHECK(ErrorOf(std::string(kMinimal) + "block_size: 1MiB\nblock_size: 4MiB\n").find("'block_size' (line 5) appears twice") !=
        std::string::npos);
  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x, capacity: 1G, capacity: 2G}\n").find("tiers[0].capacity") !=
        std::string::npos);
  CHECK(ErrorOf(std::string(kMinimal) + "sessions: {max_arena: 0}\n").find("sessions.max_arena") != std::string::npos);
}

TEST_CASE("a shared tier takes the node name, defaulting to the host name, bad names and keys are refused") {
  auto c = ParseDaemonConfig(R"(
node: gpu-node-07
foreign_chunks_limit: 1000
tiers:
  - {name: nvme, path: /x, capacity: 1GiB}
  - {name: pfs, path: /mnt/pfs/kvstream, capacity: 10TiB, shared: true, miss_ttl: 250ms}
)", "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->store.node == "gpu-node-07");
  CHECK(c->store.foreign_chunks_limit == 1000);
  CHECK(ErrorOf("foreign_chunks_limit: 0\ntiers:\n  - {name: a, path: /x, capacity: 1GiB}\n").find("at least 1") !=
        std::string::npos);
  CHECK_FALSE(c->store.tiers[0].shared);
  CHECK(c->store.tiers[1].shared);
  CHECK(c->store.tiers[1].miss_ttl_seconds == Approx(0.25));
  auto validated = ValidateConfig(c->store);
  REQUIRE(validated.ok());
  CHECK(validated->node == "gpu-node-07");

  auto unnamed = ParseDaemonConfig("tiers:\n  - {name: pfs, path: /p, capacity: 1GiB, shared: true}\n", "test.yaml");
  REQUIRE(unnamed.ok());
  auto host = ValidateConfig(unnamed->store);
  REQUIRE(host.ok());
  char name[256] = {};
  REQUIRE(gethostname(name, sizeof(name) - 1) == 0);
  CHECK(host->node == name);

  CHECK(ErrorOf("tiers:\n  - {name: a, path: /x, capacity: 1GiB, miss_ttl: 1s}\n").find("shared tiers only") !=
        std::string::npos);
  StoreConfig bad = c->store;
  bad.node = "../escape";
  auto refused = ValidateConfig(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()).find("node name") != std::string::npos);
}

}  // namespace
}  // namespace kvstream

namespace kvstream {
namespace {

TEST_CASE("${NAME} and ${NAME:-default} in values come from the environment") {
  setenv("KVS_TEST_NODE", "gpu-node-7", 1);
  unsetenv("KVS_TEST_UNSET");
  auto c = ParseDaemonConfig(
      "# ${KVS_TEST_UNSET} in a comment is left alone\n"
      "node: ${KVS_TEST_NODE}\n"
      "socket: {path: \"/run/$${literal}/s.sock\"}\n"
      "tiers:\n  - name: a\n    path: /data/${KVS_TEST_NODE}/a\n"
      "    capacity: ${KVS_TEST_UNSET:-3GiB}\n"  // in a {flow: map}, quoted: "${...}"
      "  - {name: b, path: \"/data/${KVS_TEST_NODE}/b\", capacity: 1GiB}\n",
      "test.yaml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->store.node == "gpu-node-7");
  CHECK(c->socket_path == "/run/${literal}/s.sock");
  CHECK(c->store.tiers[0].path == "/data/gpu-node-7/a");
  CHECK(c->store.tiers[0].capacity_bytes == 3ull << 30);
  CHECK(c->store.tiers[1].path == "/data/gpu-node-7/b");
  const std::string unset = ErrorOf("node: ${KVS_TEST_UNSET}\n" + std::string(kMinimal));
  CHECK(unset.find("KVS_TEST_UNSET is not set") != std::string::npos);
  CHECK(unset.find("line 1") != std::string::npos);
  CHECK(ErrorOf("node: ${KVS_TEST_NODE\n" + std::string(kMinimal)).find("without its '}'") != std::string::npos);
  CHECK(ErrorOf("node: ${9x}\n" + std::string(kMinimal)).find("is not ${NAME}") != std::string::npos);
  unsetenv("KVS_TEST_NODE");
}

TEST_CASE("arena_budget auto is a quarter of the memory limit, the cgroup's where it is lower") {
  auto c = ParseDaemonConfig("sessions: {arena_budget: auto}\n" + std::string(kMinimal), "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->arena_budget_bytes == DefaultArenaBudget());
  CHECK(DefaultArenaBudget() == MemoryLimit() / 4);

  char dir[] = "/tmp/kvs-cgroup-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string root = dir;
  const auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + path).parent_path());
    std::ofstream(root + path) << text;
  };
  constexpr uint64_t kRam = 64ull << 30;
  CHECK(MemoryLimitUnder(root, kRam) == kRam);  // no /proc/self/cgroup
  // cgroup v2, a pod's limit above its container's "max".
  write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  write("/sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648\n");
  CHECK(MemoryLimitUnder(root, kRam) == 2ull << 30);
  write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "1073741824\n");
  CHECK(MemoryLimitUnder(root, kRam) == 1ull << 30);
  // In a cgroup namespace the container's cgroup is "/".
  write("/proc/self/cgroup", "0::/\n");
  write("/sys/fs/cgroup/memory.max", "3221225472\n");
  CHECK(MemoryLimitUnder(root, kRam) == 3ull << 30);
  // cgroup v1: unlimited is a huge number; a limit lowers it.
  write("/proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n");
  write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK(MemoryLimitUnder(root, kRam) == kRam);
  write("/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "4294967296\n");
  CHECK(MemoryLimitUnder(root, kRam) == 4ull << 30);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace kvstream

namespace kvstream {
namespace {

TEST_CASE("the Kubernetes DaemonSet's config parses with the node name from the pod") {
  setenv("NODE_NAME", "gpu-node-3", 1);
  std::ifstream in(KVSTREAM_SOURCE_DIR "/deploy/kubernetes/kvstreamd.yaml");
  std::stringstream text;
  text << in.rdbuf();
  auto c = ParseDaemonConfig(text.str(), "deploy/kubernetes/kvstreamd.yaml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->store.node == "gpu-node-3");
  CHECK(c->socket_group == "10001");
  CHECK(c->arena_budget_bytes == DefaultArenaBudget());
  CHECK(c->store.tiers.size() == 3);  // two drives of nvme, and pfs
  unsetenv("NODE_NAME");
}

}  // namespace
}  // namespace kvstream

namespace kvstream {
namespace {

TEST_CASE("${NAME} in an anchored value is substituted once, and an empty NAME is empty but takes a :- default") {
  setenv("KVS_TEST_DOLLAR", "$${not-again}", 1);
  setenv("KVS_TEST_EMPTY", "", 1);
  auto c = ParseDaemonConfig("node: &n \"n${KVS_TEST_EMPTY}1\"\n"
                             "socket: {path: &s \"/run/${KVS_TEST_DOLLAR}/s\"}\n"
                             "tiers:\n  - {name: a, path: \"/x/${KVS_TEST_EMPTY:-d}\", capacity: 1GiB}\n"
                             "  - {name: b, path: *n, capacity: 1GiB}\n"
                             "  - {name: c, path: *s, capacity: 1GiB}\n",
                             "test.yaml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->store.node == "n1");
  CHECK(c->socket_path == "/run/$${not-again}/s");  // a value's own text is not substituted again
  CHECK(c->store.tiers[0].path == "/x/d");
  CHECK(c->store.tiers[1].path == "n1");
  CHECK(c->store.tiers[2].path == "/run/$${not-again}/s");  // the alias of the same node
  unsetenv("KVS_TEST_DOLLAR");
  unsetenv("KVS_TEST_EMPTY");
}

}  // namespace
}  // namespace kvstream
