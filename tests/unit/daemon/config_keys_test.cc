// The table of configuration keys (daemon/config_keys.h) against what documents it:
// deploy/kvstreamd.yaml and the key table of docs/operations.md, and against the defaults of the
// structs the keys fill. The YAML's conventions, read line by line:
//   - a live key (`  max_arena: 8GiB`) or a key left out (`  # admin_group: kvstream-admin`: a
//     comment whose text starts `key:`), nested by its indentation as YAML nests it;
//   - where the table has a default, every such line shows it; where not, a value is an example;
//   - each key left out, written in with what makes it apply (ConfigKey::when), still parses;
//   - the block between "# --- Example: a GPU node" and "# --- end of example" is an example
//     config (daemon_config_test parses it): its keys count as documented, its values are free;
//   - every key of the table is documented, and none is unknown to it.
#include "config_keys.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config.h"

namespace kvstream {
namespace {

constexpr char kYamlPath[] = KVSTREAM_SOURCE_DIR "/deploy/kvstreamd.yaml";
constexpr char kMinimal[] = "tiers:\n  - {name: a, path: /x, capacity: 1GiB}\n";

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A key as a line of the YAML shows it.
struct Shown {
  std::string key;    // dotted, as the table names it: "tiers[].shared"
  std::string value;  // the scalar written (empty for a section or a block list)
  bool left_out;      // a comment `# key: value`
  int tier;           // the tier it is in (tiers[]), else -1
  size_t line;        // 1-based
};

// The keys `lines` show, nested by indentation.
std::vector<Shown> KeysShown(const std::vector<std::string>& lines) {
  static const std::regex live(R"(^( *)(- )?([a-z_]+):( +(.*))?$)");
  static const std::regex left_out(R"(^( *)# ([a-z_]+):( +(.*))?$)");
  std::vector<std::pair<size_t, std::string>> open;  // (indent, name) of the sections a line is in
  std::vector<Shown> shown;
  int tier = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    size_t indent;
    std::string name, rest;
    bool comment = false;
    if (std::regex_match(lines[i], m, live)) {
      indent = m[1].length();
      if (m[2].matched) {  // "- key:": an item of the list it is in, its keys two columns in
        while (!open.empty() && open.back().first >= indent) open.pop_back();
        open.emplace_back(indent, "[]");
        ++tier;
        indent += 2;
      }
      name = m[3], rest = m[5];
    } else if (std::regex_match(lines[i], m, left_out)) {
      indent = m[1].length(), name = m[2], rest = m[4], comment = true;
    } else {
      continue;
    }
    while (!open.empty() && open.back().first >= indent) open.pop_back();
    std::string key;
    for (const auto& [column, section] : open) key += section == "[]" ? "[]" : (key.empty() ? "" : ".") + section;
    key += (key.empty() ? "" : ".") + name;
    // The value as YAML reads it: quotes and a trailing comment gone.
    const YAML::Node value = YAML::Load(name + ": " + rest)[name];
    const bool in_tier = key.rfind("tiers[].", 0) == 0;
    shown.push_back({key, value.IsScalar() ? value.Scalar() : "", comment, in_tier ? tier : -1, i + 1});
    if (!comment && rest.empty()) open.emplace_back(indent, name);
  }
  return shown;
}

// The lines of the YAML outside its example, and the example uncommented.
std::pair<std::vector<std::string>, std::vector<std::string>> SplitExample(const std::vector<std::string>& lines) {
  std::vector<std::string> outside, example;
  bool inside = false;
  for (const std::string& line : lines) {
    if (line.rfind("# --- Example: a GPU node", 0) == 0) inside = true;
    if (!inside) {
      outside.push_back(line);
    } else if (line.rfind("# ", 0) == 0 && line.rfind("# ---", 0) != 0) {
      example.push_back(line.substr(2));
    }
    if (line.rfind("# --- end of example", 0) == 0) inside = false;
  }
  return {outside, example};
}

// `root` with the dotted `key` set to `value`, in tier `tier` for a tier's key.
void Set(YAML::Node root, const std::string& key, const std::string& value, int tier) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) {
    root[key] = value;
  } else if (key.rfind("tiers[].", 0) == 0) {
    root["tiers"][tier][key.substr(dot + 1)] = value;
  } else {
    root[key.substr(0, dot)][key.substr(dot + 1)] = value;
  }
}

