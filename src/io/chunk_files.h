// The chunk files of a tier directory, walked and read as hostile input: names resolved beneath
// the directory without following a symlink (io/safe_open.h), only regular files read, and
// anything else named like the daemon's files skipped, counted and logged, never opened
// blocking, read or removed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "format/chunk_mac.h"
#include "io/safe_open.h"
#include "io/tier_device.h"

namespace kvstream {

// Whether `s` is `length` lower-case hex digits (a chunk file's stem, a fan-out directory).
bool IsHexStem(std::string_view s, size_t length);

// A status of a name below the tier directory `root`, saying which tier.
absl::Status InTier(const std::string& root, const absl::Status& s);

// Reads and validates the header of chunk file `rel` beneath the directory `dir` (at path
// `dir_path`) and its MAC (VerifyChunkMac). Returns DataLoss/NotFound/PermissionDenied for files
// to remove; refused (IsRefused: not a regular file, reached through a symlink, another owner
// than `owner`) for names that are not the daemon's to read or remove: never opened blocking,
// never read.
absl::StatusOr<ScannedChunk> ReadChunkFileHeader(int dir, const std::string& dir_path, const std::string& rel,
                                                 std::string_view stem, const ExpectedOwner& owner,
                                                 const ChunkMacKey* mac_key, bool require_mac);

// ReadChunkFileHeader for each (path below `dir`, stem) of `files`, by a few threads (a cold scan
// waits on the device), in the order of `files`.
std::vector<absl::StatusOr<ScannedChunk>> ReadChunkFileHeaders(
    int dir, const std::string& dir_path, const std::vector<std::pair<std::string, std::string>>& files,
    const ExpectedOwner& owner, const ChunkMacKey* mac_key, bool require_mac);

// Names below a tier that look like the daemon's (a fan-out directory, a chunk file, a
// temporary) but are not what it writes there: symlinks, FIFOs, sockets, devices, directories,
// files of another owner. Counted, and logged once per walk with a few examples.
// The chunks of a saved index (format/index_checkpoint.h) as a scan reports them, each at the size
// its header gives; those the cluster key refuses (VerifyChunkMac) are logged and left out (the
// reconcile pass that follows a start from a saved index removes their files).
std::vector<ScannedChunk> SavedChunks(std::vector<ChunkMeta> saved, const std::string& tier_path,
                                      const ChunkMacKey* mac_key, bool require_mac);

struct SkippedNames {
  uint64_t count = 0;
  std::vector<std::string> examples;

  void Add(const std::string& rel, const std::string& what);
  // One warning for the walk `during` (if anything was skipped).
  void Log(const std::string& tier_path, const char* during) const;
};

// Walks a tier's chunk directories (named by the first two hex digits of their files' stems)
// beneath the directory `root`, never through a symbolic link: `on_chunk(dir, name, rel, stem)`
// for each committed chunk file, `on_temp(dir, name)` for each temporary (`dir`: its directory,
// open; `rel`: its path below `root`). Both see regular files only: every other entry by those
// names, and every fan-out name that is not a directory, goes to `skipped`.
absl::Status ForEachChunkFile(
    int root, const std::function<void(int, const std::string&, const std::string&, const std::string&)>& on_chunk,
    const std::function<void(int, const std::string&)>& on_temp, SkippedNames* skipped);

}  // namespace kvstream
