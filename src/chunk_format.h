// On-disk chunk file format (docs/chunk-format.md): an aligned, self-checking header followed by
// the payload padded to kFileAlignment. Replicas of a chunk on different tiers are byte-identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstream/key.h"

namespace kvstream {

inline constexpr uint64_t kChunkMagic = 0x4B4E55484353564Bull;  // "KVSCHUNK" as little-endian bytes
inline constexpr uint32_t kChunkFormatVersion = 1;
inline constexpr uint32_t kFileAlignment = 4096;   // header and payload padding granularity
inline constexpr uint32_t kHeaderFixedBytes = 64;
inline constexpr uint32_t kMaxHeaderBytes = 1u << 20;

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Everything the index needs about a chunk, as recorded in its header.
struct ChunkMeta {
  std::string key;
  uint64_t payload_size = 0;
  uint64_t payload_checksum = 0;       // xxh3-64 of the payload
  int64_t created_unix_ns = 0;
  uint32_t segment_size = 0;           // payload bytes per checksummed segment (= read block)
  std::vector<uint64_t> segment_checksums;  // xxh3-64 of each segment

  uint32_t header_size() const;
  uint64_t file_size() const { return header_size() + AlignUp(payload_size, kFileAlignment); }
  uint32_t segment_count() const { return static_cast<uint32_t>(segment_checksums.size()); }
  uint64_t segment_length(uint32_t i) const;  // bytes of segment i (the last may be shorter)
};

uint32_t SegmentCount(uint64_t payload_size, uint32_t segment_size);
uint32_t HeaderSizeFor(size_t key_length, uint32_t segment_count);

// Computes checksums of `payload` and fills a ChunkMeta.
ChunkMeta DescribeChunk(std::string_view key, const void* payload, uint64_t size,
                        uint32_t segment_size, int64_t created_unix_ns);

uint64_t Checksum(const void* data, size_t size);

// Writes the full file image (header, payload, zero padding) into `image`, which must hold
// meta.file_size() bytes.
void EncodeChunkFile(const ChunkMeta& meta, const void* payload, void* image);
// As EncodeChunkFile when the payload is in place already, at image + meta.header_size(): writes
// the header and the padding after the payload.
void EncodeChunkHeader(const ChunkMeta& meta, void* image);

// The size of the whole header that starts `bytes` (its first kHeaderFixedBytes at least), from
// its fixed part; DataLoss when that is not a valid chunk header.
absl::StatusOr<uint32_t> ChunkHeaderSize(const void* bytes, size_t size);

// What tells two versions of a chunk apart and fixes its layout: files agreeing on these hold the
// same payload in the same segments.
struct ChunkVersion {
  uint64_t payload_size = 0;
  uint64_t payload_checksum = 0;
  uint32_t segment_size = 0;
  bool operator==(const ChunkVersion&) const = default;
};
ChunkVersion VersionOf(const ChunkMeta& meta);
// The version in a header's fixed fields (`size` >= 64 bytes of the file's start; the header
// checksum is not verified: a reader verifies every segment anyway). DataLoss if not a header.
absl::StatusOr<ChunkVersion> PeekChunkVersion(const void* bytes, size_t size);

// Decodes a header from `bytes` (at least the first kFileAlignment bytes of a file).
// Returns OutOfRange when the header is longer than `size` (ChunkHeaderSize says how long);
// DataLoss when the header is not a valid chunk header.
absl::StatusOr<ChunkMeta> DecodeChunkHeader(const void* bytes, size_t size);

// File name stem of a key: 32 hex digits of xxh3-128(key). The file lives at
// "<stem[0:2]>/<stem>.kvc" under the tier directory.
std::string FileStem(std::string_view key);
std::string RelativeChunkPath(std::string_view stem);
inline constexpr char kChunkSuffix[] = ".kvc";
inline constexpr char kTempMarker[] = ".tmp.";
inline constexpr size_t kChunkSuffixLength = 4;

}  // namespace kvstream