TEST_CASE("every key deploy/kvstreamd.yaml shows is in the table, with the table's default") {
  const auto [outside, example] = SplitExample(Lines(kYamlPath));
  const std::vector<Shown> shown = KeysShown(outside);
  REQUIRE(shown.size() > 40);
  for (const Shown& s : shown) {
    if (s.value.empty() && !s.left_out && FindConfigKey(s.key) == nullptr) continue;  // a section
    INFO("deploy/kvstreamd.yaml line " << s.line << ": " << s.key << ": " << s.value);
    const ConfigKey* key = FindConfigKey(s.key);
    REQUIRE(key != nullptr);
    if (!key->default_value.empty()) CHECK(s.value == key->default_value);
  }
  for (const Shown& s : KeysShown(example)) {
    INFO("the GPU node example: " << s.key);
    CHECK((s.key == "tiers" || FindConfigKey(s.key) != nullptr));
  }
}

TEST_CASE("every key of the table is documented in deploy/kvstreamd.yaml") {
  const auto [outside, example] = SplitExample(Lines(kYamlPath));
  std::set<std::string> documented;
  for (const std::vector<Shown>& part : {KeysShown(outside), KeysShown(example)}) {
    for (const Shown& s : part) documented.insert(s.key);
  }
  for (const ConfigKey& key : ConfigKeys()) {
    INFO(key.name);
    CHECK(documented.count(key.name) == 1);
  }
}

TEST_CASE("every key deploy/kvstreamd.yaml leaves out parses where written in") {
  const auto [outside, example] = SplitExample(Lines(kYamlPath));
  std::string text;
  for (const std::string& line : outside) text += line + "\n";
  int left_out = 0;
  for (const Shown& s : KeysShown(outside)) {
    if (!s.left_out) continue;
    ++left_out;
    const ConfigKey* key = FindConfigKey(s.key);
    REQUIRE(key != nullptr);
    YAML::Node root = YAML::Load(text);
    Set(root, s.key, s.value, s.tier);
    if (key->when != nullptr) Set(root, key->when->key, key->when->value, s.tier);
    const std::string written = YAML::Dump(root);
    const auto config = ParseDaemonConfig(written, "deploy/kvstreamd.yaml with " + s.key);
    INFO("line " << s.line << ":\n" << written << "\n" << config.status().ToString());
    CHECK(config.ok());
  }
  CHECK(left_out >= 10);
}

TEST_CASE("every key docs/operations.md names is in the table") {
  static const std::regex quoted("`([^`]+)`");
  bool in_table = false;
  int named = 0;
  for (const std::string& line : Lines(KVSTREAM_SOURCE_DIR "/docs/operations.md")) {
    if (line == "| key | default | what |") in_table = true;
    if (in_table && line.rfind("|", 0) != 0) break;
    if (!in_table || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find(" |", 2);
    const std::string cell = line.substr(2, end - 2);
    // `section.key`, `other`: the keys after the first are in its section.
    std::string section;
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), quoted); it != std::sregex_iterator(); ++it) {
      std::string name = (*it)[1];
      if (name == "tiers[]") {  // its last cell lists a tier's keys
        const std::string keys = line.substr(line.rfind(" | ") + 3);
        for (auto k = std::sregex_iterator(keys.begin(), keys.end(), quoted); k != std::sregex_iterator(); ++k) {
          INFO(line);
          CHECK(FindConfigKey("tiers[]." + std::string((*k)[1])) != nullptr);
          ++named;
        }
        continue;
      }
      const size_t dot = name.rfind('.');
      if (dot != std::string::npos) {
        section = name.substr(0, dot + 1);
      } else {
        name = section + name;
      }
      INFO(line);
      if (name.ends_with(".*")) {
        const std::string prefix = name.substr(0, name.size() - 1);
        CHECK(std::any_of(ConfigKeys().begin(), ConfigKeys().end(),
                          [&](const ConfigKey& k) { return k.name.rfind(prefix, 0) == 0; }));
      } else {
        CHECK(FindConfigKey(name) != nullptr);
      }
      ++named;
    }
  }
  CHECK(named > 30);
}

