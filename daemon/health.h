// What kvstreamd says of its own health, for the Health RPC, kvstreamctl health and HTTP /health.
// Not OK when a tier cannot be read or written (gone, unmounted, read-only), when a tier is stalled
// (a read past its deadline), or when the I/O loop has not gone round for kLoopStuckSeconds.
#pragma once

#include "kvstream/store.h"
#include "kvstream/types.h"

namespace kvstream {

inline constexpr double kLoopStuckSeconds = 5;

HealthReport ComputeHealth(const Store& store, const std::string& version);
// True when nothing in `report` keeps the daemon from serving as configured.
bool HealthOk(const HealthReport& report);

}  // namespace kvstream
