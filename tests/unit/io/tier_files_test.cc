// A tier directory holding what the daemon never wrote: FIFOs, sockets, symlinks and directories
// named like chunks, a fan-out directory that is a symlink to elsewhere, files of another owner.
// FileDevice scans, lists, opens, reads headers and removes without ever blocking on them,
// following them or deleting them; they are counted and every good chunk stays served. Each such
// case runs with openat2 and with the component walk older kernels get. A tier directory replaced
// by a symlink while open receives nothing through it; what the device creates is 0640 and 0750.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <thread>

#include "format/chunk_format.h"
#include "io/file_device.h"
#include "io/safe_open.h"
#include "safe_open_util.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

// Runs `fn` on a thread of its own and waits at most `seconds`: a call that blocks (the old
// blocking open of a FIFO) fails the test instead of hanging it. The thread, and what it holds,
// are left behind on a timeout (the process exits past them).
template <typename T>
T Within(double seconds, std::function<T()> fn) {
  auto result = std::make_shared<std::promise<T>>();
  std::future<T> done = result->get_future();
  std::thread([result, fn = std::move(fn)] { result->set_value(fn()); }).detach();
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    FAIL("blocked for more than " << seconds << " s");
  }
  return done.get();
}

// `node`: non-empty for a shared tier, as that node.
std::shared_ptr<FileDevice> OpenDevice(const std::string& path, ExpectedOwner owner = {},
                                       const std::string& node = "") {
  FileDeviceOptions options;
  options.path = path;
  options.owner = owner;
  options.node = node;
  absl::StatusOr<std::unique_ptr<FileDevice>> device = FileDevice::Open(options);
  if (absl::IsUnavailable(device.status())) {
    std::cerr << "SKIPPED: " << device.status() << " (io_uring is unavailable on this kernel)\n";
    std::exit(kSkipExitCode);
  }
  if (!device.ok()) FAIL(device.status().ToString());
  return std::shared_ptr<FileDevice>(std::move(*device));
}

// Writes a valid chunk file of `key` into the tier directory `tier` (created as the device
// writes it); returns its path.
std::string WriteChunk(const std::string& tier, const std::string& key, size_t size = 10000) {
  const std::vector<uint8_t> payload = Payload(size, 7);
  const ChunkMeta meta = DescribeChunk(key, payload.data(), payload.size(), kFileAlignment, 1);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, payload.data(), image.data());
  const std::string path = tier + "/" + RelativeChunkPath(FileStem(key));
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(image.data()), image.size());
  return path;
}

// The path chunk `key` would have below `tier`, its fan-out directory made.
std::string ChunkName(const std::string& tier, const std::string& key) {
  const std::string path = tier + "/" + RelativeChunkPath(FileStem(key));
  fs::create_directories(fs::path(path).parent_path());
  return path;
}

bool Exists(const std::string& path) { return fs::exists(fs::symlink_status(path)); }

// Short socket paths: sun_path holds 108 bytes, the build tree's paths may be longer.
TempDir ShortTempDir() { return TempDir(fs::exists("/tmp") ? "/tmp" : ""); }

