// libFuzzer: index checkpoints from arbitrary bytes. Never crashes; what decodes re-encodes to
// the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "index_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto chunks = kvstream::DecodeCheckpoint(bytes);
  if (chunks.ok() && kvstream::EncodeCheckpoint(*chunks) != bytes) __builtin_trap();
  return 0;
}
