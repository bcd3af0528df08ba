// On-disk chunk file format (docs/chunk-format.md): an aligned, self-checking header followed by
// the payload padded to kFileAlignment. Replicas of a chunk on different tiers are byte-identical.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstream/key.h"

namespace kvstream {

inline constexpr uint64_t kChunkMagic = 0x4B4E55484353564Bull;  // "KVSCHUNK" as little-endian bytes
// Version 1: a header without a cluster key (and, from earlier writers, with a header MAC only).
// Version 2: written with a cluster key: a nonce and a tag per segment authenticate the payload
// (docs/chunk-format.md, "MAC and segment tags (cluster key)").
inline constexpr uint32_t kChunkFormatPlain = 1;
inline constexpr uint32_t kChunkFormatAuthenticated = 2;
inline constexpr uint32_t kFileAlignment = 4096;   // header and payload padding granularity
inline constexpr uint32_t kHeaderFixedBytes = 64;
inline constexpr uint32_t kMaxHeaderBytes = 1u << 20;
// The largest payload a chunk may hold: 4 GiB. Far above any KV chunk (LMCache's and vLLM's are
// MiBs; the staging limit bounds a write anyway), and low enough that every size derived from a
// header (segments, padded payload, file size) fits 64-bit arithmetic with room to spare. A
// header claiming more is not a chunk header; the writer refuses such chunks.
inline constexpr uint64_t kMaxPayloadBytes = 1ull << 32;
// Flags in the header's `reserved` field. A header with a flag this reader does not know is not
// a chunk header it can read.
inline constexpr uint32_t kHeaderFlagMac = 1u << 0;  // a 32-byte MAC follows the segment checksums
inline constexpr uint32_t kKnownHeaderFlags = kHeaderFlagMac;
inline constexpr uint32_t kChunkMacBytes = 32;
using ChunkMac = std::array<uint8_t, kChunkMacBytes>;
inline constexpr uint32_t kChunkNonceBytes = 32;
inline constexpr uint32_t kSegmentTagBytes = 16;
using ChunkNonce = std::array<uint8_t, kChunkNonceBytes>;
using SegmentTag = std::array<uint8_t, kSegmentTagBytes>;

// What a header holds: version 1 without or with a header MAC (the latter only read, from earlier
// writers), or version 2 (a MAC, a nonce and a tag per segment).
enum class HeaderLayout { kPlain, kMac, kAuthenticated };

// REQUIRES: a > 0 and v + a does not overflow (every caller's v is bounded by kMaxPayloadBytes or
// kMaxHeaderBytes first).
inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A version 2 chunk's writer's random nonce for this version of the chunk, and the tag of each
// segment (format/chunk_mac.h).
struct ChunkAuth {
  ChunkNonce nonce{};
  std::vector<SegmentTag> tags;  // one per segment
};

// Everything the index needs about a chunk, as recorded in its header.
struct ChunkMeta {
  std::string key;
  uint64_t payload_size = 0;
  uint64_t payload_checksum = 0;       // xxh3-64 of the payload
  int64_t created_unix_ns = 0;
  uint32_t segment_size = 0;           // payload bytes per checksummed segment (= read block)
  std::vector<uint64_t> segment_checksums;  // xxh3-64 of each segment
  // Keyed MAC of the header (src/format/chunk_mac.h) when the writer had a cluster key; part of the
  // header (so part of header_size) when present.
  std::optional<ChunkMac> mac;
  // Version 2 only (then `mac` is present too): what authenticates every payload byte.
  std::optional<ChunkAuth> auth;

  HeaderLayout layout() const {
    return auth ? HeaderLayout::kAuthenticated : mac ? HeaderLayout::kMac : HeaderLayout::kPlain;
  }

