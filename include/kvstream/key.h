// Chunk keys: what the store, the daemon and the clients accept as a key.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kvstream {

inline constexpr size_t kMaxKeyLength = 1024;

// OK for 1..kMaxKeyLength bytes without NUL; InvalidArgument naming the problem otherwise.
absl::Status ValidateKey(std::string_view key);

// Key namespaces: the key "\x1d" <namespace> "\x1d" <key> lives in <namespace>; every other key
// in the namespace "". The daemon puts each uid's keys in one under sessions.isolation uid, and
// the store counts a namespace's chunks as one tenant's (StoreConfig::tenant_tier_share): the
// namespace is in the key itself, so it survives a restart in the chunk files' headers.
// REQUIRES: `ns` holds no "\x1d".
std::string NamespacedKey(std::string_view ns, std::string_view key);
std::string_view KeyNamespace(std::string_view key);

}  // namespace kvstream
