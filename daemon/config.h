// kvstreamd's configuration file (YAML): its keys are config_keys.h's table, documented in
// deploy/kvstreamd.yaml.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "daemon_config.h"

namespace kvstream {

// Parses YAML text, ${NAME} and ${NAME:-default} in values replaced from the environment. Errors
// name the key (and line) at fault; unknown keys are errors, so a typo is never silently ignored. `origin` names the text in messages (usually the file path).
absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& origin);
absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path);

}  // namespace kvstream
