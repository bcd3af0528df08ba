// ErrnoStatus: a failed system call as an absl::Status, coded by its errno, for every layer of
// the core (formats, tiers, the index) to report file errors the same way.
#pragma once

#include <cerrno>
#include <string>

#include "absl/status/status.h"

namespace kvstream {

// An error status for a failed control operation, coded by its errno: NotFound, PermissionDenied,
// ResourceExhausted (no space) or Internal. `message` says what failed; strerror follows it.
absl::Status ErrnoStatus(int error, const std::string& message);

// ErrnoStatus for "<what> <path>": a system call on a path failed with `error` (default errno).
absl::Status ErrnoAt(const char* what, const std::string& path, int error = errno);

}  // namespace kvstream
