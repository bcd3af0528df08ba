// Engine::Stats: the store's counters and gauges, gathered from the components that keep them.
#include <sys/resource.h>

#include <algorithm>

#include "engine.h"

namespace kvstream {

StoreStats Engine::Stats() const {
  StoreStats s;
  s.staged_bytes = stager_.staged_bytes();
  s.staged_chunks = stager_.staged_chunks();
  s.staging_limit_bytes = stager_.limit_bytes();
  s.staging_kept_bytes = stager_.kept_bytes();
  s.persists = stager_.persists();
  s.persist_failures = stager_.persist_failures();
  s.steps = history_.count();
  s.retrieve_hits = counters_.retrieve_hits;
  s.retrieve_misses = counters_.retrieve_misses;
  s.retrieve_failures = counters_.retrieve_failures;
  s.writes_under_pressure = counters_.writes_under_pressure;
  s.persists_dropped = counters_.persists_dropped;
  s.persist_dropped_bytes = counters_.persist_dropped_bytes;
  s.shared_copies = counters_.shared_copies;
  s.shared_copies_skipped = counters_.shared_copies_skipped;
  s.write_stall_seconds = stager_.stall_seconds();
  s.fsync = config_.fsync;
  {
    const int64_t ran = loop_ran_ns_.load(std::memory_order_relaxed);
    s.loop_lag_seconds = ran == 0 ? 0 : std::max<int64_t>(0, SteadyNowNs() - ran) / 1e9;
  }
  {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
    s.process_cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }
  s.verify_threads = static_cast<uint32_t>(reader_.verify_threads());
  s.reconciling = reconciling_.load();
  s.step_seconds = step_seconds_.Snapshot();
  s.step_bound_seconds = step_bound_seconds_.Snapshot();
  s.step_gap = step_gap_.Snapshot();
  s.load_estimate_error = load_estimate_error_.Snapshot();
  s.policies = policies();
  absl::ReaderMutexLock lock(&index_.mu());
  const Index& index = index_.get_shared();
  s.chunks = index.size();
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const Tier& tier = *tiers_[t];
    const TierCounters& c = tier.counters;
    const DeviceProperties& p = tier.device->properties();
    TierStats ts;
    ts.name = tier.name;
    ts.path = config_.tiers[t].path;
    ts.group = tier.group_name;
    ts.io_engine = p.io_engine;
    ts.direct_io = p.direct_io;
    ts.mem_alignment = p.mem_alignment;
    ts.offset_alignment = p.offset_alignment;
    ts.fixed_buffers = p.fixed_buffers;
    ts.queue_depth = tier.read_depth_now.load(std::memory_order_relaxed);
    ts.capacity_bytes = index.capacity(static_cast<int>(t));
    ts.used_bytes = index.used(static_cast<int>(t));
    ts.chunks = index.replicas(static_cast<int>(t));
#define KVSTREAM_TIER_COUNTER_COPY(field, metric, labels, help) ts.field = c.field.load(std::memory_order_relaxed);
    KVSTREAM_TIER_COUNTERS(KVSTREAM_TIER_COUNTER_COPY)
#undef KVSTREAM_TIER_COUNTER_COPY
    ts.resubmits = tier.device->resubmits();
    ts.fixed_ops = tier.device->fixed_ops();
    ts.reference_bandwidth_bps = tier.reference_bps;
    ts.stalled = tier.stalled || tier.not_answering;
    ts.shared = p.shared;
    ts.foreign_chunks = index.foreign_replicas(static_cast<int>(t));
    ts.discovered = shared_lookup_.discovered(static_cast<int>(t));
    ts.read_seconds = c.read_seconds.Snapshot();
    ts.write_seconds = c.write_seconds.Snapshot();
    ts.readable = tier.readable;
    ts.writable = tier.writable;
    {
      absl::MutexLock condition_lock(&tier.condition_mu);
      ts.condition = tier.condition;
    }
    s.tiers.push_back(std::move(ts));
  }
  return s;
}

}  // namespace kvstream
