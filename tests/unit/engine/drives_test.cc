// A tier over several drives (TierConfig::drives) in virtual time: one tier per drive after
// ValidateConfig, chunks spread over the drives in turn with one replica per tier, a step read at
// the sum of every drive and the other tier, and a failed drive costing only its own chunks.
#include <catch2/catch.hpp>

#include <bit>
#include <cerrno>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

constexpr double kDriveBps = 100 * MBps;
constexpr double kPfsBps = 200 * MBps;

// "nvme" over four drives of 1 GiB in all (one byte more than four equal shares), then "pfs".
StoreConfig DrivesAndPfs(ReplicationPolicy replication = ReplicationPolicy::kAll) {
  StoreConfig c;
  TierConfig nvme;
  nvme.name = "nvme";
  nvme.drives = {"/sim/d0", "/sim/d1", "/sim/d2", "/sim/d3"};
  nvme.capacity_bytes = (1ull << 30) + 1;
  nvme.queue_depth = 2;
  TierConfig pfs;
  pfs.name = "pfs";
  pfs.path = "/sim/pfs";
  pfs.capacity_bytes = 4ull << 30;
  pfs.queue_depth = 2;
  c.tiers = {nvme, pfs};
  c.replication = replication;
  return c;
}

SimRig DrivesRig(ReplicationPolicy replication = ReplicationPolicy::kAll) {
  return SimRig({kDriveBps, kDriveBps, kDriveBps, kDriveBps, kPfsBps}, DrivesAndPfs(replication));
}

constexpr uint32_t kDrivesMask = 0b01111;
constexpr uint32_t kPfsMask = 0b10000;

TEST_CASE("a tier over several drives is one tier per drive, each with a share of the capacity") {
  auto valid = ValidateConfig(DrivesAndPfs());
  REQUIRE(valid.ok());
  REQUIRE(valid->tiers.size() == 5);
  uint64_t capacity = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    const TierConfig& d = valid->tiers[i];
    CHECK(d.name == "nvme." + std::to_string(i));
    CHECK(d.group == "nvme");
    CHECK(d.drive == i);
    CHECK(d.path == "/sim/d" + std::to_string(i));
    CHECK(d.drives.empty());
    CHECK(d.queue_depth == 2);
    capacity += d.capacity_bytes;
  }
  CHECK(capacity == (1ull << 30) + 1);  // the sum of the drives, the odd byte on drive 0
  CHECK(valid->tiers[0].capacity_bytes == (1ull << 28) + 1);
  CHECK(valid->tiers[4].name == "pfs");
  CHECK(valid->tiers[4].group == "pfs");

  auto again = ValidateConfig(*valid);  // the daemon validates, then the store: the same tiers
  REQUIRE(again.ok());
  REQUIRE(again->tiers.size() == 5);
  CHECK(again->tiers[3].name == "nvme.3");

  StoreConfig both = DrivesAndPfs();
  both.tiers[0].path = "/sim/x";
  CHECK(ValidateConfig(both).status().message().find("both a path and drives") != std::string_view::npos);
  StoreConfig shared = DrivesAndPfs();
  shared.tiers[0].shared = true;
  CHECK(absl::IsInvalidArgument(ValidateConfig(shared).status()));
  StoreConfig twice = DrivesAndPfs();
  twice.tiers[1].name = "nvme";  // a second tier named like the first one's drives' group
  CHECK(ValidateConfig(twice).status().message().find("duplicate tier name 'nvme'") != std::string_view::npos);
  twice.tiers = {twice.tiers[1], DrivesAndPfs().tiers[0]};  // and the other way round
  CHECK(!ValidateConfig(twice).ok());
  StoreConfig same_drive = DrivesAndPfs();
  same_drive.tiers[0].drives[3] = "/sim/d0";
  CHECK(ValidateConfig(same_drive).status().message().find("used twice") != std::string_view::npos);
  StoreConfig too_many = DrivesAndPfs();
  too_many.tiers[0].drives.clear();
  for (int i = 0; i < 32; ++i) too_many.tiers[0].drives.push_back("/sim/d" + std::to_string(i));
  CHECK(ValidateConfig(too_many).status().message().find("at most 32") != std::string_view::npos);
  StoreConfig forged = *valid;
  forged.tiers[2].name = "nvme.7";  // a drive's name that does not say which drive it is
  CHECK(!ValidateConfig(forged).ok());
}

