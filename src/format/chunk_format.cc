#include "format/chunk_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"
#if defined(__x86_64__)
// XXH3 through libxxhash's runtime dispatch (AVX2/AVX-512 where the CPU has them): the plain
// entry point is built for baseline x86-64 (SSE2) and hashes ~6x slower here (5.6 vs 36 GB/s on
// 1 MiB blocks in cache). Same function, same values.
#include "xxh_x86dispatch.h"
#endif

namespace kvstream {
namespace {

// Fixed header fields, little-endian (x86-64 and aarch64 Linux are both little-endian).
struct FixedHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_size;
  uint64_t payload_size;
  uint64_t payload_checksum;
  int64_t created_unix_ns;
  uint32_t segment_size;
  uint32_t segment_count;
  uint32_t key_length;
  uint32_t reserved;
  uint64_t header_checksum;  // xxh3-64 of [0, header_size) with this field zeroed
};
static_assert(sizeof(FixedHeader) == kHeaderFixedBytes);
constexpr size_t kHeaderChecksumOffset = offsetof(FixedHeader, header_checksum);

uint64_t HeaderChecksum(const uint8_t* header, uint32_t header_size) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint64_t zero = 0;
  XXH3_64bits_update(&state, header, kHeaderChecksumOffset);
  XXH3_64bits_update(&state, &zero, sizeof(zero));
  XXH3_64bits_update(&state, header + kHeaderFixedBytes, header_size - kHeaderFixedBytes);
  return XXH3_64bits_digest(&state);
}

}  // namespace

uint64_t Checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

bool MatchesChecksums(const ChunkMeta& meta, const uint8_t* payload) {
  for (uint32_t i = 0; i < meta.segment_count(); ++i) {
    if (Checksum(payload + uint64_t{i} * meta.segment_size, meta.segment_length(i)) != meta.segment_checksums[i]) {
      return false;
    }
  }
  return true;
}

uint64_t SegmentCount(uint64_t payload_size, uint32_t segment_size) {
  if (segment_size == 0) return 0;
  return payload_size / segment_size + (payload_size % segment_size != 0 ? 1 : 0);
}

uint64_t HeaderSizeFor(uint64_t key_length, uint64_t segment_count, HeaderLayout layout) {
  // Bounds far above any valid header (1 MiB) and far below overflow: 64 + 32 + 2^40 + 24 x 2^40
  // + 32 and its alignment fit 64 bits.
  constexpr uint64_t kBeyond = 1ull << 40;
  if (key_length > kBeyond || segment_count > kBeyond) return UINT64_MAX;
  uint64_t bytes = kHeaderFixedBytes + key_length + 8 * segment_count;
  if (layout != HeaderLayout::kPlain) bytes += kChunkMacBytes;
  if (layout == HeaderLayout::kAuthenticated) bytes += kChunkNonceBytes + kSegmentTagBytes * segment_count;
  return AlignUp(bytes, kFileAlignment);
}

absl::Status ChunkLayoutFits(size_t key_length, uint64_t payload_size, uint32_t segment_size, HeaderLayout layout) {
  if (key_length == 0 || key_length > kMaxKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("a key must be 1 to ", kMaxKeyLength, " bytes, not ", key_length));
  }
  if (payload_size == 0 || payload_size > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a chunk must hold 1 to ", kMaxPayloadBytes, " bytes, not ", payload_size));
  }
  if (segment_size == 0 || segment_size % kFileAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad segment size ", segment_size));
  }
  const uint64_t header = HeaderSizeFor(key_length, SegmentCount(payload_size, segment_size), layout);
  if (header > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a chunk of ", payload_size, " bytes in segments of ", segment_size,
                                                   " needs a header of ", header, " bytes; at most ", kMaxHeaderBytes));
  }
  return absl::OkStatus();
}

uint32_t ChunkMeta::header_size() const {
  return static_cast<uint32_t>(HeaderSizeFor(key.size(), segment_checksums.size(), layout()));
}

uint64_t ChunkMeta::segment_length(uint32_t i) const {
  const uint64_t start = uint64_t{i} * segment_size;
  return std::min<uint64_t>(segment_size, payload_size - start);
}

ChunkMeta DescribeChunk(std::string_view key, const void* payload, uint64_t size,
                        uint32_t segment_size, int64_t created_unix_ns) {
  ChunkMeta meta;
  meta.key = std::string(key);
  meta.payload_size = size;
  meta.payload_checksum = Checksum(payload, size);
  meta.created_unix_ns = created_unix_ns;
  meta.segment_size = segment_size;
  const auto* bytes = static_cast<const uint8_t*>(payload);
  const uint32_t n = static_cast<uint32_t>(SegmentCount(size, segment_size));  // REQUIRES: ChunkLayoutFits
  meta.segment_checksums.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    meta.segment_checksums[i] = Checksum(bytes + uint64_t{i} * segment_size, meta.segment_length(i));
  }
  return meta;
}

