// ReconcileTier (catalog/reconcile.h): after a start from the index saved at the last clean shutdown,
// the index is compared with the files actually on the tier, as a full scan would have judged
// them: a replica whose file is gone leaves the index, one whose file has another size leaves it
// with its file, and a file the index lacks is indexed if valid or removed if invalid or older than
// the version indexed. State of this run (created at or after its start) is left alone.
#include "catalog/reconcile.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/sim_clock.h"
#include "sim/sim_device.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr uint32_t kSegment = 64 << 10;
constexpr int64_t kStarted = 1000;  // this run's start; files created before it are the saved state

ChunkMeta MetaOf(const std::string& key, size_t size, int64_t created) {
  const auto payload = Payload(size, std::hash<std::string>{}(key) + created);
  return DescribeChunk(key, payload.data(), payload.size(), kSegment, created);
}

std::vector<uint8_t> FileOf(const ChunkMeta& meta) {
  const auto payload = Payload(meta.payload_size, std::hash<std::string>{}(meta.key) + meta.created_unix_ns);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, payload.data(), image.data());
  return image;
}

// Two simulated tiers and an index of them, as the engine holds them.
struct Rig {
  SimClock clock;
  Tiers tiers;
  GuardedIndex index{{1ull << 30, 1ull << 30}};
  std::atomic<bool> stop{false};

  Rig() {
    for (int t = 0; t < 2; ++t) {
      auto tier = std::make_unique<Tier>();
      tier->name = "t" + std::to_string(t);
      tier->device = std::make_unique<SimDevice>(&clock, 0, 0);
      tiers.push_back(std::move(tier));
    }
  }
  SimDevice& device(int t) { return static_cast<SimDevice&>(*tiers[t]->device); }
  // The chunk on tier `t`: its file there and (with `indexed`) its replica in the index.
  void Put(int t, const ChunkMeta& meta, bool indexed = true) {
    device(t).files()[FileStem(meta.key)] = FileOf(meta);
    if (indexed) AddToIndex(t, meta);
  }
  void AddToIndex(int t, const ChunkMeta& meta) {
    absl::MutexLock lock(&index.mu());
    index.get().AddReplica(t, std::make_shared<const ChunkMeta>(meta));
  }
  uint32_t TiersOf(const std::string& key) {
    absl::MutexLock lock(&index.mu());
    const IndexEntry* e = index.get().FindLive(key);
    return e == nullptr ? 0 : e->tiers;
  }
  bool HasFile(int t, const std::string& key) { return device(t).files().count(FileStem(key)) > 0; }
  ReconcileReport Reconcile(int t) { return ReconcileTier(tiers, t, &index, kStarted, stop); }
};

TEST_CASE("indexed replicas whose files are in place with their size are only counted") {
  Rig rig;
  rig.Put(0, MetaOf("a", 100 << 10, 1));
  rig.Put(0, MetaOf("b", 3000, 2));
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.checked == 2);
  CHECK(r.missing + r.torn + r.added + r.removed == 0);
  CHECK(rig.TiersOf("a") == 1u);
  CHECK(rig.TiersOf("b") == 1u);
}

TEST_CASE("a replica whose file was deleted while the daemon was down leaves the index, on that tier only") {
  Rig rig;
  const ChunkMeta a = MetaOf("a", 100 << 10, 1);
  rig.Put(0, a);
  rig.Put(1, a);
  rig.device(0).files().clear();
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.missing == 1);
  CHECK(r.checked == 0);
  CHECK(rig.TiersOf("a") == 2u);  // tier 1's replica stands
  CHECK(rig.Reconcile(1).checked == 1);
}

TEST_CASE("a replica whose file has another size (torn) leaves the index and its file is removed") {
  Rig rig;
  rig.Put(0, MetaOf("torn", 100 << 10, 1));
  rig.Put(0, MetaOf("longer", 3000, 1));
  rig.device(0).files()[FileStem("torn")].resize(4096);      // cut short
  rig.device(0).files()[FileStem("longer")].resize(3 * 4096);  // replaced by something longer
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.torn == 2);
  CHECK(rig.TiersOf("torn") == 0);
  CHECK(rig.TiersOf("longer") == 0);
  CHECK_FALSE(rig.HasFile(0, "torn"));
  CHECK_FALSE(rig.HasFile(0, "longer"));
}

