#include "memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kvstream {

uint64_t MemoryLimitUnder(const std::string& root, uint64_t physical) {
  uint64_t limit = physical;
  const auto lower_to = [&limit](const std::string& file) {
    std::ifstream in(file);
    std::string word;
    uint64_t bytes = 0;
    // "max" (v2) or a page-rounded huge number (v1) when there is no limit.
    if (in >> word && absl::SimpleAtoi(word, &bytes) && bytes > 0) limit = std::min(limit, bytes);
  };
  std::ifstream cgroups(root + "/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // "ID:CONTROLLERS:PATH": v2 is "0::PATH"; v1 lists its controllers ("4:memory:PATH").
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    std::string dir, file;
    if (parts[0] == "0" && parts[1].empty()) {
      dir = root + "/sys/fs/cgroup", file = "memory.max";
    } else if (absl::StrContains(parts[1], "memory")) {
      dir = root + "/sys/fs/cgroup/memory", file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    // The cgroup's limit and every ancestor's (a pod's limit above its container's).
    for (std::string path = parts[2];; path = path.substr(0, path.rfind('/'))) {
      lower_to(dir + (path == "/" ? "" : path) + "/" + file);
      if (path.empty() || path == "/") break;
    }
  }
  return limit;
}

uint64_t MemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t physical = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return MemoryLimitUnder("", physical > 0 ? physical : 16ull << 30);
}

uint64_t DefaultStagingLimit() { return std::clamp<uint64_t>(MemoryLimit() / 32, 256ull << 20, 16ull << 30); }

uint64_t DefaultArenaBudget() { return MemoryLimit() / 4; }

}  // namespace kvstream
