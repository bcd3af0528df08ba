// Victim: a replica taken out of the index (evicted, stale or bad) whose file must now be removed
// from its tier (RemoveReplicaFiles, io/tier.h). Apart from index.h so that what removes files need
// not see the index.
#pragma once

#include <cstdint>
#include <string>

namespace kvstream {

// A replica taken out of the index whose file must now be removed.
struct Victim {
  std::string key;
  std::string stem;
  int tier;
  uint64_t bytes;
};

}  // namespace kvstream
