// The cluster key file (`shared_key_file`): read once when the store opens, and only when it is
// where the operator put it and no one else can read or change it. The key made from its bytes,
// and what that key signs and verifies, are format/chunk_mac.h's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "format/chunk_mac.h"

namespace kvstream {

// Loads the key file at `path`: an absolute path without a symlink in any component, to a
// regular file (never opened blocking) owned by this process's uid or root that no group or
// other user may read or write (mode & 077 == 0), holding 32 to 4096 bytes of key
// material, taken exactly as they are (raw bytes; a trailing newline is part of the key, so
// every node needs the identical file: e.g. `head -c 32 /dev/urandom > key; chmod 0600 key`).
// The MAC and segment keys are derived from those bytes (ChunkMacKey::FromBytes).
// InvalidArgument / PermissionDenied / NotFound, with the path and the reason, otherwise.
absl::StatusOr<std::shared_ptr<const ChunkMacKey>> LoadClusterKeyFile(const std::string& path);

}  // namespace kvstream
