// Every field of the core's records survives the trip through the control-plane messages.
#include "proto_convert.h"

#include <catch2/catch.hpp>

namespace kvstream {
namespace {

TEST_CASE("step records round-trip through the control plane") {
  StepRecord r;
  r.id = 7; r.start_unix_ns = -3; r.chunks = 10; r.hits = 8; r.misses = 1; r.failed = 1;
  r.bytes = 1ull << 40; r.wall_seconds = 0.5; r.bound_seconds = 0.48; r.gap = 0.04;
  r.routing = "static:0.75"; r.batching = "serial";
  r.tiers = {{"nvme", 5, 6, 0.25, 3e9, true}, {"pfs", 1, 2, 0.125, 1e9, false}};
  v1::StepRecord p;
  ToProto(r, &p);
  const StepRecord back = FromProto(p);
  CHECK(back.id == 7);
  CHECK(back.start_unix_ns == -3);
  CHECK(back.chunks == 10);
  CHECK(back.hits == 8);
  CHECK(back.misses == 1);
  CHECK(back.failed == 1);
  CHECK(back.bytes == 1ull << 40);
  CHECK(back.wall_seconds == 0.5);
  CHECK(back.bound_seconds == 0.48);
  CHECK(back.gap == 0.04);
  CHECK(back.routing == "static:0.75");
  CHECK(back.batching == "serial");
  REQUIRE(back.tiers.size() == 2);
  CHECK(back.tiers[1].tier == "pfs");
  CHECK(back.tiers[1].blocks == 1);
  CHECK(back.tiers[1].bytes == 2);
  CHECK(back.tiers[1].busy_seconds == 0.125);
  CHECK(back.tiers[1].bandwidth_bps == 1e9);
  CHECK_FALSE(back.tiers[1].eligible);
  CHECK(back.tiers[0].eligible);
}

TEST_CASE("stats round-trip through the control plane") {
  StoreStats s;
  s.chunks = 1; s.staged_bytes = 2; s.staged_chunks = 3; s.staging_limit_bytes = 4; s.steps = 5; s.staging_kept_bytes = 30;
  s.retrieve_hits = 6; s.retrieve_misses = 7; s.retrieve_failures = 8; s.persists = 9;
  s.persist_failures = 10; s.writes_under_pressure = 11;
  TierStats t;
  t.name = "nvme"; t.path = "/p"; t.direct_io = true; t.mem_alignment = 12; t.offset_alignment = 13;
  t.fixed_buffers = true; t.queue_depth = 14; t.capacity_bytes = 15; t.used_bytes = 16; t.chunks = 17;
  t.bytes_read = 18; t.blocks_read = 19; t.bytes_written = 20; t.replicas_written = 21; t.read_errors = 22;
  t.checksum_failures = 23; t.write_errors = 24; t.evictions = 25; t.bounce_reads = 26; t.resubmits = 27;
  t.fixed_ops = 28; t.reference_bandwidth_bps = 29.5;
  s.tiers.push_back(t);
  v1::StatsReply p;
  ToProto(s, &p);
  const StoreStats b = FromProto(p);
  CHECK(b.chunks == 1);
  CHECK(b.staged_bytes == 2);
  CHECK(b.staged_chunks == 3);
  CHECK(b.staging_limit_bytes == 4);
  CHECK(b.staging_kept_bytes == 30);
  CHECK(b.steps == 5);
  CHECK(b.retrieve_hits == 6);
  CHECK(b.retrieve_misses == 7);
  CHECK(b.retrieve_failures == 8);
  CHECK(b.persists == 9);
  CHECK(b.persist_failures == 10);
  CHECK(b.writes_under_pressure == 11);
  REQUIRE(b.tiers.size() == 1);
  const TierStats& u = b.tiers[0];
  CHECK(u.name == "nvme");
  CHECK(u.path == "/p");
  CHECK(u.direct_io);
  CHECK(u.mem_alignment == 12);
  CHECK(u.offset_alignment == 13);
  CHECK(u.fixed_buffers);
  CHECK(u.queue_depth == 14);
  CHECK(u.capacity_bytes == 15);
  CHECK(u.used_bytes == 16);
  CHECK(u.chunks == 17);
  CHECK(u.bytes_read == 18);
  CHECK(u.blocks_read == 19);
  CHECK(u.bytes_written == 20);
  CHECK(u.replicas_written == 21);
  CHECK(u.read_errors == 22);
  CHECK(u.checksum_failures == 23);
  CHECK(u.write_errors == 24);
  CHECK(u.evictions == 25);
  CHECK(u.bounce_reads == 26);
  CHECK(u.resubmits == 27);
  CHECK(u.fixed_ops == 28);
  CHECK(u.reference_bandwidth_bps == 29.5);
}

TEST_CASE("chunk results keep their status code and message") {
  ChunkResult r{3, absl::DataLossError("no intact replica"), 0, 2};
  v1::ChunkDone p;
  ToProto(r, &p);
  CHECK(p.code() == 15);  // google.rpc.Code DATA_LOSS
  const ChunkResult b = FromProto(p);
  CHECK(b.index == 3);
  CHECK(absl::IsDataLoss(b.status));
  CHECK(b.status.message() == "no intact replica");
  CHECK(b.tier_mask == 2);
  EvictRequest e{"k", "pfs", 4096, true};
  v1::EvictRequest pe;
  ToProto(e, &pe);
  const EvictRequest eb = FromProto(pe);
  CHECK(eb.key == "k");
  CHECK(eb.tier == "pfs");
  CHECK(eb.bytes == 4096);
  CHECK(eb.all);
}

TEST_CASE("every per-tier counter of tier_counters.h crosses the control plane by its name") {
  StoreStats s;
  TierStats t;
  uint64_t value = 1000;
  for (const TierCounter& c : kTierCounters) t.*c.field = value++;
  s.tiers.push_back(t);
  v1::StatsReply p;
  ToProto(s, &p);
  REQUIRE(p.tiers_size() == 1);
  CHECK(p.tiers(0).counters_size() == static_cast<int>(std::size(kTierCounters)));
  CHECK(p.tiers(0).counters().at("hedged_reads") == t.hedged_reads);
  const StoreStats b = FromProto(p);
  value = 1000;
  for (const TierCounter& c : kTierCounters) {
    INFO(c.name);
    CHECK(b.tiers[0].*c.field == value++);
  }
  // A counter this build does not know (a newer daemon's) is ignored, not an error.
  (*p.mutable_tiers(0)->mutable_counters())["counted_by_a_newer_daemon"] = 7;
  CHECK(FromProto(p).tiers[0].bytes_read == t.bytes_read);
}

}  // namespace
}  // namespace kvstream
