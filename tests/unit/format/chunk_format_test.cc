#include "format/chunk_format.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>

#include "format/chunk_mac.h"
#include "mac_key_util.h"
#include "test_util.h"

namespace kvstream {
namespace {

using testing::MacKey;
using testing::Payload;

std::vector<uint8_t> Image(const ChunkMeta& meta, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> image(meta.file_size(), 0xee);
  EncodeChunkFile(meta, payload.data(), image.data());
  return image;
}

TEST_CASE("a chunk file round-trips its header and payload") {
  const auto payload = Payload(3 * 65536 + 123, 1);
  const ChunkMeta meta = DescribeChunk("model@1@0@abc", payload.data(), payload.size(), 65536, 42);
  CHECK(meta.segment_count() == 4);
  CHECK(meta.segment_length(3) == 123);
  CHECK(meta.header_size() == 4096);
  CHECK(meta.file_size() == 4096 + AlignUp(payload.size(), 4096));
  const auto image = Image(meta, payload);
  auto decoded = DecodeChunkHeader(image.data(), 4096);
  REQUIRE(decoded.ok());
  CHECK(decoded->key == "model@1@0@abc");
  CHECK(decoded->payload_size == payload.size());
  CHECK(decoded->payload_checksum == Checksum(payload.data(), payload.size()));
  CHECK(decoded->created_unix_ns == 42);
  CHECK(decoded->segment_checksums == meta.segment_checksums);
  CHECK(std::memcmp(image.data() + 4096, payload.data(), payload.size()) == 0);
  // Padding is zero, so replicas are byte-identical.
  for (size_t i = 4096 + payload.size(); i < image.size(); ++i) REQUIRE(image[i] == 0);
  CHECK(Image(meta, payload) == image);
}

TEST_CASE("a header with many segments grows in 4 KiB steps") {
  const auto payload = Payload(1000 * 4096, 2);
  const ChunkMeta meta = DescribeChunk(std::string(1024, 'k'), payload.data(), payload.size(), 4096, 0);
  CHECK(meta.header_size() == AlignUp(64 + 1024 + 8 * 1000, 4096));
  const auto image = Image(meta, payload);
  auto partial = DecodeChunkHeader(image.data(), 4096);
  REQUIRE(absl::IsOutOfRange(partial.status()));
  auto size = ChunkHeaderSize(image.data(), 4096);
  REQUIRE(size.ok());
  CHECK(*size == meta.header_size());
  auto full = DecodeChunkHeader(image.data(), meta.header_size());
  REQUIRE(full.ok());
  CHECK(full->segment_checksums == meta.segment_checksums);
}

TEST_CASE("any flipped header bit is detected") {
  const auto payload = Payload(10000, 3);
  const ChunkMeta meta = DescribeChunk("key", payload.data(), payload.size(), 4096, 7);
  const auto image = Image(meta, payload);
  for (size_t bit = 0; bit < 8 * (64 + 3 + 8 * 3); bit += 7) {
    auto bad = image;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    INFO("bit " << bit);
    auto decoded = DecodeChunkHeader(bad.data(), 4096);
    CHECK(!decoded.ok());
  }
}

TEST_CASE("a header claiming an empty payload is rejected") {
  const uint8_t byte = 0;
  const ChunkMeta meta = DescribeChunk("key", &byte, 0, 4096, 0);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, &byte, image.data());
  CHECK(absl::IsDataLoss(DecodeChunkHeader(image.data(), image.size()).status()));
}

TEST_CASE("segment checksums catch payload corruption") {
  const auto payload = Payload(5 * 4096, 4);
  const ChunkMeta meta = DescribeChunk("key", payload.data(), payload.size(), 4096, 0);
  auto bad = payload;
  bad[2 * 4096 + 17] ^= 1;
  CHECK(Checksum(bad.data() + 2 * 4096, 4096) != meta.segment_checksums[2]);
  CHECK(Checksum(bad.data() + 1 * 4096, 4096) == meta.segment_checksums[1]);
}

// Crafted headers: fields an attacker with write access to a tier chooses, with a header checksum
// that matches them (anyone can compute it), so only the decoder's bounds stand in the way.
template <typename T>
void Set(std::vector<uint8_t>& header, size_t offset, T value) {
  std::memcpy(header.data() + offset, &value, sizeof(value));
}
template <typename T>
T Get(const std::vector<uint8_t>& header, size_t offset) {
  T value;
  std::memcpy(&value, header.data() + offset, sizeof(value));
  return value;
}
// Recomputes the header checksum over [0, the header_size field) as a writer would, if that many
// bytes are there.
void Seal(std::vector<uint8_t>& header) {
  const uint32_t header_size = Get<uint32_t>(header, 12);
  if (header_size > header.size() || header_size < kHeaderFixedBytes) return;
  std::vector<uint8_t> copy(header.begin(), header.begin() + header_size);
  Set<uint64_t>(copy, 56, 0);
  Set<uint64_t>(header, 56, Checksum(copy.data(), copy.size()));
}
// A valid header of a 10000-byte chunk in 4 KiB segments, as the first page of its file.
std::vector<uint8_t> GoodHeader(const ChunkMacKey* key = nullptr) {
  const auto payload = Payload(10000, 5);
  ChunkMeta meta = DescribeChunk("key", payload.data(), payload.size(), 4096, 7);
  if (key != nullptr) REQUIRE(key->Sign(&meta, payload.data()).ok());
  const auto image = Image(meta, payload);
  return std::vector<uint8_t>(image.begin(), image.begin() + 4096);
}
void RequireRefused(const std::vector<uint8_t>& header) {
  CHECK(absl::IsDataLoss(DecodeChunkHeader(header.data(), header.size()).status()));
  CHECK(absl::IsDataLoss(ChunkHeaderSize(header.data(), header.size()).status()));
  CHECK(absl::IsDataLoss(PeekChunkVersion(header.data(), header.size()).status()));
}

TEST_CASE("the crafted headers are sealed like real ones") {
  auto header = GoodHeader();
  Set<uint64_t>(header, 32, 8);  // another creation time
  CHECK(absl::IsDataLoss(DecodeChunkHeader(header.data(), header.size()).status()));
  Seal(header);
  auto decoded = DecodeChunkHeader(header.data(), header.size());
  REQUIRE(decoded.ok());
  CHECK(decoded->created_unix_ns == 8);
}

TEST_CASE("a sealed header claiming 2 TiB in 4 KiB segments is refused, nothing copied") {
  // 2^29 segment checksums are 4 GiB: its true header size is 2^32 + 4096, which a 32-bit
  // computation takes for 4096, the size the header claims.
  auto header = GoodHeader();
  Set<uint64_t>(header, 16, uint64_t{1} << 41);
  Set<uint32_t>(header, 44, uint32_t{1} << 29);
  Set<uint32_t>(header, 12, 4096);
  Seal(header);
  RequireRefused(header);
}

TEST_CASE("a sealed header whose payload exceeds the largest chunk is refused") {
  auto header = GoodHeader();
  Set<uint64_t>(header, 16, kMaxPayloadBytes + 4096);  // consistent segments and header size
  Set<uint32_t>(header, 40, 64u << 20);
  Set<uint32_t>(header, 44, static_cast<uint32_t>(SegmentCount(kMaxPayloadBytes + 4096, 64u << 20)));
  Seal(header);
  RequireRefused(header);
}

TEST_CASE("a sealed header whose segment count does not match its payload is refused") {
  for (uint32_t count : {0u, 2u, 4u, 100u, 0xffffffffu}) {
    INFO("count " << count);
    auto header = GoodHeader();
    Set<uint32_t>(header, 44, count);
    Seal(header);
    RequireRefused(header);
  }
}

TEST_CASE("a sealed header whose size is not the one its fields imply is refused") {
  for (uint32_t size : {0u, 64u, 4095u, 8192u, kMaxHeaderBytes, kMaxHeaderBytes + 4096, 0xfffff000u}) {
    INFO("header size " << size);
    auto header = GoodHeader();
    Set<uint32_t>(header, 12, size);
    Seal(header);
    RequireRefused(header);
  }
}

TEST_CASE("a sealed header with a bad key length or segment size or an unknown flag is refused") {
  for (uint32_t length : {0u, static_cast<uint32_t>(kMaxKeyLength) + 1, 0xffffffffu}) {
    auto header = GoodHeader();
    Set<uint32_t>(header, 48, length);
    Seal(header);
    RequireRefused(header);
  }
  for (uint32_t segment : {0u, 4095u, 6000u}) {
    auto header = GoodHeader();
    Set<uint32_t>(header, 40, segment);
    Seal(header);
    RequireRefused(header);
  }
  auto header = GoodHeader();
  Set<uint32_t>(header, 52, 2u);
  Seal(header);
  RequireRefused(header);
}

TEST_CASE("a valid header longer than the bytes given is OutOfRange, never read past them") {
  const auto payload = Payload(2000 * 4096, 6);
  const ChunkMeta meta = DescribeChunk("k", payload.data(), payload.size(), 4096, 0);
  REQUIRE(meta.header_size() == 16384);
  const auto image = Image(meta, payload);
  // Exactly the first page, in a buffer of its own (the sanitizers see a read past it).
  const std::vector<uint8_t> page(image.begin(), image.begin() + 4096);
  CHECK(absl::IsOutOfRange(DecodeChunkHeader(page.data(), page.size()).status()));
  CHECK(*ChunkHeaderSize(page.data(), page.size()) == 16384);
  CHECK(absl::IsDataLoss(DecodeChunkHeader(page.data(), 63).status()));
  CHECK(absl::IsDataLoss(DecodeChunkHeader(nullptr, 0).status()));
}

TEST_CASE("sizes are computed in 64 bits and bounded") {
  CHECK(SegmentCount(~uint64_t{0}, 4096) == (~uint64_t{0}) / 4096 + 1);
  CHECK(SegmentCount(4096, 0) == 0);
  CHECK(SegmentCount(1, 4096) == 1);
  constexpr HeaderLayout kPlain = HeaderLayout::kPlain, kAuthenticated = HeaderLayout::kAuthenticated;
  CHECK(HeaderSizeFor(3, uint64_t{1} << 29, kPlain) == (uint64_t{1} << 32) + 4096);
  CHECK(HeaderSizeFor(3, ~uint64_t{0}, kPlain) == UINT64_MAX);
  CHECK(HeaderSizeFor(3, ~uint64_t{0}, kAuthenticated) == UINT64_MAX);
  CHECK(HeaderSizeFor(3, 1, HeaderLayout::kMac) == 4096);
  CHECK(HeaderSizeFor(3, 1, kAuthenticated) == 4096);
  CHECK(HeaderSizeFor(3, 200, kPlain) == 4096);
  CHECK(HeaderSizeFor(3, 200, kAuthenticated) == 8192);  // 64 + 32 + 3 + 24 x 200 + 32
  CHECK(ChunkLayoutFits(3, 10000, 4096, kAuthenticated).ok());
  CHECK(ChunkLayoutFits(3, kMaxPayloadBytes, 64u << 20, kAuthenticated).ok());
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(3, kMaxPayloadBytes + 1, 64u << 20, kAuthenticated)));
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(3, 0, 4096, kPlain)));
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(0, 1, 4096, kPlain)));
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(3, 1, 0, kPlain)));
  // 1 GiB in 4 KiB segments needs a 2 MiB header: more than a header may be.
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(3, 1ull << 30, 4096, kPlain)));
  // 256 MiB in 4 KiB segments fits plainly (512 KiB of checksums), not with a tag each (1.5 MiB).
  CHECK(ChunkLayoutFits(3, 1ull << 28, 4096, kPlain).ok());
  CHECK(absl::IsInvalidArgument(ChunkLayoutFits(3, 1ull << 28, 4096, kAuthenticated)));
}

