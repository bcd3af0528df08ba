// Index checkpoints: written at clean shutdown, taken once at the next start instead of reading
// every chunk header; damaged ones are refused, never half-used.
#include "format/index_checkpoint.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "format/chunk_mac.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

// A directory open as the tier keeps it: checkpoints are written and taken through it.
struct OpenDir {
  explicit OpenDir(const std::string& path) : path(path), fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    REQUIRE(fd >= 0);
  }
  ~OpenDir() { close(fd); }
  OpenDir(const OpenDir&) = delete;
  OpenDir& operator=(const OpenDir&) = delete;
  std::string path;
  int fd;
};

std::vector<uint8_t> PayloadOf(int i) { return Payload(1000 + 300000 * (i % 4), i); }

std::vector<ChunkMeta> Metas(int n) {
  std::vector<ChunkMeta> out;
  for (int i = 0; i < n; ++i) {
    const auto payload = PayloadOf(i);
    out.push_back(DescribeChunk("key/" + std::to_string(i), payload.data(), payload.size(), 64 << 10, 100 + i));
  }
  return out;
}

bool Same(const ChunkMeta& a, const ChunkMeta& b) {
  return a.key == b.key && a.payload_size == b.payload_size && a.payload_checksum == b.payload_checksum &&
         a.created_unix_ns == b.created_unix_ns && a.segment_size == b.segment_size &&
         a.segment_checksums == b.segment_checksums && a.mac == b.mac && a.auth.has_value() == b.auth.has_value() &&
         (!a.auth || (a.auth->nonce == b.auth->nonce && a.auth->tags == b.auth->tags));
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
// A checkpoint's preamble with `version` and `count`; Seal appends the checksum.
std::string Preamble(uint32_t version, uint64_t count) {
  std::string out = "KVSINDEX";
  Put(&out, version);
  Put(&out, count);
  return out;
}
std::string Seal(std::string bytes) {
  Put(&bytes, Checksum(bytes.data(), bytes.size()));
  return bytes;
}
// One entry as version 1 wrote it (no flags, no MAC).
void PutV1Entry(std::string* out, const ChunkMeta& m, uint32_t segments) {
  Put(out, static_cast<uint32_t>(m.key.size()));
  *out += m.key;
  Put(out, m.payload_size);
  Put(out, m.payload_checksum);
  Put(out, m.created_unix_ns);
  Put(out, m.segment_size);
  Put(out, segments);
  for (uint64_t c : m.segment_checksums) Put(out, c);
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

TEST_CASE("a checkpoint keeps each chunk's nonce, tags and MAC (version 3) and still reads 1 and 2") {
  auto metas = Metas(6);
  const std::vector<uint8_t> material(32, 9);
  const auto key = *ChunkMacKey::FromBytes(material.data(), material.size());
  for (size_t i = 0; i < metas.size(); i += 2) REQUIRE(key->Sign(&metas[i], PayloadOf(static_cast<int>(i)).data()).ok());
  metas[1].mac = key->Compute(metas[1]);  // a version 1 chunk with a MAC, as written before version 2
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(metas));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->size() == metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    INFO("chunk " << i);
    CHECK(Same((*decoded)[i], metas[i]));
    CHECK((*decoded)[i].auth.has_value() == (i % 2 == 0));
    CHECK((*decoded)[i].mac.has_value() == (i % 2 == 0 || i == 1));
    if ((*decoded)[i].mac) CHECK(key->Verify((*decoded)[i]));
    if (i % 2 == 0) {
      const auto payload = PayloadOf(static_cast<int>(i));
      CHECK(key->VerifySegment((*decoded)[i], 0, payload.data(), (*decoded)[i].segment_length(0)));
    }
  }
  // Version 2 (a MAC per entry, no tags) is still read.
  std::string v2 = Preamble(2, 1);
  PutV1Entry(&v2, metas[1], metas[1].segment_count());
  Put(&v2, kHeaderFlagMac);
  v2.append(reinterpret_cast<const char*>(metas[1].mac->data()), kChunkMacBytes);
  auto two = DecodeCheckpoint(Seal(v2));
  REQUIRE(two.ok());
  CHECK(Same((*two)[0], metas[1]));

  const auto v1 = Metas(3);
  std::string bytes = Preamble(1, v1.size());
  for (const ChunkMeta& m : v1) PutV1Entry(&bytes, m, m.segment_count());
  auto old = DecodeCheckpoint(Seal(bytes));
  REQUIRE(old.ok());
  REQUIRE(old->size() == 3);
  for (size_t i = 0; i < v1.size(); ++i) CHECK(Same((*old)[i], v1[i]));
  CHECK(absl::IsDataLoss(DecodeCheckpoint(Seal(Preamble(kCheckpointVersion + 1, 0))).status()));
}

