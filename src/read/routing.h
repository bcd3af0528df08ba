// Routing (M4): which block of a step each tier reads next. Under `completion` routing every tier
// claims the next unread block it holds whenever it has room: the first tier from the front of the
// step, the last from the back (tiers in between from the front), so they meet wherever their
// bandwidths put the boundary, without measuring or predicting those bandwidths. `static:g` and
// `fastest` instead pin blocks to tiers when the step is placed (the baselines). Pure logic over
// the pool's Step (read/step_pool.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kvstream/policies.h"

namespace kvstream {

struct Step;

class Routing {
 public:
  Routing(int tiers, RoutingPolicy policy);

  const RoutingPolicy& policy() const { return policy_; }
  int tiers() const { return static_cast<int>(from_back_.size()); }
  // Whether `tier` claims from the back of a step (and of each chunk under serial batching).
  bool from_back(int tier) const { return from_back_[tier]; }

  // Pins blocks to tiers (static: share g of the replicated blocks on the first holder, the rest
  // on the second; fastest: every block on its first holder) and sets every tier's cursor.
  void Place(Step* step) const;
  // The next claimable block of `step` for `tier` in its direction, advancing its cursor past the
  // blocks it skips (they are claimed, or `tier` may not read them; a block that becomes
  // claimable again after a failure is retried by the pool). -1 when none is left.
  int64_t Next(Step* step, int tier) const;

 private:
  RoutingPolicy policy_;
  std::vector<bool> from_back_;
};

}  // namespace kvstream