TEST_CASE("a replica whose file cannot be looked at leaves the index, is counted, and keeps its file") {
  Rig rig;
  rig.Put(0, MetaOf("eio", 100 << 10, 1));
  rig.Put(0, MetaOf("fine", 100 << 10, 1));
  rig.device(0).files()[FileStem("eio")].resize(4096);  // listed at another size: looked at again
  rig.device(0).SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kOpen && op.stem == FileStem("eio") ? SimFault::Error(EIO) : SimFault::None();
  });
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.unconfirmed == 1);
  CHECK(r.missing == 0);
  CHECK(r.torn == 0);
  CHECK(r.checked == 1);
  CHECK(rig.TiersOf("eio") == 0);   // not served on a replica nobody could confirm
  CHECK(rig.HasFile(0, "eio"));     // but not removed either: the next start's scan decides
}

TEST_CASE("a valid file the index lacks is indexed and an invalid one is removed") {
  Rig rig;
  rig.Put(0, MetaOf("extra", 100 << 10, 1), /*indexed=*/false);
  auto flipped = FileOf(MetaOf("flipped", 3000, 1));
  flipped[20] ^= 1;  // its header no longer checks
  rig.device(0).files()[FileStem("flipped")] = flipped;
  rig.device(0).files()[FileStem("misnamed")] = FileOf(MetaOf("other", 3000, 1));
  auto short_file = FileOf(MetaOf("short", 100 << 10, 1));
  short_file.resize(short_file.size() - 4096);
  rig.device(0).files()[FileStem("short")] = short_file;
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.added == 1);
  CHECK(r.removed == 3);
  CHECK(rig.TiersOf("extra") == 1u);
  CHECK(rig.HasFile(0, "extra"));
  for (const char* key : {"flipped", "misnamed", "short"}) {
    INFO(key);
    CHECK_FALSE(rig.HasFile(0, key));
    CHECK(rig.TiersOf(key) == 0);
  }
  CHECK(rig.TiersOf("other") == 0);  // a misnamed file's key is not indexed either
}

TEST_CASE("a file older than the version indexed is removed, and a newer one replaces that version") {
  Rig rig;
  rig.Put(1, MetaOf("k", 100 << 10, 20));        // the index serves version 20 from tier 1
  rig.Put(0, MetaOf("k", 50 << 10, 10), false);  // tier 0 holds version 10, unindexed
  rig.Put(1, MetaOf("n", 3000, 10));             // the index serves version 10 of n
  rig.Put(0, MetaOf("n", 5000, 30), false);      // tier 0 holds the newer version 30
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.removed == 1);
  CHECK(r.added == 1);
  CHECK_FALSE(rig.HasFile(0, "k"));
  CHECK(rig.TiersOf("k") == 2u);
  CHECK(rig.TiersOf("n") == 1u);  // the newer version, on tier 0 ...
  CHECK_FALSE(rig.HasFile(1, "n"));  // ... and tier 1's stale file is gone
  absl::MutexLock lock(&rig.index.mu());
  CHECK(rig.index.get().Find("n")->meta->created_unix_ns == 30);
}

TEST_CASE("replicas and files of this run are left alone") {
  Rig rig;
  rig.Put(0, MetaOf("new-gone", 3000, kStarted));  // written by this run; its file removed since
  rig.device(0).files().erase(FileStem("new-gone"));
  rig.Put(0, MetaOf("new-unindexed", 3000, kStarted + 1), false);  // committed, not yet indexed
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.checked + r.missing + r.torn + r.added + r.removed == 0);
  CHECK(rig.TiersOf("new-gone") == 1u);      // the loop's business
  CHECK(rig.TiersOf("new-unindexed") == 0);  // the loop indexes it
  CHECK(rig.HasFile(0, "new-unindexed"));
}

TEST_CASE("a pass told to stop does nothing more") {
  Rig rig;
  rig.Put(0, MetaOf("gone", 3000, 1));
  rig.device(0).files().clear();
  rig.Put(0, MetaOf("extra", 3000, 1), false);
  rig.stop = true;
  const ReconcileReport r = rig.Reconcile(0);
  CHECK(r.checked + r.missing + r.torn + r.added + r.removed == 0);
  CHECK(rig.TiersOf("gone") == 1u);
  CHECK(rig.TiersOf("extra") == 0);
}

}  // namespace
}  // namespace kvstream::testing