TEST_CASE("a signed header is version 2: nonce, key, checksums, tags and MAC, all round-tripped") {
  const auto key = MacKey(1);
  const auto payload = Payload(3 * 65536 + 5, 8);
  ChunkMeta meta = DescribeChunk("model@1@0@abc", payload.data(), payload.size(), 65536, 42);
  REQUIRE(key->Sign(&meta, payload.data()).ok());
  REQUIRE(meta.mac.has_value());
  REQUIRE(meta.auth.has_value());
  REQUIRE(meta.auth->tags.size() == 4);
  const auto image = Image(meta, payload);
  CHECK(Get<uint32_t>(image, 8) == kChunkFormatAuthenticated);
  CHECK(Get<uint32_t>(image, 52) == kHeaderFlagMac);
  const size_t key_at = 64 + kChunkNonceBytes, tags_at = key_at + meta.key.size() + 8 * 4;
  CHECK(std::memcmp(image.data() + 64, meta.auth->nonce.data(), kChunkNonceBytes) == 0);
  CHECK(std::memcmp(image.data() + key_at, meta.key.data(), meta.key.size()) == 0);
  CHECK(std::memcmp(image.data() + tags_at, meta.auth->tags.data(), 4 * kSegmentTagBytes) == 0);
  CHECK(std::memcmp(image.data() + tags_at + 4 * kSegmentTagBytes, meta.mac->data(), kChunkMacBytes) == 0);
  auto decoded = DecodeChunkHeader(image.data(), 4096);
  REQUIRE(decoded.ok());
  CHECK(decoded->key == meta.key);
  CHECK(decoded->segment_checksums == meta.segment_checksums);
  REQUIRE(decoded->auth.has_value());
  CHECK(decoded->auth->nonce == meta.auth->nonce);
  CHECK(decoded->auth->tags == meta.auth->tags);
  CHECK(*decoded->mac == *meta.mac);
  CHECK(decoded->header_size() == meta.header_size());
  CHECK(key->Verify(*decoded));
  CHECK(VerifyChunkMac(*decoded, key.get(), /*require=*/true).ok());
  CHECK_FALSE(MacKey(2)->Verify(*decoded));
  CHECK(absl::IsPermissionDenied(VerifyChunkMac(*decoded, MacKey(2).get(), false)));
  // Without a key the MAC is kept, unchecked.
  CHECK(VerifyChunkMac(*decoded, nullptr, true).ok());
  // The version names its writer: the nonce's first bytes, in the header and in the meta alike.
  auto peeked = PeekChunkVersion(image.data(), 96);
  REQUIRE(peeked.ok());
  CHECK(*peeked == VersionOf(meta));
  CHECK(peeked->writer != 0);
  CHECK(absl::IsDataLoss(PeekChunkVersion(image.data(), 64).status()));  // the nonce is not there
}

