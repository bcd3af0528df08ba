#include "proto_convert.h"

namespace kvstream {

void ToProto(const StepRecord& in, v1::StepRecord* out) {
  out->set_id(in.id);
  out->set_start_unix_ns(in.start_unix_ns);
  out->set_chunks(in.chunks);
  out->set_hits(in.hits);
  out->set_misses(in.misses);
  out->set_failed(in.failed);
  out->set_bytes(in.bytes);
  out->set_wall_seconds(in.wall_seconds);
  out->set_bound_seconds(in.bound_seconds);
  out->set_estimate_seconds(in.estimate_seconds);
  out->set_gap(in.gap);
  out->set_routing(in.routing);
  out->set_batching(in.batching);
  for (const TierStep& t : in.tiers) {
    v1::TierStep* p = out->add_tiers();
    p->set_tier(t.tier);
    p->set_blocks(t.blocks);
    p->set_bytes(t.bytes);
    p->set_busy_seconds(t.busy_seconds);
    p->set_bandwidth_bps(t.bandwidth_bps);
    p->set_eligible(t.eligible);
  }
}

StepRecord FromProto(const v1::StepRecord& in) {
  StepRecord r;
  r.id = in.id();
  r.start_unix_ns = in.start_unix_ns();
  r.chunks = in.chunks();
  r.hits = in.hits();
  r.misses = in.misses();
  r.failed = in.failed();
  r.bytes = in.bytes();
  r.wall_seconds = in.wall_seconds();
  r.bound_seconds = in.bound_seconds();
  r.estimate_seconds = in.estimate_seconds();
  r.gap = in.gap();
  r.routing = in.routing();
  r.batching = in.batching();
  for (const v1::TierStep& p : in.tiers()) {
    r.tiers.push_back({p.tier(), p.blocks(), p.bytes(), p.busy_seconds(), p.bandwidth_bps(), p.eligible()});
  }
  return r;
}

void ToProto(const StoreStats& in, v1::StatsReply* out) {
  for (const TierStats& t : in.tiers) {
    v1::TierStats* p = out->add_tiers();
    p->set_name(t.name);
    p->set_path(t.path);
    p->set_direct_io(t.direct_io);
    p->set_mem_alignment(t.mem_alignment);
    p->set_offset_alignment(t.offset_alignment);
    p->set_fixed_buffers(t.fixed_buffers);
    p->set_queue_depth(t.queue_depth);
    p->set_capacity_bytes(t.capacity_bytes);
    p->set_used_bytes(t.used_bytes);
    p->set_chunks(t.chunks);
    p->set_shared(t.shared);
    p->set_foreign_chunks(t.foreign_chunks);
    p->set_discovered(t.discovered);
    p->set_resubmits(t.resubmits);
    p->set_fixed_ops(t.fixed_ops);
    p->set_reference_bandwidth_bps(t.reference_bandwidth_bps);
    p->set_stalled(t.stalled);
    p->set_readable(t.readable);
    p->set_writable(t.writable);
    p->set_condition(t.condition);
    p->set_group(t.group);
    p->set_io_engine(t.io_engine);
    for (const TierCounter& c : kTierCounters) (*p->mutable_counters())[c.name] = t.*c.field;
  }
  out->set_chunks(in.chunks);
  out->set_staged_bytes(in.staged_bytes);
  out->set_staged_chunks(in.staged_chunks);
  out->set_staging_limit_bytes(in.staging_limit_bytes);
  out->set_staging_kept_bytes(in.staging_kept_bytes);
  out->set_steps(in.steps);
  out->set_retrieve_hits(in.retrieve_hits);
  out->set_retrieve_misses(in.retrieve_misses);
  out->set_retrieve_failures(in.retrieve_failures);
  out->set_persists(in.persists);
  out->set_persist_failures(in.persist_failures);
  out->set_writes_under_pressure(in.writes_under_pressure);
  out->set_persists_dropped(in.persists_dropped);
  out->set_persist_dropped_bytes(in.persist_dropped_bytes);
  out->set_shared_copies(in.shared_copies);
  out->set_shared_copies_skipped(in.shared_copies_skipped);
  out->set_process_cpu_seconds(in.process_cpu_seconds);
  out->set_verify_threads(in.verify_threads);
  out->set_write_stall_seconds(in.write_stall_seconds);
  ToProto(in.policies, out->mutable_policies());
  out->set_fsync(std::string(ToString(in.fsync)));
}

StoreStats FromProto(const v1::StatsReply& in) {
  StoreStats s;
  for (const v1::TierStats& p : in.tiers()) {
    TierStats t;
    t.name = p.name();
    t.path = p.path();
    t.direct_io = p.direct_io();
    t.mem_alignment = p.mem_alignment();
    t.offset_alignment = p.offset_alignment();
    t.fixed_buffers = p.fixed_buffers();
    t.queue_depth = p.queue_depth();
    t.capacity_bytes = p.capacity_bytes();
    t.used_bytes = p.used_bytes();
    t.chunks = p.chunks();
    t.shared = p.shared();
    t.foreign_chunks = p.foreign_chunks();
    t.discovered = p.discovered();
    t.resubmits = p.resubmits();
    t.fixed_ops = p.fixed_ops();
    t.reference_bandwidth_bps = p.reference_bandwidth_bps();
    t.stalled = p.stalled();
    t.readable = p.readable();
    t.writable = p.writable();
    t.condition = p.condition();
    t.group = p.group();
    t.io_engine = p.io_engine();
    for (const TierCounter& c : kTierCounters) {
      if (auto it = p.counters().find(c.name); it != p.counters().end()) t.*c.field = it->second;
    }
    s.tiers.push_back(std::move(t));
  }
  s.chunks = in.chunks();
  s.staged_bytes = in.staged_bytes();
  s.staged_chunks = in.staged_chunks();
  s.staging_limit_bytes = in.staging_limit_bytes();
  s.staging_kept_bytes = in.staging_kept_bytes();
  s.steps = in.steps();
  s.retrieve_hits = in.retrieve_hits();
  s.retrieve_misses = in.retrieve_misses();
  s.retrieve_failures = in.retrieve_failures();
  s.persists = in.persists();
  s.persist_failures = in.persist_failures();
  s.writes_under_pressure = in.writes_under_pressure();
  s.persists_dropped = in.persists_dropped();
  s.persist_dropped_bytes = in.persist_dropped_bytes();
  s.shared_copies = in.shared_copies();
  s.shared_copies_skipped = in.shared_copies_skipped();
  s.process_cpu_seconds = in.process_cpu_seconds();
  s.verify_threads = in.verify_threads();
  s.write_stall_seconds = in.write_stall_seconds();
  if (auto p = FromProto(in.policies(), Policies{}); p.ok()) s.policies = *p;
  if (auto f = ParseFsync(in.fsync()); f.ok()) s.fsync = *f;
  return s;
}

void ToProto(const ChunkResult& in, v1::ChunkDone* out) {
  out->set_index(static_cast<uint32_t>(in.index));
  out->set_code(static_cast<int32_t>(in.status.code()));
  out->set_message(std::string(in.status.message()));
  out->set_size(in.size);
  out->set_tier_mask(in.tier_mask);
}

ChunkResult FromProto(const v1::ChunkDone& in) {
  ChunkResult r;
  r.index = in.index();
  r.status = absl::Status(static_cast<absl::StatusCode>(in.code()), in.message());
  r.size = in.size();
  r.tier_mask = in.tier_mask();
  return r;
}

absl::StatusOr<Policies> FromProto(const v1::Policies& in, const Policies& current) {
  return ChangePolicies(current, in.routing(), in.batching(), in.writes(), in.replication());
}

void ToProto(const Policies& in, v1::Policies* out) {
  out->set_routing(ToString(in.routing));
  out->set_batching(std::string(ToString(in.batching)));
  out->set_writes(std::string(ToString(in.writes)));
  out->set_replication(std::string(ToString(in.replication)));
}

EvictRequest FromProto(const v1::EvictRequest& in) { return {in.key(), in.tier(), in.bytes(), in.all()}; }

void ToProto(const EvictRequest& in, v1::EvictRequest* out) {
  out->set_key(in.key);
  out->set_tier(in.tier);
  out->set_bytes(in.bytes);
  out->set_all(in.all);
}

}  // namespace kvstream
