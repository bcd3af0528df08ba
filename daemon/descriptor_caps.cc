#include "descriptor_caps.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

namespace kvstream {
namespace {

// `share` of the descriptors, between `floor` and `ceiling`; a uid gets a quarter of it.
UidSlots::Limits Cap(uint64_t share, uint32_t floor, uint32_t ceiling) {
  const auto total = static_cast<uint32_t>(std::clamp<uint64_t>(share, floor, ceiling));
  return {total, std::max<uint32_t>(total / 4, 1)};
}

constexpr uint64_t kLanes = 2;  // the data socket's hand-over and region lanes (data_server.h)

}  // namespace

DescriptorCaps SizeDescriptorCaps(uint64_t descriptors) {
  const uint64_t d = descriptors;
  DescriptorCaps caps;
  caps.connections = Cap(d / 4, 16, 65536);  // d/2 descriptors
  caps.identities = Cap(d / 8, 16, 65536);   // d/8
  caps.pending = Cap(d / 32, 16, 256);       // d/16
  caps.queued = Cap(d / 64, 8, 256);         // d/16 over both lanes
  caps.regions = Cap(d / 8, 16, 65536);      // d/8
  return caps;
}

uint64_t DescriptorsAtCaps(const DescriptorCaps& caps) {
  return 2 * uint64_t{caps.connections.total} + caps.identities.total + 2 * uint64_t{caps.pending.total} +
         kLanes * 2 * uint64_t{caps.queued.total} + caps.regions.total;
}

uint64_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : limit.rlim_cur;
}

uint64_t OpenDescriptors() {
  std::error_code ec;
  uint64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace kvstream
