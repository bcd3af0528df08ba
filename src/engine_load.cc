// Engine: the load estimate (docs/design.md, "Load or recompute"). Lookups and steps ask it from
// any thread; it reads only what the loop publishes (each tier's bandwidth in steps, usual read
// time and oldest read in flight; the verification's rate while it is the bottleneck; the bytes
// queued) and asks the load model (model/load_model.h), the one kvsim asks too.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine.h"
#include "model/load_model.h"

namespace kvstream {

std::vector<TierRate> Engine::LoadRates(int64_t now_ns, uint32_t* unmeasured) const {
  std::vector<TierRate> rates(tiers_.size());
  *unmeasured = 0;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const Tier& tier = *tiers_[t];
    TierReading r;
    r.usable = tier.readable && !tier.stalled;
    r.bps = tier.reference_bps.load(std::memory_order_relaxed);
    r.usual_read_s = tier.usual_read_seconds.load(std::memory_order_relaxed);
    r.depth = tier.read_depth_now.load(std::memory_order_relaxed);
    if (const int64_t oldest = tier.oldest_read_ns.load(std::memory_order_relaxed); oldest != 0) {
      r.oldest_read_age_s = std::max<int64_t>(0, now_ns - oldest) / 1e9;
    }
    if (r.usable && !(r.bps > 0)) *unmeasured |= 1u << t;
    rates[t] = RateOf(r, config_.block_size);
  }
  return rates;
}

std::vector<double> Engine::LoadSeconds(const std::vector<LookupEntry>& entries) const {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  uint32_t unmeasured;
  LoadModel model(LoadRates(reactor_->NowNs(), &unmeasured), reader_.verify_bps());
  uint32_t measured = 0;
  for (size_t t = 0; t < model.tiers().size(); ++t) measured |= (model.tiers()[t].bps > 0 ? 1u : 0u) << t;
  // The reads already queued go first (steps are served oldest first), on any tier.
  if (const uint64_t queued = queued_read_bytes_.load(std::memory_order_relaxed); queued > 0 && measured != 0) {
    model.Add(static_cast<double>(queued), measured);
  }
  std::vector<double> out(entries.size());
  bool unknown = false;
  bool any = false;  // a chunk to read so far: before one, nothing is waited for
  for (size_t i = 0; i < entries.size(); ++i) {
    const LookupEntry& e = entries[i];
    if (e.present && e.tier_mask != 0 && e.size > 0) {  // in staging (mask 0): copied, no tier read
      // Held only by tiers not measured yet: no estimate from here on (the client loads it).
      unknown |= (e.tier_mask & measured) == 0 && (e.tier_mask & unmeasured) != 0;
      model.Add(static_cast<double>(e.size), e.tier_mask);
      any = true;
    }
    out[i] = unknown ? kNone : any ? model.seconds() : 0.0;
  }
  return out;
}

void Engine::PublishLoad() {
  const uint64_t blocks = pool_.unclaimed() + reader_.PublishLoad();
  queued_read_bytes_.store(blocks * config_.block_size, std::memory_order_relaxed);
}

double Engine::StepEstimate(const std::vector<ChunkRead>& reads) const {
  std::vector<LookupEntry> entries(reads.size());
  {
    absl::ReaderMutexLock lock(&index_.mu());
    for (size_t i = 0; i < reads.size(); ++i) entries[i] = Present(reads[i].key);
  }
  const std::vector<double> seconds = LoadSeconds(entries);
  return seconds.empty() ? 0.0 : seconds.back();
}

void Engine::ObserveEstimate(const StepRecord& record) {
  // Only steps the tiers served and the estimate covered: a step of misses or staged chunks
  // measures placement, not the tiers.
  if (!std::isfinite(record.estimate_seconds) || record.wall_seconds <= 0 || record.hits == 0) return;
  bool tiers_read = false;
  for (const TierStep& t : record.tiers) tiers_read |= t.bytes > 0;
  if (!tiers_read) return;
  load_estimate_error_.Observe(std::abs(record.estimate_seconds - record.wall_seconds) / record.wall_seconds);
}

}  // namespace kvstream