TEST_CASE("a sealed checkpoint claiming 2^60 chunks is refused before anything is allocated") {
  for (uint32_t version : {1u, 2u}) {
    for (uint64_t count : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{2}}) {
      INFO("version " << version << " count " << count);
      std::string bytes = Preamble(version, count);
      PutV1Entry(&bytes, Metas(1)[0], Metas(1)[0].segment_count());  // one entry's bytes, whatever the count
      const auto started = std::chrono::steady_clock::now();
      CHECK(absl::IsDataLoss(DecodeCheckpoint(Seal(bytes)).status()));
      CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
    }
  }
}

TEST_CASE("a sealed checkpoint entry with lying sizes is refused") {
  const ChunkMeta m = Metas(1)[0];  // 1000 bytes in 64 KiB segments: 1 segment
  auto entry = [&](uint64_t payload, uint32_t segment_size, uint32_t segments) {
    ChunkMeta lie = m;
    lie.payload_size = payload;
    lie.segment_size = segment_size;
    std::string bytes = Preamble(1, 1);
    PutV1Entry(&bytes, lie, segments);
    return Seal(bytes);
  };
  CHECK(DecodeCheckpoint(entry(1000, 64 << 10, 1)).ok());
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(1000, 64 << 10, 0xffffffffu)).status()));  // 32 GiB of checksums claimed
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(uint64_t{1} << 41, 4096, 1u << 29)).status()));
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(~uint64_t{0}, 4096, 0)).status()));
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(1000, 0, 1)).status()));
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(1000, 1000, 1)).status()));
  CHECK(absl::IsDataLoss(DecodeCheckpoint(entry(0, 4096, 0)).status()));
  // Unknown flags in a version 2 entry (bit 1, authenticated, is version 3's).
  for (uint32_t flags : {4u, 2u}) {
    std::string bytes = Preamble(2, 1);
    PutV1Entry(&bytes, m, 1);
    Put(&bytes, flags);
    CHECK(absl::IsDataLoss(DecodeCheckpoint(Seal(bytes)).status()));
  }
  // Version 3: authenticated without a MAC; tags cut short.
  std::string no_mac = Preamble(3, 1);
  PutV1Entry(&no_mac, m, 1);
  Put(&no_mac, uint32_t{2});
  no_mac.append(kChunkNonceBytes + kSegmentTagBytes, 'n');
  CHECK(absl::IsDataLoss(DecodeCheckpoint(Seal(no_mac)).status()));
  std::string short_tags = Preamble(3, 1);
  PutV1Entry(&short_tags, m, 1);
  Put(&short_tags, uint32_t{3});
  short_tags.append(kChunkNonceBytes + kSegmentTagBytes - 1, 't');
  CHECK(absl::IsDataLoss(DecodeCheckpoint(Seal(short_tags)).status()));
}

