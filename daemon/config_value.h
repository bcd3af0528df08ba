// One value of kvstreamd's YAML configuration as a key's reader sees it (config_keys.cc): the
// node and the dotted key it was found at, read as the key's type. Private to the config library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "absl/status/statusor.h"

namespace kvstream {

// Thrown inside the parser and turned into InvalidArgument at the edge (ParseDaemonConfig).
struct ConfigError {
  std::string message;
};

// "'key' (line N)", or "'key'" where the node has no place in the text (a default, a key absent).
std::string Where(const YAML::Node& node, const std::string& key);

class ConfigValue {
 public:
  ConfigValue(YAML::Node node, std::string key) : node_(std::move(node)), key_(std::move(key)) {}

  const std::string& key() const { return key_; }
  bool IsAuto() const { return node_.IsScalar() && node_.Scalar() == "auto"; }

  // Each reads the value as its type or throws a ConfigError naming the key and line.
  std::string Str() const;
  uint64_t Bytes() const;                       // 4096, 64KiB, 1MiB (ParseBytes)
  uint32_t Uint() const;                        // a non-negative integer
  double Seconds() const;                       // "50ms", "2s", "1.5" (seconds), "500us"
  double Number() const;
  bool Bool() const;                            // true/yes/on, false/no/off
  const YAML::Node& Node() const { return node_; }
  template <typename T>
  T Parsed(absl::StatusOr<T> (*parse)(std::string_view)) const {  // a policy or an engine by name
    absl::StatusOr<T> v = parse(Str());
    if (!v.ok()) Fail(": " + std::string(v.status().message()));
    return *v;
  }

  // Throws "'key' (line N)<what>".
  [[noreturn]] void Fail(const std::string& what) const;

 private:
  YAML::Node node_;
  std::string key_;
};

}  // namespace kvstream
