#include "config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config_keys.h"
#include "config_value.h"

namespace kvstream {
namespace {

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

// A dotted key's section and its name there: "sessions" and "max_arena" of "sessions.max_arena",
// "tiers" and "name" of "tiers[].name", "" and "node" of "node".
std::pair<std::string, std::string> SectionAndName(const std::string& dotted) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) return {"", dotted};
  std::string section = dotted.substr(0, dot);
  if (section.ends_with("[]")) section.resize(section.size() - 2);
  return {section, dotted.substr(dot + 1)};
}

// The keys the table allows in `section`; in "" the top-level keys and the sections.
std::set<std::string> AllowedIn(const std::string& section) {
  std::set<std::string> allowed;
  for (const ConfigKey& key : ConfigKeys()) {
    const auto [in, name] = SectionAndName(key.name);
    if (in == section) allowed.insert(name);
    if (section.empty() && !in.empty()) allowed.insert(in);
  }
  return allowed;
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

// The node of `name` in `map`, or an undefined one where `map` has none.
YAML::Node Child(const YAML::Node& map, const std::string& name) {
  return map.IsDefined() && map.IsMap() ? map[name] : YAML::Node(YAML::NodeType::Undefined);
}

// One key, `where` as messages name it ("tiers[0].capacity"): its value where `map` has it, its
// default where not and it has one.
void ReadKey(const ConfigKey& key, const YAML::Node& map, const std::string& where, DaemonConfig& config,
             TierConfig* tier) {
  const YAML::Node node = Child(map, SectionAndName(key.name).second);
  if (node.IsDefined()) {
    if (key.when != nullptr && !key.when->holds(config, tier)) {
      throw ConfigError{Where(node, where) + " applies to " + key.when->doc + " only"};
    }
    key.read(ConfigValue(node, where), config, tier);
  } else if (!key.default_value.empty()) {
    key.read(ConfigValue(YAML::Node(key.default_value), where), config, tier);
  }
}

// Under isolation uid: every uid a tenant of every tier, and a shared tier only where the operator
// says uids are the same accounts on every node.
void ApplyIsolation(DaemonConfig* c) {
  if (c->isolation != DaemonConfig::Isolation::kUid) return;
  for (size_t i = 0; i < c->store.tiers.size(); ++i) {
    if (c->store.tiers[i].shared && !c->uids_same_on_all_nodes) {
      throw ConfigError{"sessions.isolation uid with the shared tier tiers[" + std::to_string(i) +
                        "]: a uid's keys there are that uid's on every node (uid N here reads and overwrites uid N's "
                        "keys of every other node); set sessions.uids_same_on_all_nodes: true if every node's uids are "
                        "the same accounts (one directory service), else keep isolation uid off shared tiers"};
    }
  }
  c->store.tenant_tier_share = c->tier_share_per_uid;
  if (c->locked_bytes_per_uid) {
    c->store.tenant_locked_bytes = *c->locked_bytes_per_uid;
    return;
  }
  if (!(c->tier_share_per_uid > 0 && c->tier_share_per_uid <= 1)) return;  // none, or ValidateConfig refuses it
  uint64_t smallest = UINT64_MAX;  // a drive's share of its tier is what one drive holds
  for (const TierConfig& t : c->store.tiers) {
    smallest = std::min<uint64_t>(smallest, t.capacity_bytes / std::max<size_t>(1, t.drives.size()));
  }
  c->store.tenant_locked_bytes =
      std::max<uint64_t>(1, static_cast<uint64_t>(c->tier_share_per_uid * static_cast<double>(smallest)));
}

DaemonConfig Parse(const YAML::Node& root) {
  DaemonConfig c;
  RequireMap(root, "", AllowedIn(""));
  std::set<std::string> sections_seen;
  for (const ConfigKey& key : ConfigKeys()) {
    const auto [section, name] = SectionAndName(key.name);
    if (section == "tiers") continue;
    const YAML::Node map = section.empty() ? root : Child(root, section);
    if (!section.empty() && map.IsDefined() && sections_seen.insert(section).second) {
      RequireMap(map, section, AllowedIn(section));
    }
    ReadKey(key, map, key.name, c, nullptr);
  }
  const YAML::Node tiers = Child(root, "tiers");
  if (tiers.IsDefined() && !tiers.IsSequence()) {
    throw ConfigError{Where(tiers, "tiers") + " must list at least one tier"};
  }
  for (size_t i = 0; tiers.IsDefined() && i < tiers.size(); ++i) {
    const std::string where = "tiers[" + std::to_string(i) + "]";
    const YAML::Node t = tiers[i];
    RequireMap(t, where, AllowedIn("tiers"));
    TierConfig tier;
    for (const ConfigKey& key : ConfigKeys()) {
      const auto [section, name] = SectionAndName(key.name);
      if (section != "tiers") continue;
      if (key.required && !Child(t, name).IsDefined()) throw ConfigError{Where(t, where) + " needs '" + name + "'"};
    }
    for (const ConfigKey& key : ConfigKeys()) {
      const auto [section, name] = SectionAndName(key.name);
      if (section == "tiers") ReadKey(key, t, where + "." + name, c, &tier);
    }
    c.store.tiers.push_back(std::move(tier));
  }
  ApplyIsolation(&c);
  return c;
}

// The key ValidateConfig refused (its fault), with its line: "'tiers[1].capacity' (line 9): ".
std::string Blame(const YAML::Node& root, const ConfigFault& fault) {
  if (fault.field.empty()) return "";  // a fault of no one key: never blame the first row
  if (fault.field == "tiers") return Where(Child(root, "tiers"), "tiers") + ": ";
  for (const ConfigKey& key : ConfigKeys()) {
    const auto [section, name] = SectionAndName(key.name);
    if (key.store_field != fault.field || (section == "tiers") != (fault.tier >= 0)) continue;
    if (section != "tiers") {
      const YAML::Node node = Child(section.empty() ? root : Child(root, section), name);
      return Where(node, key.name) + ": ";
    }
    const YAML::Node tiers = Child(root, "tiers");
    const YAML::Node tier = tiers.IsDefined() && tiers.IsSequence() && fault.tier < static_cast<int>(tiers.size())
                                ? tiers[fault.tier]
                                : YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node node = Child(tier, name);  // or where absent, the tier that lacks it
    return Where(node.IsDefined() ? node : tier, "tiers[" + std::to_string(fault.tier) + "]." + name) + ": ";
  }
  return "";
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& origin) {
  DaemonConfig config;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
    std::vector<YAML::Node> done;
    SubstituteEnvironment(root, &done);
    config = Parse(root);
  } catch (const ConfigError& e) {
    return absl::InvalidArgumentError(origin + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(origin + ": " + e.what());
  }
  ConfigFault fault;
  auto store = ValidateConfig(std::move(config.store), &fault);
  if (!store.ok()) {
    return absl::InvalidArgumentError(origin + ": " + Blame(root, fault) + std::string(store.status().message()));
  }
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
