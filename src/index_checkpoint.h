// Index checkpoints: the headers of every chunk a tier holds, in one file written at clean
// shutdown (`.kvstream.index` in the tier directory), so the next start reads one file instead of
// one header per chunk file. A checkpoint is consumed when loaded (removed), so after a crash the
// next start finds none and scans every file: a checkpoint never describes files that changed
// after it was written by this daemon. Files changed behind the daemon's back are caught where
// they always are: a missing file or a short read is a lost replica, a checksum mismatch a bad one.
//
// Format (little-endian): "KVSINDEX", u32 version, u64 count, then per chunk: u32 key length, key,
// u64 payload size, u64 payload checksum, i64 creation time, u32 segment size, u32 segment count,
// u64 x segment count; last, the xxh3-64 of everything before it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chunk_format.h"

namespace kvstream {

inline constexpr char kCheckpointName[] = ".kvstream.index";

std::string EncodeCheckpoint(const std::vector<ChunkMeta>& chunks);
// DataLoss when the bytes are not a whole, intact checkpoint.
absl::StatusOr<std::vector<ChunkMeta>> DecodeCheckpoint(const std::string& bytes);

// Writes `chunks` as the checkpoint of directory `dir` crash-safely (temporary, fsync, rename,
// directory fsync).
absl::Status WriteCheckpoint(const std::string& dir, const std::vector<ChunkMeta>& chunks);
// Loads and removes the checkpoint of `dir`. NotFound when there is none; DataLoss (and removed)
// when it is damaged.
absl::StatusOr<std::vector<ChunkMeta>> TakeCheckpoint(const std::string& dir);

}  // namespace kvstream
