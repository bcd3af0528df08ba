// Self-describing chunk payloads for torture runs: the first 16 bytes say which key and version a
// payload is, the rest follows from them, so a reader can tell an intact version from bad bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xxhash.h"

namespace kvtorture {

struct PayloadId {
  uint64_t key_hash = 0;
  uint64_t version = 0;
};

inline uint64_t KeyHash(const std::string& key) { return XXH3_64bits(key.data(), key.size()); }

// The payload of `version` of `key`, `size` bytes (at least 16).
inline void FillPayload(const std::string& key, uint64_t version, uint8_t* out, size_t size) {
  const PayloadId id{KeyHash(key), version};
  std::memcpy(out, &id, sizeof(id));
  uint64_t x = id.key_hash ^ (version * 0x9E3779B97F4A7C15ull);
  for (size_t i = sizeof(id); i + 8 <= size; i += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(out + i, &x, 8);
  }
  for (size_t i = size - size % 8; i < size && i >= sizeof(id); ++i) out[i] = static_cast<uint8_t>(i);
}

// Which version of `key` `data` holds, or false when it is not an intact payload of that key.
inline bool ReadPayload(const std::string& key, const uint8_t* data, size_t size, uint64_t* version) {
  if (size < sizeof(PayloadId)) return false;
  PayloadId id;
  std::memcpy(&id, data, sizeof(id));
  if (id.key_hash != KeyHash(key)) return false;
  std::vector<uint8_t> expected(size);
  FillPayload(key, id.version, expected.data(), size);
  if (std::memcmp(expected.data(), data, size) != 0) return false;
  *version = id.version;
  return true;
}

}  // namespace kvtorture
