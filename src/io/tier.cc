#include "io/tier.h"

#include <chrono>

#include "spdlog/spdlog.h"

namespace kvstream {

bool LogLimiter::Allow(uint64_t* left_out) {
  constexpr int64_t kPeriodNs = 1'000'000'000;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now < next_ns_) {
    ++refused_;
    return false;
  }
  next_ns_ = now + kPeriodNs;
  *left_out = refused_;
  refused_ = 0;
  return true;
}

void RemoveReplicaFiles(const Tiers& tiers, const std::vector<Victim>& victims) {
  for (const Victim& v : victims) {
    absl::Status s = tiers[v.tier]->device->RemoveChunk(v.stem);
    if (!s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("tier {}: cannot remove '{}': {}", tiers[v.tier]->name, v.key, std::string(s.message()));
    }
  }
}

bool GroupMissing(const Tiers& tiers, uint32_t holders, bool primary_only) {
  for (const auto& tier : tiers) {
    if (primary_only && tier->group != 0) continue;
    if ((holders & tier->group_mask) == 0) return true;
  }
  return false;
}

}  // namespace kvstream
