// Whether a directory's file system takes O_DIRECT for chunk files, found by doing it: a real
// aligned write and read of a probe file, with the alignment statx (STATX_DIOALIGN) asks for.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvstream {

struct DirectIoSupport {
  bool direct_io = false;
  uint32_t mem_alignment = 0;     // when direct_io: what buffers and lengths must be aligned to
  uint32_t offset_alignment = 0;  // when direct_io: what file offsets must be aligned to
  std::string buffered_reason;    // when not: why (tmpfs, an alignment above the chunk format's, ...)
};

// Probes the directory `dir` (at `path`) with a probe file created there (never a symlink's
// target) and removed after. An error only when the directory cannot be written at all.
absl::StatusOr<DirectIoSupport> ProbeDirectIoBeneath(int dir, const std::string& path);

}  // namespace kvstream
