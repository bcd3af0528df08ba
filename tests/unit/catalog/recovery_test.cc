// Recovery: the index rebuilt from the tiers' files at start, on simulated tiers prefilled with
// chunk files: replicas found on every tier, the newer of two versions kept, temporaries and
// invalid files removed, each tier evicted down to its capacity, a scan failure named.
#include "catalog/recovery.h"

#include <catch2/catch.hpp>

#include <cerrno>

#include "sim_rig.h"

namespace kvstream::testing {
namespace {

std::vector<uint8_t> FileImage(const std::string& key, const std::vector<uint8_t>& payload, int64_t created) {
  ChunkMeta meta = DescribeChunk(key, payload.data(), payload.size(), kBlock, created);
  std::vector<uint8_t> image(meta.file_size());
  EncodeChunkFile(meta, payload.data(), image.data());
  return image;
}

TEST_CASE("the index is rebuilt from the files of every tier") {
  const auto a = Payload(3000, 1), b = Payload(kBlock + 1, 2);
  SimRig rig({300 * MBps, 100 * MBps}, {}, 0, [&](std::vector<SimDevice*>& d) {
    d[0]->files()[FileStem("a")] = FileImage("a", a, 1);
    d[1]->files()[FileStem("a")] = FileImage("a", a, 1);
    d[1]->files()[FileStem("b")] = FileImage("b", b, 2);
  });
  auto found = rig.engine->Lookup({"a", "b", "c"});
  CHECK(found[0].tier_mask == 3u);
  CHECK(found[0].size == a.size());
  CHECK(found[1].tier_mask == 2u);
  CHECK_FALSE(found[2].present);
  std::vector<uint8_t> out(b.size());
  std::vector<ChunkResult> results;
  rig.engine->Retrieve({{"b", out.data(), out.size()}}, &results);
  REQUIRE(results[0].status.ok());
  CHECK(out == b);
}

TEST_CASE("of two versions of a key the newer wins and the older's file is removed") {
  const auto older = Payload(3000, 3), newer = Payload(5000, 4);
  SimRig rig({300 * MBps, 100 * MBps}, {}, 0, [&](std::vector<SimDevice*>& d) {
    d[0]->files()[FileStem("k")] = FileImage("k", older, 10);
    d[1]->files()[FileStem("k")] = FileImage("k", newer, 20);
  });
  auto found = rig.engine->Lookup({"k"});
  CHECK(found[0].tier_mask == 2u);
  CHECK(found[0].size == newer.size());
  CHECK(rig.devices[0]->files().empty());
}

TEST_CASE("temporaries and invalid files are removed and never indexed") {
  const auto a = Payload(3000, 5);
  SimRig rig({300 * MBps}, {}, 0, [&](std::vector<SimDevice*>& d) {
    d[0]->files()[FileStem("good")] = FileImage("good", a, 1);
    auto torn = FileImage("torn", a, 1);
    torn.resize(torn.size() - 4096);
    d[0]->files()[FileStem("torn")] = torn;
    auto flipped = FileImage("flipped", a, 1);
    flipped[10] ^= 1;
    d[0]->files()[FileStem("flipped")] = flipped;
    d[0]->files()[FileStem("misnamed")] = FileImage("other", a, 1);
    REQUIRE(d[0]->CreateTemp(FileStem("half")).ok());
  });
  auto found = rig.engine->Lookup({"good", "torn", "flipped", "misnamed", "other"});
  CHECK(found[0].present);
  for (size_t i = 1; i < found.size(); ++i) CHECK_FALSE(found[i].present);
  CHECK(rig.devices[0]->files().size() == 1);
  CHECK(rig.devices[0]->temporaries() == 0);
}

TEST_CASE("each tier is evicted down to its capacity, oldest first") {
  StoreConfig c = SimConfig(1);
  const auto payload = Payload(60 << 10, 6);
  const uint64_t file = FileImage("x", payload, 0).size();
  c.tiers[0].capacity_bytes = 3 * file;
  SimRig rig({300 * MBps}, c, 0, [&](std::vector<SimDevice*>& d) {
    for (int i = 0; i < 5; ++i) d[0]->files()[FileStem("k" + std::to_string(i))] = FileImage("k" + std::to_string(i), payload, 100 + i);
  });
  auto found = rig.engine->Lookup({"k0", "k1", "k2", "k3", "k4"});
  CHECK_FALSE(found[0].present);
  CHECK_FALSE(found[1].present);
  CHECK(found[2].present);
  CHECK(found[4].present);
  CHECK(rig.devices[0]->files().size() == 3);
  CHECK(rig.engine->Stats().tiers[0].evictions == 2);
}

TEST_CASE("a tier that cannot be scanned fails the start with the tier's name") {
  auto clock = std::make_shared<SimClock>();
  StoreConfig config = *ValidateConfig(SimConfig(2));
  std::vector<std::unique_ptr<TierDevice>> devices;
  for (int i = 0; i < 2; ++i) devices.push_back(std::make_unique<SimDevice>(clock.get(), 100 * MBps, 0));
  static_cast<SimDevice*>(devices[1].get())->SetFaultHook([](const SimOpInfo& op) {
    return op.op == SimOp::kScan ? SimFault::Error(EIO) : SimFault::None();
  });
  auto engine = Engine::Create(config, std::move(devices), clock);
  REQUIRE_FALSE(engine.ok());
  CHECK(engine.status().message().find("t1") != std::string::npos);
}

}  // namespace
}  // namespace kvstream::testing
