#include "model.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "model/load_model.h"

namespace kvsim {

double BoundTime(double bytes, const std::vector<double>& b, const std::vector<double>& delay) {
  std::vector<kvstream::TierRate> tiers(b.size());
  for (size_t k = 0; k < b.size(); ++k) tiers[k] = {b[k], k < delay.size() ? delay[k] : 0.0};
  return kvstream::BoundTime(bytes, tiers);
}

double StaticTime(double bytes, double g, double b0, double b1, double delay0, double delay1) {
  const double t0 = g > 0 ? delay0 + g * bytes / b0 : 0;
  const double t1 = g < 1 ? delay1 + (1 - g) * bytes / b1 : 0;
  return std::max(t0, t1);
}

double StaticPenalty(double g, double b0, double b1) {
  const double phi = b0 / (b0 + b1);
  return std::max(g / phi, (1 - g) / (1 - phi)) - 1;
}

double CompletionTime(double bytes, double block, uint32_t depth, const std::vector<double>& b,
                      const std::vector<double>& delay, std::vector<double>* tier_bytes, bool leave_tail) {
  const size_t k_tiers = b.size();
  if (tier_bytes) tier_bytes->assign(k_tiers, 0);
  if (bytes <= 0) return 0;
  const uint64_t blocks = static_cast<uint64_t>(std::ceil(bytes / block));
  const double last = bytes - (blocks - 1) * block;  // the last block may be short
  uint64_t next = 0;                                 // next unclaimed block
  // Per tier: a FIFO of claimed blocks' sizes; the head is being transferred.
  struct Tier {
    std::queue<double> claimed;
    double queued = 0;   // bytes claimed behind the head
    double free_at = 0;  // when the head transfer ends
  };
  std::vector<Tier> tiers(k_tiers);
  using Event = std::pair<double, size_t>;  // (time, tier)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  auto claim = [&](size_t k) {
    const double size = next + 1 == blocks ? last : block;
    ++next;
    if (!tiers[k].claimed.empty()) tiers[k].queued += size;
    tiers[k].claimed.push(size);
    if (tier_bytes) (*tier_bytes)[k] += size;
  };
  // At time t, tier k (a block in flight) leaves the next block to the others (see leave_tail).
  auto leaves = [&](size_t k, double t) {
    if (!leave_tail || tiers[k].claimed.empty()) return false;
    const double size = next + 1 == blocks ? last : block;
    const double lands = tiers[k].free_at - t + (tiers[k].queued + size) / b[k];
    double others_bytes = static_cast<double>(blocks - next - 1) * block + last, others_bps = 0;  // unclaimed
    for (size_t j = 0; j < k_tiers; ++j) {
      if (j == k || b[j] <= 0) continue;
      others_bps += b[j];
      if (!tiers[j].claimed.empty()) others_bytes += (tiers[j].free_at - t) * b[j] + tiers[j].queued;
    }
    return others_bps > 0 && others_bytes / others_bps <= lands;
  };
  for (size_t k = 0; k < k_tiers; ++k) {
    if (b[k] <= 0) continue;
    for (uint32_t i = 0; i < depth && next < blocks; ++i) claim(k);
    if (!tiers[k].claimed.empty()) {
      tiers[k].free_at = (k < delay.size() ? delay[k] : 0) + tiers[k].claimed.front() / b[k];
      events.emplace(tiers[k].free_at, k);
    }
  }
  double end = 0;
  while (!events.empty()) {
    auto [t, k] = events.top();
    events.pop();
    end = std::max(end, t);
    tiers[k].claimed.pop();
    if (!tiers[k].claimed.empty()) {
      tiers[k].queued -= tiers[k].claimed.front();
      tiers[k].free_at = t + tiers[k].claimed.front() / b[k];
      events.emplace(tiers[k].free_at, k);
    }
    if (next < blocks && !leaves(k, t)) {
      const bool was_idle = tiers[k].claimed.empty();
      claim(k);
      if (was_idle) {
        tiers[k].free_at = t + tiers[k].claimed.front() / b[k];
        events.emplace(tiers[k].free_at, k);
      }
    }
  }
  return end;
}

double PlacedCompletionTime(double block, uint32_t depth, const std::vector<double>& b,
                            const std::vector<uint32_t>& holders, std::vector<double>* tier_bytes) {
  const size_t k_tiers = b.size(), blocks = holders.size();
  if (tier_bytes) tier_bytes->assign(k_tiers, 0);
  std::vector<bool> claimed(blocks, false);
  std::vector<size_t> front(k_tiers, 0), back(k_tiers, blocks);  // back: one past the next candidate
  std::vector<double> free_at(k_tiers, 0);                          // when the tier's last claim lands
  using Event = std::pair<double, size_t>;                          // (a claim lands, tier)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  auto holds = [&](size_t k, size_t i) { return !claimed[i] && (holders[i] >> k & 1u) != 0; };
  auto claim = [&](size_t k, double now) {
    size_t i;
    if (k + 1 == k_tiers && k_tiers > 1) {
      while (back[k] > 0 && !holds(k, back[k] - 1)) --back[k];
      if (back[k] == 0) return;
      i = --back[k];
    } else {
      while (front[k] < blocks && !holds(k, front[k])) ++front[k];
      if (front[k] == blocks) return;
      i = front[k]++;
    }
    claimed[i] = true;
    free_at[k] = std::max(now, free_at[k]) + block / b[k];
    events.emplace(free_at[k], k);
    if (tier_bytes) (*tier_bytes)[k] += block;
  };
  for (size_t k = 0; k < k_tiers; ++k) {
    for (uint32_t d = 0; d < depth && b[k] > 0; ++d) claim(k, 0);
  }
  double end = 0;
  while (!events.empty()) {
    const auto [t, k] = events.top();
    events.pop();
    end = std::max(end, t);
    claim(k, t);
  }
  return end;
}

}  // namespace kvsim
