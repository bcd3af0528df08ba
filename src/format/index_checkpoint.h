// Index checkpoints: the headers of every chunk a tier holds, in one file written at clean
// shutdown (`.kvstream.index` in the tier directory), so the next start reads one file instead of
// one header per chunk file. A checkpoint is consumed when loaded (removed), so after a crash the
// next start finds none and scans every file: a checkpoint never describes files that changed
// after it was written by this daemon. Files changed behind the daemon's back are caught where
// they always are: a missing file or a short read is a lost replica, a checksum mismatch a bad one.
//
// Format (little-endian, docs/chunk-format.md): "KVSINDEX", u32 version (3), u64 count, then per
// chunk: u32 key length, key, u64 payload size, u64 payload checksum, i64 creation time, u32
// segment size, u32 segment count, u64 x segment count, u32 flags (bit 0 = a MAC, bit 1 = an
// authenticated chunk), if bit 1 its 32-byte nonce and 16 x segment count bytes of segment tags,
// 32 bytes of MAC if bit 0; last, the xxh3-64 of everything before it. Versions 1 (no flags, no
// MAC) and 2 (no bit 1) are still read.
//
// A saved index is read from a tier, so it is hostile input: it is opened without following a
// symlink and without blocking, read only if it is a regular file of at most
// kMaxCheckpointBytes, and decoded with every count bounded by the bytes left before anything is
// allocated.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "format/chunk_format.h"

namespace kvstream {

inline constexpr char kCheckpointName[] = ".kvstream.index";
inline constexpr uint32_t kCheckpointVersion = 3;
// The largest saved index read: 4 GiB, about 30 million chunks of 16 segments (over 400 TiB of
// 16 MiB chunks, more than any tier one node indexes). A larger one is ignored, never read.
inline constexpr uint64_t kMaxCheckpointBytes = 1ull << 32;

std::string EncodeCheckpoint(const std::vector<ChunkMeta>& chunks);
// DataLoss when the bytes are not a whole, intact checkpoint (of version 1 to 3) or describe a
// chunk the format cannot hold.
absl::StatusOr<std::vector<ChunkMeta>> DecodeCheckpoint(std::string_view bytes);

// Both work on the directory open as `dir_fd` (`dir` is its path, for messages only) and never
// by path: every name is one component relative to the descriptor, opened O_NOFOLLOW, so neither
// a symlink planted under a name nor a directory on the way replaced by one leads outside it.
//
// Writes `chunks` as the checkpoint of the directory crash-safely (temporary, fsync, rename,
// directory fsync).
absl::Status WriteCheckpoint(int dir_fd, const std::string& dir, const std::vector<ChunkMeta>& chunks);
// Loads and removes the checkpoint of the directory. NotFound when there is none; DataLoss (and
// removed) when it is damaged or larger than kMaxCheckpointBytes. FailedPrecondition when
// something other than a regular file has its name (a symlink, a FIFO, a device): that is
// neither read nor removed.
absl::StatusOr<std::vector<ChunkMeta>> TakeCheckpoint(int dir_fd, const std::string& dir);

}  // namespace kvstream
