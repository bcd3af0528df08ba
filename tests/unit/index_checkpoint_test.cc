// Index checkpoints: written at clean shutdown, taken once at the next start instead of reading
// every chunk header; damaged ones are refused, never half-used.
#include "index_checkpoint.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace kvstream::testing {
namespace {

std::vector<ChunkMeta> Metas(int n) {
  std::vector<ChunkMeta> out;
  for (int i = 0; i < n; ++i) {
    const auto payload = Payload(1000 + 300000 * (i % 4), i);
    out.push_back(DescribeChunk("key/" + std::to_string(i), payload.data(), payload.size(), 64 << 10, 100 + i));
  }
  return out;
}

bool Same(const ChunkMeta& a, const ChunkMeta& b) {
  return a.key == b.key && a.payload_size == b.payload_size && a.payload_checksum == b.payload_checksum &&
         a.created_unix_ns == b.created_unix_ns && a.segment_size == b.segment_size &&
         a.segment_checksums == b.segment_checksums;
}

TEST_CASE("a checkpoint round-trips every chunk's header fields") {
  const auto metas = Metas(50);
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(metas));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->size() == metas.size());
  for (size_t i = 0; i < metas.size(); ++i) CHECK(Same((*decoded)[i], metas[i]));
  CHECK(DecodeCheckpoint(EncodeCheckpoint({})).ok());
}

TEST_CASE("a damaged or truncated checkpoint is refused as a whole") {
  const std::string good = EncodeCheckpoint(Metas(10));
  for (size_t at : {size_t{0}, size_t{9}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x20;
    CHECK(absl::IsDataLoss(DecodeCheckpoint(bad).status()));
  }
  CHECK(absl::IsDataLoss(DecodeCheckpoint(good.substr(0, good.size() - 9)).status()));
  CHECK(absl::IsDataLoss(DecodeCheckpoint("").status()));
}

TEST_CASE("a written checkpoint is taken once: the next start finds none") {
  TempDir dir;
  REQUIRE(WriteCheckpoint(dir.path(), Metas(7)).ok());
  auto taken = TakeCheckpoint(dir.path());
  REQUIRE(taken.ok());
  CHECK(taken->size() == 7);
  CHECK_FALSE(std::filesystem::exists(dir.sub(kCheckpointName)));
  CHECK(absl::IsNotFound(TakeCheckpoint(dir.path()).status()));

  std::ofstream(dir.sub(kCheckpointName)) << "garbage";
  CHECK(absl::IsDataLoss(TakeCheckpoint(dir.path()).status()));
  CHECK_FALSE(std::filesystem::exists(dir.sub(kCheckpointName)));
}

}  // namespace
}  // namespace kvstream::testing
