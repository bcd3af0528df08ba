#include "kvstream/key.h"

#include "absl/strings/str_cat.h"

namespace kvstream {

absl::Status ValidateKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (key.size() > kMaxKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("key is ", key.size(), " bytes; the limit is ", kMaxKeyLength));
  }
  if (key.find('\0') != std::string_view::npos) return absl::InvalidArgumentError("key contains NUL");
  return absl::OkStatus();
}

}  // namespace kvstream
