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
  // The process's, as Prometheus's client libraries name them (ReadProcessGauges; 0: unknown).
  uint64_t resident_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t open_fds = 0;
};

// Fills the process gauges from /proc/self (statm, stat, fd) and /proc/stat (boot time).
void ReadProcessGauges(DaemonGauges* gauges);

std::string RenderMetrics(const StoreStats& stats, const DaemonGauges& daemon, bool healthy, const std::string& version);

}  // namespace kvstream
