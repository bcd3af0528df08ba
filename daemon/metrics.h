// kvstreamd's metrics in the Prometheus text format (served on HTTP /metrics, http_endpoint.h).
// Families follow Prometheus conventions (kvstream_*_total counters, _seconds, _bytes); labels are
// low-cardinality: tier, op, kind, result; never a key.
#pragma once

#include <string>

#include "kvstream/types.h"

namespace kvstream {

struct DaemonGauges {
  uint32_t sessions = 0;
  uint64_t arena_bytes = 0;
  uint64_t arena_budget_bytes = 0;
};

std::string RenderMetrics(const StoreStats& stats, const DaemonGauges& daemon, bool healthy, const std::string& version);

}  // namespace kvstream