TEST_CASE("two writers' authenticated copies of the same bytes are two versions, plain copies one") {
  const auto key = MacKey(1);
  const auto payload = Payload(70000, 4);
  ChunkMeta plain = DescribeChunk("k", payload.data(), payload.size(), 65536, 1);
  ChunkMeta a = plain, b = plain;
  REQUIRE(key->Sign(&a, payload.data()).ok());
  REQUIRE(key->Sign(&b, payload.data()).ok());
  CHECK(a.auth->nonce != b.auth->nonce);
  CHECK_FALSE(SameVersion(a, b));
  CHECK_FALSE(SameVersion(a, plain));  // another layout, too
  ChunkMeta retimed = a;  // a copy of a's bytes, re-MACed for its own time: a's version still
  retimed.created_unix_ns = 99;
  key->Reseal(&retimed);
  CHECK(SameVersion(a, retimed));
  CHECK(key->Verify(retimed));
  ChunkMeta later = plain;
  later.created_unix_ns = 2;
  CHECK(SameVersion(plain, later));
}

TEST_CASE("the header size counts the nonce, tags and MAC where they cross a page") {
  // 64 + 1024 + 8 x 125 = 2088 bytes plainly; 64 + 32 + 1024 + 24 x 125 + 32 = 4152 signed.
  REQUIRE(kMaxKeyLength == 1024);
  const auto payload = Payload(125 * 4096, 9);
  ChunkMeta meta = DescribeChunk(std::string(1024, 'k'), payload.data(), payload.size(), 4096, 0);
  CHECK(meta.header_size() == 4096);
  REQUIRE(MacKey(1)->Sign(&meta, payload.data()).ok());
  CHECK(meta.header_size() == 8192);
  std::vector<uint8_t> image(meta.header_size());
  EncodeChunkHeader(meta, image.data());
  CHECK(absl::IsOutOfRange(DecodeChunkHeader(image.data(), 4096).status()));
  auto decoded = DecodeChunkHeader(image.data(), image.size());
  REQUIRE(decoded.ok());
  CHECK(decoded->header_size() == 8192);
  CHECK(MacKey(1)->Verify(*decoded));
}