  // REQUIRES: a chunk the format can hold (key of 1..kMaxKeyLength bytes, payload of at most
  // kMaxPayloadBytes, header of at most kMaxHeaderBytes): what DecodeChunkHeader and
  // DecodeCheckpoint return, and what DescribeChunk returns for a layout ChunkLayoutFits accepts.
  uint32_t header_size() const;
  uint64_t file_size() const { return header_size() + AlignUp(payload_size, kFileAlignment); }
  uint32_t segment_count() const { return static_cast<uint32_t>(segment_checksums.size()); }
  uint64_t segment_length(uint32_t i) const;  // bytes of segment i (the last may be shorter)
};

// ceil(payload_size / segment_size) without overflow; 0 when segment_size is 0.
uint64_t SegmentCount(uint64_t payload_size, uint32_t segment_size);
// The header size of `layout` (docs/chunk-format.md): align_up(64 + key_length + 8 x segment_count,
// 4096) plainly; + 32 with a MAC; + 32 + 16 x segment_count + 32 authenticated. In 64 bits;
// UINT64_MAX when the arguments are beyond any header (compare the result with kMaxHeaderBytes).
uint64_t HeaderSizeFor(uint64_t key_length, uint64_t segment_count, HeaderLayout layout);
// What a writer writes: authenticated with a cluster key, plain without.
inline HeaderLayout WrittenLayout(bool keyed) { return keyed ? HeaderLayout::kAuthenticated : HeaderLayout::kPlain; }
// OK when a chunk of this shape can be written and read back: key of 1..kMaxKeyLength bytes,
// payload of 1..kMaxPayloadBytes, segment size a non-zero multiple of kFileAlignment, header of at
// most kMaxHeaderBytes. InvalidArgument otherwise, saying which bound.
absl::Status ChunkLayoutFits(size_t key_length, uint64_t payload_size, uint32_t segment_size, HeaderLayout layout);

// Computes checksums of `payload` and fills a ChunkMeta (no MAC: ChunkMacKey::Sign adds it).
ChunkMeta DescribeChunk(std::string_view key, const void* payload, uint64_t size,
                        uint32_t segment_size, int64_t created_unix_ns);

uint64_t Checksum(const void* data, size_t size);
// Whether every segment of `payload` (meta.payload_size bytes) hashes to its checksum in `meta`.
bool MatchesChecksums(const ChunkMeta& meta, const uint8_t* payload);

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
// same payload in the same segments at the same offsets, verified by the same segment checksums
// and, authenticated, the same tags (one writer's nonce: `writer` is its first 8 bytes, 0 for
// version 1). Two writers' authenticated copies of equal bytes are two versions.
struct ChunkVersion {
  uint64_t payload_size = 0;
  uint64_t payload_checksum = 0;
  uint32_t segment_size = 0;
  uint32_t header_size = 0;
  uint64_t writer = 0;
  bool operator==(const ChunkVersion&) const = default;
};
ChunkVersion VersionOf(const ChunkMeta& meta);
inline bool SameVersion(const ChunkMeta& a, const ChunkMeta& b) { return VersionOf(a) == VersionOf(b); }
// The version in a header's first bytes (its fixed fields and, in version 2, the nonce after them:
// `size` >= 96 bytes of the file's start; the header checksum is not verified: a reader verifies
// every segment anyway). DataLoss if not a header.
absl::StatusOr<ChunkVersion> PeekChunkVersion(const void* bytes, size_t size);

// Decodes a header from `bytes` (at least the first kFileAlignment bytes of a file). The only
// decoder of the format: every size is checked against its bound in 64 bits, and the header size
// against `size`, before anything is copied or allocated.
// Returns OutOfRange when the header is longer than `size` (ChunkHeaderSize says how long);
// DataLoss when the header is not a valid chunk header. A MAC is decoded, not verified (that
// needs the key: VerifyChunkMac in format/chunk_mac.h).
absl::StatusOr<ChunkMeta> DecodeChunkHeader(const void* bytes, size_t size);

// The bytes a chunk's MAC covers, fed to `feed` in order: every header byte before the MAC as
// encoded, with the header checksum taken as 0 (the MAC flag set): the fixed fields, then (version
// 2) the nonce, the key, the segment checksums and (version 2) the segment tags. Version 2 binds
// the payload to the tags, which a reader with the key verifies; version 1 binds it only to the
// segment checksums (XXH3, which anyone can match: docs/security.md).
void ForEachMacInput(const ChunkMeta& meta, const std::function<void(const void*, size_t)>& feed);

// File name stem of a key: 32 hex digits of xxh3-128(key). The file lives at
// "<stem[0:2]>/<stem>.kvc" under the tier directory.
std::string FileStem(std::string_view key);
std::string RelativeChunkPath(std::string_view stem);
inline constexpr char kChunkSuffix[] = ".kvc";
inline constexpr char kTempMarker[] = ".tmp.";
inline constexpr size_t kChunkSuffixLength = 4;

}  // namespace kvstream
