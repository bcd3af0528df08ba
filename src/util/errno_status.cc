#include "util/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstream {

absl::Status ErrnoStatus(int error, const std::string& message) {
  const std::string text = absl::StrCat(message, ": ", std::strerror(error));
  switch (error) {
    case ENOENT: case ESTALE: return absl::NotFoundError(text);
    case EACCES: case EPERM: case EROFS: return absl::PermissionDeniedError(text);
    case ENOSPC: case EDQUOT: return absl::ResourceExhaustedError(text);
    default: return absl::InternalError(text);
  }
}

absl::Status ErrnoAt(const char* what, const std::string& path, int error) {
  return ErrnoStatus(error, absl::StrCat(what, " ", path));
}

}  // namespace kvstream