TEST_CASE("the table's defaults are the defaults of the structs the keys fill") {
  const auto c = ParseDaemonConfig(kMinimal, "test.yaml");
  REQUIRE(c.ok());
  const DaemonConfig daemon;
  const StoreConfig store;
  const TierConfig tier;
  CHECK(c->socket_path == daemon.socket_path);
  CHECK(c->socket_mode == daemon.socket_mode);
  CHECK(c->isolation == daemon.isolation);
  CHECK(c->max_sessions == daemon.max_sessions);
  CHECK(c->max_arena_bytes == daemon.max_arena_bytes);
  CHECK(c->arena_budget_bytes == daemon.arena_budget_bytes);
  CHECK(c->tier_share_per_uid == daemon.tier_share_per_uid);
  CHECK(c->uids_same_on_all_nodes == daemon.uids_same_on_all_nodes);
  CHECK(c->max_lookup_keys == daemon.max_lookup_keys);
  CHECK(c->max_chunks_per_call == daemon.max_chunks_per_call);
  CHECK(c->log_level == daemon.log_level);
  CHECK(c->metrics_listen == daemon.metrics_listen);
  CHECK(c->store.block_size == store.block_size);
  CHECK(c->store.staging_high_water == store.staging_high_water);
  CHECK(c->store.staging_max_defer_seconds == store.staging_max_defer_seconds);
  CHECK(c->store.verify_checksums == store.verify_checksums);
  CHECK(c->store.read_deadline_floor_seconds == store.read_deadline_floor_seconds);
  CHECK(c->store.read_deadline_cap_seconds == store.read_deadline_cap_seconds);
  CHECK(c->store.read_give_up_seconds == store.read_give_up_seconds);
  CHECK(c->store.verify_threads == store.verify_threads);
  CHECK(c->store.routing.kind == store.routing.kind);
  CHECK(c->store.batching == store.batching);
  CHECK(c->store.writes == store.writes);
  CHECK(c->store.replication == store.replication);
  CHECK(c->store.fsync == store.fsync);
  CHECK(c->store.io_engine == store.io_engine);
  CHECK(c->store.foreign_chunks_limit == store.foreign_chunks_limit);
  const TierConfig& t = c->store.tiers[0];
  CHECK(t.write_queue_depth == tier.write_queue_depth);
  CHECK(t.allow_buffered_fallback == tier.allow_buffered_fallback);
  CHECK(t.shared == tier.shared);
  CHECK(t.miss_ttl_seconds == tier.miss_ttl_seconds);
  CHECK(t.owner_uid == tier.owner_uid);
  CHECK(t.owner_gid == tier.owner_gid);
}

TEST_CASE("a value the store refuses is named by its key and line") {
  const auto refused = [](const std::string& yaml) {
    const auto c = ParseDaemonConfig(yaml, "test.yaml");
    REQUIRE_FALSE(c.ok());
    return std::string(c.status().message());
  };
  CHECK(refused(std::string(kMinimal) + "reads: {give_up: 7200s}\n").find("'reads.give_up' (line 3): ") !=
        std::string::npos);
  CHECK(refused("tiers:\n  - {name: a, path: /x, capacity: 1GiB}\n  - {name: b, path: /y, capacity: 1GiB,\n"
                "     write_queue_depth: 0}\n")
            .find("'tiers[1].write_queue_depth' (line 4): tier 'b' write_queue_depth must be 1-256") !=
        std::string::npos);
  CHECK(refused("sessions: {isolation: uid,\n  tier_share_per_uid: 1.5}\n" + std::string(kMinimal))
            .find("'sessions.tier_share_per_uid' (line 2): ") != std::string::npos);
  CHECK(refused("tiers: []\n").find("'tiers' (line 1): at least one tier") != std::string::npos);
  CHECK(refused("node: a\n").find("'tiers': at least one tier") != std::string::npos);
  CHECK(refused(std::string(kMinimal) + "block_size: 64MiB\nstaging: {limit: 32MiB}\n")
            .find("'staging.limit' (line 4)") != std::string::npos);
}

TEST_CASE("every key reads its own default, and the table lists each key once") {
  std::set<std::string> names;
  for (const ConfigKey& key : ConfigKeys()) {
    INFO(key.name);
    CHECK(names.insert(key.name).second);
    CHECK(key.read != nullptr);
    CHECK(!key.doc.empty());
    CHECK((key.default_value.empty() != key.absent.empty()));  // a default, or what its absence means
  }
  CHECK(FormatConfigKeys().find("sessions.max_arena  bytes  default: 8GiB") != std::string::npos);
}

}  // namespace
}  // namespace kvstream
