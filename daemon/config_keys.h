// kvstreamd's configuration keys: the one place a key is declared. Each row gives
//   - its dotted name ("sessions.max_arena"; a tier's key "tiers[].capacity"), from which the
//     parser knows every section, every key it allows and the order it reads them in,
//   - its type and default as deploy/kvstreamd.yaml documents them (the default is read as if
//     written where the key is absent, so the text is the default),
//   - when it applies (given otherwise, it is an error),
//   - its reader: the key's type and the checks on values only the daemon knows of. Checks on a
//     store's values are ValidateConfig's (kvstream/config.h), which names the field it refused
//     and the parser the key and line from `store_field`.
// tests/unit/daemon/config_keys_test.cc holds deploy/kvstreamd.yaml and docs/operations.md to it;
// `kvstreamd --config-keys` prints it. Adding a key is a row here and its field.
#pragma once

#include <string>
#include <vector>

#include "daemon_config.h"

namespace kvstream {

class ConfigValue;  // config_value.h

// A condition under which some keys apply (ConfigKey::when).
struct ConfigCondition {
  const char* doc;    // as in "'key' applies to <doc> only"
  const char* key;    // a key that makes it hold, written `value` (examples, tests)
  const char* value;
  bool (*holds)(const DaemonConfig& config, const TierConfig* tier);
};

struct ConfigKey {
  std::string name{};         // dotted: "socket.path", "block_size", "tiers[].capacity"
  std::string type{};         // what a value is: "bytes", "duration", "none | uid", ...
  // The documented default, read as the value where the key is absent; empty where there is none
  // (then `absent` says what no value means).
  std::string default_value{};
  std::string absent{};
  bool required = false;      // (tiers[]) a tier without it is refused
  const ConfigCondition* when = nullptr;  // nullptr: always
  // The StoreConfig or TierConfig field the key sets, as ConfigFault names it; empty for the
  // daemon's own keys.
  std::string store_field{};
  void (*read)(const ConfigValue& value, DaemonConfig& config, TierConfig* tier) = nullptr;
  std::string doc{};          // one line
};

// Every key, in the order the parser reads them: a key whose reader or condition uses another's
// value comes after it (sessions.max_sessions_per_uid after max_sessions and isolation).
const std::vector<ConfigKey>& ConfigKeys();

// The row of a dotted name ("tiers[].path"), nullptr for an unknown one.
const ConfigKey* FindConfigKey(const std::string& name);

// The table as text: a line per key (name, type, default, when, doc), for `kvstreamd --config-keys`.
std::string FormatConfigKeys();

}  // namespace kvstream
