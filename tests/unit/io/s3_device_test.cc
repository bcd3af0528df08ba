// S3Device against a real S3 server (moto_server): the device contract (writes assembled, a queued
// commit, ranged reads), the catalog (a cold scan of the listing, the saved index, invalid objects
// removed), the shared protocol between two nodes (first publisher wins, markers say whose), and
// the condition when the server stops answering. Skipped (77) where no moto_server is found.
#include "io/s3_device.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "format/chunk_format.h"
#include "s3_test_servers.h"
#include "test_util.h"

namespace kvstream {
namespace {

using testing::MotoServer;

constexpr char kBucket[] = "kvs-device-test";

struct Chunk {
  ChunkMeta meta;
  std::string stem;
  std::vector<uint8_t> image;
};

Chunk MakeChunk(const std::string& key, size_t payload_size, uint64_t seed, uint32_t segment_size = 64 << 10) {
  const std::vector<uint8_t> payload = testing::Payload(payload_size, seed);
  Chunk c;
  c.meta = DescribeChunk(key, payload.data(), payload.size(), segment_size, 1000 + static_cast<int64_t>(seed));
  c.stem = FileStem(key);
  c.image.resize(c.meta.file_size());
  EncodeChunkFile(c.meta, payload.data(), c.image.data());
  return c;
}

// A moto_server with the test's bucket (MotoServer skips the test, 77, where there is none).
std::unique_ptr<MotoServer> StartServer() {
  auto server = std::make_unique<MotoServer>();
  S3ClientOptions options;
  options.endpoint = server->endpoint();
  options.bucket = kBucket;
  options.credentials = {"testing", "testing", ""};
  absl::StatusOr<std::unique_ptr<S3Client>> client = S3Client::Create(options);
  REQUIRE(client.ok());
  REQUIRE((*client)->CreateBucket().ok());
  return server;
}

std::unique_ptr<S3Device> OpenDevice(const MotoServer& server, const std::string& node = "",
                                     const std::string& prefix = "kv/") {
  S3DeviceOptions options;
  options.client.endpoint = server.endpoint();
  options.client.bucket = kBucket;
  options.client.credentials = {"testing", "testing", ""};
  options.client.request_timeout_seconds = 2;
  options.client.retry_base_seconds = 0.01;
  options.client.max_attempts = 2;
  options.prefix = prefix;
  options.path = std::string("s3://") + kBucket + "/" + prefix;
  options.node = node;
  absl::StatusOr<std::unique_ptr<S3Device>> device = S3Device::Open(options);
  REQUIRE(device.ok());
  return *std::move(device);
}

// Reaps until `n` completions came (at most 10 s).
std::vector<IoCompletion> ReapN(S3Device& device, size_t n) {
  std::vector<IoCompletion> out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (out.size() < n && std::chrono::steady_clock::now() < end) {
    device.Reap(&out);
    if (out.size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(out.size() == n);
  return out;
}

// Writes `c` as a replica the way the replicator does (pieces of 256 KiB, then a queued commit);
// returns the commit's outcome.
IoStatus WriteReplica(S3Device& device, const Chunk& c) {
  absl::StatusOr<FileHandle> temp = device.CreateTemp(c.stem);
  REQUIRE(temp.ok());
  std::vector<IoRequest> pieces;
  for (uint64_t off = 0; off < c.image.size(); off += 256 << 10) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(256 << 10, c.image.size() - off));
    pieces.emplace_back().Set(IoKind::kWrite, *temp, off, len, const_cast<uint8_t*>(c.image.data()) + off);
  }
  for (IoRequest& p : pieces) REQUIRE(device.Queue(&p));
  device.Submit();
  for (const IoCompletion& done : ReapN(device, pieces.size())) CHECK(done.status == IoStatus::kOk);
  IoRequest commit;
  commit.Set(IoKind::kCommit, *temp, 0, 0, nullptr);
  REQUIRE(device.Queue(&commit));
  device.Submit();
  return ReapN(device, 1)[0].status;
}

std::vector<uint8_t> ReadRange(S3Device& device, const std::string& stem, uint64_t offset, uint32_t length,
                               IoStatus* status) {
  absl::StatusOr<FileHandle> h = device.OpenChunk(stem);
  REQUIRE(h.ok());
  std::vector<uint8_t> buf(length + 64, 0xEE);  // 64 guard bytes
  IoRequest r;
  r.Set(IoKind::kRead, *h, offset, length, buf.data());
  REQUIRE(device.Queue(&r));
  device.Submit();
  *status = ReapN(device, 1)[0].status;
  for (size_t i = length; i < buf.size(); ++i) REQUIRE(buf[i] == 0xEE);  // nothing past the request
  buf.resize(length);
  return buf;
}

TEST_CASE("an s3 replica is written in pieces, published by a queued commit and read back by range") {
  auto server = StartServer();
  auto device = OpenDevice(*server);
  CHECK(device->properties().async_commit);
  CHECK(device->properties().durable_commit);
  const Chunk c = MakeChunk("prefix/chunk-1", 1'000'000, 1);
  REQUIRE(WriteReplica(*device, c) == IoStatus::kOk);
  for (uint64_t off : {uint64_t{0}, uint64_t{4096}, uint64_t{c.meta.header_size()}, c.image.size() - 4096}) {
    IoStatus status;
    const std::vector<uint8_t> got = ReadRange(*device, c.stem, off, 4096, &status);
    CHECK(status == IoStatus::kOk);
    CHECK(std::memcmp(got.data(), c.image.data() + off, 4096) == 0);
  }
  IoStatus status;
  ReadRange(*device, c.stem, c.image.size() - 4096, 8192, &status);  // past the end: a short object
  CHECK(status == IoStatus::kEndOfFile);
  ReadRange(*device, FileStem("never-written"), 0, 4096, &status);
  CHECK(status == IoStatus::kGone);
  const absl::StatusOr<uint64_t> size = device->ChunkFileSize(c.stem);
  REQUIRE(size.ok());
  CHECK(*size == c.image.size());
  const absl::StatusOr<ScannedChunk> header = device->ReadChunkHeader(c.stem);
  REQUIRE(header.ok());
  CHECK(header->meta.key == c.meta.key);
  CHECK(header->meta.segment_checksums == c.meta.segment_checksums);
}

TEST_CASE("adjacent block reads of one object go out as one GET, and an abandoned part is never written") {
  auto server = StartServer();
  auto device = OpenDevice(*server);
  const Chunk c = MakeChunk("merged", 3'000'000, 9);
  REQUIRE(WriteReplica(*device, c) == IoStatus::kOk);
  constexpr uint32_t kBlock = 256 << 10;
  const uint32_t blocks = static_cast<uint32_t>(c.image.size() / kBlock);  // whole blocks only
  REQUIRE(blocks >= 8);
  absl::StatusOr<FileHandle> h = device->OpenChunk(c.stem);
  REQUIRE(h.ok());
  std::vector<std::vector<uint8_t>> bufs(blocks, std::vector<uint8_t>(kBlock, 0xEE));
  std::vector<IoRequest> reads(blocks);
  // Blocks 0..blocks-1 except block 3, queued out of order: two runs, [0, 3) and [4, blocks).
  for (uint32_t b = blocks; b-- > 0;) {
    if (b == 3) continue;
    reads[b].Set(IoKind::kRead, *h, uint64_t{b} * kBlock, kBlock, bufs[b].data());
    REQUIRE(device->Queue(&reads[b]));
  }
  const uint64_t requests_before = device->client().requests();
  server->Pause();  // the GETs stay in flight until the abandon is done
  device->Submit();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  device->Abandon(&reads[5]);  // part of the second run
  server->Resume();
  const std::vector<IoCompletion> done = ReapN(*device, blocks - 1);
  CHECK(device->client().requests() - requests_before == 2);  // one GET per run
  for (const IoCompletion& d : done) {
    const auto b = static_cast<uint32_t>(d.request - reads.data());
    INFO("block " << b);
    if (b == 5) {
      CHECK(d.status == IoStatus::kFailed);
      CHECK(std::all_of(bufs[5].begin(), bufs[5].end(), [](uint8_t x) { return x == 0xEE; }));  // never written
      continue;
    }
    CHECK(d.status == IoStatus::kOk);
    CHECK(std::memcmp(bufs[b].data(), c.image.data() + uint64_t{b} * kBlock, kBlock) == 0);
  }
}

TEST_CASE("an s3 tier's scan reads every header, removes invalid objects, and takes a saved index once") {
  auto server = StartServer();
  std::vector<Chunk> chunks;
  {
    auto device = OpenDevice(*server);
    for (int i = 0; i < 70; ++i) {  // more than one batch of header reads in flight
      chunks.push_back(MakeChunk("scan-" + std::to_string(i), 70'000 + i * 1000, 100 + i));
      REQUIRE(WriteReplica(*device, chunks.back()) == IoStatus::kOk);
    }
    // A header longer than the first 4 KiB a scan reads (733 segments of 4 KiB).
    chunks.push_back(MakeChunk("long-header", 3'000'000, 99, 4096));
    REQUIRE(chunks.back().meta.header_size() > 4096);
    REQUIRE(WriteReplica(*device, chunks.back()) == IoStatus::kOk);
    // Hostile objects under chunk names: garbage, a valid header over a cut payload, another
    // key's chunk under this one's name. And names that are not chunks at all (left alone).
    S3Client& s3 = device->client();
    REQUIRE(s3.PutObject("kv/" + FileStem("garbage") + ".kvc", std::string(8192, 'x')).ok());
    const Chunk cut = MakeChunk("cut", 200'000, 7);
    REQUIRE(s3.PutObject("kv/" + cut.stem + ".kvc", std::string(cut.image.begin(), cut.image.begin() + 100'000)).ok());
    const Chunk other = MakeChunk("other", 50'000, 8);
    REQUIRE(s3.PutObject("kv/" + FileStem("renamed") + ".kvc", std::string(other.image.begin(), other.image.end())).ok());
    REQUIRE(s3.PutObject("kv/notes.txt", "not a chunk").ok());
    REQUIRE(s3.PutObject("elsewhere/" + chunks[0].stem + ".kvc", "outside the prefix").ok());
  }
  auto device = OpenDevice(*server);
  absl::StatusOr<ScanReport> scan = device->Scan();
  REQUIRE(scan.ok());
  CHECK_FALSE(scan->from_checkpoint);
  CHECK(scan->chunks.size() == chunks.size());
  CHECK(scan->removed_invalid == 3);
  for (const ScannedChunk& s : scan->chunks) CHECK(s.file_size == s.meta.file_size());
  const absl::StatusOr<ScannedChunk> long_header = device->ReadChunkHeader(chunks.back().stem);
  REQUIRE(long_header.ok());
  CHECK(long_header->meta.segment_checksums == chunks.back().meta.segment_checksums);
  CHECK(long_header->file_size == chunks.back().image.size());
  absl::StatusOr<std::vector<ListedChunk>> listed = device->ListChunks();
  REQUIRE(listed.ok());
  CHECK(listed->size() == chunks.size());
  CHECK(device->client().Head("kv/notes.txt").ok());

  std::vector<ChunkMeta> metas;
  for (const ScannedChunk& s : scan->chunks) metas.push_back(s.meta);
  REQUIRE(device->SaveIndex(metas).ok());
  absl::StatusOr<ScanReport> saved = device->Scan();
  REQUIRE(saved.ok());
  CHECK(saved->from_checkpoint);
  CHECK(saved->chunks.size() == chunks.size());
  absl::StatusOr<ScanReport> again = device->Scan();  // taken: the next start reads every header
  REQUIRE(again.ok());
  CHECK_FALSE(again->from_checkpoint);
  CHECK(again->chunks.size() == chunks.size());
}

TEST_CASE("a removal queued before a publish of the same key lands first") {
  auto server = StartServer();
  auto device = OpenDevice(*server);
  const Chunk c = MakeChunk("again", 300'000, 3);
  for (int round = 0; round < 20; ++round) {
    REQUIRE(WriteReplica(*device, c) == IoStatus::kOk);
    REQUIRE(device->RemoveChunk(c.stem).ok());  // queued, not waited for
  }
  REQUIRE(WriteReplica(*device, c) == IoStatus::kOk);
  IoStatus status;
  const std::vector<uint8_t> got = ReadRange(*device, c.stem, 0, 4096, &status);
  CHECK(status == IoStatus::kOk);
  CHECK(std::memcmp(got.data(), c.image.data(), 4096) == 0);
}

TEST_CASE("an s3 device destroyed with removals queued behind a hung one issues none of them") {
  auto server = StartServer();
  auto device = OpenDevice(*server);
  const Chunk c = MakeChunk("going", 100'000, 10);
  REQUIRE(WriteReplica(*device, c) == IoStatus::kOk);
  server->Pause();  // the first removal hangs; the others queue behind it
  for (int i = 0; i < 5; ++i) REQUIRE(device->RemoveChunk(c.stem).ok());
  device.reset();  // cancels the first: its callback must not start the next on a client being destroyed
  server->Resume();
  SUCCEED("destroyed");
}

TEST_CASE("on a shared s3 tier the first node's object stands and each node lists only its own") {
  auto server = StartServer();
  auto a = OpenDevice(*server, "node-a", "shared/");
  auto b = OpenDevice(*server, "node-b", "shared/");
  CHECK(a->properties().shared);
  const Chunk first = MakeChunk("contested", 100'000, 4);
  const Chunk second = MakeChunk("contested", 100'000, 5);  // another version of the same key
  REQUIRE(WriteReplica(*a, first) == IoStatus::kOk);
  CHECK(WriteReplica(*b, second) == IoStatus::kExists);
  IoStatus status;
  const std::vector<uint8_t> got = ReadRange(*b, first.stem, 0, 4096, &status);
  REQUIRE(status == IoStatus::kOk);
  CHECK(std::memcmp(got.data(), first.image.data(), 4096) == 0);  // a's version, read by b
  const Chunk own_b = MakeChunk("b-only", 60'000, 6);
  REQUIRE(WriteReplica(*b, own_b) == IoStatus::kOk);

  auto stems = [](S3Device& d) {
    absl::StatusOr<std::vector<ListedChunk>> l = d.ListChunks();
    REQUIRE(l.ok());
    std::vector<std::string> out;
    for (const ListedChunk& c : *l) out.push_back(c.stem);
    return out;
  };
  CHECK(stems(*a) == std::vector<std::string>{first.stem});
  CHECK(stems(*b) == std::vector<std::string>{own_b.stem});
  absl::StatusOr<ScannedChunk> seen_by_b = b->ReadChunkHeader(first.stem);
  REQUIRE(seen_by_b.ok());
  CHECK_FALSE(seen_by_b->owned);
  absl::StatusOr<ScannedChunk> seen_by_a = a->ReadChunkHeader(first.stem);
  REQUIRE(seen_by_a.ok());
  CHECK(seen_by_a->owned);
  absl::StatusOr<ScanReport> scan_b = b->Scan();
  REQUIRE(scan_b.ok());
  REQUIRE(scan_b->chunks.size() == 1);
  CHECK(scan_b->chunks[0].meta.key == "b-only");

  REQUIRE(a->RemoveChunk(first.stem).ok());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b->ChunkFileSize(first.stem).ok() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(absl::IsNotFound(b->ChunkFileSize(first.stem).status()));
  CHECK(stems(*a).empty());
}

TEST_CASE("an s3 tier whose server stops answering is not answering, and usable once it answers") {
  auto server = StartServer();
  auto device = OpenDevice(*server);
  auto condition_within = [&](TierCondition::State want, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (device->Condition().state == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  CHECK(condition_within(TierCondition::State::kUsable, 2));
  server->Pause();
  const auto paused = std::chrono::steady_clock::now();
  CHECK(condition_within(TierCondition::State::kNotAnswering, 5));
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - paused).count();
  CHECK(after < 3.5);  // a probe a second, not answering after a second
  CHECK_FALSE(device->Condition().reason.empty());
  server->Resume();
  CHECK(condition_within(TierCondition::State::kUsable, 5));
}

TEST_CASE("wrong credentials or a missing bucket are an error at open, naming what failed") {
  auto server = StartServer();
  S3DeviceOptions options;
  options.client.endpoint = server->endpoint();
  options.client.bucket = "no-such-bucket";
  options.client.credentials = {"testing", "testing", ""};
  options.client.retry_base_seconds = 0.01;
  options.path = "s3://no-such-bucket/";
  absl::StatusOr<std::unique_ptr<S3Device>> device = S3Device::Open(options);
  REQUIRE_FALSE(device.ok());
  CHECK(device.status().message().find("s3://no-such-bucket/") != std::string::npos);
  options.client.endpoint = "http://127.0.0.1:1";  // nothing listens there
  options.client.bucket = kBucket;
  options.client.max_attempts = 2;
  device = S3Device::Open(options);
  REQUIRE_FALSE(device.ok());
}

}  // namespace
}  // namespace kvstream