TEST_CASE("a FIFO named like a chunk is skipped by the scan, never opened blocking nor removed") {
  PickResolution();
  TempDir dir;
  const std::string tier = dir.sub("t0");
  WriteChunk(tier, "good");
  const std::string fifo = ChunkName(tier, "fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0640) == 0);
  auto device = OpenDevice(tier);
  ScanReport report = Within<ScanReport>(5, [device] { return *device->Scan(); });
  REQUIRE(report.chunks.size() == 1);
  CHECK(report.chunks[0].meta.key == "good");
  CHECK(report.skipped_irregular == 1);
  CHECK(report.removed_invalid == 0);
  CHECK(Exists(fifo));
}

TEST_CASE("a FIFO where a chunk was is a missing replica to the read path and the header read") {
  PickResolution();
  TempDir dir;
  const std::string tier = dir.sub("t0");
  auto device = OpenDevice(tier);
  const std::string stem = FileStem("fifo");
  REQUIRE(mkfifo(ChunkName(tier, "fifo").c_str(), 0640) == 0);
  const absl::Status opened = Within<absl::Status>(5, [device, stem] { return device->OpenChunk(stem).status(); });
  CHECK(absl::IsNotFound(opened));
  const absl::Status header = Within<absl::Status>(5, [device, stem] { return device->ReadChunkHeader(stem).status(); });
  CHECK(absl::IsNotFound(header));
  CHECK(absl::IsNotFound(device->ChunkFileSize(stem).status()));
  CHECK(!device->RemoveChunk(stem).ok());
  CHECK(Exists(ChunkName(tier, "fifo")));
}

TEST_CASE("a fan-out directory that is a symlink is not followed: temporaries outside the tier survive") {
  PickResolution();
  TempDir dir;
  const std::string tier = dir.sub("t0"), outside = dir.sub("outside");
  fs::create_directories(tier);
  fs::create_directories(outside);
  // What a scan would take for the directory's temporaries and chunks, were it followed.
  const std::string stem = FileStem("elsewhere");
  const std::string temp = outside + "/" + stem + ".kvc.tmp.1.1";
  std::ofstream(temp) << "not the daemon's";
  WriteChunk(dir.sub("other-tier"), "elsewhere");
  fs::copy_file(dir.sub("other-tier") + "/" + RelativeChunkPath(stem), outside + "/" + stem + ".kvc");
  fs::create_directory_symlink(outside, tier + "/" + stem.substr(0, 2));
  WriteChunk(tier, "good");
  auto device = OpenDevice(tier);
  ScanReport report = *device->Scan();
  REQUIRE(report.chunks.size() == 1);
  CHECK(report.chunks[0].meta.key == "good");
  CHECK(report.removed_temporaries == 0);
  CHECK(report.skipped_irregular == 1);
  CHECK(Exists(temp));
  CHECK(Exists(outside + "/" + stem + ".kvc"));
  // Nor do the read path, the listing or removal go through it.
  CHECK(absl::IsNotFound(device->OpenChunk(stem).status()));
  CHECK(absl::IsNotFound(device->ReadChunkHeader(stem).status()));
  CHECK(!device->RemoveChunk(stem).ok());
  CHECK(Exists(outside + "/" + stem + ".kvc"));
  auto listed = device->ListChunks();
  REQUIRE(listed.ok());
  CHECK(listed->size() == 1);
  // Writes refuse it too: a temporary is never created through it.
  CHECK(!device->CreateTemp(stem).ok());
  CHECK(std::distance(fs::directory_iterator(outside), fs::directory_iterator()) == 2);
}

TEST_CASE("a symlink named like a chunk is neither followed nor removed, and its target survives") {
  PickResolution();
  TempDir dir;
  const std::string tier = dir.sub("t0");
  const std::string target = WriteChunk(dir.sub("other-tier"), "linked");  // a valid chunk elsewhere
  const std::string link = ChunkName(tier, "linked");
  fs::create_symlink(target, link);
  // A temporary that is a symlink: a scan removes temporaries, but not this one nor its target.
  const std::string victim = dir.sub("victim");
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, link + ".tmp.1.1");
  auto device = OpenDevice(tier);
  ScanReport report = *device->Scan();
  CHECK(report.chunks.empty());
  CHECK(report.skipped_irregular == 2);
  CHECK(report.removed_temporaries == 0);
  CHECK(Exists(link));
  CHECK(Exists(target));
  CHECK(Exists(victim));
  CHECK(absl::IsNotFound(device->OpenChunk(FileStem("linked")).status()));
  CHECK(absl::IsNotFound(device->ReadChunkHeader(FileStem("linked")).status()));
}

TEST_CASE("a socket and a directory named like chunks are skipped and left in place") {
  PickResolution();
  TempDir dir = ShortTempDir();
  const std::string tier = dir.sub("t0");
  const std::string socket_path = ChunkName(tier, "socket");
  MakeSocketFile(socket_path);
  const std::string directory = ChunkName(tier, "directory");
  fs::create_directory(directory);
  std::ofstream(directory + "/inside") << "x";
  // A regular file where a fan-out directory would be.
  std::ofstream(tier + "/ab") << "x";
  WriteChunk(tier, "good");
  auto device = OpenDevice(tier);
  ScanReport report = Within<ScanReport>(5, [device] { return *device->Scan(); });
  REQUIRE(report.chunks.size() == 1);
  CHECK(report.skipped_irregular == 3);
  CHECK(report.removed_invalid == 0);
  CHECK(Exists(socket_path));
  CHECK(Exists(directory + "/inside"));
  CHECK(absl::IsNotFound(device->OpenChunk(FileStem("socket")).status()));
  CHECK(absl::IsNotFound(device->OpenChunk(FileStem("directory")).status()));
  auto listed = device->ListChunks();
  REQUIRE(listed.ok());
  CHECK(listed->size() == 1);
}

TEST_CASE("regular temporaries and invalid chunk files of this process are still removed") {
  PickResolution();
  TempDir dir;
  const std::string tier = dir.sub("t0");
  const std::string bad = ChunkName(tier, "bad");
  std::ofstream(bad) << "not a chunk header";
  const std::string temp = ChunkName(tier, "temp") + ".tmp.99.1";
  std::ofstream(temp) << "half written";
  WriteChunk(tier, "good");
  auto device = OpenDevice(tier);
  ScanReport report = *device->Scan();
  CHECK(report.chunks.size() == 1);
  CHECK(report.removed_invalid == 1);
  CHECK(report.removed_temporaries == 1);
  CHECK(report.skipped_irregular == 0);
  CHECK(!Exists(bad));
  CHECK(!Exists(temp));
}

