// The cluster key's segment tags (format/chunk_mac.h): every payload byte of a version 2 chunk is
// authenticated, so a payload forged to keep its XXH3-64 segment checksums (which anyone can do:
// tests/support/xxh3_forgery.h) fails where a forged header already did.
#include "format/chunk_mac.h"

#include <catch2/catch.hpp>

#include <cstring>

#include "read/block_verifier.h"
#include "shared_memory.h"
#include "mac_key_util.h"
#include "test_util.h"
#include "xxh3_forgery.h"

namespace kvstream {
namespace {

using testing::MacKey;
using testing::MappedSharedMemory;
using testing::Payload;

ChunkMeta Signed(const ChunkMacKey& key, const std::vector<uint8_t>& payload, uint32_t segment_size) {
  ChunkMeta meta = DescribeChunk("model@tp0@h", payload.data(), payload.size(), segment_size, 1);
  REQUIRE(key.Sign(&meta, payload.data()).ok());
  return meta;
}

const uint8_t* Segment(const std::vector<uint8_t>& payload, const ChunkMeta& meta, uint32_t i) {
  return payload.data() + uint64_t{i} * meta.segment_size;
}

TEST_CASE("every segment of a signed chunk verifies against its tag, and nothing else does") {
  const auto key = MacKey(1);
  const auto payload = Payload(3 * 65536 + 777, 1);
  const ChunkMeta meta = Signed(*key, payload, 65536);
  REQUIRE(meta.segment_count() == 4);
  for (uint32_t i = 0; i < 4; ++i) {
    INFO("segment " << i);
    CHECK(key->VerifySegment(meta, i, Segment(payload, meta, i), meta.segment_length(i)));
    std::vector<uint8_t> flipped(Segment(payload, meta, i), Segment(payload, meta, i) + meta.segment_length(i));
    flipped[flipped.size() / 2] ^= 1;
    CHECK_FALSE(key->VerifySegment(meta, i, flipped.data(), flipped.size()));
    CHECK_FALSE(MacKey(2)->VerifySegment(meta, i, Segment(payload, meta, i), meta.segment_length(i)));
  }
  // Another segment's bytes at this index, a shorter length, an index past the end: no.
  CHECK_FALSE(key->VerifySegment(meta, 1, Segment(payload, meta, 0), 65536));
  CHECK_FALSE(key->VerifySegment(meta, 0, Segment(payload, meta, 0), 65536 - 4096));
  CHECK_FALSE(key->VerifySegment(meta, 4, Segment(payload, meta, 0), 777));
  // The same bytes signed again get another nonce, so other tags: a tag is bound to its version.
  const ChunkMeta again = Signed(*key, payload, 65536);
  CHECK(again.auth->tags[0] != meta.auth->tags[0]);
  // A chunk without tags (format version 1) verifies nothing.
  ChunkMeta plain = meta;
  plain.auth.reset();
  CHECK_FALSE(key->VerifySegment(plain, 0, Segment(payload, meta, 0), 65536));
}

TEST_CASE("a payload forged to keep every XXH3-64 segment checksum fails its tags") {
  const auto key = MacKey(1);
  const auto payload = Payload(4 << 20, 2);  // 4 segments of 1 MiB, as the daemon writes them
  const ChunkMeta meta = Signed(*key, payload, 1 << 20);
  auto forged = payload;
  for (uint32_t i = 0; i < meta.segment_count(); ++i) {
    INFO("segment " << i);
    uint8_t* segment = forged.data() + uint64_t{i} * meta.segment_size;
    const size_t changed = testing::ForgeKeepingXxh3(segment, meta.segment_length(i), 'A');
    CHECK(changed > meta.segment_length(i) * 7 / 10);  // most of it is the attacker's
    // The forgery is real: the XXH3-64 checksum, which the MAC covers, still matches...
    REQUIRE(Checksum(segment, meta.segment_length(i)) == meta.segment_checksums[i]);
    CHECK(std::memcmp(segment, Segment(payload, meta, i), meta.segment_length(i)) != 0);
    // ...and the tag does not.
    CHECK_FALSE(key->VerifySegment(meta, i, segment, meta.segment_length(i)));
  }
  CHECK(Checksum(forged.data(), forged.size()) == meta.payload_checksum);  // even the whole payload's
}

TEST_CASE("the block verifier checks a block's tag when given the key, its checksum otherwise") {
  const auto key = MacKey(1);
  const auto payload = Payload(2 << 20, 3);
  const ChunkMeta meta = Signed(*key, payload, 1 << 20);
  auto forged = payload;
  testing::ForgeKeepingXxh3(forged.data(), 1 << 20, 'A');
  BlockVerifier verifier(0, nullptr);  // inline
  auto job = [&](const std::vector<uint8_t>& bytes, const ChunkMacKey* with) {
    VerifyJob j{bytes.data()};
    j.length = 1 << 20;
    j.expected = meta.segment_checksums[0];
    j.key = with;
    j.meta = &meta;
    j.segment = 0;
    return j;
  };
  verifier.Submit(job(payload, key.get()));
  verifier.Submit(job(forged, key.get()));
  verifier.Submit(job(forged, nullptr));  // a private tier: XXH3, which the forgery matches
  std::vector<VerifyJob> done;
  verifier.TakeDone(&done);
  REQUIRE(done.size() == 3);
  CHECK(done[0].ok);
  CHECK_FALSE(done[1].ok);
  CHECK(done[2].ok);
}

TEST_CASE("a block's tag is checked in client memory under the SIGBUS guard: vanished memory is gone") {
  const auto key = MacKey(1);
  const auto payload = Payload(2 << 20, 5);
  const ChunkMeta meta = Signed(*key, payload, 1 << 20);
  MappedSharedMemory memory(2 << 20);
  std::memcpy(memory.data(), payload.data(), payload.size());
  BlockVerifier verifier(0, nullptr);
  auto job = [&](uint32_t segment) {
    VerifyJob j{memory.data() + uint64_t{segment} * (1 << 20)};
    j.guarded = true;
    j.length = 1 << 20;
    j.key = key.get();
    j.meta = &meta;
    j.segment = segment;
    return j;
  };
  verifier.Submit(job(0));
  REQUIRE(ftruncate(memory.fd(), 1 << 20) == 0);  // the client truncated its second MiB away
  verifier.Submit(job(1));
  std::vector<VerifyJob> done;
  verifier.TakeDone(&done);
  REQUIRE(done.size() == 2);
  CHECK(done[0].ok);
  CHECK_FALSE(done[0].gone);
  CHECK_FALSE(done[1].ok);
  CHECK(done[1].gone);  // not a crash, and not the tier's fault
}

}  // namespace
}  // namespace kvstream
