#include "tier.h"

#include "spdlog/spdlog.h"

namespace kvstream {

void RemoveReplicaFiles(const Tiers& tiers, const std::vector<Victim>& victims) {
  for (const Victim& v : victims) {
    absl::Status s = tiers[v.tier]->device->RemoveChunk(v.stem);
    if (!s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("tier {}: cannot remove '{}': {}", tiers[v.tier]->name, v.key, std::string(s.message()));
    }
  }
}

}  // namespace kvstream
