#include "model/load_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvstream {

TierRate RateOf(const TierReading& r, double block_bytes) {
  if (!r.usable || !(r.bps > 0)) return {};
  const double queued = std::max<uint32_t>(1, r.depth) * block_bytes / r.bps;
  double delay = std::max(0.0, r.usual_read_s - queued);
  if (r.usual_read_s > 0 && r.oldest_read_age_s > kStallingReads * r.usual_read_s) {
    delay = std::max(delay, r.oldest_read_age_s);
  }
  return {r.bps, delay};
}

namespace {

// The bound over tiers in the order they start (`by_delay`, present tiers only; by_delay[i] is the
// tier of bit bits[i]), counting those in `only`: add tiers in that order; the answer lies where
// the rate so far suffices before the next one starts.
double SortedBound(double bytes, std::span<const TierRate> by_delay, std::span<const uint32_t> bits, uint32_t only) {
  if (!(bytes > 0)) return 0;
  double rate = 0, weighted = 0;  // sum bps_k, sum bps_k * delay_k of the tiers started so far
  double t = INFINITY;
  for (size_t i = 0; i < by_delay.size(); ++i) {
    if (!(only & bits[i])) continue;
    if (rate > 0 && t <= by_delay[i].delay_s) return t;  // done before this tier starts
    rate += by_delay[i].bps;
    weighted += by_delay[i].bps * by_delay[i].delay_s;
    t = (bytes + weighted) / rate;
  }
  return t;
}

}  // namespace

double BoundTime(double bytes, std::span<const TierRate> tiers, uint32_t only) {
  if (!(bytes > 0)) return 0;
  std::pair<double, size_t> order[32];  // (delay, tier) of the tiers counted
  size_t n = 0;
  for (size_t k = 0; k < tiers.size() && k < 32; ++k) {
    if ((only >> k & 1u) && tiers[k].bps > 0) order[n++] = {std::max(0.0, tiers[k].delay_s), k};
  }
  std::sort(order, order + n);
  TierRate by_delay[32];
  uint32_t bits[32];
  for (size_t i = 0; i < n; ++i) {
    by_delay[i] = {tiers[order[i].second].bps, order[i].first};
    bits[i] = 1u << order[i].second;
  }
  return SortedBound(bytes, {by_delay, n}, {bits, n}, ~0u);
}

LoadModel::LoadModel(std::vector<TierRate> tiers, double host_bps) : tiers_(std::move(tiers)), host_bps_(host_bps) {
  std::vector<std::pair<double, size_t>> order;  // (delay, tier) of the present tiers
  for (size_t k = 0; k < tiers_.size() && k < 32; ++k) {
    if (tiers_[k].bps > 0) {
      present_ |= 1u << k;
      order.push_back({std::max(0.0, tiers_[k].delay_s), k});
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [delay, k] : order) {
    by_delay_.push_back({tiers_[k].bps, delay});
    bit_.push_back(1u << k);
  }
}

double LoadModel::Bound(double bytes, uint32_t only) const { return SortedBound(bytes, by_delay_, bit_, only); }

double LoadModel::UnionTime(uint32_t tiers_mask) const {
  double bytes = 0;
  for (const Group& g : groups_) {
    if ((g.holders & ~tiers_mask) == 0) bytes += g.bytes;
  }
  return Bound(bytes, tiers_mask);
}

double LoadModel::Add(double bytes, uint32_t holders) {
  if (!(bytes > 0)) return seconds_;
  holders &= present_;
  if (holders == 0) return seconds_ = INFINITY;
  bytes_ += bytes;
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.holders == holders; });
  size_t changed;
  if (it == groups_.end()) {
    groups_.push_back({holders, bytes});
    changed = groups_.size() - 1;
  } else {
    it->bytes += bytes;
    changed = static_cast<size_t>(it - groups_.begin());
  }
  // Bytes only grow, so only the unions that hold the changed group can raise the answer.
  double t = host_bps_ > 0 ? std::max(seconds_, bytes_ / host_bps_) : seconds_;
  if (groups_.size() <= kMaxExactGroups) {
    const size_t others = groups_.size() - 1;
    for (uint32_t pick = 0; pick < (1u << others); ++pick) {
      uint32_t mask = holders;
      for (size_t j = 0, bit = 0; j < groups_.size(); ++j) {
        if (j == changed) continue;
        if (pick >> bit++ & 1u) mask |= groups_[j].holders;
      }
      t = std::max(t, UnionTime(mask));
    }
  } else {
    uint32_t all = 0;
    for (const Group& g : groups_) all |= g.holders;
    t = std::max({t, UnionTime(holders), UnionTime(all)});
  }
  return seconds_ = t;
}

}  // namespace kvstream
