// Client memory that may shrink under the store: a client's own shared-memory file (say an
// unsealed /dev/shm pool) that the daemon maps, where a load from a page the client truncated away
// raises SIGBUS, which would kill the daemon. So the store touches it with the CPU only under a
// guard that turns that SIGBUS into an error for the one access (GuardedAccess, GuardedCopy), or
// through the file (pread for persists). A range that is no longer there is FailedPrecondition,
// never a crash and never the tiers' fault.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream/store.h"

namespace kvstream {

// Reads all of `range` into `out` (pread, retried on EINTR and short reads).
absl::Status ReadClientMemory(const FileRange& range, void* out);
// Runs `access` (loads from, or stores to, client memory that may vanish, such as hashing a block
// landed there): FailedPrecondition instead of a crash when a page it touches is gone, `access`
// then cut short. The guard is a SIGBUS handler (installed on first use, process-wide) that
// returns to this call only while the calling thread is inside one; a SIGBUS anywhere else still
// terminates the process. REQUIRES: `access` holds no lock and allocates nothing (it may be left
// at any load from that memory).
absl::Status GuardedAccess(absl::FunctionRef<void()> access);
// memcpy of `size` bytes from `src` to `dst`, where `dst` maps client memory that may vanish:
// FailedPrecondition instead of a crash when a page of it is gone (the bytes before it copied).
// Under the same guard as GuardedAccess; about 1.4x the throughput of pwrite into a tmpfs file
// for bounced reads into a region (docs/design.md, "client region").
absl::Status GuardedCopy(uint8_t* dst, const void* src, size_t size);

}  // namespace kvstream