TEST_CASE("with an expected owner, another owner's chunk is a miss and never removed (root)") {
  PickResolution();
  if (geteuid() != 0) {
    WARN("not root: chown is refused, the owner check is tested by safe_open_test only");
    return;
  }
  TempDir dir;
  const std::string tier = dir.sub("t0");
  const std::string theirs = WriteChunk(tier, "theirs");
  REQUIRE(chown(theirs.c_str(), 12345, 12345) == 0);
  const std::string their_bad = ChunkName(tier, "their-bad");
  std::ofstream(their_bad) << "garbage";
  REQUIRE(chown(their_bad.c_str(), 12345, 12345) == 0);
  const std::string their_temp = ChunkName(tier, "their-temp") + ".tmp.1.1";
  std::ofstream(their_temp) << "x";
  REQUIRE(chown(their_temp.c_str(), 12345, 12345) == 0);
  WriteChunk(tier, "mine");
  {
    auto device = OpenDevice(tier, {static_cast<int64_t>(geteuid()), -1});
    ScanReport report = *device->Scan();
    REQUIRE(report.chunks.size() == 1);
    CHECK(report.chunks[0].meta.key == "mine");
    CHECK(report.skipped_irregular == 3);  // theirs and their bad file unread, their temporary kept
    CHECK(absl::IsNotFound(device->OpenChunk(FileStem("theirs")).status()));
    CHECK(absl::IsNotFound(device->ReadChunkHeader(FileStem("theirs")).status()));
    CHECK(!device->RemoveChunk(FileStem("theirs")).ok());
  }
  CHECK(Exists(theirs));
  CHECK(Exists(their_bad));
  CHECK(Exists(their_temp));
  // Without an expected owner their valid chunk is read; their files are still never removed.
  auto device = OpenDevice(tier);
  ScanReport report = *device->Scan();
  CHECK(report.chunks.size() == 2);
  CHECK(report.removed_invalid == 0);  // invalid, but not its to remove
  CHECK(report.skipped_irregular == 2);
  CHECK(Exists(their_bad));
  CHECK(Exists(their_temp));
}

TEST_CASE("tier directories are created 0750") {
  TempDir dir;
  const mode_t old = umask(0);
  auto device = OpenDevice(dir.sub("a/b/t0"));
  umask(old);
  CHECK((fs::status(dir.sub("a/b/t0")).permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec));
  CHECK((fs::status(dir.sub("a")).permissions() & fs::perms::others_all) == fs::perms::none);
}

TEST_CASE("a tier directory or a shared tier's .nodes replaced by a symlink while open: chunks land where it opened") {
  PickResolution();
  const bool shared = GENERATE(false, true);
  INFO((shared ? "a shared tier's .nodes replaced" : "a private tier's directory replaced"));
  TempDir dir;
  const std::string tier = dir.sub("t0"), outside = dir.sub("outside");
  fs::create_directories(outside);
  auto device = OpenDevice(tier, {}, shared ? "n1" : "");
  // Another writer moves the directory away and puts a symlink to elsewhere at its path.
  const std::string replaced = shared ? tier + "/.nodes" : tier;
  fs::rename(replaced, replaced + ".moved");
  fs::create_directory_symlink(outside, replaced);
  const std::string stem = FileStem("k");
  absl::StatusOr<FileHandle> temp = device->CreateTemp(stem);
  REQUIRE(temp.ok());
  REQUIRE(device->CommitTemp(*temp, stem, /*sync_directory=*/true).ok());
  CHECK(fs::is_empty(outside));
  const std::string rel = RelativeChunkPath(stem);
  if (shared) {
    CHECK(fs::is_regular_file(tier + "/.nodes.moved/n1/" + rel));  // the node's own link
    CHECK(fs::is_regular_file(tier + "/" + rel));                   // published in the tier
  } else {
    CHECK(fs::is_regular_file(tier + ".moved/" + rel));
  }
  CHECK(device->RemoveChunk(stem).ok());
  CHECK(fs::is_empty(outside));
}

TEST_CASE("chunk files are created 0640 in fan-out directories 0750") {
  TempDir dir;
  const std::string tier = dir.sub("t0");
  const mode_t old = umask(0);
  auto device = OpenDevice(tier);
  const std::string stem = FileStem("k");
  absl::StatusOr<FileHandle> temp = device->CreateTemp(stem);
  REQUIRE(temp.ok());
  REQUIRE(device->CommitTemp(*temp, stem, /*sync_directory=*/false).ok());
  umask(old);
  const fs::path chunk = tier + "/" + RelativeChunkPath(stem);
  CHECK((fs::status(chunk).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK((fs::status(chunk.parent_path()).permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec));
}

}  // namespace
}  // namespace kvstream::testing