namespace {

// Where the variable fields of a header of `layout` start (docs/chunk-format.md, "Layout").
struct HeaderOffsets {
  size_t nonce, key, checksums, tags, mac;
};
HeaderOffsets OffsetsOf(HeaderLayout layout, uint64_t key_length, uint64_t segment_count) {
  const bool authenticated = layout == HeaderLayout::kAuthenticated;
  HeaderOffsets at;
  at.nonce = kHeaderFixedBytes;
  at.key = at.nonce + (authenticated ? kChunkNonceBytes : 0);
  at.checksums = at.key + key_length;
  at.tags = at.checksums + 8 * segment_count;
  at.mac = at.tags + (authenticated ? kSegmentTagBytes * segment_count : 0);
  return at;
}

HeaderLayout LayoutOf(const FixedHeader& h) {
  if (h.version == kChunkFormatAuthenticated) return HeaderLayout::kAuthenticated;
  return (h.reserved & kHeaderFlagMac) != 0 ? HeaderLayout::kMac : HeaderLayout::kPlain;
}

// The fixed fields of `meta`'s header of `layout`, its checksum 0.
FixedHeader FixedFieldsOf(const ChunkMeta& meta, HeaderLayout layout) {
  FixedHeader h{};
  h.magic = kChunkMagic;
  h.version = layout == HeaderLayout::kAuthenticated ? kChunkFormatAuthenticated : kChunkFormatPlain;
  h.header_size = static_cast<uint32_t>(HeaderSizeFor(meta.key.size(), meta.segment_checksums.size(), layout));
  h.payload_size = meta.payload_size;
  h.payload_checksum = meta.payload_checksum;
  h.created_unix_ns = meta.created_unix_ns;
  h.segment_size = meta.segment_size;
  h.segment_count = meta.segment_count();
  h.key_length = static_cast<uint32_t>(meta.key.size());
  h.reserved = layout == HeaderLayout::kPlain ? 0 : kHeaderFlagMac;
  return h;
}

}  // namespace

void ForEachMacInput(const ChunkMeta& meta, const std::function<void(const void*, size_t)>& feed) {
  // A version 1 header is MACed as if it carried its MAC (the MAC is being computed for it).
  const FixedHeader h = FixedFieldsOf(meta, meta.auth ? HeaderLayout::kAuthenticated : HeaderLayout::kMac);
  feed(&h, sizeof(h));
  if (meta.auth) feed(meta.auth->nonce.data(), kChunkNonceBytes);
  feed(meta.key.data(), meta.key.size());
  feed(meta.segment_checksums.data(), 8 * meta.segment_checksums.size());
  if (meta.auth) feed(meta.auth->tags.data(), size_t{kSegmentTagBytes} * meta.auth->tags.size());
}

void EncodeChunkHeader(const ChunkMeta& meta, void* image) {
  auto* out = static_cast<uint8_t*>(image);
  const uint32_t header_size = meta.header_size();
  std::memset(out, 0, header_size);
  const HeaderLayout layout = meta.layout();
  const FixedHeader h = FixedFieldsOf(meta, layout);
  std::memcpy(out, &h, sizeof(h));
  const HeaderOffsets at = OffsetsOf(layout, meta.key.size(), meta.segment_count());
  std::memcpy(out + at.key, meta.key.data(), meta.key.size());
  std::memcpy(out + at.checksums, meta.segment_checksums.data(), 8ull * meta.segment_count());
  if (meta.auth) {
    std::memcpy(out + at.nonce, meta.auth->nonce.data(), kChunkNonceBytes);
    std::memcpy(out + at.tags, meta.auth->tags.data(), size_t{kSegmentTagBytes} * meta.segment_count());
  }
  if (meta.mac) std::memcpy(out + at.mac, meta.mac->data(), kChunkMacBytes);
  const uint64_t checksum = HeaderChecksum(out, header_size);
  std::memcpy(out + kHeaderChecksumOffset, &checksum, sizeof(checksum));
  const uint64_t padded = AlignUp(meta.payload_size, kFileAlignment);
  std::memset(out + header_size + meta.payload_size, 0, padded - meta.payload_size);
}

void EncodeChunkFile(const ChunkMeta& meta, const void* payload, void* image) {
  std::memcpy(static_cast<uint8_t*>(image) + meta.header_size(), payload, meta.payload_size);
  EncodeChunkHeader(meta, image);
}

