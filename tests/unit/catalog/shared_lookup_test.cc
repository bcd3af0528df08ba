// SharedLookup (catalog/shared_lookup.h): keys this node's index lacks, looked for on a shared tier
// (a real FileDevice on a directory shared with node "other", whose files a case writes as that
// node would publish them). A key another node published is indexed as a foreign replica; a miss
// is not looked for again until it ends; a file that failed its checksum is passed over while it
// holds that version; a foreign-only key is checked again once the miss TTL has passed. Time is
// the lookup's own clock, moved by hand. Skipped (exit code 77) where the kernel has no io_uring.
#include "catalog/shared_lookup.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "io/file_device.h"
#include "sim/sim_clock.h"
#include "sim/sim_device.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int kShared = 1;  // tier 0 is a private (simulated) tier, tier 1 the shared directory

class ManualClock : public Reactor {
 public:
  int64_t NowNs() override { return now_ns; }
  void Wait(int64_t) override {}
  void WaitUntil(int64_t) override {}
  void Wake() override {}
  int64_t now_ns = 0;
};

ChunkMeta MetaOf(const std::string& key, size_t size, int64_t created = 1) {
  const auto payload = Payload(size, created);
  return DescribeChunk(key, payload.data(), payload.size(), 64 << 10, created);
}

struct Rig {
  TempDir dir;
  SimClock sim;
  ManualClock clock;
  StoreConfig config;
  Tiers tiers;
  GuardedIndex index{{1ull << 30, 1ull << 30}};
  std::unique_ptr<SharedLookup> lookup;

  Rig() {
    config.tiers = {{"nvme", "/sim/nvme", 1ull << 30}, {"pfs", dir.sub("pfs"), 1ull << 30}};
    config.tiers[kShared].shared = true;
    config.tiers[kShared].miss_ttl_seconds = 1;
    FileDeviceOptions options;
    options.path = config.tiers[kShared].path;
    options.node = "this";
    absl::StatusOr<std::unique_ptr<FileDevice>> device = FileDevice::Open(options);
    if (absl::IsUnavailable(device.status())) {
      std::cerr << "SKIPPED: " << device.status() << " (io_uring is unavailable on this kernel)\n";
      std::exit(kSkipExitCode);
    }
    REQUIRE(device.ok());
    for (int t = 0; t < 2; ++t) tiers.push_back(std::make_unique<Tier>());
    tiers[0]->device = std::make_unique<SimDevice>(&sim, 0, 0);
    tiers[kShared]->device = *std::move(device);
    lookup = std::make_unique<SharedLookup>(config, tiers, &index, &clock);
  }

  // Writes `meta`'s chunk file at `rel` below the shared directory (`bytes` cuts or pads it).
  void Write(const std::string& rel, const ChunkMeta& meta, int64_t bytes = -1) {
    const auto payload = Payload(meta.payload_size, meta.created_unix_ns);
    std::vector<uint8_t> image(meta.file_size());
    EncodeChunkFile(meta, payload.data(), image.data());
    if (bytes >= 0) image.resize(bytes);
    const std::string path = dir.sub("pfs/" + rel);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  }
  // As node "other" publishes it: at its published name, with no link of this node's.
  void Publish(const ChunkMeta& meta, const std::string& key = "") {
    Write(RelativeChunkPath(FileStem(key.empty() ? meta.key : key)), meta);
  }
  void Unpublish(const std::string& key) {
    std::filesystem::remove(dir.sub("pfs/" + RelativeChunkPath(FileStem(key))));
  }
  // {tiers, foreign} of the key's index entry, {0, 0} when it has none.
  std::pair<uint32_t, uint32_t> Indexed(const std::string& key) {
    absl::MutexLock lock(&index.mu());
    const IndexEntry* e = index.get().FindLive(key);
    return e == nullptr ? std::pair<uint32_t, uint32_t>{0, 0} : std::pair{e->tiers, e->foreign};
  }
};

constexpr std::pair<uint32_t, uint32_t> kForeign{1u << kShared, 1u << kShared};
constexpr std::pair<uint32_t, uint32_t> kAbsent{0, 0};

TEST_CASE("a chunk another node published is discovered and indexed as its foreign replica") {
  Rig rig;
  CHECK(rig.lookup->active());
  rig.Publish(MetaOf("theirs", 100 << 10));
  rig.lookup->Discover({"theirs", "nowhere"});
  CHECK(rig.Indexed("theirs") == kForeign);
  CHECK(rig.Indexed("nowhere") == kAbsent);
  CHECK(rig.lookup->discovered(kShared) == 1);
  CHECK(rig.lookup->discovered(0) == 0);
}

TEST_CASE("a chunk this node published itself is discovered as its own") {
  Rig rig;
  const ChunkMeta meta = MetaOf("mine", 3000);
  const std::string rel = RelativeChunkPath(FileStem("mine"));
  rig.Write(".nodes/this/" + rel, meta);  // its link, published under the shared name too
  std::filesystem::create_directories(rig.dir.sub("pfs/" + rel.substr(0, 2)));
  REQUIRE(link(rig.dir.sub("pfs/.nodes/this/" + rel).c_str(), rig.dir.sub("pfs/" + rel).c_str()) == 0);
  rig.lookup->Discover({"mine"});
  CHECK(rig.Indexed("mine") == std::pair<uint32_t, uint32_t>{1u << kShared, 0});
}

