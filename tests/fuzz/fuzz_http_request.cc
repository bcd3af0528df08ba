// libFuzzer: HTTP request heads as a hostile client on the metrics port sends them, through the
// endpoint's parser. Never crashes; a head is complete or refused exactly when its empty line has
// arrived; a complete one names a path that starts with '/' and carries no query; a refusal has
// one of the statuses the endpoint answers with.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "http_endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const kvstream::HttpRequestHead head = kvstream::ParseRequestHead(bytes);
  using Outcome = kvstream::HttpRequestHead::Outcome;
  const bool ended = bytes.find("\r\n\r\n") != std::string_view::npos;
  if ((head.outcome == Outcome::kIncomplete) == ended) __builtin_trap();
  if (head.outcome == Outcome::kComplete &&
      (head.path.empty() || head.path[0] != '/' || head.path.find_first_of("?#") != std::string::npos)) {
    __builtin_trap();
  }
  if (head.outcome == Outcome::kBad && head.error_status != 400 && head.error_status != 405 &&
      head.error_status != 413 && head.error_status != 505) {
    __builtin_trap();
  }
  return 0;
}
