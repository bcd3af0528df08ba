// kvsim --drives: a tier over several drives (docs/design.md, "Tiers over several drives"), with
// or without a tier holding every chunk (a PFS under replication: all). Steps of several
// requests' prefixes are read by completion routing (model.h's PlacedCompletionTime), each chunk
// placed on one drive either in turn (what the daemon does: each request's chunks were written one
// after another, from wherever the drive cursor stood) or by a hash of its key (uniformly at
// random). Prints each placement's time over the bound D / (sum of every drive + the replica
// tier), and how much faster than a tier on one drive with the replica tier.
#pragma once

#include <cstdint>
#include <string>

namespace kvsim {

struct DrivesOptions {
  uint32_t drives = 0;                // --drives: drives in the tier (runs the mode when > 0)
  std::string drive_bw = "7e9";       // --drive-bw: each drive's read bandwidth (bytes/s or with a unit)
  std::string replica_bw = "10e9";    // --replica-bw: the tier holding every chunk; 0 = none (primary)
  std::string step_bytes = "1GiB";    // --drive-step: bytes per step
  std::string chunk_bytes = "16MiB";  // --drive-chunk: bytes per chunk
  uint32_t requests = 4;              // --drive-requests: requests (prefixes) per step
  uint32_t steps = 200;               // --drive-steps: steps simulated per placement
};

// Returns 0, or 2 with a message on stderr for a bad option.
int RunDrives(const DrivesOptions& o, uint32_t queue_depth, uint64_t seed);

}  // namespace kvsim
