// Chunk keys: what the store, the daemon and the clients accept as a key.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace kvstream {

inline constexpr size_t kMaxKeyLength = 1024;

// OK for 1..kMaxKeyLength bytes without NUL; InvalidArgument naming the problem otherwise.
absl::Status ValidateKey(std::string_view key);

}  // namespace kvstream
