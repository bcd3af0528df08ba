#include "kvstream/config.h"

#include <catch2/catch.hpp>

namespace kvstream {
namespace {

StoreConfig OneTier() {
  StoreConfig c;
  c.tiers.push_back({"nvme", "/x", 1 << 30});
  return c;
}

TEST_CASE("policies parse and print") {
  CHECK(ParseRouting("completion")->kind == RoutingKind::kCompletion);
  CHECK(ParseRouting("static:0.75")->static_share == Approx(0.75));
  CHECK(ToString(*ParseRouting("static:0.75")) == "static:0.75");
  CHECK(ParseRouting("fastest")->kind == RoutingKind::kFastest);
  CHECK(!ParseRouting("static:1.5").ok());
  CHECK(!ParseRouting("static:").ok());
  CHECK(!ParseRouting("random").ok());
  CHECK(*ParseBatching("serial") == BatchingPolicy::kSerial);
  CHECK(*ParseWrites("immediate") == WritePolicy::kImmediate);
  CHECK(*ParseReplication("primary") == ReplicationPolicy::kPrimary);
  CHECK(*ParseFsync("chunk") == FsyncPolicy::kChunk);
  CHECK(!ParseBatching("batch").ok());
}

TEST_CASE("policies change by name from the current ones, an empty name keeps one") {
  Policies current;
  current.writes = WritePolicy::kImmediate;
  current.replication = ReplicationPolicy::kAdaptive;
  auto changed = ChangePolicies(current, "static:0.25", "serial", "", "");
  REQUIRE(changed.ok());
  CHECK(changed->routing.kind == RoutingKind::kStatic);
  CHECK(changed->routing.static_share == Approx(0.25));
  CHECK(changed->batching == BatchingPolicy::kSerial);
  CHECK(changed->writes == WritePolicy::kImmediate);               // kept
  CHECK(changed->replication == ReplicationPolicy::kAdaptive);    // kept
  CHECK(ChangePolicies(current, "", "", "", "all")->replication == ReplicationPolicy::kAll);
  CHECK(absl::IsInvalidArgument(ChangePolicies(current, "", "", "sometimes", "").status()));
}

TEST_CASE("byte sizes parse with binary units") {
  CHECK(*ParseBytes("4096") == 4096);
  CHECK(*ParseBytes("64MiB") == 64ull << 20);
  CHECK(*ParseBytes("1.5G") == 3ull << 29);
  CHECK(*ParseBytes("2 TB") == 2ull << 40);
  CHECK(*ParseBytes("512k") == 512ull << 10);
  CHECK(!ParseBytes("").ok());
  CHECK(!ParseBytes("ten").ok());
  CHECK(!ParseBytes("5 parsecs").ok());
  CHECK(!ParseBytes("-3M").ok());
}

TEST_CASE("validation fills defaults and rejects bad configs with a reason") {
  auto ok = ValidateConfig(OneTier());
  REQUIRE(ok.ok());
  CHECK(ok->tiers[0].queue_depth == DefaultQueueDepth(1 << 20));
  CHECK(DefaultQueueDepth(1 << 20) == 2);
  CHECK(DefaultQueueDepth(64 << 10) == 32);

  StoreConfig c = OneTier();
  c.tiers.push_back({"nvme", "/y", 1 << 30});
  CHECK(absl::IsInvalidArgument(ValidateConfig(c).status()));
  c = OneTier();
  c.tiers[0].capacity_bytes = 0;
  CHECK(!ValidateConfig(c).ok());
  c = OneTier();
  c.block_size = 1000;
  CHECK(!ValidateConfig(c).ok());
  c = OneTier();
  c.tiers[0].name = "bad name";
  CHECK(!ValidateConfig(c).ok());
  c = OneTier();
  c.staging_high_water = 0;
  CHECK(!ValidateConfig(c).ok());
  c = OneTier();
  c.staging_max_defer_seconds = 0;  // a bound that never holds a write back is `immediate`
  CHECK(!ValidateConfig(c).ok());
  c.staging_max_defer_seconds = 3601;
  CHECK(!ValidateConfig(c).ok());
  CHECK(!ValidateConfig(StoreConfig{}).ok());
}

}  // namespace
}  // namespace kvstream
