// libFuzzer, structure-aware: chunk file headers (what a damaged, foreign or hostile file holds).
// An input is a header's bytes. The mutator changes whole fields (sizes to powers of two and
// boundaries, one field's value into another), sometimes makes the derived fields agree as a
// writer would (segment count from payload and segment size, header size from those, computed
// in 64 bits and stored in their 32-bit fields), and every input is sealed with a matching header
// checksum before it is decoded: the fuzzer explores the decoder's bounds, not the checksum.
// Never crashes, never reads past the buffer (it is exactly the input's size); whatever decodes
// is self-consistent and re-encodes to a header that decodes the same.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "format/chunk_format.h"
#if __has_include("format/chunk_mac.h")
#include "format/chunk_mac.h"
#define KVSTREAM_FUZZ_MAC 1
#endif

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

// The fixed header's fields (docs/chunk-format.md): offset and width.
struct Field {
  size_t at;
  size_t width;
};
constexpr Field kVersion{8, 4}, kHeaderSize{12, 4}, kPayloadSize{16, 8}, kSegmentSize{40, 4}, kSegmentCount{44, 4},
    kKeyLength{48, 4}, kFlags{52, 4};
constexpr Field kFields[] = {kVersion, kHeaderSize, kPayloadSize, kSegmentSize, kSegmentCount, kKeyLength, kFlags};
constexpr size_t kChecksumAt = 56;
constexpr size_t kFixed = 64;

uint64_t Get(const uint8_t* data, Field f) {
  uint64_t v = 0;
  std::memcpy(&v, data + f.at, f.width);  // little-endian
  return v;
}
void Set(uint8_t* data, Field f, uint64_t v) { std::memcpy(data + f.at, &v, f.width); }

// Writes the header checksum a writer would: xxh3-64 of [0, header_size) with the field as 0,
// when the input holds that many bytes (else the decoder stops at the size anyway).
void Seal(uint8_t* data, size_t size) {
  if (size < kFixed) return;
  const uint64_t header_size = Get(data, kHeaderSize);
  if (header_size < kFixed || header_size > size) return;
  std::memset(data + kChecksumAt, 0, 8);
  const uint64_t checksum = kvstream::Checksum(data, header_size);
  std::memcpy(data + kChecksumAt, &checksum, 8);
}

void MutateField(uint8_t* data, std::minstd_rand& rng) {
  const Field f = kFields[rng() % std::size(kFields)];
  const unsigned bits = 8 * static_cast<unsigned>(f.width);
  const uint64_t old = Get(data, f);
  const uint64_t power = uint64_t{1} << (rng() % bits);
  uint64_t v = 0;
  switch (rng() % 8) {
    case 0: v = power; break;
    case 1: v = power + (rng() % 64) - 32; break;
    case 2: v = power * 4096; break;  // sizes in pages
    case 3: v = old + (rng() % 8192) - 4096; break;
    case 4: v = rng() % 2 ? old << (rng() % 16) : old >> (rng() % 16); break;
    case 5: v = ~uint64_t{0} - rng() % 4; break;
    case 6: v = Get(data, kFields[rng() % std::size(kFields)]); break;
    default: v = (uint64_t{rng()} << 32) ^ rng(); break;
  }
  Set(data, f, v);
}

// Derived fields as a writer computes them: in 64 bits, stored in their 32-bit fields.
void MakeConsistent(uint8_t* data) {
  const uint64_t payload = Get(data, kPayloadSize), segment = Get(data, kSegmentSize);
  const uint64_t segments = segment == 0 ? 0 : payload / segment + (payload % segment != 0);
  Set(data, kSegmentCount, segments);
  const bool authenticated = Get(data, kVersion) == 2;  // a nonce, a tag per segment and the MAC
  const uint64_t mac = (authenticated || (Get(data, kFlags) & 1)) ? 32 : 0;
  const uint64_t bytes = kFixed + Get(data, kKeyLength) + 8 * segments + mac + (authenticated ? 32 + 16 * segments : 0);
  Set(data, kHeaderSize, (bytes + 4095) / 4096 * 4096);
}

#ifdef KVSTREAM_FUZZ_MAC
const kvstream::ChunkMacKey& Key() {
  static const auto key = *kvstream::ChunkMacKey::FromBytes("0123456789abcdef0123456789abcdef", 32);
  return *key;
}
#endif

void Check(const uint8_t* data, size_t size) {
  auto header_size = kvstream::ChunkHeaderSize(data, size);
  auto version = kvstream::PeekChunkVersion(data, size);
  auto meta = kvstream::DecodeChunkHeader(data, size);
  if (!meta.ok()) return;
#ifdef KVSTREAM_FUZZ_MAC
  (void)kvstream::VerifyChunkMac(*meta, &Key(), true);  // whatever the MAC bytes: never crashes
#endif
  if (!header_size.ok() || *header_size != meta->header_size() || meta->header_size() > size) __builtin_trap();
  if (!version.ok() || !(*version == kvstream::VersionOf(*meta))) __builtin_trap();
  if (meta->segment_count() != kvstream::SegmentCount(meta->payload_size, meta->segment_size)) __builtin_trap();
  if (meta->key.empty() || meta->key.size() > kvstream::kMaxKeyLength) __builtin_trap();
  // Re-encoded (padding zeroed), it decodes to the same chunk. EncodeChunkHeader also zeroes the
  // padding after the payload, so it needs the whole file image: only for small chunks.
  if (meta->file_size() > (4u << 20)) return;
  std::vector<uint8_t> again(meta->file_size());
  kvstream::EncodeChunkHeader(*meta, again.data());
  auto decoded = kvstream::DecodeChunkHeader(again.data(), again.size());
  if (!decoded.ok() || decoded->key != meta->key || decoded->segment_checksums != meta->segment_checksums ||
      !(kvstream::VersionOf(*decoded) == kvstream::VersionOf(*meta)) ||
      decoded->created_unix_ns != meta->created_unix_ns) {
    __builtin_trap();
  }
#ifdef KVSTREAM_FUZZ_MAC
  if (decoded->mac != meta->mac || decoded->auth.has_value() != meta->auth.has_value()) __builtin_trap();
  if (decoded->auth && (decoded->auth->nonce != meta->auth->nonce || decoded->auth->tags != meta->auth->tags)) {
    __builtin_trap();
  }
  // The input's own bytes as segment 0: a tag the fuzzer matched without the key would be a forgery.
  if (decoded->auth && size >= decoded->segment_length(0) &&
      Key().VerifySegment(*decoded, 0, data, decoded->segment_length(0))) {
    __builtin_trap();
  }
  Key().Reseal(&*decoded);
  if (!Key().Verify(*decoded)) __builtin_trap();
#endif
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  if (size < kFixed || rng() % 4 == 0) size = LLVMFuzzerMutate(data, size, max_size);  // any byte: key, checksums
  if (size >= kFixed) {
    for (unsigned n = 1 + rng() % 2; n > 0; --n) MutateField(data, rng);
    if (rng() % 2) MakeConsistent(data);
  }
  Seal(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> header(data, data + size);  // exactly `size` bytes, so ASan sees any read past them
  Check(header.data(), header.size());             // as found
  Seal(header.data(), header.size());
  Check(header.data(), header.size());             // as a writer would seal it
  return 0;
}