namespace {

// Reads and checks the fixed part of a header (everything but the header checksum). Every bound
// is checked in 64 bits before anything is narrowed; the header size returned is at most
// kMaxHeaderBytes and exactly what the other fields imply.
absl::StatusOr<FixedHeader> DecodeFixedHeader(const void* bytes, size_t size) {
  if (bytes == nullptr || size < kHeaderFixedBytes) return absl::DataLossError("chunk header truncated");
  FixedHeader h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic != kChunkMagic) return absl::DataLossError("bad chunk magic");
  if (h.version != kChunkFormatPlain && h.version != kChunkFormatAuthenticated) {
    return absl::DataLossError(absl::StrCat("unsupported chunk format version ", h.version));
  }
  if ((h.reserved & ~kKnownHeaderFlags) != 0) {
    return absl::DataLossError(absl::StrCat("unknown chunk header flags ", absl::Hex(h.reserved)));
  }
  if (h.version == kChunkFormatAuthenticated && (h.reserved & kHeaderFlagMac) == 0) {
    return absl::DataLossError("an authenticated chunk header without its MAC flag");
  }
  if (h.key_length == 0 || h.key_length > kMaxKeyLength) return absl::DataLossError("bad key length");
  if (h.payload_size == 0) return absl::DataLossError("empty payload");
  if (h.payload_size > kMaxPayloadBytes) {
    return absl::DataLossError(absl::StrCat("payload size ", h.payload_size, " exceeds ", kMaxPayloadBytes));
  }
  if (h.segment_size == 0 || h.segment_size % kFileAlignment != 0) {
    return absl::DataLossError("bad segment size");
  }
  if (uint64_t{h.segment_count} != SegmentCount(h.payload_size, h.segment_size)) {
    return absl::DataLossError("segment count does not match payload size");
  }
  const uint64_t header_size = HeaderSizeFor(h.key_length, h.segment_count, LayoutOf(h));
  if (header_size > kMaxHeaderBytes || uint64_t{h.header_size} != header_size) {
    return absl::DataLossError("bad header size");
  }
  return h;
}

}  // namespace

absl::StatusOr<uint32_t> ChunkHeaderSize(const void* bytes, size_t size) {
  absl::StatusOr<FixedHeader> h = DecodeFixedHeader(bytes, size);
  if (!h.ok()) return h.status();
  return h->header_size;
}

ChunkVersion VersionOf(const ChunkMeta& meta) {
  uint64_t writer = 0;
  if (meta.auth) std::memcpy(&writer, meta.auth->nonce.data(), sizeof(writer));
  return {meta.payload_size, meta.payload_checksum, meta.segment_size, meta.header_size(), writer};
}

absl::StatusOr<ChunkVersion> PeekChunkVersion(const void* bytes, size_t size) {
  absl::StatusOr<FixedHeader> fixed = DecodeFixedHeader(bytes, size);
  if (!fixed.ok()) return fixed.status();
  uint64_t writer = 0;  // the first 8 bytes of a version 2 header's nonce, right after the fixed fields
  if (fixed->version == kChunkFormatAuthenticated) {
    if (size < kHeaderFixedBytes + kChunkNonceBytes) return absl::DataLossError("chunk header truncated");
    std::memcpy(&writer, static_cast<const uint8_t*>(bytes) + kHeaderFixedBytes, sizeof(writer));
  }
  return ChunkVersion{fixed->payload_size, fixed->payload_checksum, fixed->segment_size, fixed->header_size, writer};
}

absl::StatusOr<ChunkMeta> DecodeChunkHeader(const void* bytes, size_t size) {
  absl::StatusOr<FixedHeader> fixed = DecodeFixedHeader(bytes, size);
  if (!fixed.ok()) return fixed.status();
  const FixedHeader& h = *fixed;
  const auto* in = static_cast<const uint8_t*>(bytes);
  if (size < h.header_size) {
    return absl::OutOfRangeError(absl::StrCat("the header is ", h.header_size, " bytes; ", size, " given"));
  }
  if (HeaderChecksum(in, h.header_size) != h.header_checksum) {
    return absl::DataLossError("header checksum mismatch");
  }
  // DecodeFixedHeader bounded header_size by kMaxHeaderBytes and made it exactly the bytes of
  // the fields below (rounded up); `size` holds all of it.
  const HeaderLayout layout = LayoutOf(h);
  const HeaderOffsets at = OffsetsOf(layout, h.key_length, h.segment_count);
  ChunkMeta meta;
  meta.key.assign(reinterpret_cast<const char*>(in + at.key), h.key_length);
  meta.payload_size = h.payload_size;
  meta.payload_checksum = h.payload_checksum;
  meta.created_unix_ns = h.created_unix_ns;
  meta.segment_size = h.segment_size;
  meta.segment_checksums.resize(h.segment_count);
  std::memcpy(meta.segment_checksums.data(), in + at.checksums, 8ull * h.segment_count);
  if (layout == HeaderLayout::kAuthenticated) {
    meta.auth.emplace();
    std::memcpy(meta.auth->nonce.data(), in + at.nonce, kChunkNonceBytes);
    meta.auth->tags.resize(h.segment_count);
    std::memcpy(meta.auth->tags.data(), in + at.tags, size_t{kSegmentTagBytes} * h.segment_count);
  }
  if (layout != HeaderLayout::kPlain) {
    meta.mac.emplace();
    std::memcpy(meta.mac->data(), in + at.mac, kChunkMacBytes);
  }
  return meta;
}

std::string FileStem(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

std::string RelativeChunkPath(std::string_view stem) {
  return absl::StrCat(std::string(stem.substr(0, 2)), "/", std::string(stem), kChunkSuffix);
}

}  // namespace kvstream
