// libFuzzer: kvstreamd's YAML configuration from arbitrary text. Never crashes or throws; a
// config that parses is a valid store configuration.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = kvstream::ParseDaemonConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  if (config.ok() && !kvstream::ValidateConfig(config->store).ok()) __builtin_trap();
  return 0;
}
