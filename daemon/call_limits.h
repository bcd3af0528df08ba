// The defaults of what one call may name (sessions.max_lookup_keys, sessions.max_chunks_per_call):
// each key of a Lookup may be a file system lookup on a shared tier, each chunk of a Retrieve or
// Persist a read or a write, so one call's work is bounded. Clients learn the chunk bound at
// attach (SessionEvent.Attached.max_chunks_per_call).
#pragma once

#include <cstdint>

namespace kvstream {

inline constexpr uint32_t kDefaultMaxLookupKeys = 16384;
inline constexpr uint32_t kDefaultMaxChunksPerCall = 16384;
inline constexpr uint32_t kMaxChunksPerCallLimit = 65536;  // the most sessions.max_chunks_per_call may be

}  // namespace kvstream