TEST_CASE("a re-sealed change to any authenticated field fails the MAC") {
  const auto key = MacKey(3);
  const auto good = GoodHeader(key.get());
  REQUIRE(key->Verify(*DecodeChunkHeader(good.data(), good.size())));
  // Key "key", 3 segments: nonce at 64, key at 96, checksums at 99, tags at 123, the MAC at 171.
  // Created time, payload checksum, nonce, a key byte, a segment checksum, a tag, the MAC itself:
  for (size_t offset : {size_t{32}, size_t{24}, size_t{64 + 5}, size_t{96}, size_t{99 + 8}, size_t{123 + 20},
                        size_t{171 + 5}}) {
    INFO("offset " << offset);
    auto header = good;
    header[offset] ^= 0x40;
    Seal(header);
    auto decoded = DecodeChunkHeader(header.data(), header.size());
    REQUIRE(decoded.ok());  // a valid header...
    CHECK(absl::IsPermissionDenied(VerifyChunkMac(*decoded, key.get(), false)));  // ...not signed by the key
  }
  // The MAC flag taken off a version 2 header: not a header at all.
  auto stripped = good;
  Set<uint32_t>(stripped, 52, 0);
  Seal(stripped);
  RequireRefused(stripped);
}

TEST_CASE("a version 1 header's MAC does not make it servable where payloads must be authenticated") {
  // As written before version 2: a MAC over the header (covering only XXH3 segment checksums).
  const auto key = MacKey(3);
  const auto payload = Payload(10000, 5);
  ChunkMeta meta = DescribeChunk("key", payload.data(), payload.size(), 4096, 7);
  meta.mac = key->Compute(meta);
  const auto image = Image(meta, payload);
  CHECK(Get<uint32_t>(image, 8) == kChunkFormatPlain);
  auto decoded = DecodeChunkHeader(image.data(), 4096);
  REQUIRE(decoded.ok());
  CHECK(decoded->layout() == HeaderLayout::kMac);
  CHECK(key->Verify(*decoded));
  CHECK(absl::IsPermissionDenied(VerifyChunkMac(*decoded, key.get(), /*require=*/true)));  // a shared tier
  CHECK(VerifyChunkMac(*decoded, key.get(), /*require=*/false).ok());                      // a private one
  // Nor a plain one.
  auto plain = DecodeChunkHeader(GoodHeader().data(), 4096);
  REQUIRE(plain.ok());
  CHECK(absl::IsPermissionDenied(VerifyChunkMac(*plain, key.get(), /*require=*/true)));
  CHECK(VerifyChunkMac(*plain, key.get(), /*require=*/false).ok());
}