TEST_CASE("a key looked for in vain is not looked for again until its miss ends") {
  Rig rig;
  rig.lookup->Discover({"late"});
  rig.Publish(MetaOf("late", 3000));  // published just after the miss
  rig.clock.now_ns = kSecond - 1;
  rig.lookup->Discover({"late"});
  CHECK(rig.Indexed("late") == kAbsent);  // the miss stands for the tier's miss TTL
  rig.clock.now_ns = kSecond;
  rig.lookup->Discover({"late"});
  CHECK(rig.Indexed("late") == kForeign);
}

TEST_CASE("a torn, misnamed or garbage file is a miss") {
  Rig rig;
  const ChunkMeta torn = MetaOf("torn", 100 << 10);
  rig.Write(RelativeChunkPath(FileStem("torn")), torn, torn.file_size() - 4096);
  rig.Publish(MetaOf("other", 3000), "misnamed");  // another key's file under this key's name
  rig.Write(RelativeChunkPath(FileStem("empty")), torn, 0);
  rig.lookup->Discover({"torn", "misnamed", "empty"});
  for (const char* key : {"torn", "misnamed", "other", "empty"}) CHECK(rig.Indexed(key) == kAbsent);
  CHECK(rig.lookup->discovered(kShared) == 0);
}

TEST_CASE("a foreign file that failed its checksum is passed over until it holds another version") {
  Rig rig;
  const ChunkMeta bad = MetaOf("k", 100 << 10, 1);
  rig.Publish(bad);
  rig.lookup->Discover({"k"});
  REQUIRE(rig.Indexed("k") == kForeign);
  {  // the loop read it, a block failed its checksum: the replica goes, the version is marked
    absl::MutexLock lock(&rig.index.mu());
    rig.index.get().RemoveReplica("k", kShared);
  }
  rig.lookup->MarkBad(kShared, bad);
  rig.lookup->Discover({"k"});
  CHECK(rig.Indexed("k") == kAbsent);
  rig.clock.now_ns = 5 * kSecond;  // long after any miss: the same version is still bad
  rig.lookup->Discover({"k"});
  CHECK(rig.Indexed("k") == kAbsent);
  rig.Publish(MetaOf("k", 100 << 10, 2));  // its owner wrote it again
  rig.clock.now_ns = 10 * kSecond;
  rig.lookup->Discover({"k"});
  REQUIRE(rig.Indexed("k") == kForeign);
  absl::MutexLock lock(&rig.index.mu());
  CHECK(rig.index.get().Find("k")->meta->created_unix_ns == 2);
}

TEST_CASE("a foreign-only key is checked again after the miss TTL: dropped when gone, read again when replaced") {
  Rig rig;
  rig.Publish(MetaOf("gone", 3000, 1));
  rig.Publish(MetaOf("replaced", 3000, 1));
  rig.lookup->Discover({"gone", "replaced"});
  REQUIRE(rig.Indexed("gone") == kForeign);
  rig.Unpublish("gone");
  rig.Publish(MetaOf("replaced", 5000, 2));
  rig.clock.now_ns = kSecond / 2;  // found half a TTL ago: vouched for without a look
  rig.lookup->Discover({"gone", "replaced"});
  CHECK(rig.Indexed("gone") == kForeign);
  rig.clock.now_ns = kSecond;
  rig.lookup->Discover({"gone", "replaced"});
  CHECK(rig.Indexed("gone") == kAbsent);
  REQUIRE(rig.Indexed("replaced") == kForeign);
  absl::MutexLock lock(&rig.index.mu());
  CHECK(rig.index.get().Find("replaced")->meta->payload_size == 5000);
}

TEST_CASE("keys the index holds are not looked for, and a prefix lookup stops at the first key found nowhere") {
  Rig rig;
  for (const char* key : {"a", "c", "own"}) rig.Publish(MetaOf(key, 3000));
  {
    absl::MutexLock lock(&rig.index.mu());
    rig.index.get().AddReplica(0, std::make_shared<const ChunkMeta>(MetaOf("own", 5000, 7)));
  }
  rig.lookup->Discover({"own", "a", "b", "c"}, /*prefix_only=*/true);
  CHECK(rig.Indexed("own") == std::pair<uint32_t, uint32_t>{1u, 0});  // this node's own replica stands
  CHECK(rig.Indexed("a") == kForeign);
  CHECK(rig.Indexed("c") == kAbsent);  // after "b", found nowhere
  rig.lookup->Discover({"own", "a", "b", "c"});
  CHECK(rig.Indexed("c") == kForeign);
}

TEST_CASE("without a shared tier the lookup is inactive and indexes nothing") {
  SimClock sim;
  ManualClock clock;
  StoreConfig config;
  config.tiers = {{"nvme", "/sim/nvme", 1ull << 30}};
  Tiers tiers;
  tiers.push_back(std::make_unique<Tier>());
  auto device = std::make_unique<SimDevice>(&sim, 0, 0);
  const ChunkMeta meta = MetaOf("k", 3000);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, Payload(3000, 1).data(), image.data());
  device->files()[FileStem("k")] = image;
  tiers[0]->device = std::move(device);
  GuardedIndex index({1ull << 30});
  SharedLookup lookup(config, tiers, &index, &clock);
  CHECK_FALSE(lookup.active());
  lookup.Discover({"k"});
  absl::MutexLock lock(&index.mu());
  CHECK(index.get().FindLive("k") == nullptr);
}

}  // namespace
}  // namespace kvstream::testing
