// LoadModel: the expected time to read a set of chunks from the tiers that hold them, all tiers
// reading at once under completion routing (docs/design.md, "Load or recompute"). The daemon
// answers Lookups with it from each tier's measured rate; kvsim's verdict mode asks it the same
// question of simulated tiers. Pure arithmetic: no clock, no I/O, no locks.
//
// The model: tier k reads at `bps` once `delay_s` has passed (its per-read latency, or work it
// must finish first). Completion routing keeps every tier busy while a block it holds is unread,
// so a set of tiers S finishes the bytes only S holds no sooner than the aggregate-bandwidth bound
// of S, and no later than the largest such bound over the unions of the holder sets present (the
// residual is the blocks in flight at the end). A tier with bps <= 0 is absent (stalled, given up,
// out of reach): bytes only absent tiers hold take forever (+inf). Every byte read also passes the
// host's verification, a stage alongside the reads: when it is the slower one (at GB/s on few
// cores), the whole takes its bytes at the host's rate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvstream {

struct TierRate {
  double bps = 0;      // bytes per second it reads at; <= 0: absent
  double delay_s = 0;  // before its first byte lands
};

// What the daemon measured of a tier, as its loop last published it.
struct TierReading {
  bool usable = true;             // readable and not stalled (claims reads now)
  double bps = 0;                 // its bandwidth in recent steps; 0: not measured yet
  double usual_read_s = 0;        // a read's usual time from issue to landing; 0: none landed yet
  uint32_t depth = 1;             // the reads it keeps in flight
  double oldest_read_age_s = 0;   // how long its oldest read in flight has been; 0: none in flight
};

// A read in flight this many usual read times makes its tier look stalled before its deadline.
inline constexpr double kStallingReads = 2;

// The tier as the model sees it: absent when not usable or not measured; its delay is its latency
// (the usual read time less the `depth` transfers of `block_bytes` queued ahead of a read), or,
// when its oldest read in flight is over kStallingReads usual read times old, that read's age
// (it has waited that long: expect as long again before the tier helps).
TierRate RateOf(const TierReading& reading, double block_bytes);

// Earliest T with sum over present tiers of bps_k * max(0, T - delay_k) >= bytes: 0 for no bytes,
// +inf when no tier is present. Bit k of `only` (all bits: every tier) picks the tiers counted.
double BoundTime(double bytes, std::span<const TierRate> tiers, uint32_t only = ~0u);

class LoadModel {
 public:
  // At most 32 tiers (holder masks are 32 bits); those beyond are never counted. `host_bps`: the
  // rate at which the host verifies what the tiers read, when that bounds the reads (<= 0: not).
  explicit LoadModel(std::vector<TierRate> tiers, double host_bps = 0);

  // Adds `bytes` that the tiers of `holders` (bit k: tier k) hold. Returns the expected seconds to
  // have everything added so far (monotone: never less than the previous answer): the largest of
  // the holder sets' bounds and of all the bytes at the host's rate.
  double Add(double bytes, uint32_t holders);
  double seconds() const { return seconds_; }
  const std::vector<TierRate>& tiers() const { return tiers_; }

 private:
  struct Group {
    uint32_t holders;  // the present tiers among the chunk's holders
    double bytes;
  };
  // Beyond this many distinct holder sets the unions looked at are each set alone and all of them.
  static constexpr size_t kMaxExactGroups = 8;

  // The bound of the bytes held only within the tiers of `tiers_mask`.
  double UnionTime(uint32_t tiers_mask) const;
  // BoundTime(bytes, tiers_, only), over the present tiers in the order they start (by_delay_):
  // a Lookup asks it for every entry, so nothing is sorted per call.
  double Bound(double bytes, uint32_t only) const;

  std::vector<TierRate> tiers_;
  std::vector<TierRate> by_delay_;  // the present tiers, by delay
  std::vector<uint32_t> bit_;       // by_delay_[i] is tier k: bit_[i] = 1 << k
  double host_bps_ = 0;
  double bytes_ = 0;      // added so far, that a present tier holds
  uint32_t present_ = 0;  // tiers with bps > 0
  std::vector<Group> groups_;
  double seconds_ = 0;
};

}  // namespace kvstream