TEST_CASE("chunks spread over a tier's drives in turn, one replica on the tier and one on the other") {
  SimRig rig = DrivesRig();
  auto data = rig.Populate("k", 16, 4 * kBlock);
  for (int d = 0; d < 4; ++d) CHECK(rig.devices[d]->files().size() == 4);
  CHECK(rig.devices[4]->files().size() == 16);
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) keys.push_back("k" + std::to_string(i));
  for (const LookupEntry& e : rig.engine->Lookup(keys)) {
    CHECK(std::popcount(e.tier_mask & kDrivesMask) == 1);
    CHECK((e.tier_mask & kPfsMask) != 0);
  }
  const StoreStats stats = rig.engine->Stats();
  uint64_t capacity = 0;
  for (int d = 0; d < 4; ++d) {
    CHECK(stats.tiers[d].group == "nvme");
    CHECK(stats.tiers[d].chunks == 4);
    capacity += stats.tiers[d].capacity_bytes;
  }
  CHECK(capacity == (1ull << 30) + 1);
  // Evicting by the tier's name evicts on every drive.
  REQUIRE(rig.engine->Evict({"k3", "nvme", 0, false}).ok());
  CHECK(rig.engine->Lookup({"k3"})[0].tier_mask == kPfsMask);
}

TEST_CASE("a step reads at the sum of every drive and the other tier") {
  SimRig rig = DrivesRig();
  auto data = rig.Populate("k", 32, 4 * kBlock);
  auto batch = SimRig::MakeBatch("k", 32, 4 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  const double bound = static_cast<double>(rec.bytes) / (4 * kDriveBps + kPfsBps);
  CHECK(rec.wall_seconds < bound * 1.05);
  // The best a tier on one drive with the PFS could do: 1.3x slower at least.
  CHECK(rec.wall_seconds * 1.3 < static_cast<double>(rec.bytes) / (kDriveBps + kPfsBps));
  for (int d = 0; d < 5; ++d) CHECK(rec.tiers[d].blocks > 0);
}

TEST_CASE("under primary the chunks live on the drives only, still spread") {
  SimRig rig = DrivesRig(ReplicationPolicy::kPrimary);
  auto data = rig.Populate("k", 8, kBlock);
  for (int d = 0; d < 4; ++d) CHECK(rig.devices[d]->files().size() == 2);
  CHECK(rig.devices[4]->files().empty());
  auto batch = SimRig::MakeBatch("k", 8, kBlock);
  std::vector<ChunkResult> results;
  rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
}

TEST_CASE("a failed drive costs only its chunks: the other tier serves them, new chunks skip it") {
  SimRig rig = DrivesRig();
  auto data = rig.Populate("k", 16, 4 * kBlock);
  // Drive 2 fails every read from its 3rd on, in the middle of the step.
  rig.devices[2]->SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kRead && op.index >= 2 ? SimFault::Error(EIO) : SimFault::None();
  });
  auto batch = SimRig::MakeBatch("k", 16, 4 * kBlock);
  std::vector<ChunkResult> results;
  StepRecord rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rec.failed == 0);
  StoreStats stats = rig.engine->Stats();
  CHECK(stats.tiers[2].read_errors > 0);
  for (int d : {0, 1, 3}) CHECK(stats.tiers[d].read_errors == 0);

  // Its directory is gone (the drive was pulled): only its chunks leave the index.
  rig.devices[2]->SetFaultHook(nullptr);
  rig.devices[2]->SetCondition({TierCondition::State::kDetached, "another directory is now at /sim/d2 (unmounted)"});
  REQUIRE(rig.engine->Persist("tick", data[0].data(), 4096).ok());  // the loop checks its tiers once a second
  rig.engine->Flush();
  bool dropped = false;
  for (int tries = 0; tries < 20 && !dropped; ++tries) {
    auto tick = Payload(4096, tries);
    rig.devices[0]->SetFaultHook([](const SimOpInfo&) { return SimFault::Delay(600'000'000); });
    REQUIRE(rig.engine->Persist("tick", tick.data(), tick.size()).ok());
    rig.engine->Flush();
    rig.devices[0]->SetFaultHook(nullptr);
    dropped = !rig.engine->Stats().tiers[2].readable;
  }
  REQUIRE(dropped);
  stats = rig.engine->Stats();
  CHECK(stats.tiers[2].chunks == 0);
  for (int d : {0, 1, 3}) CHECK(stats.tiers[d].chunks >= 4);
  results.clear();
  rec = rig.engine->Retrieve(batch.reads, &results);
  RequireIntact(batch, data, results);
  CHECK(rec.tiers[2].blocks == 0);

  // New chunks go to the drives still usable, in turn.
  const auto fresh = Payload(kBlock, 77);
  for (int i = 0; i < 6; ++i) {
    REQUIRE(rig.engine->Persist("new" + std::to_string(i), fresh.data(), fresh.size()).ok());
  }
  rig.engine->Flush();
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) keys.push_back("new" + std::to_string(i));
  for (const LookupEntry& e : rig.engine->Lookup(keys)) {
    CHECK((e.tier_mask & 0b00100) == 0);
    CHECK(std::popcount(e.tier_mask & kDrivesMask) == 1);
  }
}

}  // namespace
}  // namespace kvstream::testing