// The MAC's cost per chunk: a 16 MiB chunk in 1 MiB blocks (16 segments), and in 64 KiB blocks
// (256): microseconds per MAC (computed and verified), said when it fails (only if absurdly slow).
TEST_CASE("the MAC of a 16 MiB chunk's header costs microseconds") {
  const auto key = MacKey(4);
  for (uint32_t block : {1u << 20, 64u << 10}) {
    ChunkMeta meta;
    meta.key = "model@tp0@" + std::string(64, 'h');
    meta.payload_size = 16ull << 20;
    meta.segment_size = block;
    meta.segment_checksums.assign(SegmentCount(meta.payload_size, block), 0x1234567890abcdefull);
    meta.auth.emplace().tags.resize(meta.segment_count());
    constexpr int kRounds = 20000;
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      meta.created_unix_ns = i;
      key->Reseal(&meta);
    }
    const auto signed_at = std::chrono::steady_clock::now();
    int verified = 0;
    for (int i = 0; i < kRounds; ++i) verified += key->Verify(meta);
    const auto ended = std::chrono::steady_clock::now();
    CHECK(verified == kRounds);
    const double sign_us = std::chrono::duration<double, std::micro>(signed_at - started).count() / kRounds;
    const double verify_us = std::chrono::duration<double, std::micro>(ended - signed_at).count() / kRounds;
    INFO("MAC of a 16 MiB chunk in " << (block >> 10) << " KiB blocks: sign " << sign_us << " us, verify "
                                      << verify_us << " us");
    CHECK(sign_us < 1000);
    CHECK(verify_us < 1000);
  }
}

TEST_CASE("keys are validated and hashed into fanned-out file names") {
  CHECK(ValidateKey("a").ok());
  CHECK(!ValidateKey("").ok());
  CHECK(!ValidateKey(std::string(kMaxKeyLength + 1, 'x')).ok());
  CHECK(!ValidateKey(std::string("a\0b", 3)).ok());
  const std::string stem = FileStem("../../etc/passwd");
  CHECK(stem.size() == 32);
  CHECK(stem.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(FileStem("x") == FileStem("x"));
  CHECK(FileStem("x") != FileStem("y"));
  CHECK(RelativeChunkPath(stem) == stem.substr(0, 2) + "/" + stem + ".kvc");
}

}  // namespace
}  // namespace kvstream
