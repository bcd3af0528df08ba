#include "read/step_record.h"

#include <algorithm>

namespace kvstream {

StepRecord MakeStepRecord(const StepRecordInput& in, std::vector<ReferenceRate>* reference) {
  StepRecord rec;
  rec.chunks = static_cast<uint32_t>(in.results->size());
  uint64_t tier_bytes = 0;  // the bound's: a chunk served from staging took no tier's time
  for (const ChunkResult& r : *in.results) {
    if (r.status.ok()) {
      ++rec.hits;
      rec.bytes += r.size;
      if (r.tier_mask != 0) tier_bytes += r.size;
    } else if (absl::IsNotFound(r.status)) {
      ++rec.misses;
    } else {
      ++rec.failed;
    }
  }
  rec.wall_seconds = in.wall_ns / 1e9;
  rec.estimate_seconds = in.estimate_seconds;
  rec.routing = ToString(in.policies.routing);
  rec.batching = std::string(ToString(in.policies.batching));
  double sum_bps = 0;
  for (size_t t = 0; t < in.use->size(); ++t) {
    const TierUse& use = (*in.use)[t];
    ReferenceRate& ref = (*reference)[t];
    TierStep ts;
    ts.tier = (*in.tier_names)[t];
    ts.blocks = use.blocks;
    ts.bytes = use.bytes;
    ts.busy_seconds = use.busy_ns / 1e9;
    ts.eligible = in.eligible & (1u << t);
    if (use.bytes > 0 && use.busy_ns > 0) {
      ts.bandwidth_bps = use.bytes / ts.busy_seconds;
      ref.Add(static_cast<double>(use.bytes), ts.busy_seconds);
    } else {
      ts.bandwidth_bps = ref.bps();
    }
    if (ts.eligible) sum_bps += ts.bandwidth_bps;
    rec.tiers.push_back(std::move(ts));
  }
  if (sum_bps > 0 && tier_bytes > 0) {
    rec.bound_seconds = tier_bytes / sum_bps;
    rec.gap = rec.wall_seconds / rec.bound_seconds - 1;
  }
  return rec;
}

void StepHistory::Add(StepRecord* record) {
  absl::MutexLock lock(&mu_);
  record->id = next_id_++;
  records_.push_back(*record);
  if (records_.size() > kLimit) records_.pop_front();
}

std::vector<StepRecord> StepHistory::Recent(size_t max) const {
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max, records_.size());
  return std::vector<StepRecord>(records_.end() - static_cast<std::ptrdiff_t>(n), records_.end());
}

uint64_t StepHistory::count() const {
  absl::MutexLock lock(&mu_);
  return next_id_;
}

}  // namespace kvstream