TEST_CASE("a saved index that is not a regular file is neither read nor removed") {
  TempDir dir;
  OpenDir at(dir.path());
  const std::string path = dir.sub(kCheckpointName);
  const auto started = std::chrono::steady_clock::now();
  // A symlink to /dev/zero: reading it would never end.
  std::filesystem::create_symlink("/dev/zero", path);
  CHECK(absl::IsFailedPrecondition(TakeCheckpoint(at.fd, at.path).status()));
  CHECK(std::filesystem::is_symlink(path));
  std::filesystem::remove(path);
  // A symlink to a valid checkpoint elsewhere: not followed either.
  const std::string elsewhere = dir.sub("elsewhere");
  REQUIRE(WriteCheckpoint(at.fd, at.path, Metas(2)).ok());
  std::filesystem::rename(path, elsewhere);
  std::filesystem::create_symlink(elsewhere, path);
  CHECK(absl::IsFailedPrecondition(TakeCheckpoint(at.fd, at.path).status()));
  CHECK(std::filesystem::exists(elsewhere));
  std::filesystem::remove(path);
  // A FIFO: opening it blocking would wait for a writer forever.
  REQUIRE(mkfifo(path.c_str(), 0600) == 0);
  CHECK(absl::IsFailedPrecondition(TakeCheckpoint(at.fd, at.path).status()));
  CHECK(std::filesystem::is_fifo(path));
  std::filesystem::remove(path);
  // A directory.
  std::filesystem::create_directory(path);
  CHECK(!TakeCheckpoint(at.fd, at.path).ok());
  CHECK(std::filesystem::is_directory(path));
  std::filesystem::remove(path);
  // A temporary that is not a regular file is not removed either.
  const std::string temp = path + ".tmp";
  REQUIRE(mkfifo(temp.c_str(), 0600) == 0);
  CHECK(absl::IsNotFound(TakeCheckpoint(at.fd, at.path).status()));
  CHECK(std::filesystem::is_fifo(temp));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE("a saved index larger than the bound is refused unread and removed") {
  TempDir dir;
  OpenDir at(dir.path());
  const std::string path = dir.sub(kCheckpointName);
  {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0640);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, static_cast<off_t>(kMaxCheckpointBytes + 1)) == 0);  // sparse: no disk used
    close(fd);
  }
  const auto started = std::chrono::steady_clock::now();
  auto taken = TakeCheckpoint(at.fd, at.path);
  CHECK(absl::IsDataLoss(taken.status()));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));  // not read
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a written checkpoint is taken once: the next start finds none") {
  TempDir dir;
  OpenDir at(dir.path());
  REQUIRE(WriteCheckpoint(at.fd, at.path, Metas(7)).ok());
  auto taken = TakeCheckpoint(at.fd, at.path);
  REQUIRE(taken.ok());
  CHECK(taken->size() == 7);
  CHECK_FALSE(std::filesystem::exists(dir.sub(kCheckpointName)));
  CHECK(absl::IsNotFound(TakeCheckpoint(at.fd, at.path).status()));

  std::ofstream(dir.sub(kCheckpointName)) << "garbage";
  CHECK(absl::IsDataLoss(TakeCheckpoint(at.fd, at.path).status()));
  CHECK_FALSE(std::filesystem::exists(dir.sub(kCheckpointName)));
}

TEST_CASE("links planted under the saved index's name or its temporary's are replaced, their targets never written") {
  TempDir dir, elsewhere;
  OpenDir at(dir.path());
  const std::string path = dir.sub(kCheckpointName);
  const std::string target = elsewhere.sub("target"), temp_target = elsewhere.sub("temp-target");
  std::ofstream(target) << "precious";
  std::ofstream(temp_target) << "precious";
  std::filesystem::create_symlink(target, path);
  std::filesystem::create_symlink(temp_target, path + ".tmp");
  REQUIRE(WriteCheckpoint(at.fd, at.path, Metas(2)).ok());
  for (const std::string& t : {target, temp_target}) {
    std::ifstream in(t);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "precious");
  }
  CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(path)));
  auto taken = TakeCheckpoint(at.fd, at.path);
  REQUIRE(taken.ok());
  CHECK(taken->size() == 2);
}

TEST_CASE("a checkpoint is written and taken through its directory's descriptor, never its path") {
  // The directory is moved away and a symlink to another one put at its path: the checkpoint
  // still goes to (and comes from) the directory that was opened, and nothing lands elsewhere.
  TempDir dir, elsewhere;
  const std::string tier = dir.sub("tier"), moved = dir.sub("moved");
  REQUIRE(std::filesystem::create_directory(tier));
  OpenDir at(tier);
  std::filesystem::rename(tier, moved);
  std::filesystem::create_directory_symlink(elsewhere.path(), tier);
  REQUIRE(WriteCheckpoint(at.fd, at.path, Metas(3)).ok());
  CHECK(std::filesystem::is_regular_file(moved + "/" + kCheckpointName));
  CHECK(std::filesystem::is_empty(elsewhere.path()));
  // A file elsewhere under the checkpoint's name is neither read nor removed.
  REQUIRE(WriteCheckpoint(at.fd, at.path, Metas(1)).ok());
  std::filesystem::copy_file(moved + "/" + kCheckpointName, elsewhere.sub(kCheckpointName));
  auto taken = TakeCheckpoint(at.fd, at.path);
  REQUIRE(taken.ok());
  CHECK(taken->size() == 1);
  CHECK(std::filesystem::exists(elsewhere.sub(kCheckpointName)));
  CHECK_FALSE(std::filesystem::exists(moved + "/" + kCheckpointName));
}

}  // namespace
}  // namespace kvstream::testing
