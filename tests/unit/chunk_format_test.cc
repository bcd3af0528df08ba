#include "chunk_format.h"

#include <catch2/catch.hpp>

#include <cstring>

#include "test_util.h"

namespace kvstream {
namespace {

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
